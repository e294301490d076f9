"""The convergence table: per group, the metric's mean and interval, steps to target and a
verdict against the reference group (the one --reference names, else the best); how
--reference names a group in every table (reference_indices); --best-over's choice.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.report import stats
from normbench.report.base import Method, Metric
from normbench.report.batch import PER_DEVICE_BATCH
from normbench.report.grouping import frame, group_rows, groups, status_masks
from normbench.report.labels import label, label_codes, label_count, labels
from normbench.report.results import (
    RESULT_STATUSES,
    UNFINISHED_STATUSES,
    numbers,
    resolution,
    scored,
    seed_array,
    seeded,
)


def convergence_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame:
    """One row per group: counts, the metric's mean and 95% CI on validation and test, steps
    and time to target, training-loss AUC, parameters, and the verdict against the reference
    group: the one ``--reference`` names (normbench.report.stats.compare_with_reference), or
    the best (compare_with_best); reference first, then by mean."""
    name = metric.name
    test = metric.test_column
    columns = Columns(runs, metric)
    rows, samples = [], []
    for values, at in group_rows(runs, keys):
        val = columns.results(at, metric.column, metric, method)
        tested = columns.results(at, test, metric, method)
        reached = columns.present("steps_to_target", at)
        mean, ci = stats.mean_ci(list(val.values()))
        test_mean, test_ci = stats.mean_ci(list(tested.values()))
        rows.append(
            {
                **values,
                "n": len(at),
                "results": len(val),
                "diverged": int(columns.diverged[at].sum()),
                "failed": int(columns.failed[at].sum()),
                "unfinished": int(columns.unfinished[at].sum()),
                f"{name}_mean": mean,
                f"{name}_ci95": ci,
                f"{test}_mean": test_mean,
                f"{test}_ci95": test_ci,
                "steps_to_target": float(np.median(reached)) if len(reached) else math.nan,
                "reached_target": len(reached),
                "time_to_target_s": float(np.median(columns.present("time_to_target_s", at)))
                if len(reached)
                else math.nan,
                "train_loss_auc": columns.result_mean("train_loss_auc", at),
                "parameters": columns.first_int("parameters", at),
                "mixed": columns.mixed_provenance(at),
                "seeds": list(tested if method.test else val),
                "values": [round(v, 6) for v in (tested if method.test else val).values()],
            }
        )
        samples.append(scored(tested if method.test else val, metric))
    table = frame(rows, keys)
    if table.empty:
        return table
    step = resolution(runs, metric, method.test)
    references = reference_indices(rows, keys, method.reference, method.reference_origin)
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
    table.attrs["common_only"] = any(v.common_only for v in verdicts)  # the caption says so
    means = [np.mean(list(s.values())) if s else -math.inf for s in samples]
    order = list(np.argsort([-m for m in means], kind="stable"))
    first = (
        [best]
        if best is not None
        else [i for i, v in enumerate(verdicts) if v.verdict == "reference"]
    )
    order = [*first, *[i for i in order if i not in first]]  # references first
    ordered = table.iloc[order].reset_index(drop=True)
    # each row's stats.Difference as plain numbers (a sweep's looks read them, not the text)
    ordered.attrs["differences"] = stats.difference_rows([verdicts[i].difference for i in order])
    return ordered


def reference_indices(
    rows: list[dict], keys: list[str], reference: tuple[str, ...], origin: str = "--reference"
) -> list[int | None] | None:
    """Each row's reference row, as ``--reference KEY=VALUE ...`` names it (``norm=`` for
    ``norm.name``), or None without one. The named keys pick the reference among rows that
    agree on every other grouping key: one reference group per stratum (``--reference
    norm=layernorm`` with learning rates varying: LayerNorm at each rate). A key that does not
    apply to one side (``-``: GroupNorm has no ghost batch) matches any value of the other
    when no reference agrees exactly, so that ``--reference norm=groupnorm`` compares
    BatchNorm at every ghost batch with the one GroupNorm group. A row with no such reference,
    or with several, gets None. A name that matches no group, or a key that does not tell
    groups apart, is refused in one line, named by its ``origin`` (``--reference``, or the
    sweep record it came from: none was typed)."""
    if not reference:
        return None
    wanted = {}
    for item in reference:
        key, _, value = item.partition("=")
        column = f"{key}.name" if f"{key}.name" in keys or key in GROUP_NAMES else key
        if column not in keys:
            raise UsageError(
                f"{origin} {item}: {key} does not tell the groups of this table apart; "
                f"valid keys: {', '.join(k.removesuffix('.name') for k in keys) or 'none'}"
            )
        wanted[column] = value
    # the per-device batch is batch_size / train.devices, both keys themselves where they
    # vary: as a stratum it would keep every world size apart from the one --reference names
    strata = [k for k in keys if k not in wanted and k != PER_DEVICE_BATCH]
    chosen = [i for i, row in enumerate(rows) if all(label(row[k]) == v for k, v in wanted.items())]
    if not chosen and "norm.name" in wanted:  # a user norm by the name it was given
        bare = {**wanted, "norm.name": wanted["norm.name"].partition("(")[0]}
        named = [
            i
            for i, row in enumerate(rows)
            if label(row["norm.name"]).partition("(")[0] == bare["norm.name"]
            and all(label(row[k]) == v for k, v in bare.items() if k != "norm.name")
        ]
        if len({label(rows[i]["norm.name"]) for i in named}) == 1:  # options folded in: one
            chosen = named
    if not chosen:
        shown = " | ".join(  # each choice once: many groups share the value of one key
            dict.fromkeys(
                " ".join(f"{k.removesuffix('.name')}={label(row[k])}" for k in wanted)
                for row in rows
            )
        )
        raise UsageError(f"{origin} {' '.join(reference)} matches no group; valid: {shown[:300]}")
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


# (data: a fetched set's fingerprint; runs on two fingerprints of one set are marked, never
# pooled silently: normbench.data.hubcache)
PROVENANCE = (
    ("code", "code_hash"),
    ("torch", "torch_version"),
    ("device", "device_used"),
    ("data", "data_fingerprint"),
)


class Columns:
    """The columns the convergence table reads, as arrays taken once from the whole frame, so
    that a group's numbers are array operations on its rows (``group_rows``), not pandas
    operations on a part of a wide frame: 500 groups' parts cost more than their numbers."""

    def __init__(self, runs: pd.DataFrame, metric: Metric):
        self.status = runs["status"].to_numpy(dtype=object)
        masks = status_masks(runs["status"])
        self.diverged, self.failed = masks["diverged"], masks["failed"]
        self.finished = masks.any_of(RESULT_STATUSES)
        self.unfinished = masks.any_of(UNFINISHED_STATUSES)
        seeds = runs["seed"] if "seed" in runs else runs.index.to_series()
        self.seeds = seed_array(seeds.to_numpy())
        self.classes = runs["num_classes"].to_numpy(dtype=float)
        self.numbers = {
            column: numbers(runs[column])
            for column in (metric.column, metric.test_column, *NUMBERS)
            if column in runs
        }
        self.parameters = numbers(runs["parameters"]) if "parameters" in runs else None
        self.provenance = {  # (one value in every run: no group mixes it)
            name: label_codes(runs[column])[0]
            for name, column in PROVENANCE
            if column in runs and label_count(runs[column]) > 1
        }
        self.length = len(runs)

    def values(self, column: str, at: np.ndarray) -> np.ndarray:
        if column not in self.numbers:
            return np.full(len(at), np.nan)
        return self.numbers[column][at]

    def results(self, at: np.ndarray, column: str, metric: Metric, method: Method) -> stats.Results:
        """results.seeded_results of the group's rows ``at``."""
        return seeded(
            self.seeds[at],
            self.status[at],
            self.values(column, at),
            self.classes[at],
            metric,
            method,
        )

    def present(self, column: str, at: np.ndarray) -> np.ndarray:
        """The group's values of a column that are numbers (a run that never reached the
        target has none)."""
        values = self.values(column, at)
        return values[~np.isnan(values)]

    def result_mean(self, column: str, at: np.ndarray) -> float:
        """The mean over the group's finished runs (complete or diverged), NaN when none has
        a finite value."""
        values = self.values(column, at)[self.finished[at]]
        return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan

    def first_int(self, column: str, at: np.ndarray) -> int | None:
        """The group's first value of a column that is not null, as an int."""
        if self.parameters is None:
            return None
        present = self.parameters[at][~np.isnan(self.parameters[at])]
        return int(present[0]) if len(present) else None

    def mixed_provenance(self, at: np.ndarray) -> str:
        """Which of code, torch version and device differ among a group's results ('' if
        none)."""
        finished = at[self.finished[at]]
        return ",".join(
            name
            for name, codes in self.provenance.items()
            if len(finished) and codes[finished].min() != codes[finished].max()
        )


NUMBERS = ("steps_to_target", "time_to_target_s", "train_loss_auc")


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
