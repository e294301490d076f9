"""What every study shares: its sweep (a preset or axes, and what --quick and --smoke change),
where its runs and figures go, and the helpers that turn a report into a findings section.

Every number in a section comes from runs; every verdict is computed by the report's
statistics (docs/statistics.md), never written by hand. A claim's label is computed from its
registration (normbench.studies.registry) by normbench.studies.family, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report import pipeline, plots, stability, stats
from normbench.report.base import Method, Report, Section
from normbench.report.labels import label
from normbench.report.markdown import to_markdown
from normbench.report.tuning import Tuning, tuning_of
from normbench.store import catalog, records
from normbench.store.catalog import Selection
from normbench.store.rundir import RunDir
from normbench.studies import family, registry
from normbench.studies.registry import Claim
from normbench.sweeps.presets import load_preset

# --smoke: the quick settings on a tiny model and a few steps, for the test suite.
SMOKE = [
    "model.width=8",
    "norm.groups=4",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.log_every=3",
    "seed=0,1",
]
SMOKE_DATA = {
    "mnist1d": ["data.num_samples=300"],
    "pysource": ["data.eval_windows=8", "data.context=16"],
    "workloads": [],  # a study over several data sets keeps each one's own size
}


@dataclass
class Study:
    """One sweep: its arguments for `normbench sweep`, and what --quick changes."""

    name: str
    args: list[str]
    quick: list[str]
    data: str = "mnist1d"
    smoke: tuple[str, ...] = ()  # --smoke: fewer points on an axis (the test suite's budget)
    # A tuned study (normbench.sweeps.tuned): KEY=v1,v2,... each group tunes on tuning seeds
    # before its confirmation runs, which are the study's runs; its verdicts are on test.
    tune: tuple[str, ...] = ()
    tune_seeds: int = 2  # tuning seeds per candidate (--tune-seeds)
    smoke_tune_seeds: int | None = None  # --smoke's, where it differs
    # A ladder (a preset's ``ladder:``, normbench.sweeps.ladder): ``--ladder KEY=v1,...`` per
    # scale where it replaces the preset's, and the keys each rung sets (its axis, its steps
    # under a budget rule), which the smoke settings then leave to it.
    ladder: dict[str, str] = field(default_factory=dict)
    owned: tuple[str, ...] = ()


@dataclass(frozen=True)
class Context:
    """Where a findings document reads its runs and writes its figures, and at which scale."""

    runs: Path
    scale: str  # full | quick | smoke
    img: Path  # figures go beside the document: docs/img/<study>/


def arguments(study: Study, scale: str) -> list[str]:
    """The study's sweep arguments at a scale; a later override replaces one of its key. At
    full scale a study whose runs registered claims test trains the seeds they registered
    (the most any of them needs: normbench.studies.registry)."""
    seeds = registry.seeds_of(study.name)
    extra = {
        "full": [f"seed=range({seeds})"] if seeds else [],
        "quick": study.quick,
        "smoke": [*study.quick, *SMOKE, *SMOKE_DATA[study.data], *study.smoke],
    }[scale]
    presets = [arg for arg in study.args if "=" not in arg]
    merged: dict[str, str] = {}
    for arg in [*study.args, *extra]:
        if "=" in arg and arg.split("=", 1)[0] not in study.owned:
            merged[arg.split("=", 1)[0]] = arg
    return presets + list(merged.values())


def preset_of(study: Study) -> str | None:
    """The study's sweep preset (its first argument when that is no KEY=VALUE), or None."""
    return study.args[0] if study.args and "=" not in study.args[0] else None


def load(runs: Path, study: str, filters: list[str] = ()) -> Selection:
    ids, _, _ = records.sweep_run_ids(runs, f"findings-{study}")
    return catalog.select(catalog.load_runs(runs), list(filters), ids)


def subset(selection: Selection, keep: Callable[[pd.DataFrame], pd.Series]) -> Selection:
    return Selection(selection.runs[keep(selection.runs)], selection.warnings)


def report(
    selection: Selection,
    by: list[str] | None = None,
    study: Study | None = None,
    scaling: str | None = None,
    **method,
) -> Report:
    """The study's report; a tuned study's verdicts are on test (its values were chosen on
    validation); ``scaling``: a ladder's size key, for its scaling section; ``method``: Method
    fields (``reference=("norm=layernorm",)``)."""
    tuned = tuned_keys(study) if study else ()
    request = pipeline.Request(
        None, by=tuple(by or ()), method=Method(**method), tuned=tuned, scaling=scaling
    )
    return pipeline.verdicts(request, pipeline.given(selection, request))


