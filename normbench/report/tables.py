"""Runs grouped into the report's tables: convergence with verdicts against the best,
batch-size sensitivity as a pre-specified contrast, and precision.

Grouping only: the statistics are normbench.stats, the rendering normbench.render. A report
is split into sections, one per setting (data set, model, training budget) when those vary
and are not grouping keys, so that runs of different experiments are never ranked against
each other. Within a section, runs are grouped by the config keys that vary (seeds
aggregated); every table states the settings held fixed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_parquet
from normbench.core.text import plain
from normbench.experiment.compose import parse_overrides
from normbench.experiment.schema import EXECUTION_KEYS, OBSERVATION_KEYS
from normbench.layers.keys import NORM_KEYS, NORM_SPECIFIC_KEYS
from normbench.report import stats
from normbench.report.stats import Results
from normbench.store.catalog import NOT_CONFIG, Selection
from normbench.store.rundir import MAX_BYTES

RESULT_STATUSES = ("complete", "diverged")  # runs whose numbers are results
UNFINISHED_STATUSES = ("interrupted", "running", "abandoned")
# Never grouping keys: the seed is what is aggregated over; the rest change no result.
NOT_GROUPING = {"seed", *EXECUTION_KEYS, *OBSERVATION_KEYS}
BATCH_KEYS = ("batch_size", "norm.ghost_batch")
# Stress axes: the stability table gives, per group, the largest value at which every seed
# still trains (Peri-LN's and nGPT's measure for the learning rate; the depth study's for depth).
STRESS_AXES = {"train.lr": "lr_stability", "model.depth": "depth_stability"}
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

    def learned(self, value: float, chance: float) -> bool:
        """Whether a final metric is clear of chance: by 5% of the way from chance to perfect
        for accuracy (1.0), by 5% of chance for bits per byte (perfect is 0)."""
        if self.higher_is_better:
            return value >= chance + LEARNED_MARGIN * (1 - chance)
        return value <= (1 - LEARNED_MARGIN) * chance

    def score(self, values: np.ndarray) -> np.ndarray:
        """Values oriented so that higher is better (what normbench.stats expects)."""
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
    # --until-decided: the information fraction of each look the design can take and the look
    # this report is (alpha spent over them, normbench.report.stats.look_alpha); a record of
    # an older normbench has only its number of looks (alpha split evenly: ``looks``).
    fractions: tuple[float, ...] = ()
    look: int = 1
    looks: int = 1

    @property
    def level(self) -> float:
        """The alpha of this look: alpha itself for a report of a fixed design."""
        if self.fractions:
            return stats.look_alpha(self.alpha, self.fractions, self.look)
        return self.alpha / self.looks

    @property
    def sequential(self) -> bool:
        return bool(self.fractions) or self.looks > 1

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


# ------------------------------------------------------------------------------ building
def build(
    selection: Selection,
    by: list[str] | None = None,
    best_over_key: str | None = None,
    method: Method | None = None,
) -> Report:
    """Every table that applies to a selection, section by section."""
    method = method or Method()
    runs = selection.runs
    if runs.empty and selection.warnings:
        raise UsageError(
            f"no readable runs: {len(selection.warnings)} skipped (the warnings above name "
            "each run and file)"
        )
    if runs.empty:
        raise UsageError("no runs match: check the runs directory, --sweep and the filters")
    if by:
        missing = [key for key in by if key not in runs.columns]
        if missing:
            raise UsageError(f"--by {','.join(missing)}: not a config key of these runs")
    if best_over_key and best_over_key not in runs.columns:
        raise UsageError(f"--best-over {best_over_key}: not a config key of these runs")
    if best_over_key:
        method = Method(**{**method.__dict__, "test": True})
    split = [k for k in varying_keys(runs) if is_setting(k) and k not in (by or [])]
    sections = [
        build_section(part, setting, by, best_over_key, method)
        for setting, part in groups(runs, split)
    ]
    counts = runs["status"].value_counts().to_dict()
    return Report(sections, method, counts, list(selection.warnings), best_over_key)


def build_section(
    runs: pd.DataFrame,
    setting: dict,
    by: list[str] | None,
    best_over_key: str | None,
    method: Method,
) -> Section:
    if "seed" in runs:  # in seed order once, so that every group's results are (seeded_results)
        runs = runs.sort_values("seed", kind="stable")
    keys = by or [k for k in varying_keys(runs) if not is_setting(k)]
    metric = metric_of(runs)
    if best_over_key:
        runs = best_over(runs, best_over_key, keys, metric)
        keys = [k for k in keys if k != best_over_key] + [best_over_key]
    fixed = {k: runs[k].iloc[0] for k in HEADLINE_KEYS if k in runs and k not in keys}
    fixed = {k: v for k, v in fixed.items() if labels(runs[k]).nunique() == 1 and v is not None}
    tables = {
        "convergence": convergence_table(runs, keys, metric, method),
        "batch_sensitivity": batch_table(runs, keys, metric, method),
        "precision": precision_table(runs, keys, metric, method),
        **{
            name: stability_table(runs, keys, axis, metric, method)
            for axis, name in STRESS_AXES.items()
        },
    }
    return Section(setting, fixed, keys, metric, tables, section_notes(runs, metric, method), runs)


def metric_of(runs: pd.DataFrame) -> Metric:
    """Bits per byte for language-model runs (they record it), accuracy otherwise."""
    if "final_val_bpb" in runs and runs["final_val_bpb"].notna().any():
        return BITS_PER_BYTE
    return ACCURACY


def varying_keys(runs: pd.DataFrame) -> list[str]:
    """Config keys whose value differs across the runs (seed, execution and observation keys
    aside), group names first."""
    config = [c for c in runs.columns if c not in NOT_CONFIG and c not in NOT_GROUPING]
    varying = [c for c in config if labels(runs[c]).nunique() > 1]
    varying = [c for c in varying if not _implied_by_norm(runs, c)]
    return sorted(varying, key=lambda c: (not c.endswith(".name"), c))


def _implied_by_norm(runs: pd.DataFrame, key: str) -> bool:
    """A norm option that varies only because each norm keeps or nulls it (norm.groups is 8
    for GroupNorm and null for BatchNorm): it says nothing norm.name does not."""
    if key.removeprefix("norm.") not in NORM_SPECIFIC_KEYS or "norm.name" not in runs:
        return False
    return bool((labels(runs[key]).groupby(runs["norm.name"]).nunique() <= 1).all())


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


def groups(runs: pd.DataFrame, keys: list[str]) -> list[tuple[dict, pd.DataFrame]]:
    """(the keys' values, the runs) per distinct combination of labels, sorted by label; the
    values keep their types (numbers stay numbers)."""
    if not keys:
        return [({}, runs)]
    shown = [labels(runs[k]).rename(f"__{k}") for k in keys]
    return [
        ({k: _plain(part[k].iloc[0]) for k in keys}, part)
        for _, part in runs.groupby(shown, sort=True, dropna=False)
    ]


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


def results(part: pd.DataFrame, column: str, metric: Metric, method: Method) -> np.ndarray:
    """A group's results in seed order: complete runs' values, diverged runs at chance (or
    dropped with ``--diverged exclude``); failed and unfinished runs are never results."""
    return np.array(list(seeded_results(part, column, metric, method).values()), dtype=float)


def seeded_results(part: pd.DataFrame, column: str, metric: Metric, method: Method) -> Results:
    """``results`` by seed, in seed order, oriented as the metric reads (not negated). Bits per
    byte have no worst value: a run that exploded without a NaN (a finite 1e10 bits per byte)
    counts at chance, as a diverged run does, never beyond it; its excess measures nothing
    but would swamp every mean and CI. (Column by column: a group of a store of 100,000 runs
    holds hundreds.)"""
    if "seed" in part and not part["seed"].is_monotonic_increasing:
        part = part.sort_values("seed")
    seeds = part.get("seed", part.index)
    values = part[column] if column in part else [None] * len(part)
    by_seed = {}
    for seed, status, value, classes in zip(
        seeds, part["status"], values, part["num_classes"], strict=True
    ):
        if status == "diverged" and method.diverged == "chance":
            by_seed[int(seed)] = metric.chance(float(classes))
        elif status == "complete" and _finite(value):
            value, chance = float(value), metric.chance(float(classes))
            by_seed[int(seed)] = value if metric.higher_is_better else min(value, chance)
    return by_seed


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


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


# ---------------------------------------------------------------------------- convergence
def convergence_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame:
    """One row per group: counts, the metric's mean and 95% CI on validation and test, steps
    and time to target, training-loss AUC, parameters, and the verdict against the reference
    group: the one ``--reference`` names (normbench.report.stats.compare_with_reference), or
    the best (compare_with_best); reference first, then by mean."""
    name = metric.name
    test = metric.test_column
    rows, samples = [], []
    for values, part in groups(runs, keys):
        val = seeded_results(part, metric.column, metric, method)
        tested = seeded_results(part, test, metric, method)
        reached = part["steps_to_target"].dropna()
        mean, ci = stats.mean_ci(list(val.values()))
        test_mean, test_ci = stats.mean_ci(list(tested.values()))
        rows.append(
            {
                **values,
                "n": len(part),
                "results": len(val),
                "diverged": int((part["status"] == "diverged").sum()),
                "failed": int((part["status"] == "failed").sum()),
                "unfinished": int(part["status"].isin(UNFINISHED_STATUSES).sum()),
                f"{name}_mean": mean,
                f"{name}_ci95": ci,
                f"{test}_mean": test_mean,
                f"{test}_ci95": test_ci,
                "steps_to_target": float(reached.median()) if len(reached) else math.nan,
                "reached_target": len(reached),
                "time_to_target_s": float(part["time_to_target_s"].dropna().median())
                if len(reached)
                else math.nan,
                "train_loss_auc": _nanmean(part, "train_loss_auc"),
                "parameters": _first_int(part, "parameters"),
                "mixed": mixed_provenance(part),
                "seeds": list(tested if method.test else val),
                "values": [round(v, 6) for v in (tested if method.test else val).values()],
            }
        )
        samples.append(scored(tested if method.test else val, metric))
    table = frame(rows, keys)
    if table.empty:
        return table
    step = resolution(runs, metric, method.test)
    references = reference_indices(rows, keys, method.reference)
    if references is None:
        best, verdicts = stats.compare_with_best(samples, method.level, method.margin, step)
        against = "best"
    else:
        best = None
        verdicts = stats.compare_with_references(
            samples, references, method.level, method.margin, step
        )
        against = "reference"
    sign = 1 if metric.higher_is_better else -1  # differences in the metric's own units
    table["verdict"] = [v.verdict for v in verdicts]
    table[f"diff_vs_{against}"] = [sign * v.diff for v in verdicts]
    low_high = [(v.ci_low, v.ci_high) if sign > 0 else (-v.ci_high, -v.ci_low) for v in verdicts]
    table["diff_ci_low"] = [low for low, _ in low_high]
    table["diff_ci_high"] = [high for _, high in low_high]
    table["p_worse_adj" if against == "best" else "p_differs_adj"] = [v.p_differs for v in verdicts]
    table["p_equivalent_adj"] = [v.p_equivalent for v in verdicts]
    table["reason"] = [v.reason for v in verdicts]
    means = [np.mean(list(s.values())) if s else -math.inf for s in samples]
    order = list(np.argsort([-m for m in means], kind="stable"))
    first = (
        [best]
        if best is not None
        else [i for i, v in enumerate(verdicts) if v.verdict == "reference"]
    )
    order = [*first, *[i for i in order if i not in first]]  # references first
    return table.iloc[order].reset_index(drop=True)


def reference_indices(
    rows: list[dict], keys: list[str], reference: tuple[str, ...]
) -> list[int | None] | None:
    """Each row's reference row, as ``--reference KEY=VALUE ...`` names it (``norm=`` for
    ``norm.name``), or None without one. The named keys pick the reference among rows that
    agree on every other grouping key: one reference group per stratum (``--reference
    norm=layernorm`` with learning rates varying: LayerNorm at each rate). A key that does not
    apply to one side (``-``: GroupNorm has no ghost batch) matches any value of the other
    when no reference agrees exactly, so that ``--reference norm=groupnorm`` compares
    BatchNorm at every ghost batch with the one GroupNorm group. A row with no such reference,
    or with several, gets None. A name that matches no group, or a key that does not tell
    groups apart, is refused in one line."""
    if not reference:
        return None
    wanted = {}
    for item in reference:
        key, _, value = item.partition("=")
        column = f"{key}.name" if f"{key}.name" in keys or key in GROUP_NAMES else key
        if column not in keys:
            raise UsageError(
                f"--reference {item}: {key} does not tell the groups of this table apart; "
                f"valid keys: {', '.join(k.removesuffix('.name') for k in keys) or 'none'}"
            )
        wanted[column] = value
    strata = [k for k in keys if k not in wanted]
    chosen = [i for i, row in enumerate(rows) if all(label(row[k]) == v for k, v in wanted.items())]
    if not chosen:
        shown = " | ".join(
            " ".join(f"{k.removesuffix('.name')}={label(row[k])}" for k in wanted) for row in rows
        )
        raise UsageError(
            f"--reference {' '.join(reference)} matches no group; valid: {shown[:300]}"
        )
    stratum = [tuple(label(row[k]) for k in strata) for row in rows]
    by_stratum = {stratum[i]: i for i in chosen}

    def reference_of(row: int) -> int | None:
        if stratum[row] in by_stratum:
            return by_stratum[stratum[row]]
        agree = [
            i
            for i in chosen
            if all(a == b or "-" in (a, b) for a, b in zip(stratum[i], stratum[row], strict=True))
        ]
        return agree[0] if len(agree) == 1 else None

    return [reference_of(row) for row in range(len(rows))]


def reference_index(rows: list[dict], keys: list[str], reference: tuple[str, ...]) -> int | None:
    """The one row ``--reference`` names among ``rows`` (None without one); refused in one
    line when it names several (a key is missing) or none."""
    references = reference_indices(rows, keys, reference)
    if references is None:
        return None
    named = sorted({r for r in references if r is not None})
    if len(named) > 1:
        shown = " | ".join(
            " ".join(f"{k.removesuffix('.name')}={label(rows[i][k])}" for k in keys) for i in named
        )
        raise UsageError(
            f"--reference {' '.join(reference)} matches {len(named)} groups; add keys to "
            f"name one of: {shown[:300]}"
        )
    return named[0]


GROUP_NAMES = ("model", "norm", "placement", "data", "precision")


def mixed_provenance(part: pd.DataFrame) -> str:
    """Which of code, torch version and device differ among a group's results ('' if none)."""
    finished = part[part["status"].isin(RESULT_STATUSES)]
    mixed = [
        name
        for name, column in (
            ("code", "code_hash"),
            ("torch", "torch_version"),
            ("device", "device_used"),
        )
        if column in finished and len({label(value) for value in finished[column]}) > 1
    ]
    return ",".join(mixed)


