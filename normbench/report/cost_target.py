"""Time and FLOPs to a target, the cost table's last columns: per group, how long its runs
trained, and how many matrix-product FLOPs they spent, until their validation metric first
reached one value, and each group's ratio to the reference group's, paired by seed.

The target is one value of the section's metric: ``report --target VALUE``, or by default the
worst final result of any run in the cost table (the last logged evaluation of the run whose
last evaluation is worst). The default is the best value every run reaches, so no run is
censored by it, and every group gets a ratio; it is chosen after looking, which a ratio of
times does not test against. A run reaches the target at its first logged evaluation at or
beyond it (>= for accuracy, <= for bits per byte): that evaluation's training time
(``elapsed_s``: the steps' time, evaluation excluded) and its step times the run's FLOPs per
step. No interpolation between evaluations: a run is known to have reached the target only
where it was evaluated, as the trainer's own ``steps_to_target`` counts.

A run that never reaches the target is censored: its group shows "not reached" with how
many seeds did, and no ratio involving it is computed (nothing is guessed about when it
would have). Ratios: the geometric mean of the per-seed ratios (Welch's on the log times
where the seeds differ), with the (1 - 2 alpha) t interval on the mean log ratio, as the
step-time ratio has (normbench.report.stats.difference and interval); intervals only, no
verdict. A time ratio is given only where the step times compare (the row's step verdict
is not ``not compared``); FLOPs do not depend on the load, so their ratio always is.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.core.errors import StoreError
from normbench.report import stats
from normbench.report.base import Method, Report, Section
from normbench.report.convergence import reference_indices
from normbench.report.cost import NOT_COMPARED, timed_mask
from normbench.report.grouping import group_rows
from normbench.report.labels import label
from normbench.report.results import numbers
from normbench.store.rundir import read_metric_columns

NOT_REACHED = "not reached"
DEFAULT_ORIGIN = "the worst run's final"
TARGET_COLUMNS = (
    "target",
    "reached",
    "time_to_target_s",
    "time_to_target_ci_low",
    "time_to_target_ci_high",
    "flops_to_target",
    "flops_to_target_ci_low",
    "flops_to_target_ci_high",
    "time_ratio",
    "time_ratio_ci_low",
    "time_ratio_ci_high",
    "flops_ratio",
    "flops_ratio_ci_low",
    "flops_ratio_ci_high",
)


def attach_to_target(
    result: Report, runs_dir: Path, method: Method, target: float | None = None
) -> None:
    """Each section's cost table gains the time and FLOPs to ``target`` (None: the worst
    run's final) and their ratios to the reference; a run whose metrics cannot be read is
    named in the report's warnings and counts as not reached."""
    for section in result.sections:
        if section.tables.get("cost") is None:
            continue
        reached, skipped = reach_times(section, runs_dir, target)
        result.warnings.extend(skipped)
        section.tables["cost"] = with_to_target(section, reached, method)


def reach_times(
    section: Section, runs_dir: Path, target: float | None
) -> tuple[pd.DataFrame, list[str]]:
    """Per timed run of the section: its first evaluation reaching the target (step and
    training seconds; NaN when it never did), with the target in ``attrs``."""
    runs = section.runs[timed_mask(section.runs)]
    metric = section.metric
    curves, skipped = {}, []
    for rid in runs["run_id"]:
        try:
            curves[rid] = _evaluations(runs_dir, rid, metric.name)
        except (OSError, StoreError) as err:
            reason = str(err) if isinstance(err, StoreError) else err.strerror
            skipped.append(f"time to target: {rid}'s metrics could not be read: {reason}")
    origin = "--target"
    if target is None:
        finals = [c[metric.name].iloc[-1] for c in curves.values() if len(c)]
        finals = [v for v in finals if math.isfinite(v)]
        target = (min if metric.higher_is_better else max)(finals) if finals else math.nan
        origin = DEFAULT_ORIGIN
    found = []
    for rid in runs["run_id"]:
        curve = curves.get(rid)
        step, seconds = math.nan, math.nan
        if curve is not None and math.isfinite(target):
            value = curve[metric.name].to_numpy()
            hit = value >= target if metric.higher_is_better else value <= target
            if hit.any():
                first = int(np.argmax(hit))
                step, seconds = (
                    float(curve["step"].iloc[first]),
                    float(curve["elapsed_s"].iloc[first]),
                )
        found.append({"run_id": rid, "step": step, "seconds": seconds})
    table = pd.DataFrame(found, columns=["run_id", "step", "seconds"])
    table.attrs.update(target=target, origin=origin)
    return table, skipped


def _evaluations(runs_dir: Path, rid: str, metric: str) -> pd.DataFrame:
    """A run's logged evaluations of ``metric`` in step order: step, elapsed_s and the
    metric, through the trusted reader (bounded in bytes and rows, numbers only)."""
    wanted = ["step", "elapsed_s", metric]
    rows = read_metric_columns(runs_dir, rid, wanted)
    return rows.dropna(subset=[metric]).sort_values("step", kind="stable")


