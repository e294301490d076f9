"""Sweep records: runs/sweeps/<name>-<time>-<id>.json, what a sweep ran (written by
normbench.sweeps.plan). Reading them selects a sweep's runs for a report; a sweep's name is a
plain, short file name.
"""

from __future__ import annotations

import re
from pathlib import Path

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_json
from normbench.core.keys import shown
from normbench.store.rundir import MAX_BYTES

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # sweep names: plain, short file names


def check_name(name: str, option: str = "--name") -> str:
    """A sweep name as the record's file name uses it; anything else is refused."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise UsageError(
            f"{option} {shown(name)}: a sweep name is 1 to 64 of A-Z a-z 0-9 . _ -, starting "
            "with a letter or digit"
        )
    return name


def sweep_run_ids(runs_dir: Path, names: str) -> tuple[list[str], dict, list]:
    """The run ids of the latest record of each named sweep (``a,b`` compares sweeps), the
    sequential design the verdicts must honour (``sequential_design``; of the sweep with the
    most looks), and the sweeps' commands."""
    ids, design, commands = [], {}, []
    for name in names.split(","):
        record = sweep_record(runs_dir, name)
        ids += [run["run_id"] for run in record["runs"] if run["run_id"] not in ids]
        found = sequential_design(record)
        if len(found.get("fractions", ())) + found.get("looks", 0) > len(
            design.get("fractions", ())
        ) + design.get("looks", 0):
            design = found
        commands.append(record.get("command"))
    return ids, design, commands


def sequential_design(record: dict) -> dict:
    """How a sweep run until decided spent its alpha, as normbench.report.base.Method keys:
    ``fractions`` (the information fraction of each look it could take) and ``look`` (the
    last it took); a record of an older normbench, which split alpha evenly, gives ``looks``;
    a fixed design gives nothing."""
    design = record.get("until_decided")
    if isinstance(design, dict) and isinstance(design.get("fractions"), list):
        fractions = [f for f in design["fractions"] if isinstance(f, (int, float))]
        look = design.get("looks_taken")
        if fractions and isinstance(look, int) and 1 <= look <= len(fractions):
            return {"fractions": tuple(float(f) for f in fractions), "look": look}
    looks = record.get("looks")
    return {"looks": looks} if isinstance(looks, int) and looks > 1 else {}


RECORD_STAMP = re.compile(r"\d{8}-\d{6}(-[0-9a-f]+)?")


def sweep_record(runs_dir: Path, name: str) -> dict:
    """The latest record of the sweep called ``name`` (runs/sweeps/<name>-<time>-<id>.json):
    the one started last; records that cannot be read are skipped."""
    check_name(name, "--sweep")
    folder = runs_dir / "sweeps"
    records = []
    for path in folder.glob(f"{name}-*.json") if folder.is_dir() else []:
        if not RECORD_STAMP.fullmatch(path.stem[len(name) + 1 :]):
            continue  # another sweep whose name starts with this one's
        record = read_record(path)
        if record is not None:
            records.append((str(record.get("started")), path.stat().st_mtime_ns, record))
    if not records:
        known = (
            sorted({p.stem.rsplit("-", 3)[0] for p in folder.glob("*.json")})
            if folder.is_dir()
            else []
        )
        raise UsageError(
            f"--sweep {name}: no such sweep in {folder}; valid: "
            + (", ".join(known) or "none (run normbench sweep first)")
        )
    return max(records, key=lambda entry: entry[:2])[2]


def read_record(path: Path) -> dict | None:
    """A sweep record (runs/sweeps/NAME.json, read through the trusted reader: never through a
    symlinked sweeps folder or file), or None when it is not one (truncated, wrong shape)."""
    try:
        record = read_json(path, MAX_BYTES["record"], root=path.parent.parent)
    except (OSError, StoreError):
        return None
    runs = record.get("runs") if isinstance(record, dict) else None
    if not isinstance(runs, list) or not all(
        isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs
    ):
        return None
    return record
