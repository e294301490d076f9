"""The norms of 2025-26 on the activation statistics they are sold on (issue 63), on the
norms_2025 preset (the causal language model): single-scale RMSNorm under Muon against RMSNorm
under AdamW on excess kurtosis (Park et al. 2025, OSP), the element-wise attention output gate
on the attention sink and the largest activation (Qiu et al. 2025), GPAS on the growth of the
residual stream's mean square over depth (Chen et al. 2025), and DyISRU against DyT on how
closely each tracks RMSNorm's validation loss (Stollenwerk 2025's derivation).

Each claim is registered on a measure of its own (normbench/studies/registered/, the
``measure`` of each), computed here per run from its diagnostics (normbench.training.activations:
the last diagnosed step, on the fixed evaluation batch) or its validation curve, and decided
by normbench.studies.family on those values paired by seed (study.seed_pairs), as the QK-norm
and Muon studies decide theirs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.labels import label
from normbench.store.rundir import RunDir
from normbench.studies import family, registry
from normbench.studies.study import Context, Study, command_of, load, md, paragraphs, seed_pairs

NORMS_2025 = Study("norms_2025", ["norms_2025"], ["seed=0,1,2"], data="pysource")
STUDIES = (NORMS_2025,)
KEYS = ("norm.name", "placement.name", "model.attention_gate", "train.optimizer")
# A reader's name per group of the preset (its values of KEYS)
GROUPS = {
    ("rmsnorm", "pre", "none", "adamw"): "Pre-RMSNorm, AdamW (the reference)",
    ("ssrmsnorm", "pre", "none", "muon"): "Pre-single-scale RMSNorm, Muon",
    ("rmsnorm", "pre", "elementwise", "adamw"): "Pre-RMSNorm + element-wise gate",
    ("rmsnorm", "gpas", "none", "adamw"): "GPAS-RMSNorm",
    ("dyt", "pre", "none", "adamw"): "Pre-DyT",
    ("dyisru", "pre", "none", "adamw"): "Pre-DyISRU",
}
REFERENCE = ("rmsnorm", "pre", "none", "adamw")
# Each measure's column, its registered claim, and how the section's table shows it
MEASURES = {
    "kurtosis": "park-osp-kurtosis",
    "sink": "qiu-gated-attention-sink",
    "max_abs": "qiu-gated-attention-max",
    "growth": "chen-gpas-variance-growth",
    "gap": "stollenwerk-dyisru-tracks-rmsnorm",
}
SHOWN = {
    "val_bpb": "final val bpb",
    "kurtosis": "largest excess kurtosis",
    "max_abs": "largest |x| (log10)",
    "sink": "attention sink (log10)",
    "growth": "mean-square growth (log10)",
    "first_ms": "after the first unit (log10)",
    "last_ms": "after the last unit (log10)",
    "gap": "mean |gap| to RMSNorm (bpb)",
}


def measures(ctx: Context) -> pd.DataFrame:
    """Per finished run of the study: its group's values of KEYS, its seed, its final
    validation bits per byte, each registered measure (the claims' ``measure`` says each;
    NaN where a run has none: a diverged run's are not finite and are left out by
    seed_pairs), and the attention sink uniform attention would have over its context."""
    runs = load(ctx.runs, "norms_2025").runs
    rows, curves = [], {}
    for _, run in runs.iterrows():
        if run["status"] not in ("complete", "diverged"):
            continue
        folder = RunDir(ctx.runs, run["run_id"])
        metrics = folder.read_metrics().dropna(subset=["val_bpb"])
        curve = metrics[metrics["step"] > 0].set_index("step")["val_bpb"]
        key = tuple(label(run[k]) for k in KEYS)
        curves[(key, int(run["seed"]))] = curve
        row = {k: v for k, v in zip(KEYS, key, strict=True)}
        row |= {"seed": int(run["seed"]), "val_bpb": float(curve.iloc[-1])}
        row |= activation_measures(folder.read_diagnostics())
        row["uniform_sink"] = uniform_sink(int(run["data.context"]))
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["gap"] = [
        gap_to_reference(curves.get((tuple(r[k] for k in KEYS), r["seed"])), curves, r["seed"])
        for _, r in frame.iterrows()
    ]
    return frame


def activation_measures(diagnostics: pd.DataFrame) -> dict[str, float]:
    """The registered activation measures at the last diagnosed step: the largest excess
    kurtosis over units of the stream and the sublayer output, log10 of the largest |x| of the
    stream, log10 of the attention sink averaged over attention units, and log10 of the
    stream's mean square after the last unit over that after the first; and, described only,
    log10 of the mean square after the first unit and after the last."""
    last = diagnostics[diagnostics["step"] == diagnostics["step"].max()].sort_values("unit")
    kurtosis = np.nanmax(last[["resid_kurtosis", "sublayer_kurtosis"]].to_numpy(dtype=float))
    sink = last["attn_sink"].dropna()
    rms = last["resid_rms"].to_numpy(dtype=float)
    return {
        "kurtosis": float(kurtosis),
        "max_abs": log10(float(last["resid_max_abs"].max())),
        "sink": log10(float(sink.mean())) if len(sink) else math.nan,
        "growth": 2 * (log10(rms[-1]) - log10(rms[0])),
        "first_ms": 2 * log10(rms[0]),
        "last_ms": 2 * log10(rms[-1]),
    }


def log10(value: float) -> float:
    """log10 of a positive finite value; NaN otherwise (a diverged run's statistics)."""
    return math.log10(value) if math.isfinite(value) and value > 0 else math.nan


def uniform_sink(context: int) -> float:
    """The attention sink of uniform causal attention over a context of T positions: query q
    (0-based, after the first) gives 1/(q+1) to the first key, so the mean over q = 1..T-1 is
    (H_T - 1) / (T - 1), H_T the T-th harmonic number."""
    return sum(1 / (q + 1) for q in range(1, context)) / (context - 1)


def gap_to_reference(curve: pd.Series | None, curves: dict[tuple, pd.Series], seed: int) -> float:
    """The mean over the evaluations after step 0 of |the run's val bpb - the reference's|,
    the reference the RMSNorm run (REFERENCE) on the same seed, over the steps both have;
    NaN without that run (or for it: its gap is 0 by definition, and no claim reads it)."""
    reference = curves.get((REFERENCE, seed))
    if curve is None or reference is None or curve is reference:
        return math.nan
    both = pd.concat([curve, reference], axis=1, join="inner").dropna()
    return float((both.iloc[:, 0] - both.iloc[:, 1]).abs().mean()) if len(both) else math.nan


def group_table(frame: pd.DataFrame, groups: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Per group named: each column's mean and 95% interval over its seeds (finite values
    only), and the seeds."""
    rows = []
    for key in groups:
        part = frame
        for name, value in zip(KEYS, key, strict=True):
            part = part[part[name] == value]
        row = {"group": GROUPS[key]}
        for column in columns:
            values = part[column].to_numpy(dtype=float)
            mean, ci = stats.mean_ci(values[np.isfinite(values)])
            shown = f"{mean:.3g} ±{ci:.2g}" if math.isfinite(ci) else f"{mean:.3g}"
            row[SHOWN[column]] = shown if math.isfinite(mean) else "-"
        row["seeds"] = part["seed"].nunique()
        rows.append(row)
    return pd.DataFrame(rows)


def claim_text(claim_id: str, frame: pd.DataFrame, runs: pd.DataFrame, column: str) -> str:
    """A registered claim decided on its measure's column, paired by seed, as its paragraph."""
    claim = registry.claim(claim_id)
    values = frame.rename(columns={column: "value"})
    tested = family.decide_claim(claim, seed_pairs(claim, values, lower_is_better=True))
    return family.claim_lines(claim, runs, tested)


def context_of(ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The study's runs, their measures, and the command they are."""
    runs = load(ctx.runs, "norms_2025").runs
    return runs, measures(ctx), f"`{command_of(NORMS_2025, ctx.scale)}`"


def steps_of(runs: pd.DataFrame) -> int:
    return int(runs["train.max_steps"].max())


def osp(ctx: Context) -> str:
    """Single-scale RMSNorm under Muon against RMSNorm under AdamW, on excess kurtosis."""
    runs, frame, command = context_of(ctx)
    groups = [REFERENCE, ("ssrmsnorm", "pre", "none", "muon")]
    table = group_table(frame, groups, ["val_bpb", "kurtosis"])
    return paragraphs(
        "## Single-scale RMSNorm under Muon and the kurtosis of activations (Park et al. "
        "2025, OSP)",
        "**Claim.** Outlier-Safe Pre-training trains with Muon and a single-scale RMSNorm (one "
        "scalar gain for all features) and keeps the excess kurtosis of activations near 0 "
        "(0.04 against 1818.56 for RMSNorm under AdamW at 1.4B parameters), so that the "
        "model quantizes to 4 bits.",
        f"**Command.** {command} (pysource; AdamW at 0.01 and Muon at 0.03 with Moonlight's RMS "
        "matching, the muon study's tuned rates; weight decay 0.1, betas 0.9/0.95, PaLM's "
        "z-loss 1e-4; diagnostics at every evaluation).",
        "Per group, over seeds (mean ±95% interval): the final validation bits per byte and "
        "the largest excess kurtosis over the residual units, of the stream each leaves and "
        "of its sublayer's output, at the last diagnosed step (docs/diagnostics.md):",
        md(table, list(table.columns)),
        claim_text(MEASURES["kurtosis"], frame, runs, "kurtosis"),
        family.RULE,
        "**What this does not show.** Park et al. train 1.4B parameters on a trillion tokens, "
        "where RMSNorm under AdamW reaches a kurtosis in the thousands; here a 4-block model "
        f"of width 64 for {steps_of(runs)} steps. The two groups differ in the norm and the "
        "optimizer together, as OSP's recipe does (its third part, the embedding projection, "
        "is not built): which of the two lowers the kurtosis is not separated, and each "
        "optimizer runs at one rate, not tuned here. Kurtosis is measured on the residual "
        "stream and the sublayer outputs, not on the inputs of every linear layer that a "
        "quantizer sees; nothing is quantized.",
    )


def gated_attention(ctx: Context) -> str:
    """The element-wise attention output gate on the attention sink and the largest |x|."""
    runs, frame, command = context_of(ctx)
    groups = [REFERENCE, ("rmsnorm", "pre", "elementwise", "adamw")]
    table = group_table(frame, groups, ["val_bpb", "sink", "max_abs"])
    uniform = float(frame["uniform_sink"].median()) if len(frame) else math.nan
    return paragraphs(
        "## Gated attention, the attention sink and the largest activation (Qiu et al. 2025)",
        "**Claims.** A sigmoid gate on each head's output after scaled dot-product attention "
        "(element-wise, their G1) removes the attention sink (the share of attention on the "
        "first token) and lowers the largest activation of the residual stream, each by "
        "about an order of magnitude at 1.7B to 15B parameters.",
        f"**Command.** {command} (pysource, Pre-LN RMSNorm under AdamW with and without "
        "model.attention_gate=elementwise).",
        "Per group, over seeds (mean ±95% interval): the final validation bits per byte, "
        "log10 of the attention sink averaged over the attention units and log10 of the "
        "largest |x| of the residual stream over the units, at the last diagnosed step "
        f"(uniform causal attention over this context has a sink of {uniform:.3g}, log10 "
        f"{log10(uniform):.3g}):",
        md(table, list(table.columns)),
        "(a) " + claim_text(MEASURES["sink"], frame, runs, "sink"),
        "(b) " + claim_text(MEASURES["max_abs"], frame, runs, "max_abs"),
        family.RULE,
        "**What this does not show.** Qiu et al.'s sinks form over trillions of tokens in "
        "models of 1.7B parameters and more, with contexts of thousands of tokens; here a "
        f"4-block model of width 64 sees 64-byte windows for {steps_of(runs)} steps. A sink "
        "near uniform attention's is none to remove: then (a) says nothing about the gate "
        "and a sink that forms, whatever its label. The head-wise gate (one score per head) "
        "is built but not run here.",
    )


def gpas(ctx: Context) -> str:
    """GPAS against Pre-LN on the growth of the residual stream's mean square over depth."""
    runs, frame, command = context_of(ctx)
    groups = [REFERENCE, ("rmsnorm", "gpas", "none", "adamw")]
    table = group_table(frame, groups, ["val_bpb", "growth", "first_ms", "last_ms"])
    return paragraphs(
        "## GPAS and the growth of activations over depth under Pre-LN (Chen et al. 2025)",
        "**Claim.** Under Pre-LN the residual stream's variance grows with depth; GPAS scales "
        "each unit's output down in the forward pass through a stop-gradient (a learnable "
        "gate per unit, starting at 0: Pre-LN at initialisation) and lowers that growth "
        "while keeping the gradient.",
        f"**Command.** {command} (pysource, RMSNorm under AdamW, placement=pre against "
        "placement=gpas).",
        "Per group, over seeds (mean ±95% interval): the final validation bits per byte and "
        "log10 of the residual stream's mean square after the last unit over that after the "
        "first (the registered measure), and, described only, the two mean squares (log10), "
        "at the last diagnosed step:",
        md(table, list(table.columns)),
        claim_text(MEASURES["growth"], frame, runs, "growth"),
        family.RULE,
        "**What this does not show.** Chen et al. show the growth over 12 to 32 layers of "
        "models of 71M to 1B parameters; here 4 blocks (8 units) of width 64 for "
        f"{steps_of(runs)} steps, the gates starting at 0 and moved only by training. The "
        "measure is the end-to-end growth of the mean square, not its shape over depth, and "
        "not whether GPAS speeds up convergence (their headline), which the bits per byte "
        "above only describe. GPAS multiplies each unit's output by 1 - SiLU(g), above 1 "
        "for a negative gate (SiLU's least value is -0.28): it can enlarge the stream as "
        "well as shrink it, and the two mean squares show which it did here; the gates' "
        "values are not recorded.",
    )


def dyisru(ctx: Context) -> str:
    """DyISRU against DyT on how closely each tracks RMSNorm's validation curve."""
    runs, frame, command = context_of(ctx)
    groups = [REFERENCE, ("dyt", "pre", "none", "adamw"), ("dyisru", "pre", "none", "adamw")]
    table = group_table(frame, groups, ["val_bpb", "gap"])
    evaluations = int(steps_of(runs) / int(runs["train.eval_every"].max()))
    return paragraphs(
        "## DyISRU tracks RMSNorm more closely than DyT? (Stollenwerk 2025)",
        "**Claim** (normbench's reading). Stollenwerk derives DyISRU, x / sqrt(beta + x^2) up "
        "to scale, as the exact element-wise counterpart of RMSNorm, of which DyT's tanh is "
        "an approximation; if the derivation carries to training, a model with DyISRU should "
        "follow RMSNorm's loss more closely than one with DyT.",
        f"**Command.** {command} (pysource, Pre-LN under AdamW at 0.01; DyT's alpha_init "
        "0.5, DyISRU's beta_init C - 1).",
        "Per group, over seeds (mean ±95% interval): the final validation bits per byte and "
        f"the mean over the {evaluations} evaluations after step 0 of the absolute gap in "
        "validation bits per byte to the RMSNorm run on the same seed:",
        md(table, list(table.columns)),
        claim_text(MEASURES["gap"], frame, runs, "gap"),
        family.RULE,
        "**What this does not show.** Stollenwerk compares functions, not trained models: "
        "this tests one consequence normbench drew from it, in one small model for "
        f"{steps_of(runs)} steps at one learning rate and each norm's default initialisation "
        "(DyT's alpha is tuned per model in Zhu et al.). A gap to RMSNorm is not a loss: a "
        "norm can track RMSNorm less closely by being better.",
    )
