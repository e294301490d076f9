"""The runs a report is about: every run directory as one flat row, then narrowed to a sweep
and to filters.

Reads the run store only (never torch). The rows come from the index (normbench.store.index:
runs/.index.sqlite) where a run's files are unchanged, and from the files otherwise, so a
second report over 100,000 runs reads three stamps a run, not three files.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.core.suggest import did_you_mean
from normbench.core.text import plain
from normbench.experiment.schema import EXECUTION_KEYS
from normbench.store.index import FILE as INDEX_FILE
from normbench.store.index import Index, as_list
from normbench.store.reading import (
    COLUMNS,
    PROVENANCE_FIELDS,
    RECORD_FIELDS,
    RUN_FIELDS,
    STAMP,
    SUMMARY_FIELDS,
    Record,
    Records,
    read_many,
)
from normbench.store.records import sweep_run_ids, tuning_run_ids
from normbench.store.rundir import RunDir
from normbench.store.scan import Scan

NOT_CONFIG = ("run_id", "status", "error", *SUMMARY_FIELDS, *PROVENANCE_FIELDS, *RECORD_FIELDS)
SHORT_LIST = 160  # characters of keys an error lists in full (a run's fifty keys: 800)
OLD_INDEX = ".index.json"  # the JSON index of earlier versions: deleted, never read


@dataclass
class Selection:
    """The runs a report is about, and what was noticed while loading them."""

    runs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def load_runs(runs_dir: Path, scanning: Scan | None = None) -> Selection:
    """Every run under runs_dir; half-written, corrupt or unsafe ones skipped with a warning
    naming the run and the file; a ``running`` run whose lock is free shown as abandoned.
    ``scanning``: the scan of runs_dir a command started before importing this module."""
    if not runs_dir.is_dir():
        raise UsageError(
            f"runs directory {runs_dir} does not exist; train something first: "
            "normbench run, or normbench sweep smoke"
        )
    if scanning is None or scanning.runs_dir != runs_dir:
        scanning = Scan(runs_dir)  # scans here
    # A directory without an index gets one once it has runs to put in it: a report of an
    # empty (or mistyped) directory writes nothing there.
    index = Index.open(runs_dir) if (runs_dir / INDEX_FILE).exists() else None
    try:
        known, indexed = index.records() if index else (Records(), set())
    except sqlite3.OperationalError:  # locked past the timeout: read the files this time
        known, indexed = Records(), set()
    except sqlite3.DatabaseError:  # corrupt past its first page: read the files, rebuild it
        index.close()
        index = Index.open(runs_dir, rebuild=True)
        known, indexed = Records(), set()
    guess = guessed_frame(runs_dir, known) if scanning.in_child else None
    found, warnings = scanning.result()
    records = {  # the index's rows of unchanged runs, in the directory's order
        name: record
        for name, files in found.items()
        if (record := known.runs.get(name)) is not None and record[STAMP] == files
    }
    fresh = read_many(runs_dir, [item for item in found.items() if item[0] not in records])
    warnings += fresh.warnings
    if fresh.runs:
        records = {
            name: records[name] if name in records else fresh.runs[name]
            for name in found
            if name in records or name in fresh.runs
        }
    if index is None and fresh.runs and not (runs_dir / INDEX_FILE).exists():
        index = Index.open(runs_dir)
    if index is not None:
        removed = indexed - records.keys()
        if index.writable and (fresh.runs or removed):
            with contextlib.suppress(sqlite3.Error):  # busy or read-only: the next one writes
                index.update(fresh, removed)
        index.close()
        with contextlib.suppress(OSError):
            (runs_dir / OLD_INDEX).unlink(missing_ok=True)
    if guess is None or fresh.runs or guess.names != list(records):
        guess = None  # dropped: its memory freed before the frame is built again
        frame = as_frame(records, {**known.configs, **fresh.configs})
    else:
        frame = guess.frame  # as_frame of these very records
    running = frame.index[frame["status"] == "running"]
    for row in running:
        if RunDir(runs_dir, frame.at[row, "run_id"]).lock_is_free():
            frame.at[row, "status"] = "abandoned"
    return Selection(frame, warnings)


class Guess(NamedTuple):
    """A frame built before the scan's answer, and the runs it holds, in its order."""

    names: list[str]
    frame: pd.DataFrame


