"""One answer across workloads: every shipped norm against LayerNorm on four workloads where
norms matter for different reasons (the suite preset), aggregated as rliable and AlgoPerf
aggregate (normbench.report.across). Tuned: each norm at its own learning rate (DyT and Derf
at their own alpha_0 too), chosen on validation at an equal budget, verdicts on test from
fresh seeds (normbench.sweeps.tuned)."""

from __future__ import annotations

import math

import pandas as pd

from normbench.core.errors import UsageError
from normbench.report import aggregate, plots
from normbench.report.across import across
from normbench.report.base import Report
from normbench.report.labels import label
from normbench.report.tuning import MIN_REGRET_SEEDS, group_values, tuning_of
from normbench.studies import family, registry
from normbench.studies.study import Context, Study, command_of, load, md, paragraphs, report

# Each norm at its own best (normbench.sweeps.tuned): the learning rate for every norm, DyT's
# and Derf's alpha_0 too (the one key they add; a group samples 4 of its 12 candidates, the
# budget every group gets, drawn stratified), chosen on the validation loss of two tuning seeds
# (one seed's choice scattered: issue 46), then confirmed on the seeds its registered claims
# need, with verdicts on test.
SUITE = Study(
    "suite",
    ["suite"],
    ["seed=0,1,2", "train.max_steps=300"],
    data="workloads",
    smoke=("norm=layernorm,dyt",),
    tune=("train.lr=1e-3,3e-3,1e-2,3e-2", "norm.alpha_init=0.5,1.0,2.0"),
    tune_seeds=2,
)
STUDIES = (SUITE,)
COLUMNS = [
    "norm.name",
    "tasks",
    "poi",
    "poi_ci_low",
    "poi_ci_high",
    "iqm",
    "iqm_ci_low",
    "iqm_ci_high",
    "better",
    "equivalent",
    "worse",
    "inconclusive",
    "profile_score",
    "missing",
]


LIMITS = (
    "**What this does not show.** Four workloads are few: the stratified bootstrap "
    "resamples seeds within them and holds them fixed, so an interval says how sure "
    "these four workloads are, not how another workload would come out. Norms missing "
    "from a workload (sequence statistics on the causal model) count as never reaching "
    "its target in the profile and are named. Each workload runs a few hundred steps; the "
    f"tuning chose among four candidates per norm on {SUITE.tune_seeds} tuning seeds (DyT and "
    "Derf four of their twelve learning-rate and alpha_0 pairs, drawn stratified so that every "
    "value of each key is tried, the same budget as every norm), each at the full budget (four "
    "candidates are too few for successive halving to save: normbench.sweeps.halving), so a "
    "norm whose best lies between the grid's points is not given it; a choice at an edge of "
    "the grid is extended one step beyond it and flagged."
)
# The claims this study's runs test (registered/*.yaml): DyT not worse than LayerNorm on the
# Transformer workloads (Zhu et al. 2025); Derf on par with it on the language model (Chen et
# al. 2025 report parity on GPT-2).
CLAIMS = ("zhu-dyt-suite", "chen-derf-gpt2")
ALPHA = 0.05  # the across-workload call's family-wise error rate over the norms