def tuned_keys(study: Study) -> tuple[str, ...]:
    """The keys the study's sweep tunes: its own ``tune`` and its preset's ``tune:``."""
    preset = preset_of(study)
    own = load_preset(preset).get("tune") or {} if preset else {}
    keys = [item.split("=", 1)[0] for item in study.tune] + list(own)
    return tuple(dict.fromkeys(keys))


def tune_of(study: Study, scale: str) -> list[str]:
    """The study's ``--tune`` values at a scale: its own tuned keys (a preset's ``tune:`` comes
    with the preset); at --smoke each tuned key's first two values, the preset's too (two
    candidates: one rung, the least a tuned comparison runs)."""
    if scale != "smoke":
        return list(study.tune)
    preset = preset_of(study)
    own = load_preset(preset).get("tune") or {} if preset else {}
    items = list(study.tune) or [f"{key}={values}" for key, values in own.items()]
    return [
        f"{key}={','.join(values.split(',')[:2])}"
        for key, _, values in (item.partition("=") for item in items)
    ]


def tunes(study: Study) -> bool:
    """Whether the study's sweep is tuned: by its own ``tune`` or its preset's ``tune:``."""
    preset = preset_of(study)
    return bool(study.tune or (preset and load_preset(preset).get("tune")))


def extends(scale: str) -> bool:
    """Whether a choice at an edge is tried beyond it: not at --smoke, whose two candidates per
    key always choose an edge (up to 3 extension rounds a study would triple the test suite's
    findings run; the extension has tests of its own)."""
    return scale != "smoke"


def tune_seeds_of(study: Study, scale: str) -> int:
    """Tuning seeds per candidate at a scale."""
    smoke = study.smoke_tune_seeds if scale == "smoke" else None
    return smoke if smoke is not None else study.tune_seeds


def command_of(study: Study, scale: str) -> str:
    """The `normbench sweep` command the study's runs at a scale are (findings runs it through
    the same request: normbench.studies.findings.request_of)."""
    ladder = f" --ladder {study.ladder[scale]}" if scale in study.ladder else ""
    tune = "".join(f" --tune {value}" for value in tune_of(study, scale))
    count = tune_seeds_of(study, scale)
    seeds = f" --tune-seeds {count}" if tunes(study) and count != 2 else ""
    seeds += " --no-tune-extend" if tunes(study) and not extends(scale) else ""
    return "normbench sweep " + " ".join(arguments(study, scale)) + ladder + tune + seeds


def md(frame: pd.DataFrame, columns: list[str]) -> str:
    return to_markdown(frame[[c for c in columns if c in frame.columns]])


def paragraphs(*blocks: str | list[str]) -> str:
    """A section's blocks (a heading, a paragraph, a table), a blank line between each; a list
    is one block of lines (a section's figures), and an empty one still leaves its blank line,
    so that a section reads as what it loads, what it computes, and the blocks it writes."""
    lines: list[str] = []
    for index, block in enumerate(blocks):
        if index:
            lines.append("")
        lines += [block] if isinstance(block, str) else block
    return "\n".join(lines)


def figures(ctx: Context, result: Report, name: str, only: tuple[str, ...] = ()) -> list[str]:
    """The report's figures as PNG files under docs/img/NAME, as markdown image links."""
    drawings = plots.draw(result, ctx.runs, only=only)
    paths = plots.write_pngs(result, drawings, ctx.img / name)
    return [f"![{p.stem.replace('_', ' ')}](img/{name}/{p.name})" for p in paths]


def unregistered(ok: bool | None) -> str:
    """What a measure that is not a registered claim shows: no label (a label is the rule's,
    for registered claims only: normbench.studies.family), only what the measure computed."""
    said = {True: "borne out here", False: "not borne out here", None: "undecided here"}[ok]
    return f"*Exploratory (not a registered claim): {said}.*"


def seed_pairs(
    claim: Claim, values: pd.DataFrame, lower_is_better: bool = True
) -> list[tuple[stats.Results, stats.Results]]:
    """Per comparison of a registered claim on a study's own measure, its group's and its
    reference's per-seed values, higher better (negated where lower is better). ``values``: a
    row per run (or per seed) with the columns the claim's filters name, ``seed`` and
    ``value``; a seed's value is the mean of its finite rows, a seed without one is left out."""
    sign = -1.0 if lower_is_better else 1.0

    def results(filters: tuple[str, ...]) -> stats.Results:
        part = family.group_runs(values, filters)
        part = part[np.isfinite(part["value"].to_numpy(dtype=float))]
        means = part.groupby(part["seed"].astype(int))["value"].mean()
        return {int(seed): sign * float(value) for seed, value in means.items()}

    return [(results(c.group), results(c.reference)) for c in claim.comparisons]


