"""What LayerNorm does, measured: its claimed benefits (stability, speed, generalisation,
gradient spread, residual connections, feature scale) on the causal language model."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from normbench.report.base import Report, Section
from normbench.report.diagnostics import diagnostics_table
from normbench.report.labels import label
from normbench.report.markdown import to_markdown
from normbench.store.rundir import RunDir
from normbench.studies.study import (
    CONVERGENCE_COLUMNS,
    Context,
    Study,
    command_of,
    figures,
    load,
    md,
    paragraphs,
    report,
    row_of,
    section_of,
    unregistered,
)

LR = Study(
    "lr",
    ["lr_stability"],
    ["seed=0", "train.max_steps=200"],
    data="pysource",
    smoke=("train.lr=0.01,0.3", "placement=pre,post"),
)

DEPTH = Study(
    "depth",
    ["depth"],
    ["seed=0", "train.max_steps=200"],
    data="pysource",
    smoke=("model.depth=2,4", "placement=pre,post,lns,mix"),
)

CLAIMS = Study(
    "claims",
    [
        "data=pysource",
        "model.depth=8",
        "norm=layernorm,rmsnorm,none",
        "batch_size=16",
        "train.lr=0.003",
        "train.warmup_steps=50",
        "train.max_steps=400",
        "train.eval_every=50",
        "seed=range(3)",
        "diagnostics=true",
    ],
    ["seed=0,1", "train.max_steps=200"],
    data="pysource",
    smoke=("model.depth=2",),
)

STUDIES = (
    LR,
    DEPTH,
    CLAIMS,
)


def claims(ctx: Context) -> str:
    """The notes this project started from: LayerNorm (a) stabilises training, (b) speeds
    convergence, (c) improves generalisation, (d) keeps gradient scale similar across layers,
    (e) works with residual connections, (f) keeps feature scale consistent across depth."""
    # (b, c, d, f): the claims study, depth 8 at a learning rate every norm trains at
    selection = load(ctx.runs, "claims")
    result = report(selection, by=["norm.name"])
    section = section_of(result)
    for name, at in (("diagnostics_init", "first"), ("diagnostics", "last")):
        section.tables[name] = diagnostics_table(section.runs, section.keys, ctx.runs, at)
    return paragraphs(
        "## What LayerNorm does, measured (against no norm, and RMSNorm)",
        "The notes this project started from say LayerNorm (a) stabilises training, (b) speeds "
        "convergence, (c) improves generalisation, (d) keeps gradient scale similar across "
        "layers, (e) works with residual connections, (f) keeps feature scale consistent across "
        "depth. Each claim below names its measure; all on the causal language model "
        "(data=pysource, bits per byte, lower is better).",
        *stabilises(ctx),
        *converges(ctx, selection.runs, section.tables["convergence"]),
        *generalises(ctx, selection.runs),
        *gradients_spread(ctx, result),
        *residual(ctx),
        *features(section),
        "**What this does not show.** One small causal Transformer (width 64) on bytes of Python "
        "source for 400 steps: the measures are named so that they can be taken at scale, not "
        "because these numbers transfer. (c) compares losses at one budget; with more data or "
        "steps the gap changes.",
    )


def stability_md(table: pd.DataFrame, keys: list[str]) -> str:
    """A stability table (lr_stability, depth_stability): per group, each point's mean and
    seeds trained, the largest point that trains and the metric there."""
    stable = [c for c in table.columns if c.endswith(("_mean", "_trained"))]
    return md(table, [*keys, *stable, "largest_stable", "metric_there"])


def stabilises(ctx: Context) -> list[str]:
    """(a): the lr_stability preset's stability table."""
    lr = report(load(ctx.runs, "lr"), by=["norm.name", "placement.name", "train.lr"])
    stability = section_of(lr).tables["lr_stability"]
    pre_ln = row_of(stability, **{"norm.name": "layernorm", "placement.name": "pre"})
    none = row_of(stability, **{"norm.name": "none"})
    ln_lr = pre_ln["largest_stable"] or 0
    none_lr = none["largest_stable"] or 0
    return [
        f"**(a) Stabilises training** — measure: the largest learning rate at which every seed "
        f"trains, and divergences. `{command_of(LR, ctx.scale)}`",
        stability_md(stability, ["norm.name", "placement.name"]),
        f"{unregistered(ln_lr > none_lr if ln_lr != none_lr else None)} Pre-LN LayerNorm trains up "
        f"to learning rate {label(pre_ln['largest_stable'])}, no norm up to "
        f"{label(none['largest_stable'])}.",
    ]


