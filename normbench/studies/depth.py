"""Depth: LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models")
and Mix-LN (Li et al. 2024) against Pre-LN at depth 16, on the depth preset (its other
placements are the subject of the claims study's (e))."""

from __future__ import annotations

import pandas as pd

from normbench.studies import family, registry
from normbench.studies.claims import DEPTH
from normbench.studies.study import (
    Context,
    command_of,
    load,
    md,
    paragraphs,
    report,
    row_of,
    section_of,
)

STUDIES = ()  # the depth sweep is the claims study's


COLUMNS = [
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


def lns(ctx: Context) -> str:
    """LayerNorm Scaling and Mix-LN against Pre-LN at the depth study's deepest model, and
    their registered claims."""
    selection = load(ctx.runs, "depth")
    deepest = max(selection.runs["model.depth"].astype(int))
    deepest_runs = load(ctx.runs, "depth", [f"model.depth={deepest}"])
    result = report(deepest_runs, by=["placement.name"], reference=("placement=pre",))
    table = section_of(result).tables["convergence"]
    claims = {
        name: family.claim_lines(registry.claim(claim_id), selection.runs)
        for name, claim_id in (("lns", "sun-layernorm-scaling"), ("mix", "li-mix-ln"))
    }
    return paragraphs(
        f"## LayerNorm Scaling and Mix-LN at depth {deepest} (Sun et al. 2025; Li et al. 2024)",
        "**Claims.** Scaling each block's norm output by 1/sqrt(its depth) (LayerNorm "
        "Scaling) makes a deep Pre-LN model train better at the same learning rate; so "
        "does Post-LN in the first quarter of the blocks and Pre-LN after (Mix-LN).",
        f"**Command.** `{command_of(DEPTH, ctx.scale)}` (the depth study: learning rate 1e-2, no "
        f"warm-up), read at depth {deepest} against `--reference placement=pre`.",
        md(table, COLUMNS),
        f"Against Pre-LN at depth {deepest}: {said(table, 'lns')}; {said(table, 'mix')}.",
        claims["lns"],
        claims["mix"],
        family.RULE,
        "**What this does not show.** Sun et al. and Li et al. pre-train LLaMA models of "
        "130M to 7B parameters for billions of tokens; here a width-64 model of "
        f"{deepest} blocks for 400 steps, with the seeds the depth preset has.",
    )


def said(table: pd.DataFrame, name: str) -> str:
    """A placement's verdict against Pre-LN, with its difference when a test was made."""
    row = row_of(table, **{"placement.name": name})
    half = (row["diff_ci_high"] - row["diff_ci_low"]) / 2
    if half != half:  # no interval: no test was made
        return f"{name}: {row['verdict']} ({row['reason']})"
    return (
        f"{name}: {row['verdict']} ({row['diff_vs_reference']:+.3f} ± {half:.3f} bits per "
        f"byte against Pre-LN, {row['reason']})"
    )
