"""Norms under Muon (Jordan et al. 2024; Liu et al. 2025, Moonlight), the optimizer of 2025's
large language-model runs, on the muon preset: does the largest attention logit grow under
Muon without QK-norm (Kimi Team 2025 clipped it: MuonClip), do QK-norm or Peri-LN hold it, and
is a norm's LR sensitivity (Wortsman et al. 2023) different under Muon than under AdamW?

Tuned (normbench.sweeps.tuned): every group (norm, placement, QK-norm, optimizer, QKV path)
tunes train.lr over the preset's grid on tuning seeds, chosen on validation loss, and is
confirmed at its own rate on the seeds the claims register, so that each optimizer is compared
at its own best rate, not at the other's. The claims read the confirmation runs; LR
sensitivity needs every rate, so it is read off the tuning runs (the full grid on the tuning
seeds), as an exploratory question. Every comparison is paired by seed (the seed fixes the data
order and the initial weights, so two groups start from the same network).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.labels import label
from normbench.report.text import with_ci
from normbench.report.tuning import Tuning, group_values, tuning_of
from normbench.store import catalog, records
from normbench.store.catalog import Selection
from normbench.studies import family, registry
from normbench.studies.study import (
    Context,
    Study,
    budget_text,
    command_of,
    load,
    log_growth,
    max_logits,
    md,
    paragraphs,
    report,
    section_of,
    subset,
    tune_of,
)

# The preset's tune: block (conf/sweep/muon.yaml; a test holds them equal), named here so that
# --smoke tunes two of its rates. Three tuning seeds, not two: question (c) is read off the
# tuning runs alone, and over two seeds a paired difference has one degree of freedom (its 90%
# interval +-4.5 sd, which decides nothing); three bring it to +-1.7 sd, for 72 runs more.
MUON = Study(
    "muon",
    ["muon"],
    ["seed=0,1", "train.max_steps=200"],
    data="pysource",
    tune=("train.lr=0.003,0.01,0.03,0.1,0.3,1.0",),
    tune_seeds=3,
)
STUDIES = (MUON,)
KEYS = ["norm.name", "placement.name", "model.qk_norm"]  # a group; the optimizer is the pair
OPTIMIZERS = ("adamw", "muon")
# The registered claims on the logit's growth, compared on a log10 scale (their margin: log10 2)
CLAIMS = {"qk": "muon-qk-norm", "peri": "muon-peri-ln", "optimizer": "kimi-muon-logits"}
FUSED = " (fused QKV)"  # the fused path's groups: shown, never read by a claim


def group_name(norm: str, placement: str, qk_norm: str) -> str:
    """A reader's name for a group of the preset: Pre-LN, Pre-LN + QK-norm, Peri-LN, ..."""
    base = {"layernorm": "LN", "rmsnorm": "RMSNorm", "dyt": "DyT"}.get(norm, norm)
    where = "Peri" if placement == "sandwich" else placement.capitalize()  # peri's run name
    name = f"{where}-{base}"
    return name + (" + QK-norm" if qk_norm not in ("none", "-", "None") else "")


def group_of(values: dict[str, str]) -> tuple[str, str]:
    """A group's name (fused path marked) and optimizer from its values: a run's config labels
    (norm.name, ...) or a tuning record's group text (norm=..., placement=peri, ...)."""

    def get(key: str) -> str:
        return values.get(key, values.get(key.removesuffix(".name"), "-"))

    name = group_name(get("norm.name"), get("placement.name"), get("model.qk_norm"))
    return name + (FUSED if get("train.muon_qkv") == "fused" else ""), get("train.optimizer")


