"""What LayerNorm does, measured: its claimed benefits (stability, speed, generalisation,
gradient spread, residual connections, feature scale) on the causal language model, each a
registered claim (normbench/studies/registered/notes-layernorm-*.yaml) on a measure of its
own, computed per seed here and paired by seed, so that the claims are tested as the
literature's are (normbench.studies.family)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report import stability
from normbench.report.base import Report, Section
from normbench.report.diagnostics import diagnostics_table
from normbench.report.labels import label
from normbench.report.markdown import to_markdown
from normbench.store.rundir import RunDir
from normbench.studies import family, registry
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
    seed_pairs,
    sensitivity_pairs,
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
    by_seed = diagnostics_table(section.runs, ["norm.name", "seed"], ctx.runs, "last")
    return paragraphs(
        "## What LayerNorm does, measured (against no norm, and RMSNorm)",
        "The notes this project started from say LayerNorm (a) stabilises training, (b) speeds "
        "convergence, (c) improves generalisation, (d) keeps gradient scale similar across "
        "layers, (e) works with residual connections, (f) keeps feature scale consistent across "
        "depth. Each is registered as a claim against no norm (RMSNorm shown beside it) on "
        "a measure of its own, per seed, paired by seed; all on the causal language model "
        "(data=pysource, bits per byte, lower is better).",
        *stabilises(ctx),
        *converges(ctx, section, section.tables["convergence"]),
        *generalises(ctx, section),
        *gradients_spread(ctx, result, by_seed),
        *residual(ctx),
        *features(section, by_seed),
        family.RULE,
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
    lr = section_of(report(load(ctx.runs, "lr"), by=["norm.name", "placement.name", "train.lr"]))
    table = lr.tables["lr_stability"]
    pre_ln = row_of(table, **{"norm.name": "layernorm", "placement.name": "pre"})
    none = row_of(table, **{"norm.name": "none"})
    claim = registry.claim("notes-layernorm-stabilises")
    tested = family.decide_claim(claim, sensitivity_pairs(claim, lr))
    return [
        f"**(a) Stabilises training** — measure: {claim.measure}; the table gives the largest "
        f"learning rate at which every seed trains. `{command_of(LR, ctx.scale)}`",
        stability_md(table, ["norm.name", "placement.name"]),
        f"(a) {family.claim_lines(claim, lr.runs, tested)} Pre-LN LayerNorm trains up to "
        f"learning rate {label(pre_ln['largest_stable'])}, no norm up to "
        f"{label(none['largest_stable'])}.",
    ]


def converges(ctx: Context, section: Section, conv: pd.DataFrame) -> list[str]:
    """(b): the area under each seed's learning curve (the registered measure), steps to 3.5
    bits per byte per seed, and the same runs' final verdicts."""
    steps = steps_to(section.runs, ctx.runs, threshold=3.5)
    ln_steps = steps.set_index("norm")["median_steps"]
    areas = curve_areas(section.runs, ctx.runs)
    claim = registry.claim("notes-layernorm-converges")
    tested = family.decide_claim(claim, seed_pairs(claim, areas))
    mean_area = areas.groupby("norm.name")["value"].mean()
    return [
        f"**(b) Speeds convergence** — measure: {claim.measure}; the table gives the steps "
        f"until validation bits per byte first reach 3.5, per seed. "
        f"`{command_of(CLAIMS, ctx.scale)}`",
        to_markdown(steps),
        f"(b) {family.claim_lines(claim, section.runs, tested)} Mean area: "
        + ", ".join(f"{norm} {value:.3f}" for norm, value in mean_area.items())
        + f". Median steps to 3.5 bits per byte: LayerNorm {label(ln_steps.get('layernorm'))}, "
        f"no norm {label(ln_steps.get('none'))}, RMSNorm {label(ln_steps.get('rmsnorm'))} "
        "(at the evaluations' resolution). The final verdicts of the same runs:",
        md(conv, ["norm.name", *CONVERGENCE_COLUMNS]),
    ]


def generalises(ctx: Context, section: Section) -> list[str]:
    """(c): test minus training loss at the end, per seed."""
    per_run = generalisation_gaps(section.runs, ctx.runs)
    gaps = generalisation(per_run)
    gap = gaps.set_index("norm")["gap_bits"]
    claim = registry.claim("notes-layernorm-generalises")
    tested = family.decide_claim(claim, seed_pairs(claim, per_run))
    return [
        "**(c) Improves generalisation** — measure: test minus training loss in bits per byte "
        "at the end, per seed (the training loss is the mean of the last logged window; the "
        "table's gap is the mean over seeds).",
        to_markdown(gaps),
        f"(c) {family.claim_lines(claim, section.runs, tested)} LayerNorm's gap "
        f"{gap['layernorm']:+.3f}, no norm's {gap['none']:+.3f}.",
    ]


