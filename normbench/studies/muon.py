"""Norms under Muon (Jordan et al. 2024; Liu et al. 2025, Moonlight), the optimizer of 2025's
large language-model runs, on the muon preset: does the largest attention logit grow under
Muon without QK-norm (Kimi Team 2025 clipped it: MuonClip), do QK-norm or Peri-LN hold it, and
is a norm's LR sensitivity (Wortsman et al. 2023) different under Muon than under AdamW?

Every comparison is paired by seed (the seed fixes the data order and the initial weights, so
the two optimizers start from the same network) and decided by the report's statistics.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.labels import label
from normbench.report.text import with_ci
from normbench.studies import family, registry
from normbench.studies.study import (
    Context,
    Study,
    command_of,
    load,
    max_logits,
    md,
    paragraphs,
    report,
    section_of,
    subset,
)

MUON = Study(
    "muon",
    ["muon"],
    ["seed=0,1", "train.max_steps=200"],
    data="pysource",
    smoke=("train.lr=0.01,1.0",),
)
STUDIES = (MUON,)
KEYS = ["norm.name", "placement.name", "model.qk_norm"]  # a group; the optimizer is the pair
OPTIMIZERS = ("adamw", "muon")
# The registered claims on the logit's growth, compared on a log10 scale (their margin: log10 2)
CLAIMS = {"qk": "muon-qk-norm", "peri": "muon-peri-ln", "optimizer": "kimi-muon-logits"}


def group_name(norm: str, placement: str, qk_norm: str) -> str:
    """A reader's name for a group of the preset: Pre-LN, Pre-LN + QK-norm, Peri-LN, ..."""
    base = {"layernorm": "LN", "rmsnorm": "RMSNorm", "dyt": "DyT"}.get(norm, norm)
    where = "Peri" if placement == "sandwich" else placement.capitalize()  # peri's run name
    name = f"{where}-{base}"
    return name + (" + QK-norm" if qk_norm not in ("none", "-", "None") else "")


def muon(ctx: Context) -> str:
    """The logit's growth per group and optimizer and the registered claims on it ((a), (a'),
    (b)), and each group's LR sensitivity under Muon against AdamW ((c), a question)."""
    selection = load(ctx.runs, "muon")
    # the fused path (the qkv weight orthogonalised whole) is its own group of runs: its logit
    # growth is shown under "(fused QKV)"; the verdicts and claims read the split runs
    split = subset(selection, lambda r: ~r["train.muon_qkv"].map(label).eq("fused"))
    by = [*KEYS, "train.optimizer", "train.lr"]
    section = section_of(report(split, by=by, reference=("train.optimizer=adamw",)))
    sensitivity = sensitivity_rows(section.tables["lr_stability"])
    growth = logit_growth(ctx.runs, selection.runs)
    claims = {name: registry.claim(claim_id) for name, claim_id in CLAIMS.items()}
    tested = {
        name: family.claim_lines(
            claim, section.runs, family.decide_claim(claim, pairs_of(growth, claim))
        )
        for name, claim in claims.items()
    }
    steps, every = (int(section.runs[k].max()) for k in ("train.max_steps", "train.eval_every"))
    return paragraphs(
        "## Norms under Muon: attention logits and LR sensitivity (Jordan et al. 2024; "
        "Liu et al. 2025; Kimi Team 2025)",
        "**Claims.** (a) Under Muon the largest attention logit of a Transformer without "
        "QK-norm grows, and normalizing queries and keys holds it (Kimi Team 2025 report "
        "exploding logits under Muon and clip them, MuonClip; Wortsman et al. 2023 hold "
        "them with QK-norm under AdamW). (a') normbench's conjecture, not Kim et al.'s (theirs "
        "is that Peri-LN bounds the hidden states' growth): Peri-LN, which normalizes each "
        "sublayer's output too, holds the logit as well. (b) The logits explode more often "
        "under Muon than under AdamW (Kimi Team 2025). (c) No claim, a question: is a "
        "norm's LR sensitivity different under Muon than under AdamW?",
        f"**Command.** `{command_of(MUON, ctx.scale)}` (pysource; Muon at train.lr with "
        "Moonlight's RMS matching, on the 2-D weights of the residual sublayers with Q, K "
        "and V orthogonalised apart (as the references; the fused qkv weight orthogonalised "
        "whole is its own group, '(fused QKV)'), weight decay 0.1, AdamW (betas 0.9, 0.95) "
        f"on the rest; PaLM's z-loss 1e-4 in every group, diagnostics every {every} steps).",
        f"**Method.** Each claim is registered with its comparisons, margin and seeds "
        f"(normbench/studies/registered/): {claims['qk'].measure}; groups compared on it "
        f"paired by seed, each claim its own family, within a factor of "
        f"{10 ** claims['qk'].margin:.3g} counting as no difference "
        f"(+-{claims['qk'].margin:.3f} in log10).",
        "The largest attention logit (over layers) at the last diagnosed step, per "
        "learning rate (geometric mean over seeds), at step 0 (median over the group's "
        "runs), and the seeds compared:",
        md(
            growth_table(growth), ["group", "optimizer", "step 0", *growth_columns(growth), "seeds"]
        ),
        f"(a) {tested['qk']}",
        f"(a') {tested['peri']}",
        f"(b) {tested['optimizer']}",
        family.RULE,
        md(pd.DataFrame(sensitivity), ["group", "AdamW", "Muon", "verdict", "Muon - AdamW"]),
        sensitivity_text(sensitivity),
        "**What this does not show.** Muon's claims are about large models and long runs "
        "(Moonlight: 3B/16B parameters, 5.7T tokens; K2's logits exploded at 1T "
        f"parameters); here a 4-block Transformer of width 64 for {steps} steps, where "
        f"'grows' means over {steps} steps, not the blow-up that stops a run. Muon runs at "
        "AdamW's rate "
        "with RMS matching, so one rate axis moves both; Muon at its own tuned rate "
        "(train.muon_lr) is not compared. The z-loss holds the output logits in every group.",
    )


