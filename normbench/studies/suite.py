"""One answer across workloads: every shipped norm against LayerNorm on four workloads where
norms matter for different reasons (the suite preset), aggregated as rliable and AlgoPerf
aggregate (normbench.report.across)."""

from __future__ import annotations

from normbench.core.errors import UsageError
from normbench.report import plots
from normbench.report.across import across
from normbench.report.base import Method
from normbench.report.sections import build
from normbench.studies.study import Context, Study, command_of, load, md, verdict

SUITE = Study(
    "suite",
    ["suite"],
    ["seed=0,1,2", "train.max_steps=300"],
    data="workloads",
    smoke=("norm=layernorm,rmsnorm,batchnorm",),
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
    "its target in the profile and are named. Each workload runs a few hundred steps at "
    "one learning rate; a norm that needs its own learning rate is not given it."
)


def suite(ctx: Context) -> str:
    runs, scale = ctx.runs, ctx.scale
    method = Method(reference=("norm=layernorm",))
    result = build(load(runs, "suite"), by=["norm.name"], method=method)
    try:
        result.across = across(result, ["data"])
    except UsageError as err:  # fewer than two workloads trained past chance: a finding too
        return "\n".join(
            [*_opening(scale), "", f"{verdict(None)} Not aggregated: {err}.", "", LIMITS]
        )
    table = result.across.table
    out = ctx.img / "suite"
    out.mkdir(parents=True, exist_ok=True)
    (drawing,) = plots.across_drawings(result)
    (out / f"{drawing.name}.png").write_bytes(drawing.png)
    others = table[table["norm.name"] != "layernorm"]
    above = others[others["poi_ci_low"] > 0.5]["norm.name"].tolist()
    below = others[others["poi_ci_high"] < 0.5]["norm.name"].tolist()
    # "A norm beats LayerNorm across the suite": decided for when some norm's interval lies
    # above 1/2, against when every norm's lies below it
    beats = True if above else False if len(below) == len(others) else None
    per_task = [
        f"{task}: "
        + (
            ", ".join(
                f"{row['norm.name']} {row['verdict']}"
                for _, row in section.tables["convergence"].iterrows()
                if row["verdict"] not in ("reference", "inconclusive")
            )
            or "nothing decided"
        )
        for task, section in zip(result.across.tasks, result.sections, strict=True)
    ]
    return "\n".join(
        [
            *_opening(scale),
            "",
            md(table, COLUMNS),
            "",
            f"![performance profile](img/suite/{drawing.name}.png)",
            "",
            "Decided per workload (paired by seed against LayerNorm, Holm over the norms; "
            "inconclusive ones left out): " + "; ".join(per_task) + ".",
            "",
            f"{verdict(beats)} A norm whose probability of improvement over LayerNorm has a 95% "
            f"interval above 1/2 across the workloads: {', '.join(above) or 'none'}; below 1/2 "
            f"(LayerNorm better): {', '.join(below) or 'none'}.",
            "",
            LIMITS,
        ]
    )


def _opening(scale: str) -> list[str]:
    """The section's title, question and command: the same whether or not it aggregates."""
    return [
        "## One answer across workloads: is any norm better than LayerNorm? (the suite)",
        "",
        "**Question.** Across four workloads where norms matter for different reasons — "
        "the CNN on MNIST-1D at per-device batch 4, the Transformer on padded tokens, the "
        "causal language model on the standard library, the CNN on real 8x8 digits — does "
        "any shipped norm beat LayerNorm, and which are worse? (rliable's probability of "
        "improvement and IQM, AlgoPerf's performance profiles, normbench's paired verdicts "
        "per workload.)",
        "",
        f"**Command.** `{command_of(SUITE, scale)}`; "
        "`normbench report --sweep suite --across data --reference norm=layernorm`",
    ]
