"""The runs a report is about: every run directory read into one flat row, then narrowed to a
sweep and to filters.

Reads the run store only (never torch). An index file (runs/.index.json) keeps the rows keyed
by each run's files' sizes and modification times, so a second report over ten thousand runs
re-reads only what changed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_json
from normbench.core.text import plain
from normbench.experiment.compose import parse_overrides
from normbench.experiment.schema import LATER_KEYS, flatten
from normbench.store.records import sweep_run_ids
from normbench.store.rundir import (
    FINISHED,
    MAX_BYTES,
    RunDir,
    atomic_write,
    check_meta,
    metrics_rows,
)

INDEX = ".index.json"
INDEX_VERSION = 6
SUMMARY_FIELDS = (
    "final_val_acc",
    "best_val_acc",
    "final_val_loss",
    "final_val_bpb",
    "test_acc",
    "test_loss",
    "test_bpb",
    "steps",
    "steps_to_target",
    "time_to_target_s",
    "train_loss_auc",
    "train_s",
    "wall_s",
    "parameters",
    "num_classes",
    "unigram_bpb",
    "val_size",
    "test_size",
    "initial_val_loss",
    "initial_val_bpb",
)
# Where a run's numbers came from: the code's fingerprint, torch, and the device it ran on.
PROVENANCE_FIELDS = ("code_hash", "torch_version", "device_used")
# What a person attached, the clock recorded, or the command line was (argv): never part of
# an experiment's config.
RECORD_FIELDS = ("started", "finished", "tags", "note", "command")
NOT_CONFIG = ("run_id", "status", "error", *SUMMARY_FIELDS, *PROVENANCE_FIELDS, *RECORD_FIELDS)


@dataclass
class Selection:
    """The runs a report is about, and what was noticed while loading them."""

    runs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


RUN_FILES = ("config.yaml", "meta.json", "metrics.parquet")


def read_run(path: Path) -> dict:
    """One run as a flat row: status, the flattened config, summary numbers, provenance. A
    run whose files are not what normbench writes raises StoreError naming the file."""
    run = RunDir(path.parent, path.name)
    meta = check_meta(run.meta_path, read_json(run.meta_path, MAX_BYTES["meta.json"]))
    cfg = run.read_config()
    if meta.get("run_id", path.name) != path.name:
        raise StoreError(
            f"{run.meta_path}: it belongs to another run ({plain(str(meta['run_id']))[:80]})"
        )
    if meta["status"] in FINISHED and metrics_rows(run.metrics_path) == 0:
        raise StoreError(f"{run.metrics_path}: a finished run with no metrics")
    row = {"run_id": path.name, "status": meta["status"], "error": meta.get("error")}
    row.update(flatten(cfg))
    for key, old in LATER_KEYS.items():  # a built-in group's run made before the key existed
        if f"{key.partition('.')[0]}._target_" not in row:
            row.setdefault(key, old)
    summary = meta.get("summary") or {}
    row.update({name: summary.get(name) for name in SUMMARY_FIELDS})
    if row["num_classes"] is None:  # runs made before the summary recorded it
        row["num_classes"] = cfg["data"].get("num_classes", 10)
    code = meta.get("code") or {}
    row["code_hash"] = code.get("source_hash") or "unrecorded"
    row["torch_version"] = (meta.get("versions") or {}).get("torch")
    row["device_used"] = meta.get("device")
    row.update({name: meta.get(name) for name in RECORD_FIELDS})
    return row


def stamp(path: Path) -> list:
    """Size and modification time of a run's three files (None for a missing one): the index
    reuses a row only while all three are unchanged."""
    out = []
    for name in RUN_FILES:
        try:
            info = os.lstat(path / name)
            out.append([info.st_mtime_ns, info.st_size])
        except OSError:
            out.append(None)
    return out


def unreadable(err: Exception) -> str:
    """Why a run could not be read, naming the file: ``metrics.parquet is missing``."""
    if isinstance(err, StoreError):
        return str(err)
    if isinstance(err, FileNotFoundError) and err.filename:
        return f"{Path(err.filename).name} is missing"
    where = f"{Path(err.filename).name}: " if getattr(err, "filename", None) else ""
    return f"{where}{getattr(err, 'strerror', None) or err}"


def load_runs(runs_dir: Path) -> Selection:
    """Every run under runs_dir; half-written, corrupt or unsafe ones skipped with a warning
    naming the run and the file; a ``running`` run whose lock is free shown as abandoned."""
    if not runs_dir.is_dir():
        raise UsageError(
            f"runs directory {runs_dir} does not exist; train something first: "
            "normbench run, or normbench sweep smoke"
        )
    index = _read_index(runs_dir / INDEX)
    rows, warnings, fresh = [], [], {}
    with os.scandir(runs_dir) as entries:
        for entry in entries:
            if entry.name.startswith(".") or entry.name == "sweeps":
                continue
            name = plain(entry.name)
            if entry.is_symlink():
                warnings.append(f"skipped {name}: a symlink (normbench reads run directories only)")
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            files = stamp(Path(entry.path))
            if files[1] is None:
                warnings.append(f"skipped {name}: no meta.json (a half-written run?)")
                continue
            cached = index.get(entry.name)
            if cached and cached["stamp"] == files:
                row = cached["row"]
            else:
                try:
                    row = read_run(Path(entry.path))
                except (OSError, StoreError) as err:
                    warnings.append(f"skipped {name}: {plain(unreadable(err))}")
                    continue
            fresh[entry.name] = {"stamp": files, "row": row}
            rows.append(row)
    if fresh.keys() != index.keys() or any(fresh[k]["stamp"] != index[k]["stamp"] for k in fresh):
        with contextlib.suppress(OSError, StoreError):  # a read-only runs directory still reports
            payload = {"version": INDEX_VERSION, "runs": fresh}
            atomic_write(runs_dir / INDEX, json.dumps(payload, separators=(",", ":")))
    for row in rows:
        if row["status"] == "running" and RunDir(runs_dir, row["run_id"]).lock_is_free():
            row["status"] = "abandoned"
    return Selection(as_frame(rows), warnings)


def as_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame in which config values keep their YAML types (a ghost batch of 32
    beside a null one stays the int 32) and summary numbers are floats (NaN for missing)."""
    frame = pd.DataFrame(rows, dtype=object)
    for name in SUMMARY_FIELDS:
        if name in frame:
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype(float)
    return frame