def guessed_frame(runs_dir: Path, known: Records) -> Guess | None:
    """The frame of the index's rows in the directory's order, built while the scan's child
    is still stamping (at 100,000 runs the parent is done with its imports and the index a
    few tenths of a second before the child): what the report reads when no run changed
    since the index was written, the usual case. load_runs keeps it only when the scan
    agrees: the same runs, in the same order, every one unchanged. None when the index is
    empty or the directory cannot be listed (entry by entry: only the index's names kept)."""
    if not known.runs:
        return None
    try:
        with os.scandir(runs_dir) as entries:
            names = [entry.name for entry in entries if entry.name in known.runs]
    except OSError:
        return None
    return Guess(names, as_frame({name: known.runs[name] for name in names}, known.configs))


def as_frame(records: dict[str, Record], configs: dict[str, dict]) -> pd.DataFrame:
    """Records as one DataFrame: a run's own fields, then its config's keys (each distinct
    config built once and repeated per run). Config values keep their YAML types (a ghost
    batch of 32 beside a null one stays the int 32); summary numbers are floats (NaN for
    missing, unpacked from the index's blobs: reading.PACKED); tags and command are lists again."""
    own = pd.DataFrame(list(records.values()), columns=list(COLUMNS), dtype=object)
    values = np.frombuffer(b"".join(own["summary"]), "<f8").copy()  # writable: a frame's
    numbers = pd.DataFrame(
        values.reshape(len(own), len(SUMMARY_FIELDS)), columns=list(SUMMARY_FIELDS), index=own.index
    )
    at = own.columns.get_loc("summary")  # the numbers in RUN_FIELDS' order, NaN for none
    own = pd.concat([own.iloc[:, :at], numbers, own.iloc[:, at + 1 :]], axis=1)
    if records:  # (after the numbers: a config may have a key named summary)
        order = {key: i for i, key in enumerate(dict.fromkeys(own["config_id"]))}
        shared = pd.DataFrame([configs[key] for key in order], dtype=object)
        shared = shared.iloc[own["config_id"].map(order).to_numpy()]
        own = pd.concat([own, shared.reset_index(drop=True)], axis=1)
    own = own.drop(columns=["stamp", "config_id"])
    for name in ("tags", "command"):  # decoded once per distinct text: a sweep's runs share it
        texts = own[name].tolist()
        decoded = {text: as_list(text) for text in set(texts)}
        own[name] = pd.Series([decoded[text] for text in texts], index=own.index, dtype=object)
    return own