def _nanmean(part: pd.DataFrame, column: str) -> float:
    values = part.loc[part["status"].isin(RESULT_STATUSES), column].astype(float).to_numpy()
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def _first_int(part: pd.DataFrame, column: str) -> int | None:
    values = part[column].dropna() if column in part else []
    return int(values.iloc[0]) if len(values) else None


def best_over(runs: pd.DataFrame, key: str, keys: list[str], metric: Metric) -> pd.DataFrame:
    """Within each group (the keys without ``key``), keep only the runs at the value of
    ``key`` with the best mean validation metric; the choice is made on validation, so the
    section's verdicts are then computed on test (Method.test)."""
    kept = []
    for _, part in groups(runs, [k for k in keys if k != key]):
        finished = part[part["status"] == "complete"]
        if finished.empty:
            kept.append(part)
            continue
        means = finished.groupby(labels(finished[key]))[metric.column].mean()
        winner = means.idxmax() if metric.higher_is_better else means.idxmin()
        kept.append(part[labels(part[key]) == winner])
    return pd.concat(kept)


# ------------------------------------------------------------------------ batch sensitivity
def device_batch(runs: pd.DataFrame) -> pd.Series:
    """The batch a norm's statistics see: norm.ghost_batch when the norm uses it and it is
    set, else batch_size."""
    ghost = runs.get("norm.ghost_batch", pd.Series(np.nan, index=runs.index))
    uses = runs["norm.name"].map(lambda n: "ghost_batch" in NORM_KEYS.get(n, set()))
    chosen = np.where(uses & ghost.notna(), ghost, runs["batch_size"])
    return pd.Series(chosen.astype(float).astype(int), index=runs.index)


