"""One answer across workloads (``normbench report --across data``): the report's sections,
one per workload, combined into one table per group.

A *task* is a section of the report (its data set, model and budget); ``--across KEY`` names
the setting keys that tell the tasks apart. A *group* is the same choice of grouping keys in
every task (``norm=layernorm``). Per group: the probability of improvement over the reference
with a stratified-bootstrap 95% interval, the interquartile mean of normalized scores with its
interval, how many tasks it is better, equivalent, worse or inconclusive in (the sections'
own verdicts, paired by seed), the area under its performance profile, and the tasks it is
missing from, named. A task without a usable score (every run diverged, or no group above
chance) is left out, named in the report's warnings. The statistics are
normbench.report.aggregate's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.report import aggregate
from normbench.report.base import Report, Section
from normbench.report.labels import label

GROUP_NAMES = ("model", "norm", "placement", "data", "precision")
PROFILE_X = {"steps": "steps_to_target", "time": "time_to_target_s"}
TAUS = np.linspace(1.0, aggregate.TAU_MAX, 61)
COUNTED = ("better", "equivalent", "worse", "inconclusive")


@dataclass
class Across:
    """The aggregate over the tasks ``keys`` tell apart."""

    keys: list[str]  # dotted: data.name
    tasks: list[str]  # task labels: data=mnist1d
    group_keys: list[str]
    table: pd.DataFrame  # one row per group
    profile: pd.DataFrame  # tau, group, fraction of tasks: the figure's curves
    reference: str  # the reference group's label
    named: bool  # the reference was named before looking (--reference)
    profile_x: str  # steps | time
    left_out: dict[str, str] = field(default_factory=dict)  # task label: why it has no score
    # per group (its key values), the (group, reference) scores of each task both are in: what
    # the probability of improvement is computed on (a caller's own interval reads them)
    pairs: dict[tuple, list] = field(default_factory=dict)


def across(report: Report, keys: list[str], profile_x: str = "steps") -> Across:
    """The aggregate table of ``report`` across ``keys`` (``data`` for ``data.name``)."""
    if profile_x not in PROFILE_X:
        raise UsageError(f"--profile {profile_x}: valid: {', '.join(PROFILE_X)}")
    setting_keys = sorted({k for s in report.sections for k in s.setting})
    if not all(keys):
        raise UsageError(f"--across {','.join(keys)!r}: name setting keys, e.g. data or data,model")
    if len(set(keys)) < len(keys):
        raise UsageError(f"--across {','.join(keys)}: a key is given twice")
    keys = [f"{k}.name" if k in GROUP_NAMES else k for k in keys]
    bad = [k for k in keys if k not in setting_keys]
    if bad:
        valid = ", ".join(k.removesuffix(".name") for k in setting_keys) or "none (one section)"
        raise UsageError(
            f"--across {bad[0].removesuffix('.name')}: it does not split these runs into "
            f"workloads; valid: {valid}"
        )
    tasks = [_task_label(s, keys) for s in report.sections]
    if len(set(tasks)) < len(tasks):
        twice = next(t for t in tasks if tasks.count(t) > 1)
        others = [k.removesuffix(".name") for k in setting_keys if k not in keys]
        raise UsageError(
            f"--across {','.join(k.removesuffix('.name') for k in keys)}: two sections are "
            f"{twice} (they differ in {', '.join(others)}); add that key to --across or filter"
        )
    if len(tasks) < 2:
        raise UsageError("--across: these runs are one workload; aggregating needs two or more")
    group_keys = sorted({k for s in report.sections for k in s.keys})
    per_task = [_groups_of(section, group_keys) for section in report.sections]
    scores = [
        _scores(section, task) for section, task in zip(report.sections, per_task, strict=True)
    ]
    # a task without a usable score (every run diverged, or its best group sits at chance)
    # would normalize to NaN and sink every group's IQM: it is named and left out
    left_out = {tasks[i]: why for i, why in enumerate(scores) if isinstance(why, str)}
    for task, why in left_out.items():
        report.warnings.append(f"--across: {task} left out: {why}")
    kept = [i for i, why in enumerate(scores) if not isinstance(why, str)]
    if len(kept) < 2:
        named_out = "; ".join(f"{task}: {why}" for task, why in left_out.items())
        raise UsageError(
            f"--across: {len(kept)} of {len(tasks)} workloads have a usable score "
            f"({named_out}); aggregating needs two or more"
        )
    sections = [report.sections[i] for i in kept]
    tasks, per_task, scores = ([x[i] for i in kept] for x in (tasks, per_task, scores))
    groups = sorted({g for task in per_task for g in task})
    named = bool(report.method.reference)
    reference = _reference(per_task, groups, named)
    costs = [
        [_cost(section, task.get(g), profile_x) for g in groups]
        for section, task in zip(sections, per_task, strict=True)
    ]
    ratios = aggregate.profile_ratios(costs)
    profile_scores = aggregate.profile_score(ratios)
    rows = []
    for column, group in enumerate(groups):
        present = [i for i, task in enumerate(per_task) if group in task]
        rows.append(
            {
                **dict(zip(group_keys, group, strict=True)),
                "tasks": len(present),
                "missing": ", ".join(tasks[i] for i in range(len(tasks)) if i not in present),
                **_improvement(scores, present, group, reference),
                **_iqm(scores, present, group),
                **_counts(per_task, present, group),
                "profile_score": float(profile_scores[column]),
            }
        )
    table = pd.DataFrame(rows).sort_values(
        ["iqm", "profile_score"], ascending=False, na_position="last"
    )
    if not named:  # chosen after looking: the group with the highest interquartile mean
        reference = tuple(table.iloc[0][group_keys].astype(str))
        table = table.assign(**_recomputed(scores, groups, reference, table))
    profile = pd.DataFrame(
        [
            {"tau": float(tau), "group": _group_label(group_keys, group), "fraction": float(f)}
            for tau, fractions in zip(
                TAUS, aggregate.performance_profile(ratios, TAUS), strict=True
            )
            for group, f in zip(groups, fractions, strict=True)
        ]
    )
    present = {g: [i for i, task in enumerate(per_task) if g in task] for g in groups}
    return Across(
        keys,
        tasks,
        group_keys,
        table.reset_index(drop=True),
        profile,
        _group_label(group_keys, reference),
        named,
        profile_x,
        left_out,
        {g: _pairs(scores, present[g], g, reference) for g in groups if g != reference},
    )


def _task_label(section: Section, keys: list[str]) -> str:
    return " ".join(f"{k.removesuffix('.name')}={label(section.setting[k])}" for k in keys)


def _group_label(keys: list[str], group: tuple[str, ...]) -> str:
    return " ".join(f"{k.removesuffix('.name')}={v}" for k, v in zip(keys, group, strict=True))


def _groups_of(section: Section, group_keys: list[str]) -> dict[tuple[str, ...], pd.Series]:
    """A section's convergence rows by group: the labels of the grouping keys (a key this
    section does not group by is '-')."""
    table = section.tables["convergence"]
    return {
        tuple(label(row[k]) if k in section.keys else "-" for k in group_keys): row
        for _, row in table.iterrows()
    }


def _reference(per_task: list[dict], groups: list[tuple], named: bool) -> tuple[str, ...]:
    """The group every section's --reference named (its verdict is ``reference``), or, when
    none was named, the first group for now (replaced by the best once the table is sorted)."""
    if not named:
        return groups[0]
    found = {g for task in per_task for g, row in task.items() if row["verdict"] == "reference"}
    if len(found) != 1:
        raise UsageError(
            f"--across with --reference needs one reference group in every workload; it names "
            f"{len(found)} here (add keys to --reference, or filter)"
        )
    return found.pop()


def _scores(section: Section, task: dict) -> dict[tuple, dict] | str:
    """Per group of a task: its per-seed scores oriented higher-is-better, and the same on
    the task's scale (0 at chance, 1 at the best group's mean); or why the task has no such
    scale (no result, or no group above chance)."""
    metric = section.metric
    raw = {g: np.array(row["values"], dtype=float) for g, row in task.items()}
    oriented = {g: metric.score(v[np.isfinite(v)]) for g, v in raw.items()}
    chance = metric.score(np.array([_chance(section)]))[0]
    means = [float(v.mean()) for v in oriented.values() if len(v)]
    if not means:
        return "no usable score (no group has a result)"
    best = max(means)
    if not math.isfinite(chance):
        return "no usable score (its chance level is unknown)"
    if best <= chance:
        return (
            "no usable score (its best group's mean is at or below chance: every run "
            "diverged or learned nothing)"
        )
    return {
        g: {"scores": v, "normalized": aggregate.normalized(v, chance, best)}
        for g, v in oriented.items()
    }


def _chance(section: Section) -> float:
    """A model that learned nothing: 1 / classes for accuracy; for bits per byte the unigram
    solution when the runs recorded it, else log2(classes)."""
    runs = section.runs
    if section.metric.higher_is_better:
        return section.metric.chance(float(runs["num_classes"].dropna().median()))
    unigram = runs["unigram_bpb"].dropna() if "unigram_bpb" in runs else pd.Series(dtype=float)
    if len(unigram):
        return float(unigram.median())
    return section.metric.chance(float(runs["num_classes"].dropna().median()))


def _cost(section: Section, row: pd.Series | None, profile_x: str) -> float:
    """A group's cost to reach the task's target: the median over its runs of steps (or
    seconds) to target, a run that never reached it counting as infinite; infinite for a group
    missing from the task."""
    if row is None:
        return math.inf
    runs = section.runs
    mask = pd.Series(True, index=runs.index)
    for key in section.keys:
        mask &= runs[key].map(label) == label(row[key])
    finished = runs[mask & runs["status"].isin(("complete", "diverged"))]
    if finished.empty:
        return math.inf
    costs = finished[PROFILE_X[profile_x]].astype(float).fillna(math.inf).to_numpy()
    return float(np.median(costs))


def _pairs(scores: list[dict], present: list[int], group, reference) -> list:
    """The (group, reference) scores of each task both are in, with a score on each side."""
    return [
        (scores[i][group]["scores"], scores[i][reference]["scores"])
        for i in present
        if reference in scores[i]
        and len(scores[i][group]["scores"])
        and len(scores[i][reference]["scores"])
    ]


def _improvement(scores: list[dict], present: list[int], group, reference) -> dict:
    """P(group > reference) over the tasks both are in, with its stratified-bootstrap 95%
    interval (NaN for the reference itself)."""
    tasks = _pairs(scores, present, group, reference)
    if group == reference or not tasks:
        return {"poi": math.nan, "poi_ci_low": math.nan, "poi_ci_high": math.nan}
    low, high = aggregate.stratified_bootstrap(
        tasks, lambda resampled: aggregate.probability_of_improvement(resampled)
    )
    return {
        "poi": aggregate.probability_of_improvement(tasks),
        "poi_ci_low": low,
        "poi_ci_high": high,
    }


def _iqm(scores: list[dict], present: list[int], group) -> dict:
    """The interquartile mean of the group's normalized scores pooled over its tasks, with its
    stratified-bootstrap 95% interval."""
    strata = [
        [scores[i][group]["normalized"]] for i in present if len(scores[i][group]["normalized"])
    ]
    if not strata:
        return {"iqm": math.nan, "iqm_ci_low": math.nan, "iqm_ci_high": math.nan}

    def pooled(resampled: list[list[np.ndarray]]) -> float:
        return aggregate.interquartile_mean(np.concatenate([task[0] for task in resampled]))

    low, high = aggregate.stratified_bootstrap(strata, pooled)
    return {"iqm": pooled(strata), "iqm_ci_low": low, "iqm_ci_high": high}


def _counts(per_task: list[dict], present: list[int], group) -> dict:
    """In how many tasks each verdict of the sections' own tables (the reference's row counts
    as its own word)."""
    verdicts = [per_task[i][group]["verdict"] for i in present]
    counts = {word: verdicts.count(word) for word in COUNTED}
    counts["reference"] = verdicts.count("reference")
    return counts


def _recomputed(scores: list[dict], groups: list[tuple], reference, table: pd.DataFrame) -> dict:
    """The improvement columns against the reference chosen after sorting."""
    columns = {"poi": [], "poi_ci_low": [], "poi_ci_high": []}
    keys = [c for c in table.columns if c not in _ROW_COLUMNS]
    for _, row in table.iterrows():
        group = tuple(str(row[k]) for k in keys)
        present = [i for i, task in enumerate(scores) if group in task]
        for name, value in _improvement(scores, present, group, reference).items():
            columns[name].append(value)
    return columns


_ROW_COLUMNS = (
    "tasks",
    "missing",
    "poi",
    "poi_ci_low",
    "poi_ci_high",
    "iqm",
    "iqm_ci_low",
    "iqm_ci_high",
    *COUNTED,
    "reference",
    "profile_score",
)
