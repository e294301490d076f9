"""The scaling section of a report (``normbench report --scaling KEY``): the runs as a ladder
along the size key KEY, whatever sweep made them, its multipliers measured and its curves
fitted by normbench.report.scaling.

Each run's loss is its final validation loss: bits per byte on the language model (the
report's metric there), the cross-entropy in nats elsewhere; a diverged run counts at chance
unless ``--diverged exclude``. Its compute is C = 6 N D (Kaplan et al. 2020): N the parameter
count the run records (``parameters_non_embedding`` where every run records it, else
``parameters``: the table says which), D the tokens trained on, steps x batch size x
tokens per example, counted as the ladder's plan counts them (normbench.experiment.budget:
a window's bytes, an image's patches in the Transformer, its pixels or a signal's length in
a convolutional model). A rung is a value of
KEY (the keys that follow it, one value per rung, such as ``train.max_steps`` under a budget
rule, belong to the rung); groups are the other keys that vary (or ``--by``), setting keys
(data, model) split the runs into ladders of their own.
"""

from __future__ import annotations

import json
import math
import numbers as numeric
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.experiment.budget import positions
from normbench.report import scaling
from normbench.report.base import BITS_PER_BYTE, Method
from normbench.report.convergence import reference_index
from normbench.report.grouping import fold_norm_options, frame, groups, is_setting, varying_keys
from normbench.report.labels import label, labels
from normbench.report.results import metric_of, numbers

COUNTS = ("parameters_non_embedding", "parameters")  # N of C = 6 N D, the first recorded


@dataclass
class Ladder:
    """One ladder: its groups' cells, fit and answers (what the figures draw)."""

    setting: dict
    names: list[str]  # group labels
    reference: int
    cells: list[list[scaling.Cell]]
    sizes: list[list[tuple[float, float]]]  # per cell: N and D, means over its runs
    rungs: list  # KEY's values, in order
    fit: scaling.Fit
    answers: list[scaling.GroupScaling]


@dataclass
class Scaling:
    """The section: per group one row (``table``), per group and rung one (``rungs``)."""

    key: str
    loss: str  # the loss column fitted
    count: str  # the parameter count used as N
    table: pd.DataFrame
    rungs: pd.DataFrame
    ladders: list[Ladder]
    notes: list[str] = field(default_factory=list)
    named: bool = True  # the reference was named (--reference or the sweep's)


def check_key(runs: pd.DataFrame, key: str) -> list:
    """KEY's distinct values among the finished runs, sorted; refused in one line when it is
    no config key of these runs or has fewer than 3 values."""
    valid = ", ".join(k for k in ladder_keys(runs) if k != key) or "none (no numeric key varies)"
    if key not in runs.columns:
        raise UsageError(f"--scaling {key}: not a config key of these runs; valid: {valid}")
    values = sorted({v for v in runs[key] if _is_number(v)})
    if len(values) < 3:
        shown = ", ".join(label(v) for v in values) or "none numeric"
        raise UsageError(
            f"--scaling {key}: {len(values)} distinct value(s) ({shown}); a ladder needs 3 or "
            f"more; valid: {valid}"
        )
    return values