def batch_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame | None:
    """Rows: the groups without the batch keys; per per-device batch, the mean and 95% CI;
    then the pre-specified contrast, the reference batch (the largest, or
    ``--reference-batch``) against the smallest: the drop (how much worse the smallest is, in
    the metric's units), its (1 - 2 alpha) CI and a verdict (normbench.report.stats.contrast,
    paired by seed where the seeds match). None when the per-device batch does not vary.

    A norm that ignores norm.ghost_batch has one result for every ghost batch: its row shows
    the same runs in each column and is ``insensitive`` by construction ("same runs")."""
    runs = runs.assign(device_batch=device_batch(runs))
    sizes = sorted(runs.loc[runs["status"].isin(RESULT_STATUSES), "device_batch"].unique())
    if len(sizes) < 2:
        return None
    reference = method.reference_batch or sizes[-1]
    if reference not in sizes:
        raise UsageError(
            f"--reference-batch {reference}: not a per-device batch of these runs; valid: "
            + ", ".join(str(s) for s in sizes)
        )
    ghost_study = runs["batch_size"].nunique() == 1
    row_keys = [k for k in keys if k not in BATCH_KEYS]
    rows, pairs = [], []
    for values, part in groups(runs, row_keys):
        same_runs = ghost_study and not any(
            "ghost_batch" in NORM_KEYS.get(n, set()) for n in part["norm.name"]
        )
        row = {**values}
        cells = {}
        for size in sizes:
            cell = part if same_runs else part[part["device_batch"] == size]
            cells[size] = results(cell, metric.column, metric, method)
            mean, ci = stats.mean_ci(cells[size])
            row.update({f"b{size}_mean": mean, f"b{size}_ci95": ci, f"b{size}_n": len(cells[size])})
        smallest = min((s for s in sizes if len(cells[s])), default=sizes[0])
        row.update(
            reference_batch=int(reference), smallest_batch=int(smallest), same_runs=same_runs
        )
        rows.append(row)
        pairs.append(
            tuple(
                scored(
                    seeded_results(
                        part[part["device_batch"] == size], metric.column, metric, method
                    ),
                    metric,
                )
                for size in (reference, smallest)
            )
        )
    step = resolution(runs, metric)
    verdicts = stats.contrast(pairs, method.level, method.margin, step)
    words = {"worse": "sensitive", "equivalent": "insensitive"}
    for row, verdict in zip(rows, verdicts, strict=True):
        if row["same_runs"]:
            verdict = stats.Verdict("equivalent", 0.0, 0.0, 0.0, reason="same runs")
        elif row["smallest_batch"] == row["reference_batch"]:
            verdict = stats.Verdict("inconclusive", reason="results at one batch size only")
        row.update(  # the drop: reference minus smallest, as scored (worse is positive)
            drop=0.0 - verdict.diff,  # never -0.0
            drop_ci_low=0.0 - verdict.ci_high,
            drop_ci_high=0.0 - verdict.ci_low,
            p_sensitive_adj=verdict.p_differs,
            p_insensitive_adj=verdict.p_equivalent,
            verdict=words.get(verdict.verdict, verdict.verdict),
            reason=verdict.reason,
        )
    table = frame(rows, row_keys)
    order = np.argsort(-table["drop"].fillna(-math.inf).to_numpy(), kind="stable")
    return table.iloc[order].reset_index(drop=True)


