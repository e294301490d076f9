"""What every question of the report shares: the metric a section's verdicts are about,
the method (alpha, margin, reference, looks), a section and a report, and the grouping of runs
into groups by label with each group's results by seed.

The question modules (convergence, batch, precision, stability, diagnostics) compute their
tables from these groups through normbench.report.stats; normbench.report.sections puts the
tables into sections; the renderers (terminal, markdown, tidy, html) turn them into text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.experiment.compose import parse_overrides
from normbench.experiment.schema import EXECUTION_KEYS, OBSERVATION_KEYS, OPTION_SCHEMA
from normbench.layers.keys import NORM_COMMON_KEYS, NORM_SHARED_KEYS
from normbench.report import sequential
from normbench.report.stats import Results
from normbench.store.catalog import NOT_CONFIG

RESULT_STATUSES = ("complete", "diverged")  # runs whose numbers are results
UNFINISHED_STATUSES = ("interrupted", "running", "abandoned")
# Never grouping keys: the seed is what is aggregated over; the rest change no result.
NOT_GROUPING = {"seed", *EXECUTION_KEYS, *OBSERVATION_KEYS}
LEARNED_MARGIN = 0.05  # a final metric within 5% of chance counts as chance (Metric.learned)
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


@dataclass(frozen=True)
class Metric:
    """The number a section's verdicts are about."""

    name: str  # val_acc | val_bpb
    higher_is_better: bool

    @property
    def column(self) -> str:
        return f"final_{self.name}"

    @property
    def test_column(self) -> str:
        return self.name.replace("val_", "test_")

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    def chance(self, num_classes: float) -> float:
        """The metric of a model that learned nothing: accuracy 1/classes; bits per symbol
        of the uniform prediction, log2(classes)."""
        return 1 / num_classes if self.higher_is_better else math.log2(num_classes)

    def learned(self, value: float | np.ndarray, chance: float | np.ndarray) -> bool | np.ndarray:
        """Whether a final metric is clear of chance: by 5% of the way from chance to perfect
        for accuracy (1.0), by 5% of chance for bits per byte (perfect is 0). Numbers or
        arrays of them."""
        if self.higher_is_better:
            return value >= chance + LEARNED_MARGIN * (1 - chance)
        return value <= (1 - LEARNED_MARGIN) * chance

    def score(self, values: np.ndarray) -> np.ndarray:
        """Values oriented so that higher is better (what normbench.report.stats expects)."""
        return values if self.higher_is_better else -values


ACCURACY = Metric("val_acc", higher_is_better=True)
BITS_PER_BYTE = Metric("val_bpb", higher_is_better=False)


@dataclass(frozen=True)
class Method:
    """How verdicts are reached: error rate, margin, diverged runs, the reference, repeated
    looks."""

    alpha: float = 0.05
    margin: float = 0.01
    diverged: str = "chance"  # chance | exclude
    reference_batch: int | None = None
    test: bool = False  # verdicts on the test split (set when --best-over chose on validation)
    reference: tuple[str, ...] = ()  # --reference KEY=VALUE ...: the group named before looking
    # --until-decided: the information fraction of each look the design can take, the look
    # this report is, and how alpha was spent over them (normbench.report.sequential.SPENDING;
    # a record of an earlier version names its own: normbench.store.sweep_record.upgrade)
    fractions: tuple[float, ...] = ()
    look: int = 1
    spending: str = sequential.SPENDING

    @property
    def level(self) -> float:
        """The alpha of this look: alpha itself for a report of a fixed design."""
        if self.fractions:
            return sequential.look_alpha(self.alpha, self.fractions, self.look, self.spending)
        return self.alpha

    @property
    def sequential(self) -> bool:
        return bool(self.fractions)

    @classmethod
    def from_options(
        cls,
        alpha: float,
        margin: float,
        reference_batch: int | None = None,
        diverged: str = "chance",
        reference: list[str] | tuple[str, ...] = (),
    ) -> Method:
        """The report's options (``--alpha``, ``--margin``, ...), each refused in one line when
        out of range."""
        if not 0 < alpha < 0.5:
            raise UsageError(f"--alpha {alpha}: valid: a number strictly between 0 and 0.5")
        if not (margin > 0 and math.isfinite(margin)):
            raise UsageError(f"--margin {margin}: valid: a positive number (in the metric's units)")
        if reference_batch is not None and reference_batch < 1:
            raise UsageError(f"--reference-batch {reference_batch}: valid: a per-device batch >= 1")
        if diverged not in ("chance", "exclude"):
            raise UsageError(f"--diverged {diverged}: valid: chance, exclude")
        return cls(alpha, margin, diverged, reference_batch, reference=parse_reference(reference))

    def with_(self, **changes) -> Method:
        return dataclasses.replace(self, **changes)


def parse_reference(given: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``--reference norm=layernorm`` (repeatable, or several KEY=VALUE in one argument):
    each a plain KEY=VALUE in override syntax, one value per key."""
    items = [item for text in given for item in text.split()]
    if not items:  # Hydra's parser costs 0.3 s to import: not for the default report
        return ()
    for override in parse_overrides(items):
        if override.is_sweep_override() or override.is_delete() or override.is_add():
            raise UsageError(
                f"--reference {override.input_line}: one KEY=VALUE per key, naming one group "
                "(e.g. --reference norm=layernorm)"
            )
    keys = [item.split("=", 1)[0] for item in items]
    if len(set(keys)) < len(keys):
        raise UsageError(f"--reference {' '.join(items)}: a key is given twice")
    return tuple(items)


@dataclass
class Section:
    """The runs of one setting and their tables."""

    setting: dict[str, object]  # the setting keys that split the report (empty: one section)
    fixed: dict[str, object]  # headline keys constant over the section
    keys: list[str]  # grouping keys
    metric: Metric
    tables: dict[str, pd.DataFrame | None]
    notes: list[str] = field(default_factory=list)
    runs: pd.DataFrame | None = None


@dataclass
class Report:
    sections: list[Section]
    method: Method
    counts: dict[str, int]
    warnings: list[str]
    best_over: str | None = None
    across: object | None = None  # normbench.report.across.Across, with --across
    scaling: object | None = None  # normbench.report.scaling_section.Scaling, with --scaling


def metric_of(runs: pd.DataFrame) -> Metric:
    """Bits per byte for language-model runs (they record it), accuracy otherwise."""
    if "final_val_bpb" in runs and runs["final_val_bpb"].notna().any():
        return BITS_PER_BYTE
    return ACCURACY


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
        out.append(({k: _plain(columns[k][rows[0]]) for k in keys}, rows))
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


def _plain(value):
    """numpy scalars as Python numbers; NaN as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def narrowed(part: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``part`` with only the columns ``seeded_results`` reads (seed, status, num_classes)
    and ``columns``, those it has: a table filtering a group's runs per cell (a batch size, a
    learning rate) copied every config column of every cell."""
    keep = dict.fromkeys(("seed", "status", "num_classes", *columns))
    return part[[c for c in keep if c in part]]


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
            size = split_sizes({k: _plain(v) for k, v in data.items()})["test" if test else "val"]
        except (KeyError, TypeError, ValueError):  # a config of another normbench
            return 0.0
        return 1 / size if size else 0.0
    return 0.0


def finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)