def sensitivity_text(sensitivity: list[dict]) -> str:
    """(c): in how many groups Muon's LR sensitivity is decided against AdamW's, and how."""
    decided = [row for row in sensitivity if row["verdict"] in ("better", "worse", "equivalent")]
    return (
        f"(c) LR sensitivity (Wortsman et al.'s, in bits per byte; lower is less "
        f"sensitive) under Muon against AdamW in each group, paired by seed, Holm over the "
        f"{len(sensitivity)} comparisons, margin 0.01: decided in {len(decided)} of "
        f"{len(sensitivity)} groups"
        + (
            " (" + ", ".join(f"{r['group']}: {r['verdict']}" for r in decided) + ")."
            if decided
            else "."
        )
    )


def logit_growth(runs, frame: pd.DataFrame) -> pd.DataFrame:
    """Per diagnosed run: its group, optimizer, learning rate, seed and logit growth (log10 of
    the largest attention logit at the last diagnosed step over the same at step 0)."""
    rows = []
    for _, run, by_step in max_logits(runs, frame):
        first, last = float(by_step.iloc[0]), float(by_step.iloc[-1])
        if not (first > 0 and math.isfinite(last) and last > 0):
            continue
        rows.append(
            {
                "group": group_name(*(label(run[k]) for k in KEYS))
                + (" (fused QKV)" if label(run.get("train.muon_qkv")) == "fused" else ""),
                "optimizer": label(run["train.optimizer"]),
                "lr": label(run["train.lr"]),
                "seed": int(run["seed"]),
                "growth": math.log10(last / first),
                "first": first,
                "last": last,
            }
        )
    columns = ["group", "optimizer", "lr", "seed", "growth", "first", "last"]
    return pd.DataFrame(rows, columns=columns)


def growth_by_seed(growth: pd.DataFrame, group: str, optimizer: str) -> dict[int, float]:
    """A group's per-seed logit growth under one optimizer: the mean over the rate grid, for
    the seeds with a diagnosed run at every rate of the study."""
    part = growth[(growth["group"] == group) & (growth["optimizer"] == optimizer)]
    grid = set(growth["lr"])
    return {
        int(seed): float(runs["growth"].mean())
        for seed, runs in part.groupby("seed")
        if set(runs["lr"]) == grid
    }


def pairs_of(growth: pd.DataFrame, claim) -> list[tuple[stats.Results, stats.Results]]:
    """Per comparison of a registered claim, its group's and reference's per-seed logit growth
    (``growth_by_seed``), negated: lower growth is better. The claim's filters name columns
    of ``growth`` (group=Pre-LN, optimizer=muon)."""

    def results(filters: tuple[str, ...]) -> stats.Results:
        named = dict(item.split("=", 1) for item in filters)
        by_seed = growth_by_seed(growth, named["group"], named["optimizer"])
        return {seed: -value for seed, value in by_seed.items()}

    return [(results(c.group), results(c.reference)) for c in claim.comparisons]


def growth_columns(growth: pd.DataFrame) -> list[str]:
    return [f"lr={rate}" for rate in sorted(set(growth["lr"]), key=float)]


def growth_table(growth: pd.DataFrame) -> pd.DataFrame:
    """Per group and optimizer: the largest attention logit at the last diagnosed step per
    learning rate (geometric mean over seeds), and the seeds of the paired comparison."""
    rows = []
    for (group, optimizer), part in growth.groupby(["group", "optimizer"]):
        row = {"group": group, "optimizer": optimizer, "step 0": f"{part['first'].median():.3g}"}
        for rate, cell in part.groupby("lr"):
            row[f"lr={rate}"] = f"{float(np.exp(np.log(cell['last']).mean())):.3g}"
        row["seeds"] = len(growth_by_seed(growth, group, optimizer))
        rows.append(row)
    return pd.DataFrame(rows)


def sensitivity_rows(table: pd.DataFrame) -> list[dict]:
    """Per group: LR sensitivity under AdamW and under Muon (mean, 95% interval), and Muon's
    verdict against AdamW with its paired difference and 90% interval."""
    rows = []
    for values, part in table.groupby([k for k in KEYS if k in table]):
        names = dict(zip([k for k in KEYS if k in table], values, strict=True))
        by = {label(r["train.optimizer"]): r for _, r in part.iterrows()}
        if set(by) != set(OPTIMIZERS):
            continue
        adamw, muon_row = by["adamw"], by["muon"]
        low, high = muon_row["lr_sensitivity_diff_ci_low"], muon_row["lr_sensitivity_diff_ci_high"]
        rows.append(
            {
                "group": group_name(*(label(names.get(k, "-")) for k in KEYS)),
                "AdamW": with_ci(adamw["lr_sensitivity"], adamw["lr_sensitivity_ci95"]),
                "Muon": with_ci(muon_row["lr_sensitivity"], muon_row["lr_sensitivity_ci95"]),
                "verdict": muon_row["lr_sensitivity_verdict"],
                "Muon - AdamW": "-"
                if low != low
                else f"{muon_row['lr_sensitivity_diff']:+.3f} [{low:+.3f}, {high:+.3f}]",
            }
        )
    return rows