def sensitivity_pairs(claim: Claim, section: Section) -> list[tuple[stats.Results, stats.Results]]:
    """Per comparison of a registered claim on LR sensitivity, the group's and the reference's
    per-seed LR sensitivity (report.stability.lr_sensitivity_by_seed) over the section's
    runs, negated: lower is better."""

    def results(filters: tuple[str, ...]) -> stats.Results:
        runs = family.group_runs(section.runs, filters)
        by_seed = stability.lr_sensitivity_by_seed(runs, section.metric) if len(runs) else {}
        return {seed: -value for seed, value in by_seed.items()}

    return [(results(c.group), results(c.reference)) for c in claim.comparisons]


def row_of(table: pd.DataFrame, **values) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for key, value in values.items():
        mask &= table[key].map(label) == label(value)
    return table[mask].iloc[0]


def diff_text(row: pd.Series) -> str:
    if row["verdict"] == "reference":
        return "the reference"
    half = (row["diff_ci_high"] - row["diff_ci_low"]) / 2
    return f"{row['verdict']} ({row['diff_vs_best']:+.3f} ± {half:.3f} against the best)"


CONVERGENCE_COLUMNS = [
    "n",
    "val_acc_mean",
    "val_acc_ci95",
    "val_bpb_mean",
    "val_bpb_ci95",
    "test_acc_mean",
    "test_bpb_mean",
    "verdict",
    "diff_vs_best",
    "diff_ci_low",
    "diff_ci_high",
    "diverged",
]


def named(table: pd.DataFrame, norm: str) -> pd.Series:
    return row_of(table, **{"norm.name": norm})


def section_of(result: Report) -> Section:
    (section,) = result.sections
    return section


def max_logits(runs: Path, frame: pd.DataFrame) -> Iterator[tuple[object, pd.Series, pd.Series]]:
    """Per finished run of a frame of runs (a section's) with diagnostics at two steps or more:
    its row's index, the row, and the largest attention logit over units at each diagnosed
    step (the QK-norm and Muon studies' logit growth both start from it)."""
    for index, run in frame.iterrows():
        if run["status"] not in ("complete", "diverged"):
            continue
        try:
            frame = RunDir(runs, run["run_id"]).read_diagnostics()
        except FileNotFoundError:
            continue
        if "max_logit" in frame and frame["step"].nunique() >= 2:
            yield index, run, frame.groupby("step")["max_logit"].max()


OVERFLOWED = float(np.finfo(np.float32).max)


def log_growth(first: float, later: float) -> float | None:
    """log10(later / first), the logit growth both logit studies measure. A later logit that
    overflowed (inf, or NaN once the weights have) counts as float32's largest, a lower bound
    on its growth, so that the runs that blow up most are not the ones left out; None where
    either logit is a finite number not above 0, or step 0's is not finite (nothing to grow
    from)."""
    later = later if np.isfinite(later) else OVERFLOWED
    if not (np.isfinite(first) and first > 0 and later > 0):
        return None
    return float(np.log10(later / first))


def budget_text(tuning: Tuning | None) -> str:
    """How a tuned study compared its candidates and whether every group had as many, from
    its record (the method, the candidates per group out of each space, the budget)."""
    if tuning is None:
        return "no tuning recorded"
    trials = sorted({t for t in tuning.table["trials"] if t is not None})
    spaces = sorted({s for s in tuning.table["space"] if s is not None})
    return (
        f"{tuning.method()}, {', '.join(map(str, trials))} candidates per group out of spaces "
        f"of {', '.join(map(str, spaces))}: "
        + ("an equal budget" if tuning.equal else "UNEQUAL BUDGETS")
    )


TUNING_COLUMNS = ["group", "chosen", "tried", "edge", "val_gap", "regret", "acc_best"]


def tuning_block(runs: Path, sweep: str) -> list[str]:
    """A tuned study's choices as its sweep record holds them: per group the chosen value,
    every value it tried, a choice at an edge of the grid and what lay beyond it, how firm the
    choice is, and the accuracy-best candidate where it is another (issue 46: which values
    each group tried, in every output; issue 58: the regret bound in words where no number)."""
    tuning = tuning_of(runs, sweep)
    if tuning is None:
        return ["No tuning recorded."]
    table = tuning.table.assign(
        edge=tuning.table["edge"].fillna("-"), acc_best=tuning.table["acc_best"].fillna("-")
    )
    return [
        f"Tuning, from the sweep record: {tuning.caption()}",
        "",
        md(table, tuning.shown_columns(TUNING_COLUMNS)),  # regret: said once where withheld
    ]
