"""The report's shared grouping helpers, against the plain definitions they speed up: a
label count from distinct values, a group's results from arrays, groups as row positions."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from normbench.report.base import (
    ACCURACY,
    BITS_PER_BYTE,
    Method,
    group_rows,
    groups,
    label,
    label_count,
    labels,
    seeded_results,
)

COLUMNS = [
    [1, True],  # one label each: 1 and true
    [1, 1.0, 2],  # 1 and 1.0 are one label
    [None, None],
    [None, math.nan, "x"],
    [None, "-"],  # a null is "-": one label with the text "-"
    [8, None, 8, 16],
    [0.5, 2.0, 2],
    ["a", "b", None],
    [[1, 2], [1, 2], None],  # lists: value by value
    [True, False, None],
    [],
]


@pytest.mark.parametrize("values", COLUMNS)
def test_label_count_is_the_number_of_distinct_labels(values):
    column = pd.Series(values, dtype=object)
    assert label_count(column) == len({label(v) for v in values}) == labels(column).nunique()


def plain_results(part: pd.DataFrame, column: str, metric, method) -> dict[int, float]:
    """seeded_results as its docstring defines it, row by row."""
    by_seed: dict[int, list[float]] = {}
    for _, run in part.sort_values("seed", kind="stable").iterrows():
        chance = metric.chance(float(run["num_classes"]))
        value = run[column]
        if run["status"] == "diverged" and method.diverged == "chance":
            by_seed.setdefault(int(run["seed"]), []).append(chance)
        elif run["status"] == "complete" and value is not None and math.isfinite(value):
            kept = value if metric.higher_is_better else min(value, chance)
            by_seed.setdefault(int(run["seed"]), []).append(float(kept))
    return {seed: math.fsum(v) / len(v) for seed, v in by_seed.items()}


@pytest.mark.parametrize("metric", [ACCURACY, BITS_PER_BYTE])
@pytest.mark.parametrize("diverged", ["chance", "exclude"])
def test_seeded_results_from_arrays_are_the_row_by_row_definition(metric, diverged):
    rng = np.random.default_rng(3)
    size = 40
    part = pd.DataFrame(
        {
            "seed": rng.integers(0, 12, size).astype(object),  # unsorted, some seeds twice
            "status": rng.choice(["complete", "diverged", "failed", "running"], size),
            "value": np.where(rng.random(size) < 0.1, np.nan, rng.random(size) * 6),
            "num_classes": rng.choice([4.0, 10.0, 256.0], size),
        }
    )
    method = Method(diverged=diverged)
    got = seeded_results(part, "value", metric, method)
    want = plain_results(part, "value", metric, method)
    assert list(got) == list(want) and list(got) == sorted(got)
    assert all(got[seed] == want[seed] for seed in want)  # the same floats, not close ones


def test_group_rows_are_pandas_groups_by_label_in_order():
    runs = pd.DataFrame(
        {
            "norm.name": ["b", "a", "b", "a", "c", "a"],
            "batch_size": pd.Series([8, 8, 16, 8.0, None, 16], dtype=object),
            "seed": range(6),
        }
    )
    keys = ["norm.name", "batch_size"]
    shown = [labels(runs[k]).rename(f"__{k}") for k in keys]
    parts = [part for _, part in runs.groupby(shown, sort=True, dropna=False)]
    by_rows = group_rows(runs, keys)
    assert [runs.index[rows].tolist() for _, rows in by_rows] == [p.index.tolist() for p in parts]
    assert [values for values, _ in by_rows][:2] == [  # sorted by label, as text
        {"norm.name": "a", "batch_size": 16},
        {"norm.name": "a", "batch_size": 8},
    ]
    assert [values for values, _ in groups(runs, keys)] == [values for values, _ in by_rows]
    assert group_rows(runs.iloc[:0], keys) == []
