"""A run as a tracker sees it: its id and directory, status, config, tags and note, when it
started and finished, and its metrics, read from the run store through the trusted reader.

Both trackers write the same things from it: every metric column as a series over steps (a
NaN in metrics.parquet means "not logged at this step": validation metrics between
evaluations), the config as parameters, the tags.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from normbench.core.errors import StoreError
from normbench.core.text import plain
from normbench.experiment.schema import flatten
from normbench.store.rundir import METRIC_COLUMNS, RunDir


@dataclass(frozen=True)
class TrackedRun:
    """One run of the store, as the trackers export it."""

    run_id: str
    path: Path
    status: str  # as report shows it: a dead `running` run is `abandoned`
    config: dict
    tags: tuple[str, ...]
    note: str | None
    started: float | None  # seconds since the epoch
    finished: float | None
    code_hash: str
    metrics: pd.DataFrame  # rows with a usable step only (``usable_steps``)
    dropped: str | None = None  # the rows left out and why, for a warning


def tracked_run(row: Mapping[str, Any], runs_dir: Path) -> TrackedRun:
    """The run of one catalog row (``normbench.store.catalog``): its config and metrics read
    again through the trusted reader (StoreError when a file is refused); a run that has
    logged nothing yet has no metrics. The run id names the directory a tracker writes
    (DIR/<run_id>/): one that is not a plain name inside the runs directory is refused."""
    name = str(row["run_id"])
    if name != Path(name).name or name.startswith("."):
        raise StoreError(f"{plain(name)[:80]}: not the name of a run directory")
    run = RunDir(runs_dir, name)
    try:
        metrics = run.read_metrics()
    except FileNotFoundError:
        metrics = pd.DataFrame(columns=["step"])
    metrics, dropped = usable_steps(metrics)
    tags = row.get("tags")
    return TrackedRun(
        run_id=run.run_id,
        path=run.path,
        status=row["status"],
        config=run.read_config(),
        tags=tuple(tags) if isinstance(tags, list) else (),
        note=row.get("note") if isinstance(row.get("note"), str) else None,
        started=timestamp(row.get("started")),
        finished=timestamp(row.get("finished")),
        code_hash=str(row.get("code_hash") or "unrecorded"),
        metrics=metrics,
        dropped=dropped,
    )


MAX_STEP = 2**53  # every step up to it is an exact float and fits both trackers' int64


def usable_steps(metrics: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The rows whose step a tracker can take (a whole number from 0 to MAX_STEP), and what
    was left out: a metrics file the trusted reader accepts may lack the step column, or hold
    NaN, negative, fractional or huge steps (not normbench's writing, but a file to skip
    rows of, never a reason to stop exporting)."""
    if "step" not in metrics.columns:
        return pd.DataFrame(columns=["step"]), (
            f"no step column: its {len(metrics)} metrics row(s) not exported"
            if len(metrics)
            else None
        )
    steps = pd.to_numeric(metrics["step"], errors="coerce").astype(float)
    usable = steps.between(0, MAX_STEP) & (steps == steps.round())
    if usable.all():
        return metrics, None
    kept = metrics[usable].assign(step=steps[usable].astype("int64"))
    left = int((~usable).sum())
    return kept, f"{left} metrics row(s) without a whole step from 0 to 2^53 not exported"


def timestamp(text: Any) -> float | None:
    """An ISO time from meta.json as seconds since the epoch (UTC when it names no zone);
    None when it is missing or not a time."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def logged(row: Mapping[str, Any]) -> dict[str, float]:
    """A metrics row's logged values by column, ``step`` aside: the columns normbench knows,
    NaN and None (not logged at this step) left out."""
    values = {}
    for column in METRIC_COLUMNS[1:]:
        value = row.get(column)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            values[column] = float(value)
    return values


def rows(metrics: pd.DataFrame) -> Iterator[tuple[int, dict[str, float]]]:
    """(step, logged values) per row of a metrics table, in step order."""
    for row in metrics.sort_values("step").to_dict("records"):
        yield int(row["step"]), logged(row)


def parameters(config: dict) -> dict[str, Any]:
    """The config flattened (``norm.name``), each value a bool, int, float or string as
    trackers take them: null as ``null``, a list as its JSON."""
    return {key: parameter(value) for key, value in flatten(config).items()}


def parameter(value: Any) -> bool | int | float | str:
    if value is None:
        return "null"
    if isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)