# ------------------------------------------------------------------------------- precision
def precision_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame | None:
    """Rows: groups without precision; per precision the mean metric and 95% CI, the diverged
    and total counts, and for each lower precision a pre-specified contrast against fp32 (the
    change, its (1 - 2 alpha) CI and a verdict: worse or equivalent, as
    normbench.report.stats.contrast decides, paired by seed, Holm over every row and
    precision). None when precision does not vary."""
    if "precision.name" not in runs or runs["precision.name"].nunique() < 2:
        return None
    row_keys = [k for k in keys if k != "precision.name"]
    precisions = [p for p in ("fp32", "bf16", "fp16") if p in set(runs["precision.name"])]
    rows, pairs, cells = [], [], []
    for values, part in groups(runs, row_keys):
        row = {**values}
        by_precision = {}
        for precision in precisions:
            cell = part[part["precision.name"] == precision]
            by_precision[precision] = seeded_results(cell, metric.column, metric, method)
            mean, ci = stats.mean_ci(list(by_precision[precision].values()))
            row.update(
                {
                    f"{precision}_mean": mean,
                    f"{precision}_ci95": ci,
                    f"{precision}_diverged": int((cell["status"] == "diverged").sum()),
                    f"{precision}_n": len(cell),
                }
            )
        for precision in precisions[1:]:
            if "fp32" in by_precision:
                pairs.append(
                    (scored(by_precision["fp32"], metric), scored(by_precision[precision], metric))
                )
                cells.append((len(rows), precision))
        rows.append(row)
    verdicts = stats.contrast(pairs, method.level, method.margin, resolution(runs, metric))
    sign = 1 if metric.higher_is_better else -1  # the change in the metric's own units
    for (index, precision), verdict in zip(cells, verdicts, strict=True):
        low, high = sign * verdict.ci_low, sign * verdict.ci_high
        rows[index].update(
            {
                f"{precision}_delta": sign * verdict.diff,
                f"{precision}_delta_ci_low": min(low, high),
                f"{precision}_delta_ci_high": max(low, high),
                f"{precision}_verdict": verdict.verdict,
            }
        )
    return frame(rows, row_keys)


