"""A selection into a Report: split into sections, one per setting (data set, model,
training budget) when those vary and are not grouping keys, so that runs of different
experiments are never ranked against each other; within a section, runs grouped by the config
keys that vary (seeds aggregated), every question's table (normbench.report.convergence,
batch, precision, stability) and the notes on runs that are not averaged. Every table states
the settings held fixed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.report.base import Method, Metric, Report, Section
from normbench.report.batch import PER_DEVICE_BATCH, batch_table, per_device_batch
from normbench.report.convergence import best_over, convergence_table
from normbench.report.cost import cost_notes, cost_table
from normbench.report.grouping import (
    HEADLINE_KEYS,
    fold_norm_options,
    group_codes,
    groups,
    is_setting,
    status_masks,
    varying_keys,
)
from normbench.report.labels import label, label_count, labels
from normbench.report.precision import precision_table
from normbench.report.results import RESULT_STATUSES, UNFINISHED_STATUSES, metric_of
from normbench.report.scaling_devices import device_scaling_lines
from normbench.report.stability import STRESS_AXES, stability_table
from normbench.store.catalog import Selection, unknown_key

# --best-over chooses each group's value on validation from the very runs whose test numbers
# the verdicts then read: selection and verdict share seeds, so every output says so
# (docs/statistics.md, "Validation and test": the error rate this costs, measured)
BEST_OVER_NOTE = (
    "--best-over {key}: each group's {key} was chosen on validation from the same runs (the "
    "same seeds) whose test numbers these verdicts use, so the choice is not independent of "
    "them and the stated error rate is not kept; for verdicts on fresh seeds, tune instead: "
    "normbench sweep ... --tune {key}=..."
)


def build(
    selection: Selection,
    by: list[str] | None = None,
    best_over_key: str | None = None,
    method: Method | None = None,
    tuned: tuple[str, ...] = (),
    rung_key: str | None = None,
) -> Report:
    """Every table that applies to a selection, section by section. ``tuned``: the keys a tuned
    comparison chose per group (normbench.sweeps.tuned); each group runs at its own value, so
    they group nothing by default (a group at lr 1e-2 is compared with one at 3e-3).
    ``rung_key``: a ladder's size key (``model.width``): each of its values a section of its
    own, smallest first, so that every rung has its own verdicts (a group of width 8 is never
    judged against the best of width 4), titled by the rung rather than by a setting that
    follows it (its steps under a budget rule)."""
    method = method or Method()
    runs = selection.runs
    if runs.empty and selection.warnings:
        raise UsageError(
            "no readable runs among those selected; the warnings above say which runs and why"
        )
    if runs.empty:
        raise UsageError("no runs match: check the runs directory, --sweep and the filters")
    for key in by or []:
        if key not in runs.columns:
            raise UsageError(unknown_key(f"--by {','.join(by)}", key, runs))
    if best_over_key and best_over_key not in runs.columns:
        raise UsageError(unknown_key(f"--best-over {best_over_key}", best_over_key, runs))
    if best_over_key:
        method = Method(**{**method.__dict__, "test": True})
    varying = varying_keys(runs)
    split = [k for k in varying if is_setting(k) and k not in (by or [])]
    rungs = rung_key in varying and rung_key not in (by or []) and rung_key != best_over_key
    if rungs:
        split = [rung_key, *(k for k in split if k != rung_key and not follows(runs, k, rung_key))]
    known = None if split else varying  # one section: the selection's (0.3 s at 100,000 runs)
    parts = groups(runs, split)
    if rungs:  # smallest rung first (labels sort 16 before 8)
        parts.sort(key=lambda part: _in_order(label(part[0][rung_key])))
    sections = [
        build_section(part, setting, by, best_over_key, method, tuned, known)
        for setting, part in parts
    ]
    counts = runs["status"].value_counts().to_dict()
    return Report(sections, method, counts, list(selection.warnings), best_over_key)


def follows(runs: pd.DataFrame, key: str, rung_key: str) -> bool:
    """Whether ``key`` holds one value per rung of ``rung_key`` (a ladder's steps, set per rung
    by its budget rule): it then splits nothing the rungs do not, and is shown among the
    section's fixed settings rather than in its title."""
    return bool((labels(runs[key]).groupby(labels(runs[rung_key])).nunique() <= 1).all())


