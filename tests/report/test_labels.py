"""Labels against the plain definitions they speed up: a label count from distinct values,
label codes as the sorted labels' positions."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from normbench.report.labels import label, label_codes, label_count, labels

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
