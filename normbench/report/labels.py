"""Config values as the override syntax writes them (``label``): runs are grouped, compared
and shown by label, so that 32 and 32.0, or None and NaN, are one group. A module of its own
because renderers, studies and sweeps label values without grouping anything, and because
labelling is where a store of 100,000 runs costs: each function here labels a column once per
distinct value, or as integer codes, and its tests hold it to the plain definition.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def label(value) -> str:
    """A config value as the override syntax writes it (groups compare by label, so that 32
    and 32.0, or None and NaN, are one group)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


HOMOGENEOUS = ("string", "integer", "floating", "boolean")  # pandas' infer_dtype kinds


def labels(values: pd.Series) -> pd.Series:
    """``label`` of each value, computed once per distinct value: a column of 100,000 runs
    holds a handful. A column of one type is mapped at once; a mixed one value by value,
    keyed by type too (1, 1.0 and True stay three labels)."""
    if pd.api.types.infer_dtype(values, skipna=False) in HOMOGENEOUS:
        distinct = pd.unique(values)
        return values.map(dict(zip(distinct, map(label, distinct), strict=True)))
    keys = list(zip(map(type, values), values, strict=True))
    try:  # a label per distinct (type, value), looked up at C speed: 100,000 values
        shown_of = {key: label(key[1]) for key in set(keys)}
    except TypeError:  # a list among them: value by value
        pass
    else:
        shown = list(map(shown_of.__getitem__, keys))
        return pd.Series(shown, index=values.index, dtype=object, name=values.name)
    seen: dict[tuple, str] = {}
    shown = []
    for value in values:
        try:
            text = seen.get((type(value), value))
            if text is None:
                text = seen[(type(value), value)] = label(value)
        except TypeError:  # a list
            text = label(value)
        shown.append(text)
    return pd.Series(shown, index=values.index, dtype=object, name=values.name)


PLAIN = {int, float, str, bool, type(None)}  # what a config value is (YAML's scalars)


def _one_label_per_hash(values: pd.Series) -> bool:
    """Whether values that compare equal (and so hash alike) have one label here: in an object
    column of plain values, unless booleans meet numbers (True == 1, labelled true and 1).
    Anything else (numpy scalars, pandas' NA, lists, a typed column) is labelled value by
    value, as ``labels`` does."""
    if values.dtype != object:
        return False
    kinds = set(map(type, values))
    return kinds <= PLAIN and not (bool in kinds and kinds & {int, float})


def label_count(values: pd.Series) -> int:
    """``labels(values).nunique()`` from the distinct values alone: deciding which of a
    section's config columns vary labelled 100,000 values a column."""
    if pd.api.types.infer_dtype(values, skipna=True) in (*HOMOGENEOUS, "empty"):  # one type
        return len({label(value) for value in pd.unique(values)})  # and nulls, labelled "-"
    try:
        distinct = set(zip(map(type, values), values, strict=True))
    except TypeError:  # a list among them
        return labels(values).nunique()
    return len({label(value) for _, value in distinct})


def label_codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each value's position among its column's distinct labels sorted, and those labels:
    labels compared, counted and grouped as integers (100,000 label strings cost 10-60 ms a
    column to build; their codes a few)."""
    if _one_label_per_hash(values):  # labelled once per distinct value
        codes, distinct = pd.factorize(values, use_na_sentinel=False)
        shown = [label(value) for value in distinct.to_numpy()]
    else:
        codes, distinct = pd.factorize(labels(values).to_numpy(dtype=object), use_na_sentinel=False)
        shown = list(distinct)
    ordered, rank = np.unique(np.array(shown, dtype=object), return_inverse=True)
    return rank.reshape(len(shown))[codes], ordered.tolist()


def plain(value):
    """numpy scalars as Python numbers; NaN as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