def suite(ctx: Context) -> str:
    """Each norm's tuned choices, the aggregate across the workloads (probability of
    improvement over LayerNorm, IQM, the performance profile), the verdicts per workload and
    the registered claims; or why it could not aggregate."""
    selection = load(ctx.runs, "suite")
    result = report(selection, by=["norm.name"], study=SUITE, reference=("norm=layernorm",))
    chosen, tuning_lines = choices_table(ctx.runs)
    # every registered claim is shown, labelled by the rule, whether or not the suite aggregates
    claims = [family.claim_lines(registry.claim(claim_id), selection.runs) for claim_id in CLAIMS]
    try:
        result.across = across(result, ["data"])
    except UsageError as err:  # fewer than two workloads trained past chance: a finding too
        return paragraphs(
            _opening(ctx.scale), f"Not aggregated: {err}.", *claims, family.RULE, LIMITS
        )
    out = ctx.img / "suite"
    out.mkdir(parents=True, exist_ok=True)
    (drawing,) = plots.across_drawings(result)
    (out / f"{drawing.name}.png").write_bytes(drawing.png)
    calls = across_calls(result)
    above = [named(n) for n, (low, _) in calls.items() if low > 0.5]
    below = [named(n) for n, (_, high) in calls.items() if high < 0.5]
    found = verdicts_by_task(result)
    return paragraphs(
        _opening(ctx.scale),
        f"Chosen on the validation loss of {SUITE.tune_seeds} tuning seeds (1000000 and up; "
        "rows the norms, columns the workloads; gap: the chosen value's lead over the "
        "runner-up in mean validation loss, nats; "
        + (
            "regret: a 90% upper bound on how much lower another candidate's loss could be, "
            "paired t over the tuning seeds with Bonferroni over the candidates, at most the "
            "chosen's own loss; "
            if SUITE.tune_seeds >= MIN_REGRET_SEEDS
            else ""
        )
        + "edge N: a choice at an edge of the grid, said below the table):",
        md(chosen, list(chosen.columns)),
        *tuning_lines,
        "Across the workloads, on test, from the confirmation seeds only:",
        md(result.across.table, COLUMNS),
        f"![performance profile](img/suite/{drawing.name}.png)",
        "Decided per workload (paired by seed against LayerNorm at its own tuned rate, "
        "Holm over the norms; inconclusive ones left out): " + per_task_text(found) + ".",
        f"**Found.** Norms whose probability of improvement over LayerNorm has a "
        f"{confidence_of(len(calls))} BCa interval (Bonferroni over the {len(calls)} norms: "
        f"family-wise {ALPHA:g}; stratified by workload) above 1/2 across the workloads: "
        f"{', '.join(above) or 'none'}; below 1/2: {', '.join(below) or 'none'}"
        + "".join(f"; {named(n)} [{lo:.3f}, {hi:.3f}]" for n, (lo, hi) in calls.items())
        + ". On pysource: "
        + pysource_line(found.get("pysource", {}))
        + ".",
        *claims,
        family.RULE,
        LIMITS,
    )


def per_task_text(found: dict[str, dict[str, str]]) -> str:
    """Per workload, the norms decided against LayerNorm there and how ('nothing decided')."""
    return "; ".join(
        f"{task}: "
        + (
            ", ".join(
                f"{named(norm)} {word}" for norm, word in words.items() if word != "inconclusive"
            )
            or "nothing decided"
        )
        for task, words in found.items()
    )


def confidence_of(norms: int) -> str:
    return f"{100 * (1 - ALPHA / max(1, norms)):.2f}%"


def across_calls(result: Report) -> dict[str, tuple[float, float]]:
    """Per norm but the reference, its probability of improvement's BCa interval at level
    1 - ALPHA / (norms): Bonferroni over the norms, so that every call of the Found line
    holds at once with probability at least 1 - ALPHA by the union bound (the interval's own
    coverage at 5 seeds is measured in tests/report/test_aggregate_bca.py)."""
    pairs = result.across.pairs
    level = 1 - ALPHA / max(1, len(pairs))
    keys = result.across.group_keys
    return {
        label(dict(zip(keys, group, strict=True)).get("norm.name", group[0])): (
            aggregate.improvement_bca(tasks, level) if tasks else (math.nan, math.nan)
        )
        for group, tasks in pairs.items()
    }


def named(norm: str) -> str:
    """A norm as a sentence names it: ``none`` is the network without one."""
    return "no norm (norm=none)" if norm == "none" else norm


def pysource_line(words: dict[str, str]) -> str:
    """The norms decided better and worse than LayerNorm on the causal language model."""
    better = [named(n) for n, w in words.items() if w == "better"]
    worse = [named(n) for n, w in words.items() if w == "worse"]
    return (
        f"tuned, better: {', '.join(better) or 'none'}; worse: {', '.join(worse) or 'none'}"
        if words
        else "not run"
    )