def muon(ctx: Context) -> str:
    """The logit's growth per group at its own tuned rate and the registered claims on it ((a),
    (a'), (b)), from the confirmation runs; each group's LR sensitivity under Muon against
    AdamW ((c), an exploratory question), from the tuning runs: the whole grid."""
    selection = load(ctx.runs, "muon")
    tuning = tuning_of(ctx.runs, "findings-muon")
    grid = tuning_runs(ctx.runs, ctx.scale)
    # the fused path (the qkv weight orthogonalised whole) is its own group of runs: its logit
    # growth is shown under "(fused QKV)"; the claims and (c) read the split runs
    split = subset(selection, lambda r: ~r["train.muon_qkv"].map(label).eq("fused"))
    split_grid = subset(grid, lambda r: ~r["train.muon_qkv"].map(label).eq("fused"))
    by = [*KEYS, "train.optimizer", "train.lr"]
    grid_report = report(split_grid, by=by, reference=("train.optimizer=adamw",))
    sensitivity = sensitivity_rows(section_of(grid_report).tables["lr_stability"])
    chosen = chosen_rates(tuning)
    growth = logit_growth(ctx.runs, selection.runs)
    grid_growth = logit_growth(ctx.runs, grid.runs)
    claims = {name: registry.claim(claim_id) for name, claim_id in CLAIMS.items()}
    tested = {
        name: family.claim_lines(
            claim, split.runs, family.decide_claim(claim, pairs_of(growth, claim, chosen))
        )
        for name, claim in claims.items()
    }
    steps, every = (int(split.runs[k].max()) for k in ("train.max_steps", "train.eval_every"))
    rates = ", ".join(f"{rate:g}" for rate in grid_rates(ctx.scale))
    seeds = tuning_seeds_text(tuning)
    return paragraphs(
        "## Norms under Muon: attention logits and LR sensitivity (Jordan et al. 2024; "
        "Liu et al. 2025; Kimi Team 2025)",
        "**Claims.** (a) Under Muon the largest attention logit of a Transformer without "
        "QK-norm grows, and normalizing queries and keys holds it (Kimi Team 2025 report "
        "exploding logits under Muon and clip them, MuonClip; Wortsman et al. 2023 hold "
        "them with QK-norm under AdamW). (a') normbench's conjecture, not Kim et al.'s (theirs "
        "is that Peri-LN bounds the hidden states' growth): Peri-LN, which normalizes each "
        "sublayer's output too, holds the logit as well. (b) The logits grow more under Muon "
        "than under AdamW (Kimi Team 2025), each optimizer at its own tuned learning rate. "
        "(c) No claim, a question: is a norm's LR sensitivity different under Muon than under "
        "AdamW?",
        f"**Command.** `{command_of(MUON, ctx.scale)}` (pysource; Muon with Moonlight's RMS "
        "matching at the group's train.lr, on the 2-D weights of the residual sublayers with "
        "Q, K and V orthogonalised apart (as the references; the fused qkv weight "
        "orthogonalised whole is its own group, '(fused QKV)'), weight decay 0.1, AdamW "
        "(betas 0.9, 0.95) on the rest; PaLM's z-loss 1e-4 in every group, diagnostics every "
        f"{every} steps).",
        f"**Method.** Each group (norm, placement, QK-norm, optimizer, QKV path) at its own "
        f"learning rate: train.lr tuned over {rates}, chosen on the validation loss (mean over "
        f"{seeds}) by {budget_text(tuning)}, then confirmed at its chosen rate on the seeds "
        "the claims register, so each optimizer runs at its own best rate, never at the "
        "other's. Each claim is registered with its comparisons, margin and seeds "
        f"(normbench/studies/registered/): {claims['qk'].measure}; groups compared on it "
        f"paired by seed, each claim its own family, within a factor of "
        f"{10 ** claims['qk'].margin:.3g} counting as no difference "
        f"(+-{claims['qk'].margin:.3f} in log10).{edge_text(tuning)}",
        "Each group's chosen rate and, over its confirmation runs, the largest attention "
        "logit (over layers) at step 0 (median) and at the last diagnosed step (geometric "
        "mean over seeds), its growth (log10 of the last over step 0: mean over seeds and "
        "95% interval; a logit that overflowed counts as float32's largest, a lower bound on "
        "its growth) and the seeds compared:",
        md(chosen_table(growth, chosen), ["group", "optimizer", *CHOSEN_COLUMNS]),
        f"(a) {tested['qk']}",
        f"(a') {tested['peri']}",
        f"(b) {tested['optimizer']}",
        family.RULE,
        f"(c) *Exploratory (not a registered claim)*, from the tuning runs: every rate of the "
        f"grid on {seeds}, which also chose the rates above. The largest attention logit at "
        "the last diagnosed step per learning rate (geometric mean over the tuning seeds), "
        "at step 0 (median over the group's runs), and the tuning seeds:",
        md(
            growth_table(grid_growth),
            ["group", "optimizer", "step 0", *growth_columns(grid_growth), "seeds"],
        ),
        md(pd.DataFrame(sensitivity), ["group", "AdamW", "Muon", "verdict", "Muon - AdamW"]),
        sensitivity_text(sensitivity),
        "**What this does not show.** Muon's claims are about large models and long runs "
        "(Moonlight: 3B/16B parameters, 5.7T tokens; K2's logits exploded at 1T "
        f"parameters); here a 4-block Transformer of width 64 for {steps} steps, where "
        f"'grows' means over {steps} steps, not the blow-up that stops a run. Each group's "
        f"rate is the best of the grid's on {seeds}: a best rate between its points is not "
        "found. Under Muon one rate moves both the orthogonalised matrices (RMS-matched to "
        "AdamW's update, Moonlight's rule) and the AdamW part (embeddings, head, norms); "
        "their rates are not tuned apart (train.muon_lr). (c) rests on the tuning seeds "
        "alone. The z-loss holds the output logits in every group.",
    )


