"""The report's shared grouping helpers, against the plain definitions they speed up: a
label count from distinct values, a group's results from arrays, groups as row positions."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from normbench.report.base import (
    ACCURACY,
    BITS_PER_BYTE,
    Method,
    group_codes,
    group_rows,
    groups,
    label,
    label_codes,
    label_count,
    labels,
    seed_array,
    seeded_results,
    status_masks,
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
    [0, False, -0.0, None],  # equal, and hashed alike, but labelled 0 and false
    [np.int64(3), 3, None],
    [{"a": 1}, None],
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


ODD_COLUMNS = [  # values a store never holds, labelled as labels labels them all the same
    pd.Series([np.float32(64.0), 64, None], dtype=object),  # 64.0 and 64
    pd.Series([pd.NA, None, 1], dtype=object),  # <NA> and -
    pd.Series([Decimal("1.0"), 1], dtype=object),
    pd.Series([1 + 0j, 1], dtype=object),
    pd.Series([pd.NaT, None], dtype=object),
    pd.Series([1, None, 2], dtype="Int64"),
    pd.Series([True, None], dtype="boolean"),
    pd.Series([True, False]),  # numpy booleans
    pd.Series(["a", None, "b"], dtype="str"),
    pd.Series([{1}, {1}, None], dtype=object),  # unhashable, not a list
]


@pytest.mark.parametrize(
    "column", [pd.Series(values, dtype=object) for values in COLUMNS] + ODD_COLUMNS
)
def test_label_codes_number_the_sorted_labels(column):
    codes, shown = label_codes(column)
    assert shown == sorted(set(labels(column)))  # each label once, in order
    assert [shown[code] for code in codes] == labels(column).tolist()


SEEDS = {  # as a store gives them (Python ints as objects), and as tests and users may
    "objects": lambda seeds: seeds.astype(object),
    "int64": lambda seeds: seeds,
    "floats": lambda seeds: seeds.astype(float),
}


@pytest.mark.parametrize("metric", [ACCURACY, BITS_PER_BYTE])
@pytest.mark.parametrize("diverged", ["chance", "exclude"])
@pytest.mark.parametrize("seed_kind", list(SEEDS))
@pytest.mark.parametrize("counts", [(10.0,), (4.0, 10.0, 256.0)])
def test_seeded_results_from_arrays_are_the_row_by_row_definition(
    metric, diverged, seed_kind, counts
):
    rng = np.random.default_rng(3)
    size = 40
    part = pd.DataFrame(
        {
            "seed": SEEDS[seed_kind](rng.integers(0, 12, size)),  # unsorted, some seeds twice
            "status": rng.choice(["complete", "diverged", "failed", "running"], size),
            "value": np.where(rng.random(size) < 0.1, np.nan, rng.random(size) * 6),
            "num_classes": rng.choice(counts, size),
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


def test_seed_array_makes_int64_only_of_exact_integers():
    exact = [
        np.array([3, 1, 2], dtype=object),
        np.array([1.0, 2.0]),
        np.array([True, 2], dtype=object),
    ]
    for seeds in exact:
        assert seed_array(seeds).dtype == np.int64 and (seed_array(seeds) == seeds).all()
    kept = [
        np.array([1.5, 2.0]),
        np.array([math.nan, 1.0]),
        np.array([None, 1], dtype=object),
        np.array(["3", 1], dtype=object),
        np.array([10**30, 1], dtype=object),
    ]
    for seeds in kept:
        assert seed_array(seeds) is seeds


def test_group_codes_number_groups_as_group_rows_orders_them():
    runs = pd.DataFrame(
        {
            "norm.name": ["b", "a", "b", "a", "c", "a"],
            "batch_size": pd.Series([8, 8, 16, 8.0, None, 16], dtype=object),
        }
    )
    keys = ["norm.name", "batch_size"]
    codes = group_codes(runs, keys)
    for number, (_, rows) in enumerate(group_rows(runs, keys)):
        assert (codes[rows] == number).all()
    assert sorted(set(codes.tolist())) == list(range(len(group_rows(runs, keys))))


def test_status_masks_are_the_comparisons_with_each_status():
    status = pd.Series(
        ["complete", "failed", None, "complete", "running", "diverged"], dtype=object
    )
    masks = status_masks(status)
    assert set(masks) == {"complete", "failed", "running", "diverged"}
    for name, mask in masks.items():
        assert mask.tolist() == (status == name).tolist()
    assert status_masks(status.iloc[:0]) == {}


def test_a_status_the_runs_lack_is_no_runs_and_any_of_unites():
    status = pd.Series(["complete", "failed", None, "diverged"], dtype=object)
    masks = status_masks(status)
    assert masks["interrupted"].tolist() == [False] * 4
    assert "interrupted" not in masks  # asked for, not added
    assert masks.any_of(["complete", "diverged", "running"]).tolist() == [True, False, False, True]
    assert masks.any_of(["running"]).tolist() == [False] * 4
    assert status_masks(status.iloc[:0]).any_of(["complete"]).tolist() == []