def verdicts_by_task(result: Report) -> dict[str, dict[str, str]]:
    """Per workload (data set), each norm's verdict against LayerNorm."""
    found = {}
    for section in result.sections:
        task = label(section.setting.get("data.name"))
        rows = section.tables["convergence"]
        found[task] = {
            label(name): word for name, word in zip(rows["norm.name"], rows["verdict"], strict=True)
        }
    return found


def choices_table(runs) -> tuple[pd.DataFrame, list[str]]:
    """What the tuning chose per norm and workload, from the sweep record: the chosen value,
    its validation lead over the runner-up and the regret bound, a mark on a choice at an edge
    of the grid; and the lines that say what each edge was and which values each group tried
    (issue 46: in every output), the groups that tried the same values named together."""
    tuning = tuning_of(runs, "findings-suite")
    if tuning is None:
        return pd.DataFrame({"norm": []}), []
    cells: dict[str, dict[str, str]] = {}
    edges, tried = [], {}
    for _, row in tuning.table.iterrows():
        parts = group_values(row["group"])
        norm, task = parts.get("norm", "-"), parts.get("data", "-")
        where = f"{named(norm)} on {task}"
        chosen = ", ".join(
            item.replace("train.lr=", "lr ").replace("norm.alpha_init=", "α0 ")
            for item in str(row["chosen"]).split()
        )
        firmness = [f"gap {row['val_gap']:.3g}"] if _number(row["val_gap"]) else []
        bound, stated = row["regret_bound"], row["regret"]  # stated: in words where no number
        if _number(bound) and bound > 0:
            firmness.append(f"regret ≤ {bound:.3g}")
        elif isinstance(stated, str) and stated != "-" and not tuning.regret_withheld:
            firmness.append(f"regret {stated}")
        edge = row["edge"] if isinstance(row["edge"], str) else ""
        mark = f" edge {len(edges) + 1}" if edge else ""
        cells.setdefault(norm, {})[task] = (
            chosen + (f" ({'; '.join(firmness)})" if firmness else "") + mark
        )
        if edge:
            edges.append(f"edge {len(edges) + 1}, {where}: {edge}")
        tried.setdefault(str(row["tried"]), []).append(where)
    frame = pd.DataFrame.from_dict(cells, orient="index").fillna("missing")
    lines = [
        "Tried, the values each group trained: "
        + "; ".join(
            f"{values} by {len(groups)} groups"
            if len(groups) > 8
            else f"{values} by {', '.join(groups)}"
            for values, groups in sorted(tried.items(), key=lambda item: -len(item[1]))
        )
        + "."
    ]
    if edges:
        lines.append("At an edge of the grid: " + "; ".join(edges) + ".")
    if tuning.regret_withheld:  # once, not in every cell
        lines.append(tuning.regret_caption()[0].upper() + tuning.regret_caption()[1:] + ".")
    return frame.rename_axis("norm").reset_index(), lines


def _number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _opening(scale: str) -> list[str]:
    """The section's title, question and command: the same whether or not it aggregates."""
    return [
        "## One answer across workloads, each norm at its own best: is any norm better than "
        "LayerNorm? (the suite, tuned)",
        "",
        "**Question.** Across four workloads where norms matter for different reasons — "
        "the CNN on MNIST-1D at per-device batch 4, the Transformer on padded tokens, the "
        "causal language model on the standard library, the CNN on real 8x8 digits — does "
        "any shipped norm beat LayerNorm, and which are worse, when each norm runs at its own "
        "tuned learning rate (DyT and Derf also at their own alpha_0)? (rliable's "
        "probability of improvement and IQM, AlgoPerf's performance profiles, normbench's "
        "paired verdicts per workload.)",
        "",
        f"**Command.** `{command_of(SUITE, scale)}`; "
        "`normbench report --sweep suite --across data --reference norm=layernorm`. Tuning: "
        "four candidates per norm on the validation loss of the tuning seeds, an equal budget "
        "per workload; confirmation on fresh seeds, verdicts on test.",
    ]
