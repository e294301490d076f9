"""Depth: LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models")
and Mix-LN (Li et al. 2024) against Pre-LN at depth 16, on the depth preset (its other
placements are the subject of the claims study's (e))."""

from __future__ import annotations

from normbench.studies import family, registry
from normbench.studies.claims import DEPTH
from normbench.studies.study import Context, command_of, load, md, report, row_of

STUDIES = ()  # the depth sweep is the claims study's


def lns(ctx: Context) -> str:
    runs, scale = ctx.runs, ctx.scale
    selection = load(runs, "depth")
    deepest = max(selection.runs["model.depth"].astype(int))
    deepest_runs = load(runs, "depth", [f"model.depth={deepest}"])
    result = report(deepest_runs, by=["placement.name"], reference=("placement=pre",))
    (section,) = result.sections
    table = section.tables["convergence"]
    found = {name: row_of(table, **{"placement.name": name}) for name in ("lns", "mix")}
    claims = {
        name: family.claim_lines(registry.claim(claim_id), selection.runs)
        for name, claim_id in (("lns", "sun-layernorm-scaling"), ("mix", "li-mix-ln"))
    }

    def said(name: str) -> str:
        row = found[name]
        half = (row["diff_ci_high"] - row["diff_ci_low"]) / 2
        if half != half:  # no interval: no test was made
            return f"{name}: {row['verdict']} ({row['reason']})"
        return (
            f"{name}: {row['verdict']} ({row['diff_vs_reference']:+.3f} ± {half:.3f} bits per "
            f"byte against Pre-LN, {row['reason']})"
        )

    columns = [
        "placement.name",
        "n",
        "val_bpb_mean",
        "val_bpb_ci95",
        "verdict",
        "diff_vs_reference",
        "diff_ci_low",
        "diff_ci_high",
        "reason",
    ]
    return "\n".join(
        [
            f"## LayerNorm Scaling and Mix-LN at depth {deepest} (Sun et al. 2025; Li et al. 2024)",
            "",
            "**Claims.** Scaling each block's norm output by 1/sqrt(its depth) (LayerNorm "
            "Scaling) makes a deep Pre-LN model train better at the same learning rate; so "
            "does Post-LN in the first quarter of the blocks and Pre-LN after (Mix-LN).",
            "",
            f"**Command.** `{command_of(DEPTH, scale)}` (the depth study: learning rate 1e-2, no "
            f"warm-up), read at depth {deepest} against `--reference placement=pre`.",
            "",
            md(table, columns),
            "",
            f"Against Pre-LN at depth {deepest}: {said('lns')}; {said('mix')}.",
            "",
            claims["lns"],
            "",
            claims["mix"],
            "",
            family.RULE,
            "",
            "**What this does not show.** Sun et al. and Li et al. pre-train LLaMA models of "
            "130M to 7B parameters for billions of tokens; here a width-64 model of "
            f"{deepest} blocks for 400 steps, with the seeds the depth preset has.",
        ]
    )