def gradients_spread(
    ctx: Context, result: Report, by_seed: pd.DataFrame | None
) -> list[str | list[str]]:
    """(d): the gradient norm's spread over units, at initialisation and at the end; the
    registered claim reads it per seed at the end (``by_seed``: the per-seed diagnostics)."""
    section = section_of(result)
    spread = gradient_spread(section)
    by_norm = spread.groupby("norm")["spread_at_end"].max()
    claim = registry.claim("notes-layernorm-gradient-spread")
    tested = family.decide_claim(claim, seed_pairs(claim, spread_by_seed(by_seed)))
    return [
        "**(d) Keeps gradient scale similar across layers** — measure: the largest over the "
        "smallest gradient norm among units of one sublayer type, at initialisation (step 0) and "
        f"at the end (mean over seeds); the claim's: {claim.measure}.",
        to_markdown(spread),
        f"(d) {family.claim_lines(claim, section.runs, tested)} Largest spread at the end: "
        f"LayerNorm {by_norm['layernorm']:.1f}, no norm {by_norm['none']:.1f}, RMSNorm "
        f"{by_norm['rmsnorm']:.1f}.",
        figures(ctx, result, "claims", ("gradient_depth_init", "gradient_depth")),
    ]


def residual(ctx: Context) -> list[str]:
    """(e): the deepest model that trains, per placement (the depth preset)."""
    depth = section_of(report(load(ctx.runs, "depth"), by=["placement.name", "model.depth"]))
    depth_table = depth.tables["depth_stability"]
    pre = row_of(depth_table, **{"placement.name": "pre"})
    post = row_of(depth_table, **{"placement.name": "post"})
    deepest = deepest_by_seed(depth.runs, depth.metric)
    claim = registry.claim("notes-layernorm-residual")
    step = depth_resolution(depth.runs)
    pairs = seed_pairs(claim, deepest, lower_is_better=False)
    top = f"depth {label(depth.runs['model.depth'].astype(float).max())}"
    tested = [
        family.censor(
            t, censored_seeds(deepest, c.group), censored_seeds(deepest, c.reference), top
        )
        for t, c in zip(
            family.decide_claim(claim, pairs, [step] * len(pairs)), claim.comparisons, strict=True
        )
    ]
    capped = {
        name: censored_seeds(deepest, (f"placement.name={name}",))
        for name in sorted(set(deepest["placement.name"]))
    }
    seeds = deepest.groupby("placement.name")["seed"].nunique()
    censoring = (
        f"Censored at {top}, the grid's top (a seed that trains there has a lower bound, not a "
        "value: how much deeper it would train is not measured): "
        + ", ".join(f"{name} {capped[name]} of {seeds[name]} seeds" for name in capped)
        + ". So this grid can decide the claim for, or leave it undecided, but cannot refute it "
        "where the predicted arms reach the top; a grid that goes past where they stop "
        "training (`normbench sweep depth model.depth=4,8,16,32,64`) can."
        if any(capped.values())
        else f"No seed trains at {top}, the grid's top: no value is censored."
    )
    return [
        "**(e) Works with residual connections** — measure: the deepest model that trains, per "
        f"placement of LayerNorm in the residual unit, at learning rate 0.01 without warm-up; "
        f"the claim's: {claim.measure}. `{command_of(DEPTH, ctx.scale)}`",
        stability_md(depth_table, ["placement.name"]),
        f"(e) {family.claim_lines(claim, depth.runs, tested)} Pre-LN trains to depth "
        f"{label(pre['largest_stable'])} in every seed, Post-LN to "
        f"{label(post['largest_stable'])}. {censoring}",
    ]