def _read_index(path: Path) -> dict:
    """The index's rows by run, or {} when it is missing or not of the expected shape."""
    try:
        payload = read_json(path, MAX_BYTES["index"])
    except (OSError, StoreError):
        return {}
    if not isinstance(payload, dict) or payload.get("version") != INDEX_VERSION:
        return {}
    runs = payload.get("runs")
    if not isinstance(runs, dict) or not all(
        isinstance(entry, dict)
        and isinstance(entry.get("stamp"), list)
        and isinstance(entry.get("row"), dict)
        for entry in runs.values()
    ):
        return {}
    return runs


def select(
    selection: Selection, filters: list[str], sweep_ids: list[str] | None, tag: str | None = None
) -> Selection:
    """Narrow to a sweep's runs, to override-syntax filters (``norm=batchnorm,groupnorm``) and
    to the runs carrying a tag."""
    runs = selection.runs
    if tag is not None:
        runs = runs[runs["tags"].map(lambda tags: isinstance(tags, list) and tag in tags)]
    if sweep_ids is not None:
        missing = set(sweep_ids) - set(runs.get("run_id", []))
        if missing:
            selection.warnings.append(f"{len(missing)} runs of the sweep have no results yet")
        runs = runs[runs["run_id"].isin(sweep_ids)]
    for override in parse_overrides(filters):
        key = override.key_or_group
        column = f"{key}.name" if f"{key}.name" in runs.columns else key
        if column not in runs.columns:
            valid = ", ".join(sorted(c for c in runs.columns if "." in c or c in ("seed",)))
            raise UsageError(
                f"filter {override.input_line}: no key '{key}' in these runs; valid: {valid}"
            )
        wanted = (
            list(override.sweep_iterator()) if override.is_discrete_sweep() else [override.value()]
        )
        runs = runs[runs[column].map(lambda v, w=wanted: any(_same(v, x) for x in w))]
    return Selection(runs, selection.warnings)


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
) -> tuple[Selection, dict, list]:
    """The runs a report is about: every readable run of ``runs_dir``, narrowed to the latest
    record of each named sweep (``a,b``), to the filters and to a tag; with the sequential
    design of a sweep run until decided (records.sequential_design) and the sweeps' commands."""
    selection = load_runs(runs_dir)
    ids, design, commands = sweep_run_ids(runs_dir, sweep) if sweep else (None, {}, [])
    return select(selection, list(filters), ids, tag), design, commands