def grid_rates(scale: str) -> list[float]:
    """The learning rates the study tunes over at a scale (--smoke: two of them)."""
    (tuned,) = tune_of(MUON, scale)
    return [float(value) for value in tuned.partition("=")[2].split(",")]


def tuning_runs(runs: Path, scale: str) -> Selection:
    """The study's tuning runs on the grid: every rate of the grid on each tuning seed, at the
    full budget (a run one step beyond an edge of the grid, which only the groups that chose
    there have, is left out: LR sensitivity compares groups over the same rates)."""
    ids = records.tuning_run_ids(runs)[0].get("findings-muon", [])
    selection = catalog.select(catalog.load_runs(runs), [], ids)
    rates = grid_rates(scale)
    full = selection.runs["train.max_steps"].max() if len(selection.runs) else 0
    return subset(
        selection,
        lambda r: (
            r["train.lr"].map(lambda v: any(same_rate(v, rate) for rate in rates))
            & r["train.max_steps"].eq(full)
        ),
    )


def same_rate(a: object, b: object) -> bool:
    """Two learning rates as the record writes one (``0.01``, ``1.0``) and a run's config the
    other (0.01, 1), equal as numbers."""
    return math.isclose(float(a), float(b), rel_tol=1e-9)


def chosen_rates(tuning: Tuning | None) -> dict[tuple[str, str], str]:
    """Per group (its name, optimizer) the train.lr its tuning chose, from the sweep record
    (none when the record has no tuning)."""
    if tuning is None:
        return {}
    chosen = {}
    for group, values in zip(tuning.table["group"], tuning.table["chosen"], strict=True):
        rate = group_values(values).get("train.lr")
        if rate is not None:
            chosen[group_of(group_values(group))] = rate
    return chosen


def tuning_seeds_text(tuning: Tuning | None) -> str:
    """The tuning seeds in words, as the record lists them."""
    if tuning is None or not tuning.tuning_seeds:
        return "the tuning seeds (none recorded)"
    seeds = tuning.tuning_seeds
    return f"{len(seeds)} tuning seeds, {min(seeds)} to {max(seeds)}"


def edge_text(tuning: Tuning | None) -> str:
    """The groups whose choice sat at an edge of the grid, by what the record says of it (none:
    empty)."""
    if tuning is None:
        return ""
    edges: dict[str, list[str]] = {}
    for group, edge in zip(tuning.table["group"], tuning.table["edge"], strict=True):
        if isinstance(edge, str):
            edges.setdefault(edge, []).append(" ".join(group_of(group_values(group))))
    said = "; ".join(f"{', '.join(groups)}: {edge}" for edge, groups in edges.items())
    return f" At an edge of the grid: {said}." if edges else ""


def sensitivity_text(sensitivity: list[dict]) -> str:
    """(c): in how many groups Muon's LR sensitivity is decided against AdamW's, and how."""
    decided = [row for row in sensitivity if row["verdict"] in ("better", "worse", "equivalent")]
    return (
        f"LR sensitivity (Wortsman et al.'s, in bits per byte; lower is less "
        f"sensitive) under Muon against AdamW in each group, paired by tuning seed, Holm over "
        f"the {len(sensitivity)} comparisons, margin 0.01: decided in {len(decided)} of "
        f"{len(sensitivity)} groups"
        + (
            " (" + ", ".join(f"{r['group']}: {r['verdict']}" for r in decided) + ")."
            if decided
            else "."
        )
    )