def converges(ctx: Context, runs_frame: pd.DataFrame, conv: pd.DataFrame) -> list[str]:
    """(b): steps to 3.5 bits per byte per seed, and the same runs' final verdicts."""
    steps = steps_to(runs_frame, ctx.runs, threshold=3.5)
    ln_steps = steps.set_index("norm")["median_steps"]
    ln, none_ = ln_steps.get("layernorm", math.nan), ln_steps.get("none", math.nan)
    faster = None  # also for a tie: at the evaluation grid's resolution it decides nothing
    if not (math.isnan(ln) or math.isnan(none_)) and ln != none_:
        faster = bool(ln < none_)
    return [
        f"**(b) Speeds convergence** — measure: steps until validation bits per byte first "
        f"reach 3.5, per seed. `{command_of(CLAIMS, ctx.scale)}`",
        to_markdown(steps),
        f"{unregistered(faster)} Median steps to 3.5 bits per byte: LayerNorm "
        f"{label(ln_steps.get('layernorm'))}, no norm {label(ln_steps.get('none'))}, "
        f"RMSNorm {label(ln_steps.get('rmsnorm'))} (evaluated every 50 steps). The final "
        "verdicts of the same runs:",
        md(conv, ["norm.name", *CONVERGENCE_COLUMNS]),
    ]


def generalises(ctx: Context, runs_frame: pd.DataFrame) -> list[str]:
    """(c): test minus training loss at the end."""
    gaps = generalisation(runs_frame, ctx.runs)
    gap = gaps.set_index("norm")["gap_bits"]
    return [
        "**(c) Improves generalisation** — measure: test minus training loss in bits per byte "
        "at the end (mean over seeds; the training loss is the mean of the last logged "
        "window).",
        to_markdown(gaps),
        f"{unregistered(bool(gap['layernorm'] < gap['none']))} "
        f"LayerNorm's gap {gap['layernorm']:+.3f}, "
        f"no norm's {gap['none']:+.3f}.",
    ]


def gradients_spread(ctx: Context, result: Report) -> list[str | list[str]]:
    """(d): the gradient norm's spread over units, at initialisation and at the end."""
    spread = gradient_spread(section_of(result))
    by_norm = spread.groupby("norm")["spread_at_end"].max()
    return [
        "**(d) Keeps gradient scale similar across layers** — measure: the largest over the "
        "smallest gradient norm among units of one sublayer type, at initialisation (step 0) and "
        "at the end.",
        to_markdown(spread),
        f"{unregistered(bool(by_norm['layernorm'] < by_norm['none']))} Largest spread at the end: "
        f"LayerNorm {by_norm['layernorm']:.1f}, no norm {by_norm['none']:.1f}, RMSNorm "
        f"{by_norm['rmsnorm']:.1f}.",
        figures(ctx, result, "claims", ("gradient_depth_init", "gradient_depth")),
    ]