# ------------------------------------------------------------------------------- stability
def stability_table(
    runs: pd.DataFrame, keys: list[str], axis: str, metric: Metric, method: Method | None = None
) -> pd.DataFrame | None:
    """Rows: groups without ``axis`` (train.lr or model.depth); per value of the axis, the mean
    metric and how many seeds trained (finished, not diverged, clear of chance: see
    Metric.learned; chance is the unigram solution for bits per byte when the run recorded
    it); then the largest value at which every seed trained, and the metric there. Over
    train.lr, also the LR sensitivity (``lr_sensitivity_by_seed``): its mean over seeds, 95%
    interval and seed count, the per-seed values (JSON) and the loss it is in, and a verdict
    on it against a reference row paired by seed (``lr_sensitivity_verdicts``). None when the
    axis does not vary."""
    if axis not in runs or labels(runs[axis]).nunique() < 2:
        return None
    row_keys = [k for k in keys if k != axis]
    axis_values = sorted({v for v in runs[axis] if v is not None})
    rows = []
    for values, part in groups(runs, row_keys):
        row, stable = {**values}, None
        at = labels(part[axis])
        for value in axis_values:
            cell = part[at == label(value)]
            seeds_trained = [
                trained(status, final, classes, unigram, metric)
                for status, final, classes, unigram in zip(
                    cell["status"],
                    cell[metric.column],
                    cell["num_classes"],
                    cell["unigram_bpb"],
                    strict=True,
                )
            ]
            finished = results(cell, metric.column, metric, Method(diverged="exclude"))
            row[f"{label(value)}_mean"] = float(finished.mean()) if len(finished) else math.nan
            row[f"{label(value)}_trained"] = f"{sum(seeds_trained)}/{len(seeds_trained)}"
            if seeds_trained and all(seeds_trained):
                stable = value
        row["axis"] = axis
        row["largest_stable"] = stable
        row["metric_there"] = math.nan if stable is None else row[f"{label(stable)}_mean"]
        if axis == "train.lr":
            row.update(lr_sensitivity_row(part, metric))
        rows.append(row)
    if axis == "train.lr" and len(rows) > 1:
        lr_sensitivity_verdicts(rows, row_keys, method or Method())
    table = frame(rows, row_keys)
    order = np.argsort(
        [-(v if v is not None else -math.inf) for v in table["largest_stable"]], kind="stable"
    )
    return table.iloc[order].reset_index(drop=True)