def logit_growth(runs, frame: pd.DataFrame) -> pd.DataFrame:
    """Per diagnosed run: its group, optimizer, learning rate, seed and logit growth (log10 of
    the largest attention logit at the last diagnosed step over the same at step 0,
    ``log_growth``: a logit that overflowed counts, as float32's largest)."""
    rows = []
    for _, run, by_step in max_logits(runs, frame):
        first, last = float(by_step.iloc[0]), float(by_step.iloc[-1])
        growth = log_growth(first, last)
        if growth is None:
            continue
        group, optimizer = group_of(
            {k: label(run.get(k)) for k in [*KEYS, "train.muon_qkv", "train.optimizer"]}
        )
        rows.append(
            {
                "group": group,
                "optimizer": optimizer,
                "lr": label(run["train.lr"]),
                "seed": int(run["seed"]),
                "growth": growth,
                "first": first,
                "last": last,
            }
        )
    columns = ["group", "optimizer", "lr", "seed", "growth", "first", "last"]
    return pd.DataFrame(rows, columns=columns)


def at_rate(growth: pd.DataFrame, group: str, optimizer: str, rate: str) -> pd.DataFrame:
    """A group's runs under one optimizer at one learning rate (its chosen one)."""
    part = growth[(growth["group"] == group) & (growth["optimizer"] == optimizer)]
    return part[part["lr"].map(lambda lr: same_rate(lr, rate))]


def growth_by_seed(growth: pd.DataFrame, group: str, optimizer: str, rate: str) -> dict[int, float]:
    """A group's per-seed logit growth under one optimizer at its chosen rate: its
    confirmation run's on each seed (a run at any other rate is not read)."""
    part = at_rate(growth, group, optimizer, rate)
    return {int(seed): float(runs["growth"].mean()) for seed, runs in part.groupby("seed")}


def pairs_of(
    growth: pd.DataFrame, claim, chosen: dict[tuple[str, str], str]
) -> list[tuple[stats.Results, stats.Results]]:
    """Per comparison of a registered claim, its group's and reference's per-seed logit growth,
    each at its own chosen rate (``growth_by_seed``; a group with no choice recorded has
    none), negated: lower growth is better. The claim's filters name columns of ``growth``
    (group=Pre-LN, optimizer=muon)."""

    def results(filters: tuple[str, ...]) -> stats.Results:
        named = dict(item.split("=", 1) for item in filters)
        key = (named["group"], named["optimizer"])
        by_seed = growth_by_seed(growth, *key, chosen[key]) if key in chosen else {}
        return {seed: -value for seed, value in by_seed.items()}

    return [(results(c.group), results(c.reference)) for c in claim.comparisons]


CHOSEN_COLUMNS = ["train.lr", "step 0", "last", "growth (log10)", "seeds"]


def chosen_table(growth: pd.DataFrame, chosen: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Per group and optimizer, in the record's order: its chosen rate and, over its
    confirmation runs at that rate, the largest attention logit at step 0 (median) and at
    the last diagnosed step (geometric mean), the growth (mean and 95% interval) and seeds."""
    rows = []
    for (group, optimizer), rate in chosen.items():
        part = at_rate(growth, group, optimizer, rate)
        mean, half = stats.mean_ci(part["growth"].to_numpy(dtype=float))
        rows.append(
            {
                "group": group,
                "optimizer": optimizer,
                "train.lr": rate,
                "step 0": f"{part['first'].median():.3g}" if len(part) else "-",
                "last": f"{float(np.exp(np.log(part['last']).mean())):.3g}" if len(part) else "-",
                "growth (log10)": with_ci(mean, half) if len(part) else "-",
                "seeds": part["seed"].nunique(),
            }
        )
    return pd.DataFrame(rows, columns=["group", "optimizer", *CHOSEN_COLUMNS])


def growth_columns(growth: pd.DataFrame) -> list[str]:
    return [f"lr={rate}" for rate in sorted(set(growth["lr"]), key=float)]


def growth_table(growth: pd.DataFrame) -> pd.DataFrame:
    """Per group and optimizer: the largest attention logit at the last diagnosed step per
    learning rate (geometric mean over seeds), at step 0 (median), and the seeds."""
    rows = []
    for (group, optimizer), part in growth.groupby(["group", "optimizer"]):
        row = {"group": group, "optimizer": optimizer, "step 0": f"{part['first'].median():.3g}"}
        for rate, cell in part.groupby("lr"):
            row[f"lr={rate}"] = f"{float(np.exp(np.log(cell['last']).mean())):.3g}"
        row["seeds"] = part["seed"].nunique()
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
