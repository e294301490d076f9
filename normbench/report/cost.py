"""The cost table: per group, what a training step costs (FLOPs, bytes saved for backward,
peak memory, step time with its seed interval, throughput) from the numbers every run records
(normbench.training.cost), and a verdict on step time against the reference group.

Step times compare only where they were measured alike: a group and its reference are
compared when all their runs ran on one host and under like load (``LOAD_SPREAD``); otherwise
the row says why, and no verdict is given. Runs recorded before normbench measured cost have
no step time: they are left out of this table, and a note says how many.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.base import Method
from normbench.report.convergence import reference_indices
from normbench.report.grouping import frame, group_rows, status_masks
from normbench.report.labels import label
from normbench.report.results import RESULT_STATUSES, numbers

# Runs compare only when each one's load per CPU, the mean of its 1-minute load average at
# the start and the end of training over its CPU count, lies within this of every other's: a
# run timed beside half a machine's worth of other work is not timed like one run alone.
LOAD_SPREAD = 0.5
# Step times within 5% of the reference's (a ratio in [1/1.05, 1.05]) are equivalent: the
# equivalence margin on log step time, a choice (as --margin is for the metric), stated in
# the table's caption.
EQUIVALENT_RATIO = 1.05
VERDICT_WORDS = {"worse": "slower", "better": "faster"}  # of -log step time, higher is better
NOT_COMPARED = "not compared"


def cost_table(runs: pd.DataFrame, keys: list[str], method: Method) -> pd.DataFrame | None:
    """One row per group of the finished runs that recorded a step time: their count and
    seeds, the medians over its runs of FLOPs per step and bytes saved for backward (and peak
    memory on CUDA), the geometric mean of its seeds' median step times with its 95% CI, the
    mean examples and tokens per second, its hosts and the range of its load per CPU; then
    the step-time ratio to its reference group (the one ``--reference`` names, else the
    fastest) with its (1 - 2 alpha) CI and the verdict: ``faster``, ``slower``, ``equivalent``
    (within ``EQUIVALENT_RATIO``) or ``inconclusive`` by stats.compare_with_references (or
    compare_with_best) on the log step times, paired by seed, Holm-adjusted; ``not compared``
    with the reason where hosts or load differ. None when no run recorded a step time."""
    timed = timed_mask(runs)
    if not timed.any():
        return None
    runs = runs[timed]
    step = numbers(runs["step_s_median"])
    column = {name: _column(runs, name) for name in COST_COLUMNS}
    recorded = runs["host"] if "host" in runs else pd.Series(None, index=runs.index)
    hosts = np.array([h if isinstance(h, str) else None for h in recorded], dtype=object)
    load = (column["load_start"] + column["load_end"]) / 2 / column["cpu_count"]
    seeds = runs["seed"].to_numpy() if "seed" in runs else np.arange(len(runs))
    rows, samples, measured = [], [], []
    for values, at in group_rows(runs, keys):
        by_seed: dict[int, list[float]] = {}
        for seed, seconds in zip(seeds[at].tolist(), step[at].tolist(), strict=True):
            by_seed.setdefault(seed, []).append(-math.log(seconds))
        sample = {seed: float(np.mean(logs)) for seed, logs in by_seed.items()}
        mean, half = stats.mean_ci([-v for v in sample.values()])
        rows.append(
            {
                **values,
                "runs": len(at),
                "seeds": len(sample),
                "flops_per_step": _median(column["matmul_flops_per_step"][at]),
                "saved_bytes_per_step": _median(column["saved_bytes_per_step"][at]),
                "peak_memory_bytes": _median(column["peak_memory_bytes"][at]),
                "step_s": math.exp(mean),
                "step_s_ci_low": math.exp(mean - half) if math.isfinite(half) else math.nan,
                "step_s_ci_high": math.exp(mean + half) if math.isfinite(half) else math.nan,
                "examples_per_s": _mean(column["examples_per_s"][at]),
                "tokens_per_s": _mean(column["tokens_per_s"][at]),
                "hosts": ",".join(sorted({label(h) for h in hosts[at]})),
                "load_per_cpu_low": _least(load[at]),
                "load_per_cpu_high": _most(load[at]),
            }
        )
        samples.append(sample)
        measured.append((set(hosts[at].tolist()), load[at]))
    verdicts, against = _verdicts(rows, keys, samples, measured, method)
    for row, verdict in zip(rows, verdicts, strict=True):
        row.update(
            step_ratio=math.exp(-verdict.diff),  # the group's step time over the reference's
            ratio_ci_low=math.exp(-verdict.ci_high),
            ratio_ci_high=math.exp(-verdict.ci_low),
            p_differs_adj=verdict.p_differs,
            p_equivalent_adj=verdict.p_equivalent,
            verdict=VERDICT_WORDS.get(verdict.verdict, verdict.verdict),
            reason=verdict.reason,
        )
    table = frame(rows, keys)
    table.attrs["against"] = against
    first = [i for i, row in enumerate(rows) if row["verdict"] == "reference"]
    order = [*first, *(i for i in np.argsort(table["step_s"].to_numpy()) if i not in first)]
    return table.iloc[order].reset_index(drop=True)


def _verdicts(
    rows: list[dict],
    keys: list[str],
    samples: list[stats.Results],
    measured: list[tuple[set, np.ndarray]],
    method: Method,
) -> tuple[list[stats.Verdict], str]:
    """Each group's verdict on its -log step times, and what it was compared with
    (``reference`` or ``fastest``). The fastest is chosen after looking, among groups that
    must then all have been timed alike; a named reference is compared with each group timed
    like it, the others ``not compared``."""
    margin = math.log(EQUIVALENT_RATIO)
    references = reference_indices(rows, keys, method.reference, method.reference_origin)
    if references is None:
        why = unlike(
            set().union(*(h for h, _ in measured)), np.concatenate([x for _, x in measured])
        )
        if why:
            return [stats.Verdict(NOT_COMPARED, reason=why) for _ in rows], "fastest"
        return stats.compare_with_best(samples, method.level, margin)[1], "fastest"
    reasons = [
        ""
        if ref is None or ref == i
        else unlike(
            measured[i][0] | measured[ref][0], np.concatenate([measured[i][1], measured[ref][1]])
        )
        for i, ref in enumerate(references)
    ]
    tested = [None if why else ref for ref, why in zip(references, reasons, strict=True)]
    verdicts = stats.compare_with_references(samples, tested, method.level, margin)
    return [
        stats.Verdict(NOT_COMPARED, reason=why) if why else verdict
        for verdict, why in zip(verdicts, reasons, strict=True)
    ], "reference"


def unlike(hosts: set, load: np.ndarray) -> str:
    """Why runs' step times do not compare ('' when they do): several hosts, a host not
    recorded, a load not recorded, or loads per CPU further apart than ``LOAD_SPREAD``."""
    if None in hosts:
        return "host not recorded"
    if len(hosts) > 1:
        return f"hosts differ: {', '.join(sorted(hosts))}"
    if np.isnan(load).any():
        return "load not recorded"
    if load.max() - load.min() > LOAD_SPREAD:
        return f"load per CPU differs: {load.min():.2f} to {load.max():.2f}"
    return ""


def timed_mask(runs: pd.DataFrame) -> np.ndarray:
    """The finished runs that recorded a step time."""
    if "step_s_median" not in runs:
        return np.zeros(len(runs), dtype=bool)
    step = numbers(runs["step_s_median"])
    finished = status_masks(runs["status"]).any_of(RESULT_STATUSES)
    return finished & np.isfinite(step) & (step > 0)


def cost_notes(runs: pd.DataFrame) -> list[str]:
    """A note when the cost table leaves out finished runs that recorded no step time (made
    before normbench measured cost); none when it has no rows at all."""
    timed = timed_mask(runs)
    finished = status_masks(runs["status"]).any_of(RESULT_STATUSES)
    untimed = int((finished & ~timed).sum())
    if not timed.any() or not untimed:
        return []
    return [
        f"cost: {untimed} finished run(s) recorded no step time (made before normbench "
        "measured cost) and are left out of the cost table"
    ]


COST_COLUMNS = (
    "matmul_flops_per_step",
    "saved_bytes_per_step",
    "peak_memory_bytes",
    "examples_per_s",
    "tokens_per_s",
    "load_start",
    "load_end",
    "cpu_count",
)


def _column(runs: pd.DataFrame, name: str) -> np.ndarray:
    return numbers(runs[name]) if name in runs else np.full(len(runs), math.nan)


def _median(values: np.ndarray) -> float:
    present = values[np.isfinite(values)]
    return float(np.median(present)) if len(present) else math.nan


def _mean(values: np.ndarray) -> float:
    present = values[np.isfinite(values)]
    return float(present.mean()) if len(present) else math.nan


def _least(values: np.ndarray) -> float:
    return float(np.nanmin(values)) if np.isfinite(values).any() else math.nan


def _most(values: np.ndarray) -> float:
    return float(np.nanmax(values)) if np.isfinite(values).any() else math.nan
