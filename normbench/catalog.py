"""The runs a report is about: every run directory read into one flat row, then narrowed to a
sweep and to filters.

Reads the run store only (never torch). An index file (runs/.index.json) keeps the rows keyed
by each run's files' sizes and modification times, so a second report over ten thousand runs
re-reads only what changed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from normbench.config import UsageError, flatten, parse_overrides
from normbench.store import atomic_write

INDEX = ".index.json"
INDEX_VERSION = 4
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


def read_run(path: Path) -> dict:
    """One run as a flat row: status, the flattened config, summary numbers, provenance."""
    import yaml

    meta = json.loads((path / "meta.json").read_text())
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    cfg = yaml.load((path / "config.yaml").read_text(), Loader=loader)
    if not isinstance(cfg, dict) or "status" not in meta:
        raise ValueError("config.yaml or meta.json is incomplete")
    row = {"run_id": path.name, "status": meta["status"], "error": meta.get("error")}
    row.update(flatten(cfg))
    summary = meta.get("summary") or {}
    row.update({name: summary.get(name) for name in SUMMARY_FIELDS})
    if row["num_classes"] is None:  # runs made before the summary recorded it
        row["num_classes"] = cfg.get("data", {}).get("num_classes", 10)
    code = meta.get("code") or {}
    row["code_hash"] = code.get("source_hash") or "unrecorded"
    row["torch_version"] = (meta.get("versions") or {}).get("torch")
    row["device_used"] = meta.get("device")
    row.update({name: meta.get(name) for name in RECORD_FIELDS})
    return row


def load_runs(runs_dir: Path) -> Selection:
    """Every run under runs_dir; half-written or corrupt ones skipped with a warning."""
    if not runs_dir.is_dir():
        raise UsageError(
            f"runs directory {runs_dir} does not exist; train something first: "
            "normbench run, or normbench sweep smoke"
        )
    index_path = runs_dir / INDEX
    index = _read_index(index_path)
    rows, warnings, fresh = [], [], {}
    with os.scandir(runs_dir) as entries:
        for entry in entries:
            if not entry.is_dir() or entry.name.startswith(".") or entry.name == "sweeps":
                continue
            try:
                stat = os.stat(os.path.join(entry.path, "meta.json"))
            except FileNotFoundError:
                warnings.append(f"skipped {entry.name}: no meta.json (a half-written run?)")
                continue
            stamp = [stat.st_mtime_ns, stat.st_size]
            cached = index.get(entry.name)
            if cached and cached["stamp"] == stamp:
                row = cached["row"]
            else:
                try:
                    row = read_run(Path(entry.path))
                except (OSError, ValueError, TypeError, KeyError) as err:
                    warnings.append(f"skipped {entry.name}: unreadable ({type(err).__name__})")
                    continue
            fresh[entry.name] = {"stamp": stamp, "row": row}
            rows.append(row)
    if fresh.keys() != index.keys() or any(fresh[k]["stamp"] != index[k]["stamp"] for k in fresh):
        try:
            payload = {"version": INDEX_VERSION, "runs": fresh}
            atomic_write(index_path, json.dumps(payload, separators=(",", ":")))
        except OSError:  # a read-only runs directory still gets its report
            pass
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
    try:
        payload = json.loads(path.read_text())
        return payload["runs"] if payload.get("version") == INDEX_VERSION else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def sweep_run_ids(runs_dir: Path, name: str) -> list[str]:
    """The run ids of the latest sweep record called ``name``."""
    return [run["run_id"] for run in sweep_record(runs_dir, name)["runs"]]


def sweep_record(runs_dir: Path, name: str) -> dict:
    """The latest record of the sweep called ``name`` (runs/sweeps/<name>-<time>.json)."""
    records = sorted((runs_dir / "sweeps").glob(f"{name}-*.json"))
    records = [r for r in records if r.stem[len(name) + 1 :].replace("-", "").isdigit()]
    if not records:
        known = sorted({r.stem.rsplit("-", 2)[0] for r in (runs_dir / "sweeps").glob("*.json")})
        raise UsageError(
            f"--sweep {name}: no such sweep in {runs_dir / 'sweeps'}; valid: "
            + (", ".join(known) or "none (run normbench sweep first)")
        )
    return json.loads(records[-1].read_text())


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
