"""Sweep records: runs/sweeps/<name>-<time>-<id>.json, what a sweep ran (written by
normbench.sweeps.plan). Reading them selects a sweep's runs for a report; a sweep's name is a
plain, short file name.
"""

from __future__ import annotations

import re
from itertools import pairwise
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


def sweep_names(names: str) -> list[str]:
    """The sweeps ``--sweep a,b`` names, each checked; a name given twice is refused (it would
    count one sweep's runs once yet read as a comparison of two)."""
    listed = names.split(",")
    for name in listed:
        check_name(name, "--sweep")
    twice = sorted({name for name in listed if listed.count(name) > 1})
    if twice:
        raise UsageError(
            f"--sweep {shown(names)}: {', '.join(twice)} named more than once; valid: each "
            "sweep once (a,b compares sweeps a and b)"
        )
    return listed


def sweep_run_ids(runs_dir: Path, names: str) -> tuple[list[str], dict, list]:
    """The run ids of the latest record of each named sweep (``a,b`` compares sweeps), the
    sequential design the verdicts must honour (``sequential_design``; of the sweep with the
    most looks), and the sweeps' commands. Linear in the records' sizes."""
    ids: dict[str, None] = {}  # insertion-ordered, and a set for the test of membership
    design, commands, references = {}, [], set()
    for name in sweep_names(names):
        record = sweep_record(runs_dir, name)
        references.add(recorded_reference(record))
        ids.update((run["run_id"], None) for run in record["runs"])
        found = sequential_design(record, name)
        if len(found.get("fractions", ())) + found.get("looks", 0) > len(
            design.get("fractions", ())
        ) + design.get("looks", 0):
            design = found
        commands.append(record.get("command"))
    if len(references) == 1 and (named := references.pop()):  # the sweeps agree on one
        design = {**design, "reference": named}
    return list(ids), design, commands


def recorded_reference(record: dict) -> tuple[str, ...]:
    """The ``--reference`` a sweep named (its record's ``reference``, or its until-decided
    design's), so that its report compares against the group the sweep's own lines did;
    () when it named none or the field is not a short list of KEY=VALUE texts."""
    design = record.get("until_decided")
    named = record.get("reference", design.get("reference") if isinstance(design, dict) else ())
    ok = isinstance(named, list) and len(named) <= 20
    ok = ok and all(isinstance(n, str) and "=" in n and len(n) <= 200 for n in named)
    return tuple(named) if ok else ()


def tuning_run_ids(runs_dir: Path) -> tuple[dict[str, list[str]], int]:
    """Per tuned sweep, the runs its tuning phase trained, over every record of it (a rerun
    writes a new record whose list grows rung by rung: the union keeps a killed rerun's
    runs too); and how many records could not be read (their runs cannot be told apart).
    Tuning runs chose each group's value on validation, so a report over the whole directory
    leaves them out of its verdicts (``report --sweep NAME`` reports the comparison)."""
    folder = runs_dir / "sweeps"
    found: dict[str, dict[str, None]] = {}
    unreadable = 0
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = read_record(path)
        if record is None:
            unreadable += 1
            continue
        tuning = record.get("tuning")
        if isinstance(tuning, dict) and isinstance(tuning.get("runs"), list):
            runs = found.setdefault(_sweep_name(path.stem), {})
            runs.update((r, None) for r in tuning["runs"] if isinstance(r, str))
    return {name: list(runs) for name, runs in sorted(found.items())}, unreadable


def recorded_sweeps(runs_dir: Path) -> list[str]:
    """The names of the sweeps with a record in ``runs_dir`` (from the records' file names,
    none read: shell completion lists them as the user types)."""
    folder = runs_dir / "sweeps"
    stems = {path.stem for path in folder.glob("*.json")} if folder.is_dir() else set()
    return sorted({_sweep_name(stem) for stem in stems})


def _sweep_name(stem: str) -> str:
    """A record's sweep name: its file name less the ``-<time>-<id>`` stamp."""
    for cut in range(len(stem)):
        if stem[cut] == "-" and RECORD_STAMP.fullmatch(stem[cut + 1 :]):
            return stem[:cut]
    return stem


MAX_LOOKS = 10_000  # a sequential design's looks: one per seed added, far fewer in practice


def sequential_design(record: dict, name: str = "") -> dict:
    """How a sweep run until decided spent its alpha, as normbench.report.base.Method keys:
    ``fractions`` (the information fraction of each look it could take) and ``look`` (the
    last it took); a record of an older normbench, which split alpha evenly, gives ``looks``;
    a fixed design gives nothing. A design that normbench never writes (fractions that do not
    increase within (0, 1], a look past them, a huge number of looks) would give levels
    outside (0, 1): refused in one line."""
    refused = UsageError(
        f"--sweep {name}: its record's until-decided design is not one normbench writes "
        f"(fractions increasing within (0, 1], at most {MAX_LOOKS}, and the look taken among "
        "them); remove the record or run the sweep again"
    )
    design = record.get("until_decided")
    if design is not None:
        fractions = design.get("fractions") if isinstance(design, dict) else None
        look = design.get("looks_taken") if isinstance(design, dict) else None
        spending = design.get("spending", "") if isinstance(design, dict) else None
        if not _fractions(fractions) or not _whole(look, 1, len(fractions)):
            raise refused
        if not isinstance(spending, str) or len(spending) > 200:
            raise refused
        # no spending named: normbench 0.3's record, whose levels were O'Brien-Fleming type
        return {"fractions": tuple(float(f) for f in fractions), "look": look, "spending": spending}
    looks = record.get("looks")
    if looks is None:
        return {}
    if not _whole(looks, 1, MAX_LOOKS):
        raise refused
    return {"looks": looks} if looks > 1 else {}


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _fractions(values: object) -> bool:
    """Information fractions as normbench writes them: 1 to MAX_LOOKS numbers, increasing,
    each in (0, 1]."""
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_LOOKS:
        return False
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return False
    return values[0] > 0 and values[-1] <= 1 and all(a < b for a, b in pairwise(values))


RECORD_STAMP = re.compile(r"\d{8}-\d{6}(-[0-9a-f]+)?")


def sweep_record(runs_dir: Path, name: str) -> dict:
    """The latest record of the sweep called ``name`` (runs/sweeps/<name>-<time>-<id>.json):
    the one started last; records that cannot be read are skipped, and when none can, refused
    naming them (not "no such sweep": the sweep is there, its record spoiled)."""
    check_name(name, "--sweep")
    folder = runs_dir / "sweeps"
    records, unreadable = [], []
    for path in sorted(folder.glob(f"{name}-*.json")) if folder.is_dir() else []:
        if not RECORD_STAMP.fullmatch(path.stem[len(name) + 1 :]):
            continue  # another sweep whose name starts with this one's
        record = read_record(path)
        if record is not None:
            records.append((str(record.get("started")), path.stat().st_mtime_ns, record))
        else:
            unreadable.append(path)
    if not records and unreadable:
        raise UsageError(
            f"--sweep {name}: its record cannot be read ({', '.join(map(str, unreadable[:3]))}"
            f"{', ...' if len(unreadable) > 3 else ''}: truncated, too large or not a sweep "
            "record); remove it or run the sweep again"
        )
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