def select(
    selection: Selection, filters: list[str], sweep_ids: list[str] | None, tag: str | None = None
) -> Selection:
    """Narrow to a sweep's runs, to override-syntax filters (``norm=batchnorm,groupnorm``) and
    to the runs carrying a tag."""
    runs = selection.runs
    if tag is not None:
        runs = runs[runs["tags"].map(lambda tags: isinstance(tags, list) and tag in tags)]
    if sweep_ids is not None:
        present = set(runs.get("run_id", []))
        missing = [rid for rid in dict.fromkeys(sweep_ids) if rid not in present]
        if missing:
            named = ", ".join(plain(rid)[:80] for rid in missing[:3])
            selection.warnings.append(
                f"{len(missing)} runs of the sweep have no results yet ({named}"
                f"{', ...' if len(missing) > 3 else ''})"
            )
        runs = runs[runs["run_id"].isin(sweep_ids)]
    if filters:  # Hydra's override parser, imported only when there are filters: a second
        from hydra.core.override_parser.types import RangeSweep

        from normbench.experiment.compose import parse_overrides
    for override in parse_overrides(filters) if filters else ():
        if selection.runs.empty:  # no runs, so no keys: the caller names the empty directory
            break
        key = override.key_or_group
        (column,) = as_columns([key], runs)
        if column not in runs.columns:
            raise UsageError(unknown_key(f"filter {override.input_line}", key, runs))
        if isinstance(override.value(), RangeSweep):  # by membership, never listed
            sweep = override.value()
            runs = runs[runs[column].map(lambda v, r=sweep: _in_range(v, r))]
            continue
        wanted = (
            list(override.sweep_iterator()) if override.is_discrete_sweep() else [override.value()]
        )
        before, runs = runs, runs[runs[column].map(lambda v, w=wanted: any(_same(v, x) for x in w))]
        if runs.empty and not before.empty:
            raise UsageError(_matches_none(override.input_line, before[column]))
    return Selection(runs, selection.warnings)


def _in_range(value, sweep) -> bool:
    """Whether a number is one of ``range(start, stop, step)``'s values, tested without
    listing them (``seed=range(0,10000000000)`` would be gigabytes)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not sweep.step:
        return False
    k = round((value - sweep.start) / sweep.step)
    point = sweep.start + k * sweep.step
    ahead = (
        sweep.start <= point < sweep.stop if sweep.step > 0 else sweep.stop < point <= sweep.start
    )
    return k >= 0 and ahead and math.isclose(value, point, abs_tol=1e-12)


def as_columns(keys: list[str], runs: pd.DataFrame) -> list[str]:
    """Keys as the runs' columns: a group stands for its option's name (``norm`` is
    ``norm.name``), in ``--by`` and ``--best-over`` as in filters."""
    return [f"{key}.name" if f"{key}.name" in runs.columns else key for key in keys]


def unknown_key(given: str, key: str, runs: pd.DataFrame) -> str:
    """``filter nrom=x: no key 'nrom' in these runs (did you mean norm?); valid: ...``: the
    keys that make a run what it is (a group by its short name, as filters, ``--by`` and
    ``--best-over`` take it; no execution setting such as log.tensorboard), the closest
    first offered. One short line: where all of them would make a long one (a run has some
    fifty), the keys that vary among the runs are named and the fixed ones counted."""
    columns = [
        c
        for c in runs.columns
        if ("." in c or c in ("batch_size", "seed")) and c not in EXECUTION_KEYS
    ]
    keys = sorted({c.removesuffix(".name") for c in columns})
    head = f"{given}: no key '{plain(key)}' in these runs{did_you_mean(key, keys)}; valid: "
    if len(", ".join(keys)) <= SHORT_LIST:
        return head + ", ".join(keys)
    varying = sorted(
        {c.removesuffix(".name") for c in columns if runs[c].dropna().map(str).nunique() > 1}
    )
    fixed = [k for k in keys if k not in varying]
    return (
        head
        + (f"{', '.join(varying)} (vary here), or " if varying else "")
        + f"{len(fixed)} keys held fixed, e.g. {', '.join(fixed[:3])}"
    )


def best_over_column(key: str, runs: pd.DataFrame) -> str:
    """``--best-over``'s key as a column, refused in one line when the runs hold one value of
    it (there is nothing to choose the best of) and naming the keys that do vary."""
    (column,) = as_columns([key], runs)
    if column not in runs.columns or runs[column].map(str).nunique() > 1:
        return column  # an unknown key is refused with the other --by/--best-over checks
    varying = [
        c.removesuffix(".name")
        for c in runs.columns
        if ("." in c or c in ("batch_size", "seed"))
        and c not in EXECUTION_KEYS
        and runs[c].dropna().map(str).nunique() > 1  # null: a key the run's norm ignores
    ]
    raise UsageError(
        f"--best-over {key}: every run has {key}={plain(str(runs[column].iloc[0]))}, nothing to "
        f"choose; valid: a key that varies: {', '.join(varying) or 'none'}"
    )


def _matches_none(line: str, present: pd.Series) -> str:
    """``no runs match norm=batchnrom (did you mean batchnorm?); norm in these runs: ...``:
    a filter that empties the selection names the values there are."""
    key, _, value = line.partition("=")
    values = sorted({plain(str(v)) for v in present}, key=str)
    hint = did_you_mean(value, values)
    shown = ", ".join(values[:20]) + (f", ... ({len(values)} values)" if len(values) > 20 else "")
    return f"no runs match {plain(line)}{hint}; {key} in these runs: {shown}"


def _same(value, wanted) -> bool:
    if isinstance(wanted, bool) or isinstance(value, bool):
        return value is wanted or str(value).lower() == str(wanted).lower()
    if isinstance(wanted, (int, float)) and isinstance(value, (int, float)):
        return math.isclose(value, wanted)
    return str(value) == str(wanted)


def select_runs(
    runs_dir: Path,
    filters: list[str] = (),
    sweep: str | None = None,
    tag: str | None = None,
    scanning: Scan | None = None,
    verdicts: bool = False,
) -> tuple[Selection, dict, list]:
    """The runs a report is about: every readable run of ``runs_dir``, narrowed to the latest
    record of each named sweep (``a,b``), to the filters and to a tag; with the sequential
    design of a sweep run until decided (records.sequential_design, and the ``reference`` the
    sweep named) and the sweeps' commands. ``scanning``: as load_runs takes it.
    ``verdicts``: the runs are for verdicts, so a whole directory's leaves tuning runs out."""
    selection = load_runs(runs_dir, scanning)
    ids, design, commands = sweep_run_ids(runs_dir, sweep) if sweep is not None else (None, {}, [])
    if sweep is None and verdicts:
        selection = without_tuning_runs(selection, runs_dir)
    return select(selection, list(filters), ids, tag), design, commands