def lr_sensitivity_verdicts(rows: list[dict], row_keys: list[str], method: Method) -> None:
    """Each row's LR sensitivity against a reference row, by the convergence verdicts'
    statistics on the per-seed values (paired by seed, lower is better): the row ``--reference``
    names when its keys are the rows' keys (``--reference model.qk_norm=none``, one per
    stratum of the other keys: better, worse, equivalent or inconclusive, Holm over the
    comparisons), else the least sensitive
    row, chosen after looking (worse, equivalent or inconclusive, Holm over every pair). The
    difference is the row's sensitivity less the reference's (positive: more sensitive)."""
    samples = [
        {
            seed: -value
            for seed, value in zip(
                row["lr_sensitivity_seeds_list"], row["lr_sensitivity_values"], strict=True
            )
        }
        for row in rows
    ]
    named_items = tuple(i for i in method.reference if _reference_key(i, row_keys))
    references = reference_indices(rows, row_keys, named_items) if named_items else None
    if references is None:
        _, verdicts = stats.compare_with_best(samples, method.level, method.margin)
    else:
        verdicts = stats.compare_with_references(samples, references, method.level, method.margin)
    for row, verdict in zip(rows, verdicts, strict=True):
        row.update(
            lr_sensitivity_verdict=verdict.verdict,
            lr_sensitivity_diff=0.0 - verdict.diff,
            lr_sensitivity_diff_ci_low=0.0 - verdict.ci_high,
            lr_sensitivity_diff_ci_high=0.0 - verdict.ci_low,
            lr_sensitivity_reason=verdict.reason,
        )


def _reference_key(item: str, row_keys: list[str]) -> bool:
    key = item.partition("=")[0]
    return key in row_keys or f"{key}.name" in row_keys


def sensitivity_loss(metric: Metric) -> str:
    """The loss LR sensitivity is measured in: bits per byte where the section's metric is,
    else the validation cross-entropy (accuracy has no loss at initialisation to cap at:
    docs/statistics.md)."""
    return "val_bpb" if metric is BITS_PER_BYTE else "val_loss"