def features(section: Section, by_seed: pd.DataFrame | None) -> list[str]:
    """(f): the residual stream's std, last unit over first, at the end; the registered claim
    reads it per seed (``by_seed``: the per-seed diagnostics)."""
    scales = feature_scale(section)
    growth = scales.set_index("norm")["growth"]
    claim = registry.claim("notes-layernorm-feature-scale")
    tested = family.decide_claim(claim, seed_pairs(claim, drift_by_seed(by_seed)))
    return [
        "**(f) Keeps feature scale consistent across depth** — measure: the standard deviation "
        "of the residual stream entering each unit (the input of its norm), last unit over "
        f"first, at the end of training (mean over seeds); the claim's: {claim.measure}.",
        to_markdown(scales),
        f"(f) {family.claim_lines(claim, section.runs, tested)} "
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


def generalisation_gaps(runs_frame: pd.DataFrame, runs: Path) -> pd.DataFrame:
    """Per run: its norm, seed and test bits per byte minus the training loss (in bits) of
    its last logged window, as ``value``."""
    rows = []
    for _, run in runs_frame.iterrows():
        metrics = RunDir(runs, run["run_id"]).read_metrics()
        gap = float(run["test_bpb"]) - float(metrics["train_loss"].iloc[-1]) / math.log(2)
        rows.append({"norm.name": label(run["norm.name"]), "seed": int(run["seed"]), "value": gap})
    return pd.DataFrame(rows, columns=["norm.name", "seed", "value"])


def generalisation(gaps: pd.DataFrame) -> pd.DataFrame:
    """Per norm: the mean gap over seeds and each seed's (``generalisation_gaps``)."""
    return pd.DataFrame(
        [
            {"norm": norm, "gap_bits": float(part["value"].mean()), "per_seed": list(part["value"])}
            for norm, part in gaps.groupby("norm.name")
        ]
    )


def curve_areas(runs_frame: pd.DataFrame, runs: Path) -> pd.DataFrame:
    """Per run: its norm, seed and area under its learning curve (``curve_area``) as
    ``value``: the registered measure of (b)."""
    rows = []
    for _, run in runs_frame.iterrows():
        area = curve_area(
            RunDir(runs, run["run_id"]).read_metrics(),
            int(run["train.eval_every"]),
            int(run["train.max_steps"]),
            float(run["num_classes"]),
        )
        rows.append({"norm.name": label(run["norm.name"]), "seed": int(run["seed"]), "value": area})
    return pd.DataFrame(rows, columns=["norm.name", "seed", "value"])


def curve_area(metrics: pd.DataFrame, every: int, last: int, classes: float) -> float:
    """The mean validation bits per byte over a run's evaluations after step 0 (every
    ``every`` steps and at ``last``), an evaluation missing (a run that stopped) or not
    finite counted as the uniform prediction's log2(classes): the area under the learning
    curve, lower when the loss falls sooner."""
    evaluated = metrics.dropna(subset=["val_bpb"]).groupby("step")["val_bpb"].last()
    steps = sorted({*range(every, last + 1, every), last})
    uniform = math.log2(classes)
    values = [float(evaluated.get(step, math.nan)) for step in steps]
    return float(np.mean([v if math.isfinite(v) else uniform for v in values]))


def deepest_by_seed(runs: pd.DataFrame, metric) -> pd.DataFrame:
    """Per placement and seed: log2 of the deepest model of the study's depth grid that trains
    (report.stability.trained), one doubling below the shallowest where none does, as
    ``value``, and ``censored``: it trains at the grid's top, so the value is a lower bound
    (how much deeper it would train is not measured); a seed without a run at every depth is
    left out."""
    frame = runs.assign(
        trained=stability.trained(runs, metric),
        depth=runs["model.depth"].astype(float),
        placement=runs["placement.name"].map(label),
    )
    grid = set(frame["depth"])
    rows = []
    for (placement, seed), part in frame.groupby(["placement", "seed"]):
        if set(part["depth"]) != grid:
            continue
        trained = part.loc[part["trained"], "depth"]
        deepest = math.log2(trained.max()) if len(trained) else math.log2(min(grid)) - 1
        censored = bool(len(trained)) and trained.max() == max(grid)
        rows.append(
            {"placement.name": placement, "seed": int(seed), "value": deepest, "censored": censored}
        )
    return pd.DataFrame(rows, columns=["placement.name", "seed", "value", "censored"])


def censored_seeds(deepest: pd.DataFrame, filters: tuple[str, ...]) -> int:
    """How many of an arm's seeds train at the depth grid's top (``deepest_by_seed``)."""
    part = family.group_runs(deepest, filters)
    return int(part["censored"].sum()) if len(part) else 0


def depth_resolution(runs: pd.DataFrame) -> float:
    """The step of (e)'s measure: the smallest gap, in log2, between depths of the grid (a
    doubling grid's: 1); 0 with one depth (no step known)."""
    depths = np.log2(np.unique(runs["model.depth"].astype(float)))
    return float(np.diff(depths).min()) if len(depths) > 1 else 0.0


def spread_by_seed(by_seed: pd.DataFrame | None) -> pd.DataFrame:
    """Per norm and seed: log10 of the largest over the smallest gradient norm among the units
    of one sublayer type at the last diagnosed step, the larger over the sublayer types, as
    ``value`` (``by_seed``: diagnostics_table keyed by norm and seed)."""
    columns = ["norm.name", "seed", "value"]
    if by_seed is None or by_seed.empty:
        return pd.DataFrame(columns=columns)
    ratio = by_seed.groupby(["norm.name", "seed", "sublayer"])["grad_norm"].agg(
        lambda g: math.log10(g.max() / g.min()) if g.min() > 0 else math.nan
    )
    worst = ratio.groupby(["norm.name", "seed"]).max().reset_index(name="value")
    return worst.assign(seed=worst["seed"].astype(int))[columns]


def drift_by_seed(by_seed: pd.DataFrame | None) -> pd.DataFrame:
    """Per norm and seed: the absolute log10 of the residual stream's std entering the last
    unit over the same entering the first, at the last diagnosed step, as ``value``."""
    columns = ["norm.name", "seed", "value"]
    if by_seed is None or by_seed.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (norm, seed), part in by_seed.groupby(["norm.name", "seed"]):
        ordered = part.sort_values("unit", kind="stable")["in_std"]
        first, last = float(ordered.iloc[0]), float(ordered.iloc[-1])
        drift = abs(math.log10(last / first)) if first > 0 and last > 0 else math.nan
        rows.append({"norm.name": norm, "seed": int(seed), "value": drift})
    return pd.DataFrame(rows, columns=columns)


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
