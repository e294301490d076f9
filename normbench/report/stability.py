"""The stability tables over a stress axis (train.lr, model.depth): per group and value how
many seeds trained, the largest value at which every seed did (a lower bound, shown "≥",
when no value the group tried failed); over train.lr also Wortsman et al.'s LR sensitivity
per seed, over the rates every compared group was tried at (none below two), and a verdict on
it against a reference row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.base import BITS_PER_BYTE, Method, Metric
from normbench.report.convergence import reference_indices
from normbench.report.grouping import frame, group_rows, narrowed
from normbench.report.labels import label, label_codes, label_count
from normbench.report.results import numbers, result_columns, seed_array, seeded

# Stress axes: the stability table gives, per group, the largest value at which every seed
# still trains (Peri-LN's and nGPT's measure for the learning rate; the depth study's for depth).
STRESS_AXES = {"train.lr": "lr_stability", "model.depth": "depth_stability"}
EXCLUDE_DIVERGED = Method(diverged="exclude")  # the metric "there": where the seeds trained


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
    if axis not in runs or label_count(runs[axis]) < 2:
        return None
    row_keys = [k for k in keys if k != axis]
    axis_values = sorted({v for v in runs[axis] if v is not None})
    rows = []
    loss = sensitivity_loss(metric)
    read = (axis, metric.column, "unigram_bpb", "train.lr", f"final_{loss}", f"initial_{loss}")
    slim = narrowed(runs, *row_keys, *read)
    codes, shown = label_codes(slim[axis])  # per run, taken once for all the groups
    code_of = {text: code for code, text in enumerate(shown)}  # (-1: a value no run shows so)
    ran, whole = trained(slim, metric), result_columns(slim, metric.column)
    sensitivity = SensitivityColumns.of(slim, metric) if axis == "train.lr" else None
    groups = [(values, np.arange(len(slim))[at]) for values, at in group_rows(slim, row_keys)]
    # LR sensitivity compares groups over the same rates: those every group has runs at
    shared = set.intersection(*(set(codes[at].tolist()) for _, at in groups)) - {-1}
    for values, at in groups:
        row, stable, failed = {**values}, None, False
        columns, cells, ran_here = [column[at] for column in whole], codes[at], ran[at]
        for value in axis_values:
            here = cells == code_of.get(label(value), -1)
            count, seeds = seeds_trained(columns[0][here], ran_here[here])
            cell = seeded(*(c[here] for c in columns), metric, EXCLUDE_DIVERGED)
            finished = np.array(list(cell.values()), dtype=float)
            row[f"{label(value)}_mean"] = float(finished.mean()) if len(finished) else math.nan
            row[f"{label(value)}_trained"] = f"{count}/{seeds}"
            if seeds and count == seeds:
                stable = value
            failed = failed or count < seeds
        row["axis"] = axis
        row["largest_stable"] = stable
        # no value tried failed: the largest stable value is a lower bound, shown "≥"
        row["largest_stable_is_bound"] = stable is not None and not failed
        row["metric_there"] = math.nan if stable is None else row[f"{label(stable)}_mean"]
        if sensitivity is not None:
            kept = at[np.isin(cells, sorted(shared))] if len(shared) >= 2 else at[:0]
            by_seed = sensitivity_by_seed(sensitivity.at(kept), metric) if len(kept) else {}
            row.update(lr_sensitivity_row(by_seed, metric, [shown[c] for c in sorted(shared)]))
        rows.append(row)
    if axis == "train.lr" and len(rows) > 1 and len(shared) >= 2:
        lr_sensitivity_verdicts(rows, row_keys, method or Method())
    table = frame(rows, row_keys)
    order = np.argsort(
        [-(v if v is not None else -math.inf) for v in table["largest_stable"]], kind="stable"
    )
    return table.iloc[order].reset_index(drop=True)


def seeds_trained(seeds: np.ndarray, ran: np.ndarray) -> tuple[int, int]:
    """How many of a cell's seeds trained (a seed trained when each of its runs did), and how
    many seeds the cell has. ``seeds`` as results.seed_array gives them."""
    if seeds.dtype == np.int64:
        every = len(np.unique(seeds))
        return every - len(np.unique(seeds[~ran])), every
    by_seed: dict[int, bool] = {}
    for seed, trained_here in zip(seeds.tolist(), ran.tolist(), strict=True):
        by_seed[int(seed)] = by_seed.get(int(seed), True) and trained_here
    return sum(by_seed.values()), len(by_seed)


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
    is near a freshly initialised model's (its logits start near zero). Several runs of a seed
    at one rate (the grouping leaves out a key that varies) count as their mean capped loss."""
    return sensitivity_by_seed(SensitivityColumns.of(part, metric), metric)


@dataclass
class SensitivityColumns:
    """What LR sensitivity reads of runs, as arrays: a stability table takes them once for the
    whole frame and a group's by its rows (``at``). Plain arrays: a pandas groupby over a
    group's seeds cost 2.6 ms a seed (200 seeds x 50 groups at 100,000 runs), and filtering
    each group's runs by status 1-2 ms a group; the same numbers go through the same formula."""

    seeds: np.ndarray  # results.seed_array
    rates: np.ndarray  # the position of the run's train.lr label among the sorted labels
    finished: np.ndarray  # complete with a final loss, or diverged
    complete: np.ndarray
    final: np.ndarray
    recorded: np.ndarray  # initial loss, NaN where the run did not record it
    classes: np.ndarray

    @classmethod
    def of(cls, runs: pd.DataFrame, metric: Metric) -> SensitivityColumns:
        loss = sensitivity_loss(metric)
        status = runs["status"].to_numpy()
        final = runs[f"final_{loss}"].to_numpy(dtype=float)
        complete = status == "complete"
        initial = f"initial_{loss}"
        return cls(
            seed_array(runs["seed"].to_numpy()),
            label_codes(runs["train.lr"])[0],
            (status == "diverged") | (complete & ~np.isnan(final)),
            complete,
            final,
            runs[initial].to_numpy(dtype=float) if initial in runs else np.full(len(runs), np.nan),
            runs["num_classes"].to_numpy(dtype=float),
        )

    def at(self, rows: np.ndarray) -> SensitivityColumns:
        return SensitivityColumns(**{name: value[rows] for name, value in vars(self).items()})