def lr_sensitivity_by_seed(part: pd.DataFrame, metric: Metric) -> dict[int, float]:
    """Per seed, the LR sensitivity (normbench.report.stats.lr_sensitivity) of a group's runs
    over train.lr, in ``sensitivity_loss(metric)``: a value per seed, so that groups can be
    paired by seed. A seed counts only with a result at every learning rate the group has a
    run at: a complete run with its final loss, or a diverged run, at loss_init. loss_init is
    the runs' initial_val_loss (initial_val_bpb); runs made before normbench recorded it fall
    back to the loss of the uniform prediction, ln(classes) nats (log2(classes) bits), which
    is near a freshly initialised model's (its logits start near zero)."""
    loss = sensitivity_loss(metric)
    grid = sorted({label(value) for value in part["train.lr"]})
    diverged = part["status"] == "diverged"
    finished = part[diverged | ((part["status"] == "complete") & part[f"final_{loss}"].notna())]
    values = {}
    for seed, runs in finished.groupby("seed", sort=True):
        if sorted(runs["train.lr"].map(label)) != grid:
            continue
        losses = np.array(
            [
                run[f"final_{loss}"] if run["status"] == "complete" else math.nan
                for _, run in runs.iterrows()
            ],
            dtype=float,
        )
        recorded = runs[f"initial_{loss}"].dropna() if f"initial_{loss}" in runs else []
        classes = float(runs["num_classes"].iloc[0])
        uniform = math.log2(classes) if loss == "val_bpb" else math.log(classes)
        initial = float(recorded.iloc[0]) if len(recorded) else uniform
        values[int(seed)] = stats.lr_sensitivity(losses, initial)
    return values


def lr_sensitivity_row(part: pd.DataFrame, metric: Metric) -> dict:
    """A group's LR sensitivity columns: mean over seeds and its 95% interval, seeds, values."""
    by_seed = lr_sensitivity_by_seed(part, metric)
    mean, ci = stats.mean_ci(np.array(list(by_seed.values()), dtype=float))
    return {
        "lr_sensitivity": mean,
        "lr_sensitivity_ci95": ci,
        "lr_sensitivity_seeds": len(by_seed),
        "lr_sensitivity_values": [round(v, 6) for v in by_seed.values()],
        "lr_sensitivity_seeds_list": list(by_seed),
        "lr_sensitivity_loss": sensitivity_loss(metric),
    }


def trained(status: str, value, classes, unigram, metric: Metric) -> bool:
    """A run that finished, did not diverge and ended clear of chance."""
    if status != "complete" or not _finite(value):
        return False
    chance = unigram if not metric.higher_is_better else None
    if chance is None or not _finite(chance):
        chance = metric.chance(float(classes))
    return metric.learned(float(value), float(chance))


# ----------------------------------------------------------------------------------- notes
def section_notes(runs: pd.DataFrame, metric: Metric, method: Method) -> list[str]:
    """What a reader must know about the runs behind the numbers: failed and unfinished runs
    (never averaged, named), diverged runs (at chance, or how many were excluded)."""
    notes = []
    diverged = int((runs["status"] == "diverged").sum())
    if diverged and method.diverged == "exclude":
        notes.append(f"{diverged} diverged run(s) excluded (--diverged exclude)")
    elif diverged:
        notes.append(
            f"{diverged} diverged run(s) counted at chance ({metric.label} of a "
            "model that learned nothing)"
        )
    for status in ("failed", *UNFINISHED_STATUSES):
        named = runs[runs["status"] == status]
        if len(named):
            listed = ", ".join(
                rid + (f" ({error})" if status == "failed" and error else "")
                for rid, error in zip(named["run_id"], named["error"], strict=True)
            )
            notes.append(f"not averaged, {status}: {listed}")
    return notes


# ----------------------------------------------------------------------------- diagnostics
# Diagnostics columns every diagnosed run has, and those added later (NaN for older runs).
DIAGNOSTIC_COLUMNS = (
    "step",
    "unit",
    "grad_norm",
    "in_std",
    "out_std",
    "train_mode_val_acc",
    "eval_mode_val_acc",
    *(f"sn_{kind}_{norm}" for kind in ("mean", "var") for norm in ("in", "ln", "bn")),
)
INSTABILITY_COLUMNS = ("resid_rms", "max_logit", "log_z")
MAX_DIAGNOSTIC_ROWS = 1_000_000


