"""A group's runs as results by seed, the numbers normbench.report.stats compares: which runs
count (complete ones; diverged ones at chance or not at all), one result a seed, oriented as
the tests expect; the metric the runs are about; and its resolution, the smallest step it
moves by. Apart from grouping because these are the report's rules for numbers, which every
question applies the same way to whatever groups it forms.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report.base import ACCURACY, BITS_PER_BYTE, Method, Metric
from normbench.report.labels import plain
from normbench.report.stats import Results

RESULT_STATUSES = ("complete", "diverged")  # runs whose numbers are results
UNFINISHED_STATUSES = ("interrupted", "running", "abandoned")


def metric_of(runs: pd.DataFrame) -> Metric:
    """Bits per byte for language-model runs (they record it), accuracy otherwise."""
    if "final_val_bpb" in runs and runs["final_val_bpb"].notna().any():
        return BITS_PER_BYTE
    return ACCURACY


def seeded_results(part: pd.DataFrame, column: str, metric: Metric, method: Method) -> Results:
    """A group's results by seed, in seed order: complete runs' values, diverged runs at chance
    (or dropped with ``--diverged exclude``); failed and unfinished runs are never results.
    Oriented as the metric reads (not negated). Runs of one seed in one group (the grouping
    leaves out a key that varies: ``--by norm.name`` over batch sizes) are one result, their
    mean: the seed stays the unit that pairs groups, and no run is dropped
    (normbench.report.sections notes which keys were averaged over). Bits per byte have no
    worst value: a run that exploded without a NaN (a finite 1e10 bits per byte) counts at
    chance, as a diverged run does, never beyond it; its excess measures nothing but would
    swamp every mean and CI. (Column by column: a group of a store of 100,000 runs holds
    hundreds.)"""
    return seeded(*result_columns(part, column), metric, method)


def result_columns(part: pd.DataFrame, column: str) -> tuple[np.ndarray, ...]:
    """What ``seeded`` reads of runs, as arrays: seeds, statuses, the column's values as floats
    and the class counts. A table taking a group's cells (a batch size, a learning rate) slices
    these rather than the frame."""
    seeds = seed_array(part["seed"].to_numpy() if "seed" in part else part.index.to_numpy())
    values = numbers(part[column]) if column in part else np.full(len(part), np.nan)
    return seeds, part["status"].to_numpy(), values, part["num_classes"].to_numpy(dtype=float)


def seed_array(seeds: np.ndarray) -> np.ndarray:
    """Seeds as int64 where each is an integer exactly (the store's seed column holds Python
    ints as objects), else as they are: ``seeded`` orders and converts a group's seeds, and
    on objects that is Python arithmetic for each of 100,000 runs."""
    if seeds.dtype == np.int64:
        return seeds
    with np.errstate(invalid="ignore"):  # a float NaN casts to garbage: the test refuses it
        try:
            whole = seeds.astype(np.int64)
        except (TypeError, ValueError, OverflowError):  # None, NaN, text, a huge number
            return seeds
        return whole if (whole == seeds).all() else seeds


def seeded(
    seeds: np.ndarray,
    status: np.ndarray,
    values: np.ndarray,
    classes: np.ndarray,
    metric: Metric,
    method: Method,
) -> Results:
    """``seeded_results`` from a group's columns as arrays (values as floats: ``numbers``)."""
    if len(seeds) > 1 and (np.diff(seeds) < 0).any():
        order = np.argsort(seeds, kind="stable")
        seeds, status, values, classes = seeds[order], status[order], values[order], classes[order]
    at_chance = (status == "diverged") & (method.diverged == "chance")
    used = at_chance | ((status == "complete") & np.isfinite(values))
    chance = chances(classes[used], metric)
    values = values[used]
    if not metric.higher_is_better:
        values = np.where(chance < values, chance, values)  # min(value, chance), as Python's
    scores = np.where(at_chance[used], chance, values).tolist()
    if seeds.dtype == np.int64:
        used_seeds = seeds[used].tolist()
    else:
        used_seeds = [int(seed) for seed in seeds[used].tolist()]
    if len(set(used_seeds)) == len(used_seeds):  # one run a seed: its value is the result
        return dict(zip(used_seeds, scores, strict=True))
    by_seed: dict[int, list[float]] = {}
    for seed, score in zip(used_seeds, scores, strict=True):
        by_seed.setdefault(seed, []).append(score)
    return {seed: math.fsum(runs) / len(runs) for seed, runs in by_seed.items()}


def chances(classes: np.ndarray, metric: Metric) -> np.ndarray:
    """``metric.chance`` of each run's class count, computed once per distinct count (a store
    has one count almost always: then without sorting them)."""
    if len(classes) and (classes == classes[0]).all():  # (NaN equals nothing: the other way)
        return np.full(len(classes), metric.chance(float(classes[0])))
    distinct, which = np.unique(classes, return_inverse=True)
    return np.array([metric.chance(float(c)) for c in distinct], dtype=float)[which]


def numbers(column: pd.Series) -> np.ndarray:
    """A column as floats, NaN where a value is no finite number (None, text, infinity)."""
    if pd.api.types.is_float_dtype(column.dtype):
        return column.to_numpy(dtype=float)
    return np.array([float(v) if finite(v) else math.nan for v in column.tolist()], dtype=float)


def scored(values: Results, metric: Metric) -> Results:
    """Results oriented so that higher is better (what normbench.report.stats expects)."""
    return values if metric.higher_is_better else {seed: -v for seed, v in values.items()}


def resolution(runs: pd.DataFrame, metric: Metric, test: bool = False) -> float:
    """The smallest step the metric moves by in these runs: 1 / the number of samples (or
    bytes) an accuracy is counted over; 0 for bits per byte (continuous). The number comes from
    the run's summary (``val_size``, ``test_size``); runs made before it was recorded get it
    from their data config where that needs no file (mnist1d, digits, tokens: the split
    arithmetic; pysource: windows x context), else 0 (unknown)."""
    if not metric.higher_is_better:
        return 0.0
    column = "test_size" if test else "val_size"
    recorded = runs[column].dropna() if column in runs else pd.Series(dtype=float)
    if len(recorded):
        return 1 / float(recorded.max())
    first = runs.iloc[0]
    data = {k.removeprefix("data."): first[k] for k in runs.columns if k.startswith("data.")}
    if data.get("name") == "pysource":
        return 1 / (float(data["eval_windows"]) * float(data["context"]))
    if data.get("name") in ("mnist1d", "digits", "tokens"):
        from normbench.data.datasets import split_sizes

        try:
            size = split_sizes({k: plain(v) for k, v in data.items()})["test" if test else "val"]
        except (KeyError, TypeError, ValueError):  # a config of another normbench
            return 0.0
        return 1 / size if size else 0.0
    return 0.0


def finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)