def residual(ctx: Context) -> list[str]:
    """(e): the deepest model that trains, per placement (the depth preset)."""
    depth = report(load(ctx.runs, "depth"), by=["placement.name", "model.depth"])
    depth_table = section_of(depth).tables["depth_stability"]
    pre = row_of(depth_table, **{"placement.name": "pre"})
    post = row_of(depth_table, **{"placement.name": "post"})
    return [
        "**(e) Works with residual connections** — measure: the deepest model that trains, per "
        f"placement of LayerNorm in the residual unit, at learning rate 0.01 without warm-up. "
        f"`{command_of(DEPTH, ctx.scale)}`",
        stability_md(depth_table, ["placement.name"]),
        f"{unregistered((pre['largest_stable'] or 0) > (post['largest_stable'] or 0) or None)} "
        f"Pre-LN trains to depth {label(pre['largest_stable'])}, Post-LN to "
        f"{label(post['largest_stable'])}: the claim holds for the placement that keeps "
        "an identity path (Pre, sandwich), not for Post-LN, whose norm sits on the residual "
        "stream itself.",
    ]


def features(section: Section) -> list[str]:
    """(f): the residual stream's std, last unit over first, at the end."""
    scales = feature_scale(section)
    growth = scales.set_index("norm")["growth"]
    return [
        "**(f) Keeps feature scale consistent across depth** — measure: the standard deviation "
        "of the residual stream entering each unit (the input of its norm), last unit over "
        "first, at the end of training.",
        to_markdown(scales),
        f"{unregistered(bool(growth['layernorm'] < growth['none']))} "
        "The residual stream's std grows "
        f"by {growth['layernorm']:.1f}x over depth with LayerNorm, {growth['none']:.1f}x without a "
        "norm. (Pre-LN normalises each sublayer's input, not the stream: the norm's output std "
        "is 1 by construction, see the diagnostics.)",
    ]


def steps_to(runs_frame: pd.DataFrame, runs: Path, threshold: float) -> pd.DataFrame:
    """Per norm: each seed's first evaluated step with val_bpb <= threshold, and the median."""
    rows = []
    for norm, part in runs_frame.groupby("norm.name"):
        reached = []
        for rid in part["run_id"]:
            metrics = RunDir(runs, rid).read_metrics()
            hit = metrics[metrics["val_bpb"] <= threshold]
            reached.append(int(hit["step"].iloc[0]) if len(hit) else math.nan)
        rows.append(
            {
                "norm": norm,
                "steps_per_seed": reached,
                "median_steps": float(pd.Series(reached).median()),
            }
        )
    return pd.DataFrame(rows)


def generalisation(runs_frame: pd.DataFrame, runs: Path) -> pd.DataFrame:
    rows = []
    for norm, part in runs_frame.groupby("norm.name"):
        gaps = []
        for rid, test_bpb in zip(part["run_id"], part["test_bpb"], strict=True):
            metrics = RunDir(runs, rid).read_metrics()
            gaps.append(float(test_bpb) - float(metrics["train_loss"].iloc[-1]) / math.log(2))
        rows.append({"norm": norm, "gap_bits": float(pd.Series(gaps).mean()), "per_seed": gaps})
    return pd.DataFrame(rows)


def gradient_spread(section: Section) -> pd.DataFrame:
    rows = []
    for name, column in (("diagnostics_init", "spread_at_init"), ("diagnostics", "spread_at_end")):
        table = section.tables[name]
        for (norm, sublayer), part in table.groupby(["norm.name", "sublayer"]):
            rows.append(
                {
                    "norm": norm,
                    "sublayer": sublayer,
                    column: float(part["grad_norm"].max() / part["grad_norm"].min()),
                }
            )
    frame = pd.DataFrame(rows)
    return frame.groupby(["norm", "sublayer"], as_index=False).first()


def feature_scale(section: Section) -> pd.DataFrame:
    table = section.tables["diagnostics"]
    rows = []
    for norm, part in table.groupby("norm.name"):
        ordered = part.sort_values("unit")
        rows.append(
            {
                "norm": norm,
                "first_in_std": float(ordered["in_std"].iloc[0]),
                "last_in_std": float(ordered["in_std"].iloc[-1]),
                "growth": float(ordered["in_std"].iloc[-1] / ordered["in_std"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)
