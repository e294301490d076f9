"""A sweep's record, runs/sweeps/<name>-<time>-<id>.json: its one format, written, updated and
read here only (an older version's upgraded as it is read: normbench.store.upgrade).

A record says what a sweep ran (its runs and their overrides), the command that made it and,
for a sweep of a kind, its state: ``until_decided`` (the sequential design: its looks'
information fractions, the look taken, how alpha was spent), ``tuning`` (a tuned comparison's
phase, design and choices), ``ladder`` (a scaling ladder's axis and rungs), ``claims`` (the
content hash of each registered claim a `normbench findings` study tests, when it started) and
``reference`` (the group the sweep named before looking).
The shapes are the TypedDicts below. Records of older versions are upgraded as they are read
(normbench.store.upgrade), so that the report, the statistics and the methods know the
current format only. A record lies in an untrusted runs directory: ``read`` checks its shape,
and the parts the report uses (``sequential_design``, ``recorded_reference``,
``tuning_part``) check every field as they are taken.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, TypedDict

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_json
from normbench.core.text import plain
from normbench.store import upgrade
from normbench.store.rundir import MAX_BYTES, atomic_write, real_directory
from normbench.store.upgrade import MAX_LOOKS

RECORD_STAMP = re.compile(r"\d{8}-\d{6}(-[0-9a-f]+)?")  # <time>-<id> after the sweep's name
MAX_COUNT = 10**15  # trials, steps, seeds: far beyond any sweep, within a float's integers


class RunEntry(TypedDict):
    run_id: str
    overrides: list[str]


class UntilDecidedPart(TypedDict, total=False):
    """normbench.sweeps.adaptive.SequentialDesign.record: the design of a sweep run until
    decided, rewritten at every look."""

    max_seeds: int
    alpha: float
    margin: float
    reference: list[str]
    spending: str
    futility: float
    fractions: list[float]
    looks_taken: int
    fixed_design_runs: int


class TuningPart(TypedDict, total=False):
    """normbench.sweeps.tuned.state: a tuned comparison's phase (tuning, confirmation, done),
    its design and, once tuning has ended, each group's choice (``groups``; the fields of a
    group are those ``TunedGroup`` reads)."""

    phase: str
    rung: int
    rungs: list[dict[str, int]]
    space: dict[str, Any]
    trials: int
    eta: int
    tuning_seeds: list[int]
    max_steps: int | list[int]
    equal_budget: bool
    notes: list[str]
    extend: bool
    max_share: float
    selection: str
    groups: list[dict[str, Any]]
    runs: list[str]


class LadderPart(TypedDict, total=False):
    """normbench.sweeps.ladder_plan: a scaling ladder's size axis (``key``, ``values``), its
    budget rule, heads that follow the width, its transfer, and per rung its sizes, steps,
    tokens and what it chose (``rungs``)."""

    key: str
    values: list[str]
    rule: dict[str, Any] | None
    head_dim: int | None
    transfer: dict[str, Any] | None
    rungs: list[dict[str, Any]]


class SweepRecord(TypedDict, total=False):
    name: str
    preset_version: int | None
    started: str
    finished: str | None
    command: list[str]
    launcher: str
    axes: list[str]
    runs: list[RunEntry]
    counts: dict[str, int]
    reference: list[str]
    until_decided: UntilDecidedPart
    tuning: TuningPart
    ladder: LadderPart
    claims: dict[str, str]  # normbench findings: each registered claim's content hash


# ---------------------------------------------------------------------------- writing
def write(
    name: str,
    version: int | None,
    axes: list[str],
    runs: list[RunEntry],
    runs_dir: Path,
    launcher: str,
    started: datetime,
    command: list[str] | None = None,
    parts: dict[str, Any] | None = None,
) -> Path:
    """A new record, runs/sweeps/<name>-<time>-<id>.json: what this sweep runs and the
    command that made it (default: this process's argv), so that a report can select it.
    ``parts``: the state of its kind (``until_decided``, ``tuning``, ``reference``)."""
    stamp = f"{started.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"  # never collides
    path = real_directory(runs_dir / "sweeps") / f"{name}-{stamp}.json"
    record: SweepRecord = {
        "name": name,
        "preset_version": version,
        "started": started.isoformat(timespec="microseconds"),
        "finished": None,
        "command": list(sys.argv if command is None else command),
        "launcher": launcher,
        "axes": axes,
        "runs": runs,
        "counts": {},
    }
    record.update(parts or {})  # type: ignore[typeddict-item]
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def update(
    path: Path,
    counts: dict[str, int],
    runs: list[RunEntry],
    finished: bool = True,
    **parts: Any,
) -> None:
    """Store the runs (a sweep run until decided adds seeds), the counts so far and the state
    of its kind; ``finished`` stamps the time it ended. The record is read back through the
    trusted reader (it lies in the runs directory); one damaged meanwhile is written anew."""
    try:
        record = read_json(path, MAX_BYTES["record"], root=path.parent.parent)
    except (OSError, StoreError):
        record = None
    record = record if isinstance(record, dict) else {}
    record.update(counts=counts, runs=runs)
    record.update({k: v for k, v in parts.items() if v is not None})
    if finished:
        record["finished"] = datetime.now().isoformat(timespec="seconds")
    atomic_write(path, json.dumps(record, indent=2) + "\n")


def discard(path: Path, submitit_folder: Path) -> None:
    """Remove a sweep's record and its submission files: the sweep never started."""
    path.unlink(missing_ok=True)
    shutil.rmtree(submitit_folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # the sweeps directory, when this was its only record
        path.parent.rmdir()


# ---------------------------------------------------------------------------- reading
def read(path: Path) -> SweepRecord | None:
    """A sweep record in the current format (read through the trusted reader: never through a
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
    return upgrade.upgrade_record(record)


def started_at(record: SweepRecord, written_ns: int) -> datetime | None:
    """When a record says its sweep started, as a local time, or None when that cannot be
    trusted: not an ISO timestamp (``"9999"``), or later than the file was last written (a
    record is written as its sweep starts and only rewritten after; a day's slack for clocks
    and zones), so that such a record never counts as a sweep's newest."""
    started = record.get("started")
    if not isinstance(started, str) or len(started) > 64:
        return None
    try:
        when = datetime.fromisoformat(started)
        if when.tzinfo is not None:
            when = when.astimezone().replace(tzinfo=None)
        written = datetime.fromtimestamp(written_ns / 1e9)
    except (ValueError, OverflowError, OSError):  # OverflowError: a zone past year 1 or 9999
        return None
    return when if when <= written + timedelta(days=1) else None


def sweep_name(stem: str) -> str:
    """A record's sweep name: its file name less the ``-<time>-<id>`` stamp."""
    for cut in range(len(stem)):
        if stem[cut] == "-" and RECORD_STAMP.fullmatch(stem[cut + 1 :]):
            return stem[:cut]
    return stem


def sequential_design(record: SweepRecord, name: str = "") -> dict:
    """How a sweep run until decided spent its alpha, as normbench.report.base.Method keys:
    ``fractions`` (the information fraction of each look it could take), ``look`` (the last
    it took) and ``spending``; a fixed design gives nothing. A design that normbench never
    writes (fractions that do not increase within (0, 1], a look past them, a huge number of
    looks) would give levels outside (0, 1): refused in one line."""
    refused = UsageError(
        f"--sweep {name}: its record's until-decided design is not one normbench writes "
        f"(fractions increasing within (0, 1], at most {MAX_LOOKS}, and the look taken among "
        "them); remove the record or run the sweep again"
    )
    design = record.get("until_decided")
    if design is None:
        looks = record.get("looks")  # an older record's number of looks (upgraded when > 1)
        if looks is not None and not _whole(looks, 1, MAX_LOOKS):
            raise refused
        return {}
    fractions = design.get("fractions") if isinstance(design, dict) else None
    look = design.get("looks_taken") if isinstance(design, dict) else None
    spending = design.get("spending") if isinstance(design, dict) else None
    if not _fractions(fractions) or not _whole(look, 1, len(fractions)):
        raise refused
    if not isinstance(spending, str) or len(spending) > 200:
        raise refused
    return {"fractions": tuple(float(f) for f in fractions), "look": look, "spending": spending}


def recorded_reference(record: SweepRecord) -> tuple[str, ...]:
    """The ``--reference`` a sweep named (its record's ``reference``, or its until-decided
    design's), so that its report compares against the group the sweep's own lines did;
    () when it named none or the field is not a short list of KEY=VALUE texts."""
    design = record.get("until_decided")
    named = record.get("reference", design.get("reference") if isinstance(design, dict) else ())
    ok = isinstance(named, list) and len(named) <= 20
    ok = ok and all(isinstance(n, str) and "=" in n and len(n) <= 200 for n in named)
    return tuple(named) if ok else ()


def listed_group(axes: object, overrides: object, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The group a sweep lists first, as ``--reference`` names it: its first axis (the seed and
    ``skip`` aside) at the value of its first job (``norm=layernorm`` for ladder_lm, whose
    preset lists LayerNorm first); () when the axes or overrides are not plain KEY=VALUE texts
    (a record is untrusted)."""
    if not isinstance(axes, list) or not isinstance(overrides, list):
        return ()
    first = next((a for a in axes if isinstance(a, str) and a not in ("seed", *skip)), None)
    for override in overrides:
        key, _, value = override.partition("=") if isinstance(override, str) else ("", "", "")
        if key == first and re.fullmatch(r"[a-z_][a-z0-9_.]{0,99}", key or "-"):
            ok = re.fullmatch(r"[A-Za-z0-9_.:+-]{1,100}", value)
            return (f"{key}={value}",) if ok else ()
    return ()


def ladder_key(record: SweepRecord) -> str | None:
    """The size axis of a ladder sweep (its ``ladder`` part's key), for its report's scaling
    section; None for another sweep or a key that is not a plain dotted config key."""
    ladder = record.get("ladder")
    key = ladder.get("key") if isinstance(ladder, dict) else None
    return key if isinstance(key, str) and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", key) else None


def tuning_runs(record: SweepRecord) -> list[str]:
    """The runs a tuned comparison's tuning phase trained (none for another sweep)."""
    tuning = record.get("tuning")
    runs = tuning.get("runs") if isinstance(tuning, dict) else None
    return [r for r in runs if isinstance(r, str)] if isinstance(runs, list) else []


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


# ---------------------------------------------------------------------------- the tuning part
@dataclass
class TunedGroups:
    """A record's ``tuning`` part with every field checked: per group a row of text and
    numbers (a malformed number is None, a malformed group left out with a note)."""

    rows: list[dict[str, Any]]
    phase: str
    equal: bool
    tuning_seeds: list[int]
    rungs: list[dict[str, int]]
    notes: list[str] = field(default_factory=list)


def tuning_part(state: dict) -> TunedGroups:
    """A record's ``tuning`` part, every field checked: a malformed group is left out with a
    note, as is a malformed list (notes, groups, tuning_seeds, rungs); a malformed number of
    a group is taken as missing."""
    notes: list[str] = []
    notes += [n for n in map(_text, _list(state, "notes", notes)) if n != "-"]
    rows = []
    for group in _list(state, "groups", notes):
        row = _group(group)
        if row is None:
            notes.append("a malformed group in the sweep record was left out")
        else:
            rows.append(row)
    tuned = {row["trials"] for row in rows if (row["space"] or 0) > 1}
    equal = state.get("equal_budget") is not False and len(tuned) <= 1
    seeds = [s for s in _list(state, "tuning_seeds", notes) if _count(s) is not None]
    rungs = [
        {"keep": r["keep"], "steps": r["steps"]}
        for r in _list(state, "rungs", notes)
        if isinstance(r, dict) and _count(r.get("keep")) and _count(r.get("steps"))
    ]
    phase = state.get("phase")
    phase = phase if isinstance(phase, str) and phase in ("tuning", "confirmation") else "done"
    return TunedGroups(rows, phase, equal, seeds, rungs, notes)


def _group(group) -> dict | None:
    """One group of the record as text and numbers, or None when it is malformed (no chosen
    values, or values that are not text and numbers)."""
    if not isinstance(group, dict) or not isinstance(group.get("chosen"), dict):
        return None
    chosen = " ".join(f"{_text(k)}={_text(v)}" for k, v in group["chosen"].items())
    keys = group.get("keys") if isinstance(group.get("keys"), list) else []
    return {
        "group": _text(group.get("group")),
        "tuned": ", ".join(map(_text, keys)) or "-",
        "space": _count(group.get("space")),
        "trials": _count(group.get("trials")),
        "steps": _count(group.get("steps")),
        "full_grid_steps": _count(group.get("full_grid_steps")),
        "chosen": chosen or "-",
        "metric": _text(group.get("metric")),
        "val_chosen": _number(group.get("value")),
        "runner_up": _text(group.get("runner_up")) if group.get("runner_up") else None,
        "val_gap": _number(group.get("gap")),
        "regret_bound": _number(group.get("regret_bound")),
        "tried": _tried(group.get("tried")),
        "edge": _text(group.get("edge")) if group.get("edge") else None,
        "acc_best": _acc_best(group.get("acc_best"), chosen),
    }


def _acc_best(best, chosen: str) -> str | None:
    """Where the candidate with the best validation accuracy is not the chosen (loss-best)
    one, the candidate and both accuracies; None where they agree, or the record has none (a
    language model's, whose verdicts are on the loss in bits; an older or malformed one)."""
    if not isinstance(best, dict) or not isinstance(best.get("candidate"), str):
        return None
    candidate = _text(best["candidate"])
    if candidate == chosen:
        return None
    metric = _text(best.get("metric")).replace("_", " ")
    value, own = _number(best.get("value")), _number(best.get("chosen_value"))
    best_text, own_text = ("-" if v is None else f"{v:.4g}" for v in (value, own))
    return f"{candidate} ({metric} {best_text}; the chosen {own_text})"


def _list(state: dict, key: str, notes: list[str]) -> list:
    """A list field of the part (absent: empty); any other value is left out with a note."""
    value = state.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        notes.append(f"the sweep record's tuning.{key} is malformed and was left out")
        return []
    return value


def _count(value) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return value if ok else None


def _number(value) -> float | None:
    """A finite number, or None (an int too large for a float is no number a sweep writes)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_COUNT:
        return "-"  # str() of a huge int is slow, or refused past 4300 digits
    return plain(str(value))[:200] if isinstance(value, (str, int, float)) else "-"


def _tried(value) -> str:
    """A group's ``tried`` ({key: [values]}) as ``train.lr 0.001,0.01``; "-" when absent or
    malformed."""
    if not isinstance(value, dict):
        return "-"
    parts = []
    for key, values in list(value.items())[:20]:
        if isinstance(values, list):
            parts.append(f"{_text(key)} {','.join(_text(v) for v in values[:100])}")
    return "; ".join(parts) or "-"