def diagnostics_table(
    runs: pd.DataFrame,
    keys: list[str],
    runs_dir: Path,
    at: str = "last",
    skipped: list[str] | None = None,
) -> pd.DataFrame | None:
    """Per group and residual unit, at each run's last diagnosed step (``at="last"``) or at
    initialisation (``at="first"``: step 0, the first batch before any update), averaged over
    seeds: the sublayer's gradient norm, the activation std entering and leaving the norm, the
    RMS of the residual stream the unit leaves, its largest attention logit, the mean log Z
    of the output logits (one per run and step: the same in every unit's row), the train-mode
    minus eval-mode validation accuracy (BatchNorm, SwitchNorm) and SwitchNorm's mixing
    weights; ``layer`` numbers the units of each sublayer type (attention, mlp, conv) so that
    depth profiles compare like with like. Runs diagnosed before normbench recorded the
    stream, logits and log Z show NaN there. None when no selected run was trained with
    diagnostics=true. A diagnostics file that cannot be read (a FIFO, garbage, another kind of
    file) is left out and named in ``skipped``."""
    frames = []
    for rid in runs["run_id"]:
        try:
            frame = read_parquet(
                runs_dir / rid / "diagnostics.parquet",
                MAX_BYTES["diagnostics.parquet"],
                MAX_DIAGNOSTIC_ROWS,
                numeric=(*DIAGNOSTIC_COLUMNS, *INSTABILITY_COLUMNS),
                required=(*DIAGNOSTIC_COLUMNS, "sublayer"),
                root=runs_dir,
            )
        except FileNotFoundError:
            continue  # trained without diagnostics=true
        except (OSError, StoreError) as err:
            if skipped is not None:
                reason = str(err) if isinstance(err, StoreError) else err.strerror
                skipped.append(f"diagnostics: skipped {rid}: {plain(str(reason))}")
            continue
        if frame.empty:
            continue
        frame = frame.assign(**{c: math.nan for c in INSTABILITY_COLUMNS if c not in frame})
        step = frame["step"].max() if at == "last" else frame["step"].min()
        frames.append(frame[frame["step"] == step].assign(run_id=rid))
    if not frames:
        return None
    labelled = runs[["run_id", *keys]].assign(**{k: labels(runs[k]) for k in keys})
    merged = pd.concat(frames).merge(labelled, on="run_id")
    merged["gap"] = merged["train_mode_val_acc"] - merged["eval_mode_val_acc"]
    columns = [
        "step",
        "grad_norm",
        "in_std",
        "out_std",
        *INSTABILITY_COLUMNS,
        "gap",
        "sn_mean_in",
        "sn_mean_ln",
        "sn_mean_bn",
        "sn_var_in",
        "sn_var_ln",
        "sn_var_bn",
    ]
    table = merged.groupby([*keys, "unit", "sublayer"], sort=True)[columns].mean().reset_index()
    table = table.assign(seeds=merged.groupby([*keys, "unit"]).size().to_numpy())
    return by_sublayer(table, keys)


def by_sublayer(frame: pd.DataFrame, keys: Sequence[str] = ("step",)) -> pd.DataFrame:
    """Diagnostics rows (one per unit) with each unit's place among the units of its own
    sublayer type: ``layer`` (0 for the first attention unit, the first MLP unit, ...) and
    ``layer_depth`` (0 to 1), within each group of ``keys`` (a step, a run, a report group)."""
    units = frame.groupby([*keys, "sublayer"])["unit"]
    layer = units.rank(method="dense").astype(int) - 1
    last = units.transform("nunique") - 1
    return frame.assign(layer=layer, layer_depth=layer / last.clip(lower=1))


def last_over_first(
    frame: pd.DataFrame, keys: Sequence[str] = ("step",), column: str = "grad_norm"
) -> pd.DataFrame:
    """Per group of ``keys`` and sublayer type, ``column`` of the deepest unit over that of the
    shallowest unit of the same type: Xiong et al.'s gradient growth over depth, like with
    like. One row per group and type, the ratio in ``{column}_last_over_first``."""
    ordered = frame.sort_values("unit").groupby([*keys, "sublayer"])[column]
    ratio = ordered.agg(lambda values: values.iloc[-1] / values.iloc[0])
    return ratio.rename(f"{column}_last_over_first").reset_index()


def attach_diagnostics(result: Report, runs_dir: Path) -> None:
    """``--diagnostics``: each section's diagnostics tables at initialisation and at the last
    evaluation; refused when no selected run recorded diagnostics. A run whose diagnostics
    could not be read is named in the report's warnings."""
    found, skipped = False, []
    for section in result.sections:
        for name, at in (("diagnostics_init", "first"), ("diagnostics", "last")):
            section.tables[name] = diagnostics_table(
                section.runs, section.keys, runs_dir, at, skipped if at == "last" else None
            )
        found = found or section.tables["diagnostics"] is not None
    result.warnings.extend(skipped)
    if not found:
        reason = f" that could be read ({len(skipped)} skipped)" if skipped else ""
        raise UsageError(
            f"--diagnostics: none of these runs was trained with diagnostics=true{reason}"
        )
