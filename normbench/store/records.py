"""Selecting sweeps by name: the latest record of a sweep (runs/sweeps/<name>-<time>-<id>.json,
whose format normbench.store.sweep_record owns), the runs it names, its design and reference,
and the tuning runs a whole directory's verdicts leave out. A sweep's name is a plain, short
file name.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.core.keys import shown
from normbench.store import sweep_record

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
        record = latest_record(runs_dir, name)
        references.add(sweep_record.recorded_reference(record))
        ids.update((run["run_id"], None) for run in record["runs"])
        found = sweep_record.sequential_design(record, name)
        if len(found.get("fractions", ())) > len(design.get("fractions", ())):
            design = found
        commands.append(record.get("command"))
    if len(references) == 1 and (named := references.pop()):  # the sweeps agree on one
        design = {**design, "reference": named}
    return list(ids), design, commands


def ladder_key(runs_dir: Path, names: str) -> str | None:
    """The size axis of the named sweep when it is one ladder (``a,b``: none)."""
    listed = sweep_names(names)
    return sweep_record.ladder_key(latest_record(runs_dir, listed[0])) if len(listed) == 1 else None


def listed_reference(runs_dir: Path, name: str) -> tuple[str, ...]:
    """The group the named sweep lists first (sweep_record.listed_group, its ladder key
    aside): a ladder's reference where none was named."""
    record = latest_record(runs_dir, name)
    runs, ladder = record["runs"], sweep_record.ladder_key(record)
    overrides = runs[0].get("overrides") if runs else None
    return sweep_record.listed_group(record.get("axes"), overrides, (ladder,) if ladder else ())


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
        record = sweep_record.read(path)
        if record is None:
            unreadable += 1
            continue
        if isinstance(record.get("tuning"), dict):
            runs = found.setdefault(sweep_record.sweep_name(path.stem), {})
            runs.update((r, None) for r in sweep_record.tuning_runs(record))
    return {name: list(runs) for name, runs in sorted(found.items())}, unreadable


def recorded_sweeps(runs_dir: Path) -> list[str]:
    """The names of the sweeps with a record in ``runs_dir`` (from the records' file names,
    none read: shell completion lists them as the user types)."""
    folder = runs_dir / "sweeps"
    stems = {path.stem for path in folder.glob("*.json")} if folder.is_dir() else set()
    return sorted({sweep_record.sweep_name(stem) for stem in stems})


def record_paths(runs_dir: Path, name: str) -> list[Path]:
    """The record files of the sweep called ``name`` (runs/sweeps/<name>-<time>-<id>.json),
    read or not: not another sweep's whose name starts with this one's."""
    check_name(name, "--sweep")
    folder = runs_dir / "sweeps"
    paths = sorted(folder.glob(f"{name}-*.json")) if folder.is_dir() else []
    return [p for p in paths if sweep_record.RECORD_STAMP.fullmatch(p.stem[len(name) + 1 :])]


def latest_record(runs_dir: Path, name: str) -> dict:
    """The latest record of the sweep called ``name`` (runs/sweeps/<name>-<time>-<id>.json):
    the one started last (a start that is no timestamp, or one after the file was written,
    counts before every other: sweep_record.started_at), then the one written last; records
    that cannot be read are skipped, and when none can, refused naming them (not "no such
    sweep": the sweep is there, its record spoiled)."""
    folder = runs_dir / "sweeps"
    records, unreadable = [], []
    for path in record_paths(runs_dir, name):
        record = sweep_record.read(path)
        if record is None:
            unreadable.append(path)
            continue
        try:
            written = path.stat().st_mtime_ns
        except OSError:
            continue  # removed since it was listed
        started = sweep_record.started_at(record, written)  # None: untrusted, never newest
        records.append((started is not None, started or datetime.min, written, record))
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
    return max(records, key=lambda entry: entry[:3])[3]