def sensitivity_by_seed(columns: SensitivityColumns, metric: Metric) -> dict[int, float]:
    """``lr_sensitivity_by_seed`` of a group's columns."""
    loss = sensitivity_loss(metric)
    grid = np.unique(columns.rates)  # the group's rates (their labels' codes, in order)
    finished = columns.finished
    seeds = columns.seeds[finished]
    codes = np.searchsorted(grid, columns.rates[finished])
    complete, final = columns.complete[finished], columns.final[finished]
    recorded, classes = columns.recorded[finished], columns.classes[finished]
    log = math.log2 if loss == "val_bpb" else math.log

    def uniform(count: float) -> float:
        """The uniform prediction's loss; NaN for a class count no run can have."""
        return log(count) if count > 0 else math.nan

    present = np.flatnonzero(~pd.isna(seeds))
    present = present[np.argsort(seeds[present], kind="stable")]  # a seed's rows in frame order
    codes, complete, final = codes[present], complete[present], final[present]
    recorded, classes = recorded[present], classes[present]
    distinct, starts, counts = np.unique(seeds[present], return_index=True, return_counts=True)
    distinct = distinct.tolist()  # the seeds as Python numbers
    # Per seed, loss_init: its first recorded one, else the uniform prediction's
    at_row = np.where(np.isnan(recorded), len(present), np.arange(len(present)))
    first = np.minimum.reduceat(at_row, starts) if len(present) else at_row
    first_known = recorded[np.minimum(first, len(present) - 1)]
    fallback = np.array([uniform(c) for c in classes[starts].tolist()], dtype=float)
    initial = np.where(first < len(present), first_known, fallback)
    # Per run, its final loss capped at its seed's loss_init (a diverged run at loss_init)
    ceiling = np.repeat(initial, counts)
    ended = np.where(complete, final, math.nan)
    capped = np.where(np.isfinite(ended), np.minimum(ended, ceiling), ceiling)
    # A seed with one run at each rate, the common case: its rows are a row of a matrix
    one_each = np.flatnonzero(counts == len(grid))
    rows = starts[one_each][:, None] + np.arange(len(grid))
    every_rate_once = (np.sort(codes[rows], axis=1) == np.arange(len(grid))).all(axis=1)
    rows, one_each = rows[every_rate_once], one_each[every_rate_once]
    sensitivity = stats.lr_sensitivity_rows(capped[rows], initial[one_each][:, None])
    values = dict(zip([distinct[i] for i in one_each.tolist()], sensitivity.tolist(), strict=True))
    # Any other seed: several runs at a rate count as their mean capped loss; a seed missing a
    # rate does not count
    for which in np.flatnonzero(counts > len(grid)).tolist():  # an index into distinct
        at = slice(starts[which], starts[which] + counts[which])
        if sorted(set(codes[at].tolist())) != list(range(len(grid))):
            continue
        by_rate: dict[int, list[float]] = {}
        for code, value in zip(codes[at].tolist(), capped[at].tolist(), strict=True):
            by_rate.setdefault(code, []).append(value)
        losses = np.array([math.fsum(v) / len(v) for v in by_rate.values()], dtype=float)
        values[distinct[which]] = stats.lr_sensitivity(losses, float(initial[which]))
    return {int(seed): values[seed] for seed in sorted(values)}


def lr_sensitivity_row(
    by_seed: dict[int, float], metric: Metric, rates: list[str] | None = None
) -> dict:
    """A group's LR sensitivity columns from its values by seed (``lr_sensitivity_by_seed``):
    mean over seeds and its 95% interval, seeds, values, and the rates it is over (``rates``:
    those every compared group was tried at; none below two: no sensitivity, "-")."""
    mean, ci = stats.mean_ci(np.array(list(by_seed.values()), dtype=float))
    return {
        "lr_sensitivity_rates": ",".join(rates) if rates is not None else None,
        "lr_sensitivity": mean,
        "lr_sensitivity_ci95": ci,
        "lr_sensitivity_seeds": len(by_seed),
        "lr_sensitivity_values": [round(v, 6) for v in by_seed.values()],
        "lr_sensitivity_seeds_list": list(by_seed),
        "lr_sensitivity_loss": sensitivity_loss(metric),
    }


def trained(runs: pd.DataFrame, metric: Metric) -> np.ndarray:
    """Per run, whether it finished, did not diverge and ended clear of chance (chance: the
    unigram solution for bits per byte where the run recorded it, else Metric.chance)."""
    values = numbers(runs[metric.column])
    complete = (runs["status"] == "complete").to_numpy() & np.isfinite(values)
    classes, which = np.unique(runs["num_classes"].to_numpy(dtype=float), return_inverse=True)
    chance = np.array([metric.chance(float(c)) if c > 0 else math.nan for c in classes])[which]
    if not metric.higher_is_better:
        unigram = numbers(runs["unigram_bpb"])
        chance = np.where(np.isfinite(unigram), unigram, chance)
    return complete & metric.learned(values, chance)