def _is_number(value) -> bool:
    return (
        isinstance(value, numeric.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def ladder_keys(runs: pd.DataFrame) -> list[str]:
    """The config keys that could be a ladder here: numbers with 3 or more values."""
    return [
        k
        for k in varying_keys(runs)
        if runs[k].map(_is_number).all() and len(set(runs[k].astype(float))) >= 3
    ]


def build(
    runs: pd.DataFrame,
    key: str,
    method: Method,
    by: list[str] | None = None,
    tuned: tuple[str, ...] = (),
    boot: int = scaling.BOOTSTRAP,
) -> Scaling:
    """The scaling section of ``runs`` along ``key``."""
    runs = fold_norm_options(runs)
    rung_values = check_key(runs, key)
    runs = runs[runs["status"].isin(("complete", "diverged"))]
    runs = runs[runs[key].map(_is_number)]
    metric = metric_of(runs)
    loss = "final_val_bpb" if metric == BITS_PER_BYTE else "final_val_loss"
    count = next((c for c in COUNTS if c in runs and runs[c].notna().all()), None)
    if count is None:
        raise UsageError(f"--scaling {key}: these runs record no parameter count")
    runs = runs.assign(
        _loss=_losses(runs, loss, metric == BITS_PER_BYTE, method),
        _n=numbers(runs[count]),
        _d=_tokens(runs),
    )
    runs = runs.assign(_compute=6 * runs["_n"] * runs["_d"])
    runs = runs[np.isfinite(runs["_loss"]) & (runs["_compute"] > 0)]
    varying = [k for k in varying_keys(runs) if not k.startswith("_")]
    follows = [k for k in varying if k != key and _follows(runs, key, k)]
    free = [k for k in varying if k not in (key, *follows, *tuned)]
    settings = [k for k in free if is_setting(k) and k not in (by or [])]
    keys = list(by) if by else [k for k in free if not is_setting(k)]
    notes = [f"rung keys (one value per {key}): {', '.join(follows)}"] if follows else []
    ladders, rows, rung_rows = [], [], []
    for setting, part in groups(runs, settings):
        ladder = _ladder(part, setting, key, keys, method, boot, notes)
        if ladder is None:
            continue
        ladders.append(ladder)
        rows += _rows(ladder, method, count, loss)
        rung_rows += _rung_rows(ladder, key)
    if not ladders:
        raise UsageError(
            f"--scaling {key}: no ladder of 3 or more values of {key} "
            f"({', '.join(label(v) for v in rung_values)}): " + "; ".join(notes)
        )
    named = bool(method.reference)
    if not named:
        notes.append(
            "no --reference named: the reference is each ladder's first group by name "
            "(chosen before looking at results); name one with --reference"
        )
    # the setting's and the rung's values keep their types (a width 8, not 8.0)
    table, rung_table = frame(rows, settings), frame(rung_rows, [*settings, key])
    return Scaling(key, loss, count, table, rung_table, ladders, notes, named)


def _losses(runs: pd.DataFrame, column: str, bits: bool, method: Method) -> np.ndarray:
    """Each run's final validation loss; a diverged run at chance (log classes, in bits or
    nats) or NaN with ``--diverged exclude``; a finite loss above chance capped there."""
    classes = numbers(runs["num_classes"]) if "num_classes" in runs else np.full(len(runs), 2.0)
    chance = np.log2(classes) if bits else np.log(classes)
    values = numbers(runs[column]) if column in runs else np.full(len(runs), np.nan)
    diverged = (runs["status"] == "diverged").to_numpy()
    values = np.where(diverged, chance if method.diverged == "chance" else np.nan, values)
    return np.minimum(values, chance)


def _tokens(runs: pd.DataFrame) -> np.ndarray:
    """D: steps taken x batch size x tokens per example, the positions the model computes at
    by the rule the ladder's plan counts with (normbench.experiment.budget.positions: a
    window's bytes, an image's patches in the Transformer, its pixels in the CNN)."""
    steps = numbers(runs["steps"]) if "steps" in runs else np.full(len(runs), np.nan)
    if "train.max_steps" in runs:
        steps = np.where(np.isfinite(steps), steps, numbers(runs["train.max_steps"]))
    return steps * numbers(runs["batch_size"]) * _positions(runs)


def _positions(runs: pd.DataFrame) -> np.ndarray:
    """Each run's tokens per example from its recorded data and model settings (once per
    distinct pair); NaN where they cannot be read (the run then leaves the ladder)."""
    sections = [c for c in runs.columns if c.startswith(("data.", "model."))]
    found: dict[str, float] = {}
    out = []
    for _, row in runs[sections].iterrows():
        cfg: dict[str, dict] = {"data": {}, "model": {}}
        for column, value in row.items():
            if not (isinstance(value, float) and math.isnan(value)):
                group, _, name = column.partition(".")
                cfg[group][name] = value
        key = json.dumps(cfg, sort_keys=True, default=str)
        if key not in found:
            try:
                found[key] = float(positions(cfg))
            except (UsageError, KeyError, TypeError, ValueError):
                found[key] = math.nan
        out.append(found[key])
    return np.array(out, dtype=float)


def _follows(runs: pd.DataFrame, key: str, other: str) -> bool:
    """Whether ``other`` has one value per value of ``key`` (it follows the rung)."""
    return bool((labels(runs[other]).groupby(labels(runs[key])).nunique() <= 1).all())


def _ladder(part, setting, key, keys, method, boot, notes) -> Ladder | None:
    """One setting's ladder: the groups with 3 or more rungs in common with the reference
    (the named one, else the first by name among the groups with 3 or more rungs), on the
    rungs they all have; the groups left out and the rungs dropped are noted."""
    found = []
    for values, runs in groups(part, keys):
        name = " ".join(f"{k.removesuffix('.name')}={label(values[k])}" for k in keys) or "all"
        by_rung = {v: r for v, r in runs.groupby(runs[key].astype(float))}
        found.append((values, name, by_rung))
    where = f" ({' '.join(f'{k}={label(v)}' for k, v in setting.items())})" if setting else ""
    tall = [item for item in found if len(item[2]) >= 3]
    if not tall:
        most = max(len(by_rung) for _, _, by_rung in found)
        notes.append(f"no ladder{where}: no group has 3 or more values of {key} (at most {most})")
        return None
    named = reference_index([v for v, _, _ in found], keys, method.reference)
    if named is not None and len(found[named][2]) < 3:
        notes.append(
            f"no ladder{where}: the reference {found[named][1]} has "
            f"{len(found[named][2])} value(s) of {key}; a ladder needs 3"
        )
        return None
    anchor_rungs = set(found[named][2] if named is not None else tall[0][2])
    kept = [item for item in tall if len(anchor_rungs & set(item[2])) >= 3]
    for _, name, by_rung in found:
        if all(name != other for _, other, _ in kept):
            notes.append(
                f"{name}{where}: left out, {len(anchor_rungs & set(by_rung))} value(s) of {key} "
                f"in common with the reference (a ladder needs 3)"
            )
    common = sorted(set.intersection(*(set(r) for _, _, r in kept)))
    if len(common) < 3:
        notes.append(f"no ladder{where}: its groups share {len(common)} value(s) of {key}")
        return None
    for _, name, by_rung in kept:
        if set(by_rung) - set(common):
            notes.append(f"{name}{where}: values of {key} the other groups lack left out")
    found = kept
    rows = [values for values, _, _ in found]
    reference = reference_index(rows, keys, method.reference) if method.reference else 0
    cells = [[_cell(by_rung[v]) for v in common] for _, _, by_rung in found]
    sizes = [
        [(float(by_rung[v]["_n"].mean()), float(by_rung[v]["_d"].mean())) for v in common]
        for _, _, by_rung in found
    ]
    if any((np.diff([c.compute for c in row]) <= 0).any() for row in cells):
        raise UsageError(
            f"--scaling {key}: the runs' compute 6 N D does not grow with {key}{where} (the "
            f"same parameters and steps at each value); valid: a size key, e.g. model.width"
        )
    if any(len(c.values) < 2 for row in cells for c in row):
        notes.append(
            f"a rung{where} has results of one seed: it adds no variance to the intervals, "
            "which are then too narrow; train 2 or more seeds a rung"
        )
    fit, answers = scaling.analyse(cells, reference or 0, method.level, boot)
    names = [name for _, name, _ in found]
    rungs = [int(v) if v.is_integer() else v for v in common]  # 8, not 8.0; 0.5 stays
    return Ladder(setting, names, reference or 0, cells, sizes, rungs, fit, answers)


def _cell(runs: pd.DataFrame) -> scaling.Cell:
    """A group's rung: each seed's loss (the mean of its runs), the mean compute."""
    by_seed = runs.groupby("seed")["_loss"].mean()
    return scaling.Cell(
        float(runs["_compute"].mean()), by_seed.index.to_numpy(), by_seed.to_numpy(dtype=float)
    )


def _ratio(log10: float) -> float:
    return 10.0**log10 if math.isfinite(log10) else (math.inf if log10 > 0 else math.nan)


def _bounded(log10: float) -> float:
    """An interval's end as a multiplier: -inf (unbounded below) is 0, +inf is inf."""
    return 10.0**log10 if not math.isnan(log10) else math.nan


def _rows(ladder: Ladder, method: Method, count: str, loss: str) -> list[dict]:
    """One row per group of a ladder (the JSON keys docs/design.md lists)."""
    rows = []
    rungs = len(ladder.rungs)
    fit = ladder.fit
    for g, answer in enumerate(ladder.answers):
        low, high = answer.multiplier_ci
        trend = answer.trend
        cross_low, cross_high = answer.crossing_ci
        is_reference = g == ladder.reference
        crossing_of = (lambda v: math.nan) if is_reference or fit.point is None else _ratio
        row = {
            **ladder.setting,
            "group": ladder.names[g],
            "reference": ladder.names[ladder.reference],
            "rungs": rungs,
            "seeds": min(len(c.values) for c in ladder.cells[g]),
            "multiplier_top": _ratio(answer.multiplier[rungs - 1]),
            "multiplier_top_kind": answer.kind[rungs - 1],
            "multiplier_ci_low": _bounded(low[rungs - 1]),
            "multiplier_ci_high": _bounded(high[rungs - 1]),
            "rungs_measured": sum(k == scaling.MEASURED for k in answer.kind[:rungs]),
        }
        row.update(
            trend=trend.verdict if trend else "reference",
            trend_slope=trend.slope if trend else math.nan,
            trend_ci_low=trend.low if trend else math.nan,
            trend_ci_high=trend.high if trend else math.nan,
            trend_rungs=trend.rungs if trend else rungs,
            trend_why=trend.why if trend else "",
            form=fit.mode,
            form_why=fit.why,
            lack_of_fit_p=answer.lack_of_fit_p,
            form_lack_of_fit_p=fit.lack_of_fit_p,
            exponent=answer.exponent,
            exponent_ci_low=answer.exponent_ci[0],
            exponent_ci_high=answer.exponent_ci[1],
            E=answer.floor,
            E_ci_low=answer.floor_ci[0],
            E_ci_high=answer.floor_ci[1],
            E_mode=fit.mode,
            E_shared=fit.mode == scaling.SHARED,
            E_why=fit.why,
            C0=float(ladder.cells[0][0].compute),
            compute_top=float(answer.compute[rungs - 1]),
        )
        for i, times in enumerate(scaling.EXTRAPOLATED):
            at = rungs + i
            row[f"multiplier_{times:g}x"] = _ratio(answer.multiplier[at])
            row[f"multiplier_{times:g}x_ci_low"] = _bounded(low[at])
            row[f"multiplier_{times:g}x_ci_high"] = _bounded(high[at])
            row[f"multiplier_{times:g}x_kind"] = answer.kind[at]
        row.update(
            crossing=crossing_of(answer.crossing),
            crossing_ci_low=crossing_of(cross_low),
            crossing_ci_high=crossing_of(cross_high),
            crossing_share=math.nan if is_reference else answer.crossing_share,
            crossing_kind=(
                "reference"
                if is_reference
                else scaling.NOT_ESTIMABLE
                if fit.point is None
                else scaling.FITTED
            ),
            count=count,
            loss=loss,
        )
        rows.append(row)
    return rows


def _rung_rows(ladder: Ladder, key: str) -> list[dict]:
    """Per group, one row per rung and per extrapolated point."""
    rows = []
    fit = ladder.fit
    for g, answer in enumerate(ladder.answers):
        low, high = answer.multiplier_ci
        fitted = (
            fit.point.loss(answer.compute)[g]
            if fit.point is not None
            else np.full(len(answer.compute), math.nan)
        )
        for i, compute in enumerate(answer.compute):
            cell = ladder.cells[g][i] if i < len(ladder.rungs) else None
            rows.append(
                {
                    **ladder.setting,
                    "group": ladder.names[g],
                    key: ladder.rungs[i] if cell else None,
                    "compute": float(compute),
                    "parameters": ladder.sizes[g][i][0] if cell else math.nan,
                    "tokens": ladder.sizes[g][i][1] if cell else math.nan,
                    "extrapolated": cell is None,
                    "seeds": len(cell.values) if cell else 0,
                    "loss_mean": float(cell.values.mean()) if cell else math.nan,
                    "loss_fit": float(fitted[i]),
                    "multiplier": _ratio(answer.multiplier[i]),
                    "multiplier_kind": answer.kind[i],
                    "multiplier_ci_low": _bounded(low[i]),
                    "multiplier_ci_high": _bounded(high[i]),
                }
            )
    return rows


def caption(result: Scaling, method: Method) -> str:
    """What the scaling table says and how, in words (every format's caption)."""
    level = f"{100 * (1 - 2 * method.level):.4g}%"
    against = "named before looking" if result.named else "the first group by name"
    n = (  # the run's count keeps the output head: Kaplan et al.'s N leaves it out too
        "non-embedding parameters, output head included"
        if result.count == COUNTS[0]
        else "parameters (all)"
    )
    alpha = f"{method.level:.4g}"
    return (
        f"Scaling along {result.key} on {result.loss.removeprefix('final_')}: C = 6 N D with N "
        f"the {n} and D = steps x batch x tokens per example. x ref: the compute multiplier, "
        f"how much more compute the reference ({against}) needs to reach the group's rung-mean "
        f"loss (> 1: the group needs less), measured at the top rung on the reference's own "
        f"rung means (monotone interpolation in log-log), no curve assumed; '> m' or '< m' "
        f"where the group's loss lies beyond the reference's measured range (a bound, not a "
        f"measurement); [ ] {level} intervals by bootstrap over seeds, paired by seed "
        f"(Satterthwaite-widened). trend: the slope of |log10 multiplier| per decade of "
        f"compute over the rungs measured, by its "
        f"{100 * scaling.trend_level(method.level):.4g}% interval: "
        f"constant = inside +-{scaling.TREND_MARGIN}, shrinking or growing = below or above 0, "
        f"else inconclusive, and inconclusive with fewer than {scaling.MIN_TREND_RUNGS} rungs "
        f"measured; a false shrinking or growing at most alpha {alpha} when the multiplier is "
        f"constant and a false constant at most alpha when the slope's size is at least the "
        f"margin, both measured by simulation (docs/statistics.md) with the seeds normal and "
        f"independent. x ref@10x, @100x and cross: from a fitted curve (floor per group, "
        f"shared, zero, or a log-log parabola that steepens; the least AICc among those "
        f"passing a lack-of-fit F test at alpha {alpha}; form and p in the table), with "
        f"misfit carried into the intervals; 'n/e' (not estimable) where no form fits."
    )