def with_per_device_batch(runs: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Where the groups differ in train.devices (the world size), the per-device batch
    (batch_size / train.devices) as a column beside it: the batch a BatchNorm normalizes over
    under DistributedDataParallel, which the world size alone does not say. It splits no
    group (batch_size and train.devices decide it)."""
    if "train.devices" not in keys:
        return runs, keys
    at = keys.index("train.devices") + 1
    runs = runs.assign(**{PER_DEVICE_BATCH: per_device_batch(runs)})
    return runs, [*keys[:at], PER_DEVICE_BATCH, *keys[at:]]


def build_section(
    runs: pd.DataFrame,
    setting: dict,
    by: list[str] | None,
    best_over_key: str | None,
    method: Method,
    tuned: tuple[str, ...] = (),
    varying: list[str] | None = None,
) -> Section:
    """One section's tables. ``varying``: the keys that vary in ``runs``, where known."""
    folded = fold_norm_options(runs)
    if folded is not runs or varying is None:  # a user norm's options make names of their own
        varying = varying_keys(folded)
    runs = folded
    if "seed" in runs:  # in seed order once, so that every group's results are (seeded_results)
        runs = runs.sort_values("seed", kind="stable")
    keys = by or [k for k in varying if not is_setting(k) and k not in tuned]
    metric = metric_of(runs)
    if best_over_key:
        runs = best_over(runs, best_over_key, keys, metric)
        keys = [k for k in keys if k != best_over_key] + [best_over_key]
    runs, keys = with_per_device_batch(runs, keys)
    fixed = {k: runs[k].iloc[0] for k in HEADLINE_KEYS if k in runs and k not in keys}
    fixed = {k: v for k, v in fixed.items() if label_count(runs[k]) == 1 and v is not None}
    if "train.devices" in runs and "train.devices" not in keys and fixed.get("batch_size"):
        devices = runs["train.devices"].iloc[0]  # one value: train.devices is no group key
        if label_count(runs["train.devices"]) == 1 and devices not in (1, None):
            fixed.update(
                {"train.devices": devices, PER_DEVICE_BATCH: fixed["batch_size"] // devices}
            )
    tables = {
        "convergence": convergence_table(runs, keys, metric, method),
        "batch_sensitivity": batch_table(runs, keys, metric, method),
        "precision": precision_table(runs, keys, metric, method),
        **{
            # a tuned key is no stress axis: each group ran at the one value it chose
            name: None if axis in tuned else stability_table(runs, keys, axis, metric, method)
            for axis, name in STRESS_AXES.items()
        },
        "cost": cost_table(runs, keys, method),
    }
    notes = [*averaged_notes(runs, keys), *section_notes(runs, metric, method), *cost_notes(runs)]
    notes += device_scaling_lines(runs, keys)
    if best_over_key:
        notes.append(BEST_OVER_NOTE.format(key=best_over_key))
        if tables["convergence"] is not None:  # a column, so that CSV and JSON rows say it too
            tables["convergence"]["chosen_on"] = "validation of the same runs"
    return Section(setting, fixed, keys, metric, tables, notes, runs)


def averaged_notes(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """A note when some group has several results of one seed (the grouping leaves out a key
    that varies, e.g. ``--by norm.name`` over batch sizes): each seed's result is then the
    mean of its runs (results.seeded_results), and the note names the keys averaged over, with
    their values, and the --by that would compare them instead. None when every group has one
    run per seed."""
    finished = status_masks(runs["status"]).any_of(RESULT_STATUSES)
    if "seed" not in runs or not finished.any():
        return []
    seeds, _ = pd.factorize(runs["seed"].to_numpy()[finished], use_na_sentinel=False)
    _, cell_of, size = np.unique(  # a run's (group, seed) cell, and how many runs it holds
        group_codes(runs, keys)[finished] * (seeds.max() + 1) + seeds,
        return_inverse=True,
        return_counts=True,
    )
    shared = size[cell_of] > 1
    if not shared.any():  # (the whole frame filtered only when some cell holds several runs)
        return []
    results = runs[finished]
    cell = pd.DataFrame({**{k: labels(results[k]) for k in keys}, "seed": results["seed"]})
    within = results[shared]
    by = [cell.loc[shared, k] for k in [*keys, "seed"]]
    left_out = {
        key: sorted(set(labels(within[key])), key=_in_order)
        for key in varying_keys(runs)
        if key not in keys and (labels(within[key]).groupby(by).nunique() > 1).any()
    }
    groups = cell.loc[shared, keys].drop_duplicates() if keys else cell.loc[shared].head(1)
    if not left_out:
        return [
            f"{len(groups)} group(s) have several runs of one seed that differ in no config key "
            "compared: each seed's result is the mean of its runs"
        ]
    shown = "; ".join(f"{key} ({', '.join(values)})" for key, values in left_out.items())
    return [
        f"each seed's result is the mean of its runs over {shown}: the grouping leaves "
        f"{'them' if len(left_out) > 1 else 'it'} out ({len(groups)} group(s)); to compare "
        f"{'their' if len(left_out) > 1 else 'its'} values, --by {','.join([*keys, *left_out])}"
    ]


def _in_order(shown: str) -> tuple:
    """Labels as a reader orders them: numbers by value (8 before 16), then words."""
    try:
        return (0, float(shown), "")
    except ValueError:
        return (1, 0.0, shown)


def section_notes(runs: pd.DataFrame, metric: Metric, method: Method) -> list[str]:
    """What a reader must know about the runs behind the numbers: failed and unfinished runs
    (never averaged, named), diverged runs (at chance, or how many were excluded)."""
    notes = []
    masks = status_masks(runs["status"])
    diverged = int(masks["diverged"].sum())
    if diverged and method.diverged == "exclude":
        notes.append(f"{diverged} diverged run(s) excluded (--diverged exclude)")
    elif diverged:
        notes.append(
            f"{diverged} diverged run(s) counted at chance ({metric.label} of a "
            "model that learned nothing)"
        )
    for status in ("failed", *UNFINISHED_STATUSES):
        if masks[status].any():
            named = runs.loc[masks[status], ["run_id", "error"]]
            listed = ", ".join(
                rid + (f" ({error})" if status == "failed" and error else "")
                for rid, error in zip(named["run_id"], named["error"], strict=True)
            )
            notes.append(f"not averaged, {status}: {listed}")
    return notes
