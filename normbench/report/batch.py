"""The batch-sensitivity table: per group without the batch keys, the mean per per-device
batch and the pre-specified contrast of the reference batch against the smallest.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.layers.keys import NORM_TABLE
from normbench.report import stats
from normbench.report.base import Method, Metric
from normbench.report.grouping import frame, group_rows
from normbench.report.results import RESULT_STATUSES, resolution, result_columns, scored, seeded

# The keys a batch-sensitivity row leaves out: its columns are the batch its statistics see.
PER_DEVICE_BATCH = "per_device_batch"  # derived, not configured: batch_size / train.devices
BATCH_KEYS = ("batch_size", "norm.ghost_batch", "train.devices", PER_DEVICE_BATCH)


def ghost_users(names: pd.Series) -> np.ndarray:
    """Which runs' norm reads norm.ghost_batch: a shipped one whose entry in the norm table
    says so (the report imports no plugin to ask it)."""
    readers = [name for name, entry in NORM_TABLE.items() if "ghost_batch" in entry.reads]
    return names.isin(readers).to_numpy()


def per_device_batch(runs: pd.DataFrame) -> pd.Series:
    """Each run's per-device batch: batch_size over train.devices (a run stored before the key
    trained on one device)."""
    devices = runs.get("train.devices", pd.Series(1, index=runs.index)).fillna(1)
    return (runs["batch_size"].astype(float) // devices.astype(float)).astype(int)


def device_batch(runs: pd.DataFrame, uses_ghost: np.ndarray) -> pd.Series:
    """The batch a norm's statistics see. For a norm with batch statistics (``uses_ghost``:
    it reads norm.ghost_batch): norm.ghost_batch where set, else the per-device batch
    (batch_size / train.devices, DistributedDataParallel's default), or the global batch
    where norm.sync=global synchronizes the statistics across the devices. For any other
    norm: batch_size."""
    ghost = runs.get("norm.ghost_batch", pd.Series(np.nan, index=runs.index))
    synced = (runs.get("norm.sync", pd.Series(None, index=runs.index)) == "global").to_numpy()
    statistics = np.where(synced, runs["batch_size"], per_device_batch(runs))
    chosen = np.where(
        uses_ghost & ghost.notna(), ghost, np.where(uses_ghost, statistics, runs["batch_size"])
    )
    return pd.Series(chosen.astype(float).astype(int), index=runs.index)


def batch_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame | None:
    """Rows: the groups without the batch keys; per per-device batch, the mean and 95% CI;
    then the pre-specified contrast, the reference batch (the largest, or
    ``--reference-batch``) against the smallest: the drop (how much worse the smallest is, in
    the metric's units), its (1 - 2 alpha) CI and a verdict (normbench.report.stats.contrast,
    paired by seed where the seeds match). None when the per-device batch does not vary.

    A norm that ignores norm.ghost_batch has one result for every ghost batch: its row shows
    the same runs in each column and is ``insensitive`` by construction ("same runs"). Runs
    that differ in train.devices at one global batch are the same study: a norm with batch
    statistics has a column per per-device batch; any other norm (whose output no device
    count changes) shows all its runs in each column, "same runs" too."""
    uses_ghost = ghost_users(runs["norm.name"])
    runs = runs.assign(device_batch=device_batch(runs, uses_ghost))
    sizes = sorted(runs.loc[runs["status"].isin(RESULT_STATUSES), "device_batch"].unique())
    if len(sizes) < 2:
        return None
    reference = method.reference_batch or sizes[-1]
    if reference not in sizes:
        raise UsageError(
            f"--reference-batch {reference}: not a per-device batch of these runs; valid: "
            + ", ".join(str(s) for s in sizes)
        )
    ghost_study = runs["batch_size"].nunique() == 1
    row_keys = [k for k in keys if k not in BATCH_KEYS]
    rows, pairs = [], []
    # The columns read, taken once for the whole frame; a group's cells from its rows
    read = result_columns(runs, metric.column)
    batches = runs["device_batch"].to_numpy()
    for values, rows_at in group_rows(runs, row_keys):
        same_runs = ghost_study and not uses_ghost[rows_at].any()
        row = {**values}
        columns = [column[rows_at] for column in read]
        at = batches[rows_at]
        by_size = {s: seeded(*(c[at == s] for c in columns), metric, method) for s in sizes}
        whole = seeded(*columns, metric, method) if same_runs else None  # every column's runs
        cells = {}
        for size in sizes:
            cell = by_size[size] if whole is None else whole
            cells[size] = np.array(list(cell.values()), dtype=float)
            mean, ci = stats.mean_ci(cells[size])
            row.update({f"b{size}_mean": mean, f"b{size}_ci95": ci, f"b{size}_n": len(cells[size])})
        smallest = min((s for s in sizes if len(cells[s])), default=sizes[0])
        row.update(
            reference_batch=int(reference), smallest_batch=int(smallest), same_runs=same_runs
        )
        rows.append(row)
        pairs.append(tuple(scored(by_size[size], metric) for size in (reference, smallest)))
    step = resolution(runs, metric)
    verdicts = stats.contrast(pairs, method.level, method.margin, step)
    words = {"worse": "sensitive", "equivalent": "insensitive"}
    for row, verdict in zip(rows, verdicts, strict=True):
        if row["same_runs"]:
            verdict = stats.Verdict("equivalent", 0.0, 0.0, 0.0, reason="same runs")
        elif row["smallest_batch"] == row["reference_batch"]:
            verdict = stats.Verdict("inconclusive", reason="results at one batch size only")
        row.update(  # the drop: reference minus smallest, as scored (worse is positive)
            drop=0.0 - verdict.diff,  # never -0.0
            drop_ci_low=0.0 - verdict.ci_high,
            drop_ci_high=0.0 - verdict.ci_low,
            p_sensitive_adj=verdict.p_differs,
            p_insensitive_adj=verdict.p_equivalent,
            verdict=words.get(verdict.verdict, verdict.verdict),
            reason=verdict.reason,
        )
    table = frame(rows, row_keys)
    order = np.argsort(-table["drop"].fillna(-math.inf).to_numpy(), kind="stable")
    return table.iloc[order].reset_index(drop=True)
