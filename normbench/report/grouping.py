"""Runs into groups: which config keys vary (and so name the groups; a user norm's own
options folded into its name) and which of them split the report into settings, each group's
runs by the labels of those keys, as frames or row positions, the runs of each status as masks,
and a table's rows back into a frame keyed like its groups. Every table of the report starts
from these groups; what a group's runs are worth as results is normbench.report.results'.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from normbench.experiment.schema import EXECUTION_KEYS, OBSERVATION_KEYS, OPTION_SCHEMA
from normbench.layers.keys import NORM_COMMON_KEYS, NORM_SHARED_KEYS
from normbench.report.labels import label_codes, label_count, labels, plain
from normbench.store.catalog import NOT_CONFIG

# Never grouping keys: the seed is what is aggregated over; the rest change no result.
NOT_GROUPING = {"seed", *EXECUTION_KEYS, *OBSERVATION_KEYS}
# Keys that shown constant say what a table is about: `model=cnn data=mnist1d ...`.
HEADLINE_KEYS = (
    "model.name",
    "model.width",
    "model.depth",
    "data.name",
    "norm.name",
    "placement.name",
    "precision.name",
    "batch_size",
    "train.max_steps",
    "train.epochs",
    "train.lr",
    "train.warmup_steps",
)


def is_setting(key: str) -> bool:
    """Keys that make runs different experiments rather than different treatments: the data
    set (and its parameters), the model, the training budget."""
    return key.startswith("data.") or key in ("model.name", "train.max_steps", "train.epochs")


def varying_keys(runs: pd.DataFrame) -> list[str]:
    """Config keys whose value differs across the runs (seed, execution and observation keys
    aside), group names first."""
    config = [c for c in runs.columns if c not in NOT_CONFIG and c not in NOT_GROUPING]
    varying = [c for c in config if label_count(runs[c]) > 1]
    varying = [c for c in varying if not _implied_by_norm(runs, c)]
    return sorted(varying, key=lambda c: (not c.endswith(".name"), c))


def _implied_by_norm(runs: pd.DataFrame, key: str) -> bool:
    """A norm.* key that varies only because of which norm a run has, so that it says
    nothing norm.name does not: one value (or null) per norm, and either a key only some norms
    read (norm.groups is 8 for GroupNorm and null for BatchNorm), the import path of a user's
    norm (``_target_``), a user norm's own option (folded into its name: fold_norm_options),
    or a key every shipped norm reads that no group sets to a value of its own (fp32_stats
    and mask_padding: true for the shipped norms, null for a user norm that does not take
    them)."""
    option = key.removeprefix("norm.")
    if not key.startswith("norm.") or option == "name" or "norm.name" not in runs:
        return False
    codes, shown = label_codes(runs[key])
    norms, _ = pd.factorize(runs["norm.name"])  # -1: no norm (left out, as groupby leaves it)
    named = norms >= 0
    pairs = norms[named] * len(shown) + codes[named]
    if len(np.unique(pairs)) > len(np.unique(norms[named])):  # a norm with two values
        return False
    if option in NORM_COMMON_KEYS:
        return sum(text != "-" for text in shown) <= 1
    return True


def norm_options(runs: pd.DataFrame) -> list[str]:
    """The columns of user norms' own options (norm.p for PowerNorm): norm.* keys no shipped
    norm has (DyT's norm.alpha_init is a shipped norm's: a column of its own when it varies)."""
    shipped = {key for keys in OPTION_SCHEMA["norm"].values() for key in keys}
    shared = {"norm.name", "norm._target_", *(f"norm.{k}" for k in NORM_SHARED_KEYS), *shipped}
    return sorted(c for c in runs.columns if c.startswith("norm.") and c not in shared)


def fold_norm_options(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with each user norm's own options that vary in them folded into its name, as a
    reader names the norm: ``mynorms:PowerNorm(p=2)``; keys that exist only because one norm
    takes them are no columns of their own (varying_keys leaves them out). Runs without such
    options are returned as they are."""
    options = [k for k in norm_options(runs) if label_count(runs[k]) > 1]
    if not options or "norm.name" not in runs:
        return runs
    shown = {k: labels(runs[k]) for k in options}
    names = []
    for i, name in zip(runs.index, runs["norm.name"], strict=True):
        given = [f"{k.removeprefix('norm.')}={shown[k][i]}" for k in options if shown[k][i] != "-"]
        names.append(f"{name}({','.join(given)})" if given else name)
    return runs.assign(**{"norm.name": names})


def groups(runs: pd.DataFrame, keys: list[str]) -> list[tuple[dict, pd.DataFrame]]:
    """(the keys' values, the runs) per distinct combination of labels, sorted by label; the
    values keep their types (numbers stay numbers)."""
    return [(values, runs.take(rows)) for values, rows in group_rows(runs, keys)]


def group_rows(runs: pd.DataFrame, keys: list[str]) -> list[tuple[dict, np.ndarray]]:
    """``groups`` as row positions into ``runs``, in the frame's order within each group: what
    a table computing from whole columns needs (taking 500 groups' parts of a wide frame cost
    more than their tables)."""
    if not keys:
        return [({}, np.arange(len(runs)))]
    codes = group_codes(runs, keys)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(codes.max() + 2 if len(codes) else 1))
    columns = {k: runs[k].to_numpy(dtype=object) for k in keys}
    out = []
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[start:stop]
        out.append(({k: plain(columns[k][rows[0]]) for k in keys}, rows))
    return out


def group_codes(runs: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Each run's group among the distinct combinations of the keys' labels, numbered in the
    order of those labels sorted key by key (as a groupby of the labels numbers them)."""
    group = np.zeros(len(runs), dtype=np.int64)
    for key in keys:
        codes, shown = label_codes(runs[key])
        _, group = np.unique(group * len(shown) + codes, return_inverse=True)
    return group.reshape(len(runs))


class StatusMasks(dict):
    """Which runs have each status, a mask per status (``status_masks``). A status the runs do
    not have is no run's: ``masks[status]`` is then all false, and ``any_of`` unites several."""

    def __init__(self, masks: dict[str, np.ndarray], size: int):
        super().__init__(masks)
        self.size = size

    def __missing__(self, status: str) -> np.ndarray:
        return np.zeros(self.size, dtype=bool)

    def any_of(self, statuses: Iterable[str]) -> np.ndarray:
        """The runs with any of ``statuses``."""
        return np.logical_or.reduce([self[status] for status in statuses])


def status_masks(status: pd.Series) -> StatusMasks:
    """A mask per status from one pass over the column (each comparison with a status took
    10-20 ms at 100,000 runs)."""
    codes, names = pd.factorize(status)
    return StatusMasks({name: codes == i for i, name in enumerate(names)}, len(status))


def frame(rows: list[dict], keys: list[str]) -> pd.DataFrame:
    """Table rows as a DataFrame whose key columns keep each value's type (a column of 2, 32
    and None stays ints and None, not floats and NaN)."""
    table = pd.DataFrame(rows)
    for key in keys:
        table[key] = pd.Series([row[key] for row in rows], dtype=object, index=table.index)
    return table


def narrowed(part: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``part`` with only the columns ``seeded_results`` reads (seed, status, num_classes)
    and ``columns``, those it has: a table filtering a group's runs per cell (a batch size, a
    learning rate) copied every config column of every cell."""
    keep = dict.fromkeys(("seed", "status", "num_classes", *columns))
    return part[[c for c in keep if c in part]]
