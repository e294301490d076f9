"""Grouping against the plain definitions it speeds up: groups as row positions and codes,
as pandas groups the labels, and status masks as the comparisons with each status."""

from __future__ import annotations

import pandas as pd

from normbench.report.grouping import group_codes, group_rows, groups, status_masks
from normbench.report.labels import labels


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
