"""Low precision: where float32 statistics matter in fp16, for the norm alone and in training;
in training, the registered claim (micikevicius-fp32-statistics) that a norm needs them."""

from __future__ import annotations

import pandas as pd

from normbench.report.labels import label
from normbench.report.markdown import to_markdown
from normbench.studies import family, registry
from normbench.studies.study import (
    Context,
    Study,
    command_of,
    load,
    md,
    paragraphs,
    report,
    section_of,
)

FP16 = Study(
    "fp16",
    [
        "model=cnn",
        "norm=layernorm,rmsnorm,batchnorm,scalenorm,switchnorm",
        "precision=fp32,fp16",
        "norm.fp32_stats=true,false",
        "seed=range(3)",
        "train.max_steps=400",
        "train.eval_every=100",
    ],
    ["seed=0,1", "train.max_steps=200", "train.eval_every=50"],
    smoke=("norm=batchnorm,switchnorm",),
)

STUDIES = (FP16,)


TRAINING_COLUMNS = [
    "norm.name",
    "norm.fp32_stats",
    "fp32_mean",
    "fp16_mean",
    "change",
    "ci",
    "fp16_diverged",
    "fp16_verdict",
]


def fp16(ctx: Context) -> str:
    """Where statistics are low precision at all (the fused kernels), the norm alone against
    float64, and fp16 against fp32 in training, per norm and statistics precision."""
    from normbench.layers.numerics import SCALES, fused_kernel_errors, norm_errors

    section = section_of(
        report(load(ctx.runs, "fp16"), by=["norm.name", "norm.fp32_stats", "precision.name"])
    )
    precision = section.tables["precision"]
    claim = registry.claim("micikevicius-fp32-statistics")
    rows = precision.assign(
        change=precision["fp16_delta"],
        ci=(precision["fp16_delta_ci_high"] - precision["fp16_delta_ci_low"]) / 2,
    )
    smoke = ctx.scale == "smoke"  # fewer scales, smaller tensors: the test suite's budget
    scales = (1.0, 1e4) if smoke else SCALES
    largest = largest_errors(norm_errors(scales=scales))
    fused = fused_kernel_errors(shape=(4, 32, 256) if smoke else (16, 32, 2048))
    fused = fused[fused["weights"] == "float32"]
    needs = largest[largest["low-precision statistics"] > 10 * largest["fp32 statistics"]]
    return paragraphs(
        "## Which norms need float32 statistics in fp16?",
        "**Question.** Under fp16 autocast (with a gradient scaler), which norms lose accuracy "
        "when their statistics are computed in fp16 rather than float32? Registered: "
        f"{claim.source}.",
        "**Where statistics are low precision at all.** On CPU, PyTorch's fused kernels "
        "(layer_norm, group_norm, rms_norm; batch_norm and instance_norm with a float32 "
        "affine, which is how normbench calls them) accumulate in float32 whatever their "
        "input: their half output is the float32 result rounded (ratio 1.00 below, error of "
        "the half call over that of float32 rounded, by input offset mean/std; '-' where the "
        f"rounded input keeps no spread){exceptions_text(fused)}So "
        "`norm.fp32_stats` can only matter for the statistics normbench computes itself "
        "(SwitchNorm, ScaleNorm, masked InstanceNorm, AdaLN's condition). In the "
        "Transformer, Pre- and Post-LN norms read the float32 residual stream; only "
        "`res_post` and `sandwich`'s second norm read a half sublayer output. CUDA was not "
        "measured here.",
        to_markdown(fused_table(fused)),
        "**The norm alone.** Largest relative error of each norm's output against float64 "
        "over channels, tokens and padded tokens and activation scales up to "
        f"{max(scales):g} (offset and magnitude), where the rounded input still carries "
        "its spread:",
        to_markdown(largest),
        "Norms whose error grows more than tenfold without float32 statistics: "
        + (", ".join(sorted(set(needs["norm"]))) or "none")
        + ".",
        f"**In training.** `{command_of(FP16, ctx.scale)}` (the CNN: its norms read a "
        "convolution's half output). fp16 against fp32, per norm and statistics precision "
        "(worse / equivalent: one-sided t / TOST within ±0.01, paired by seed, Holm over every "
        "cell):",
        md(rows, TRAINING_COLUMNS),
        decided_text(rows),
        family.claim_lines(claim, section.runs),
        family.RULE,
        "**What this does not show.** At normbench's activation scales (standardised inputs, "
        "a normalised residual stream) the statistics stay far from fp16's limits; the "
        f"norm-alone table tries scales up to {max(scales):g}, where SwitchNorm's and masked "
        "InstanceNorm's fp16 statistics overflow or lose their digits. A CPU's autocast is "
        "not a GPU's: fused CUDA kernels may differ.",
    )


def largest_errors(errors: pd.DataFrame) -> pd.DataFrame:
    """Per norm and precision: the largest error with and without float32 statistics, where
    the rounded input still carries its spread (input_step <= 1)."""
    trusted = errors[errors["input_step"] <= 1]
    return (
        trusted.groupby(["norm", "precision", "fp32_stats"])["error"]
        .max()
        .unstack("fp32_stats")
        .rename(columns={True: "fp32 statistics", False: "low-precision statistics"})
        .reset_index()
    )


def fused_table(fused: pd.DataFrame) -> pd.DataFrame:
    """The fused kernels' half-over-float32 error ratio, per op and dtype by input offset."""
    table = (
        fused.pivot_table(index=["op", "dtype"], columns="offset", values="ratio")
        .round(2)
        .reset_index()
    )
    table.columns = [str(c) for c in table.columns]
    return table


def exceptions_text(fused: pd.DataFrame) -> str:
    """The end of the fused kernels' sentence: where the half call is not just rounding."""
    ratios = fused.dropna(subset=["ratio"])
    off = ratios[(ratios["ratio"] - 1).abs() > 0.05]
    exceptions = "; ".join(
        f"{r['op']} in {r['dtype']} at offset {r['offset']:g}: {r['ratio']:.1f}"
        for _, r in off.iterrows()
    )
    if not exceptions:
        return ". "
    return f", except where the input's offset dwarfs its spread ({exceptions}). "


def decided_text(rows: pd.DataFrame) -> str:
    """The training table's decisions: the cells where fp16 is worse, and where equivalent."""
    worse = rows[rows["fp16_verdict"] == "worse"]
    equivalent = rows[rows["fp16_verdict"] == "equivalent"]
    worse_text = (
        "fp16 is worse for "
        + ", ".join(
            f"{r['norm.name']} (fp32 statistics {label(r['norm.fp32_stats'])})"
            for _, r in worse.iterrows()
        )
        + "; "
        if len(worse)
        else "no norm is worse in fp16; "
    )
    equivalent_text = (
        "equivalent to fp32 for "
        + ", ".join(
            f"{r['norm.name']} ({label(r['norm.fp32_stats'])})" for _, r in equivalent.iterrows()
        )
        if len(equivalent)
        else "no cell is decided equivalent"
    )
    return f"Decided: {worse_text}{equivalent_text}. The rest is inconclusive."