def with_to_target(section: Section, reached: pd.DataFrame, method: Method) -> pd.DataFrame:
    """The section's cost table with ``TARGET_COLUMNS``: per group the geometric mean over
    its seeds of the time and FLOPs to target with their 95% CI (NaN unless every run
    reached it), how many seeds did, and the ratios to its reference group."""
    cost = section.tables["cost"].copy()
    runs = section.runs[timed_mask(section.runs)]
    keys = [k for k in section.keys if k in cost]
    by_run = reached.set_index("run_id")
    flops = numbers(runs["matmul_flops_per_step"]) if "matmul_flops_per_step" in runs else None
    seeds = (runs["seed"] if "seed" in runs else pd.Series(range(len(runs)))).tolist()
    samples: dict[tuple, tuple[stats.Results, stats.Results, int]] = {}
    for values, at in group_rows(runs, keys):
        times: dict[int, list[float]] = {}
        spent: dict[int, list[float]] = {}
        missed = set()
        for i in at:
            rid, seed = runs["run_id"].iloc[i], seeds[i]
            seconds, step = by_run.at[rid, "seconds"], by_run.at[rid, "step"]
            per_step = flops[i] if flops is not None else math.nan
            if not (math.isfinite(seconds) and seconds > 0):
                missed.add(seed)
                continue
            times.setdefault(seed, []).append(math.log(seconds))
            if math.isfinite(per_step) and per_step > 0 and step > 0:
                spent.setdefault(seed, []).append(math.log(step * per_step))
        time_logs = {s: float(np.mean(v)) for s, v in times.items() if s not in missed}
        flops_logs = {s: float(np.mean(v)) for s, v in spent.items() if s not in missed}
        samples[tuple(label(values[k]) for k in keys)] = (time_logs, flops_logs, len(missed))
    names = [tuple(label(row[k]) for k in keys) for _, row in cost.iterrows()]
    rows = [samples.get(name, ({}, {}, 0)) for name in names]
    references = _references(cost, keys, method)
    added = []
    for i, (time_logs, flops_logs, missed) in enumerate(rows):
        every = not missed
        row = {"target": reached.attrs["target"], "reached": len(time_logs)}
        row |= _geometric("time_to_target", time_logs if every else {}, "_s")
        row |= _geometric("flops_to_target", flops_logs if every else {})
        ref = references[i]
        comparable = ref is not None and ref != i and not rows[ref][2] and every
        times_compare = comparable and cost["verdict"].iloc[i] != NOT_COMPARED
        row |= _ratio("time_ratio", time_logs, rows[ref][0] if times_compare else None, method)
        row |= _ratio("flops_ratio", flops_logs, rows[ref][1] if comparable else None, method)
        if ref == i:
            row |= {"time_ratio": 1.0, "flops_ratio": 1.0}
        added.append(row)
    extra = pd.DataFrame(added, columns=list(TARGET_COLUMNS), index=cost.index)
    table = pd.concat([cost, extra], axis=1)
    table.attrs = {**cost.attrs, "target": reached.attrs["target"]}
    table.attrs["target_origin"] = reached.attrs["origin"]
    return table


def _references(cost: pd.DataFrame, keys: list[str], method: Method) -> list[int | None]:
    """Each row's reference row: the one --reference names in its stratum, else the fastest
    (the cost table's first row: it is in step-time order, its reference first)."""
    rows = [dict(row) for _, row in cost.iterrows()]
    named = reference_indices(rows, keys, method.reference, method.reference_origin)
    if named is not None:
        return named
    fastest = int(np.argmin(cost["step_s"].to_numpy())) if len(cost) else None
    marked = [i for i, v in enumerate(cost["verdict"]) if v == "reference"]
    return [marked[0] if marked else fastest] * len(cost)


def _geometric(name: str, logs: stats.Results, unit: str = "") -> dict[str, float]:
    """The geometric mean of per-seed values given as logs (column ``name`` + ``unit``), with
    its 95% t interval (``name_ci_low``, ``name_ci_high``)."""
    mean, half = stats.mean_ci(list(logs.values()))
    finite = math.isfinite(half)
    return {
        name + unit: math.exp(mean) if math.isfinite(mean) else math.nan,
        f"{name}_ci_low": math.exp(mean - half) if finite else math.nan,
        f"{name}_ci_high": math.exp(mean + half) if finite else math.nan,
    }


def _ratio(
    name: str, logs: stats.Results, reference: stats.Results | None, method: Method
) -> dict[str, float]:
    """The group's values over the reference's: the exp of the mean log ratio, paired by seed
    (Welch where the seeds differ), with its (1 - 2 alpha) interval; NaN without a reference,
    or with fewer than two seeds on either side."""
    empty = {name: math.nan, f"{name}_ci_low": math.nan, f"{name}_ci_high": math.nan}
    if reference is None or len(logs) < 2 or len(reference) < 2:
        return empty
    d = stats.difference(logs, reference)
    low, high = stats.interval(d, method.level)
    return {
        name: math.exp(d.diff),
        f"{name}_ci_low": math.exp(low) if math.isfinite(low) else math.nan,
        f"{name}_ci_high": math.exp(high) if math.isfinite(high) else math.nan,
    }