def without_tuning_runs(selection: Selection, runs_dir: Path) -> Selection:
    """The selection less the tuning runs of every tuned sweep in ``runs_dir``, with a note
    naming how many and which sweeps: runs that chose a value on validation are not evidence
    for a verdict about it (``report --sweep NAME`` reports the tuned comparison)."""
    tuning, unreadable = tuning_run_ids(runs_dir)
    notes = list(selection.warnings)
    if unreadable:
        notes.append(
            f"{unreadable} sweep record(s) in {runs_dir / 'sweeps'} cannot be read: tuning runs "
            "they list, if any, cannot be left out of these verdicts"
        )
    chosen_on = {rid for ids in tuning.values() for rid in ids}
    runs = selection.runs
    left_out = runs["run_id"].isin(chosen_on) if chosen_on and not runs.empty else None
    if left_out is None or not left_out.any():
        return Selection(runs, notes)
    names = ", ".join(tuning)
    notes.append(
        f"{int(left_out.sum())} tuning runs of the tuned sweep(s) {names} are left out: they "
        f"chose each group's value on validation (normbench report --sweep NAME reports each)"
    )
    return Selection(runs[~left_out.to_numpy()], notes)


def check_grouping(by: list[str], best_over: str | None) -> None:
    """``--by`` and ``--best-over`` take config keys: a run's own fields (its id, status,
    results, seed) would make groups of one run, or keep each group's luckiest seed."""
    for option, keys in (("--by", by), ("--best-over", [best_over])):
        bad = [key for key in keys if key is not None and (key in RUN_FIELDS or not key)]
        if bad:
            raise UsageError(
                f"{option} {bad[0] or repr('')}: not a config key to group by (a run's id, "
                "status, seed and results are what groups are compared on); valid: a config "
                "key, e.g. norm or train.lr"
            )
