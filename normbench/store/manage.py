"""Managing a runs directory: list, show, compare and clean runs.

Reads through normbench.catalog (the index keeps ``runs list`` fast over thousands of runs);
``clean`` deletes only plain run directories directly inside the runs directory, never
through a symlink, and never a run whose lock is held (a run being trained).
"""

from __future__ import annotations

import json
import math
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.experiment.schema import flatten
from normbench.store.catalog import Selection
from normbench.store.rundir import STATUSES, RunDir

# The choices that say what a run is, in the order `runs list` shows them.
HEADLINE = (
    "model.name",
    "norm.name",
    "placement.name",
    "precision.name",
    "data.name",
    "batch_size",
    "seed",
)


def parse_statuses(text: str | None) -> list[str] | None:
    """``failed,interrupted`` -> a list, each checked against the statuses a run can have."""
    if text is None:
        return None
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    valid = (*STATUSES, "abandoned")
    bad = [s for s in wanted if s not in valid]
    if bad or not wanted:
        raise UsageError(f"--status {text}: valid: {', '.join(valid)} (comma-separated)")
    return wanted


def narrow(selection: Selection, statuses: list[str] | None) -> pd.DataFrame:
    runs = selection.runs
    return runs[runs["status"].isin(statuses)] if statuses else runs


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """'3 min', '5 h', '2 d' since an ISO time; '-' when unknown."""
    try:
        then = datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return "-"
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = ((now or datetime.now(timezone.utc)) - then).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(0, seconds):.0f} s"


def list_rows(runs: pd.DataFrame) -> tuple[list[dict[str, str]], str]:
    """One row a run, newest first: id, status, the headline choices that differ between the
    listed runs, result, age, tags; and the choices they all share, as one line."""
    present = [key for key in HEADLINE if key in runs]
    shared = [key for key in present if runs[key].map(str).nunique() == 1]
    varying = [key for key in present if key not in shared]
    rows = []
    ordered = runs.sort_values("started", ascending=False, na_position="last")
    for _, run in ordered.iterrows():
        result = "-"
        for column, name in (("final_val_bpb", "bpb"), ("final_val_acc", "acc")):
            value = run.get(column)
            if isinstance(value, float) and not math.isnan(value):
                result = f"{name} {value:.4f}"
                break
        rows.append(
            {
                "run_id": run["run_id"],
                "status": run["status"],
                "choices": _choices(run, varying),
                "result": result,
                "age": age(run.get("finished") or run.get("started")),
                "tags": ",".join(run["tags"]) if isinstance(run.get("tags"), list) else "",
            }
        )
    return rows, _choices(runs.iloc[0], shared) if len(runs) else ""


def _choices(run: pd.Series, keys: list[str]) -> str:
    return " ".join(f"{key.removesuffix('.name')}={run[key]}" for key in keys)


def resolve(runs_dir: Path, name: str) -> RunDir:
    """A run by its id or an unambiguous prefix of it."""
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"run {name!r}: a run id (or the start of one), as `runs list` shows")
    exact = runs_dir / name
    if exact.is_dir() and not exact.is_symlink():
        return RunDir(runs_dir, name)
    matches = sorted(
        p.name
        for p in runs_dir.glob(f"{name}*")
        if p.is_dir() and not p.is_symlink() and not p.name.startswith(".") and p.name != "sweeps"
    )
    if len(matches) == 1:
        return RunDir(runs_dir, matches[0])
    if not matches:
        raise UsageError(f"run {name}: no such run in {runs_dir}; see normbench runs list")
    shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
    raise UsageError(f"run {name}: {len(matches)} runs start so; give more of the id: {shown}")


def read_config(run: RunDir) -> dict:
    import yaml

    text = (run.path / "config.yaml").read_text()
    cfg = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(cfg, dict):
        raise UsageError(f"run {run.run_id}: config.yaml is not a config")
    return cfg


def diff(a: RunDir, b: RunDir) -> list[tuple[str, str, str]]:
    """(key, value in A, value in B) for every config key that differs, and for the code,
    torch and device that made each run."""
    flat_a, flat_b = flatten(read_config(a)), flatten(read_config(b))
    rows = [
        (key, json.dumps(flat_a.get(key, "(absent)")), json.dumps(flat_b.get(key, "(absent)")))
        for key in sorted(set(flat_a) | set(flat_b))
        if flat_a.get(key, "(absent)") != flat_b.get(key, "(absent)")
    ]
    meta_a, meta_b = a.read_meta() or {}, b.read_meta() or {}
    for name, pick in (
        ("(code)", lambda m: (m.get("code") or {}).get("source_hash")),
        ("(torch)", lambda m: (m.get("versions") or {}).get("torch")),
        ("(device)", lambda m: m.get("device")),
    ):
        if pick(meta_a) != pick(meta_b):
            rows.append((name, str(pick(meta_a)), str(pick(meta_b))))
    return rows


def clean_candidates(runs_dir: Path, runs: pd.DataFrame) -> list[RunDir]:
    """The selected runs that can be deleted: plain directories (never symlinks) directly
    inside runs_dir, not being trained (their lock is free)."""
    out = []
    for rid in runs["run_id"]:
        run = RunDir(runs_dir, rid)
        if run.path.is_symlink() or not run.path.is_dir():
            continue
        with run.lock(wait=False) as free:
            if free:
                out.append(run)
    return out


def delete(run: RunDir) -> None:
    """Remove a run's directory and its lock file."""
    shutil.rmtree(run.path)
    (run.path.parent / ".locks" / f"{run.run_id}.lock").unlink(missing_ok=True)
