"""QK-norm: Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training
instabilities"): normalizing queries and keys makes a small Transformer trainable over a wider
range of learning rates (lower LR sensitivity), and without it the largest attention logit
grows before training fails. On the qk_norm preset (the causal language model)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report import figure_style, stability, stats
from normbench.report.base import Method, Section
from normbench.report.labels import label
from normbench.report.results import seeded_results
from normbench.report.text import fmt, with_ci
from normbench.store.rundir import RunDir
from normbench.studies import family, registry
from normbench.studies.study import (
    Context,
    Study,
    command_of,
    load,
    log_growth,
    max_logits,
    md,
    paragraphs,
    report,
    section_of,
    seed_pairs,
    sensitivity_pairs,
)

QK_NORM = Study(
    "qk_norm",
    ["qk_norm"],
    ["seed=0,1,2", "train.max_steps=200"],
    data="pysource",
    smoke=("train.lr=0.01,1.0", "model.qk_norm=none,layernorm"),
)
STUDIES = (QK_NORM,)
GROWTH = 100.0  # "the logit grew": the largest attention logit 100x its step-0 value


def qk_norm(ctx: Context) -> str:
    runs, scale = ctx.runs, ctx.scale
    selection = load(runs, "qk_norm")
    by = ["model.qk_norm", "train.lr"]
    result = report(selection, by=by, reference=("model.qk_norm=none",))
    section = section_of(result)
    stability = section.tables["lr_stability"].set_index("model.qk_norm")
    rows = [name for name in stability.index if name != "none"]
    lower = {name: stability.loc[name, "lr_sensitivity_verdict"] for name in rows}
    claim = registry.claim("wortsman-qk-norm")
    sensitivity = family.claim_lines(
        claim, section.runs, family.decide_claim(claim, sensitivity_pairs(claim, section))
    )
    stable_none = stability.loc["none", "largest_stable"]
    growth = logit_growth(runs, section)
    grows = registry.claim("wortsman-logit-growth")
    before = family.claim_lines(
        grows, section.runs, family.decide_claim(grows, seed_pairs(grows, growth_by_seed(growth)))
    )
    figure_lines = figures_of(ctx, section, stable_none)
    shown = compact(stability.reset_index())
    words = ", ".join(
        f"{name}: {lower[name]} ({stability.loc[name, 'lr_sensitivity_diff']:+.3f} "
        f"[{stability.loc[name, 'lr_sensitivity_diff_ci_low']:+.3f}, "
        f"{stability.loc[name, 'lr_sensitivity_diff_ci_high']:+.3f}] bits per byte, 90% CI)"
        for name in rows
    )
    return paragraphs(
        "## QK-norm lowers learning-rate sensitivity; attention logits grow before "
        "training fails without it (Wortsman et al. 2023)",
        "**Claims.** (a) Normalizing queries and keys (QK-norm) keeps a Transformer "
        "trainable over a wider range of learning rates: its LR sensitivity (their summary "
        "of a learning-rate sweep) is lower. (b) Without it, at high learning rates the "
        "largest attention logit grows by orders of magnitude before training fails.",
        f"**Command.** `{command_of(QK_NORM, scale)}` (pysource, PaLM's z-loss 1e-4 in "
        "every group, diagnostics every 50 steps).",
        md(shown, list(shown.columns)),
        figure_lines,
        f"(a) LR sensitivity against qk_norm=none in the report, paired by seed (Holm over "
        f"the comparisons; a positive difference is more sensitive): {words}.",
        f"(a) {sensitivity}",
        f"(b) {before} (A logit that overflowed by the first diagnosed step counts as "
        "float32's largest, a lower bound on its growth.)",
        f"(b) Described, not tested: {growth_text(growth)}",
        family.RULE,
        "**What this does not show.** Wortsman et al. train models of 10M to 1.2B "
        "parameters for 10,000 or more steps; here a 4-block model of width 64 for 400 "
        "steps, so instabilities that need scale or long training (output-logit divergence "
        "is held off by the z-loss in every group) cannot appear. (b) reads the growth by "
        "the first diagnosed step (50), when the runs that fail have not yet failed: it "
        "says the logit grows early, not that its growth makes them fail; the count of runs "
        f"past {GROWTH:g}x the step-0 logit describes, it tests nothing.",
    )


def logit_growth(runs, section: Section) -> pd.DataFrame:
    """Per run of the study: its group, learning rate, seed, whether it trained, and the
    largest attention logit over units at step 0 and at the first diagnosed step after it."""
    rows = []
    trained = pd.Series(stability.trained(section.runs, section.metric), index=section.runs.index)
    for row, run, by_step in max_logits(runs, section.runs):
        first, early = by_step.index[0], by_step.index[1]
        rows.append(
            {
                "qk_norm": run["model.qk_norm"],
                "lr": float(run["train.lr"]),
                "seed": int(run["seed"]),
                "trained": bool(trained[row]),
                "logit_0": float(by_step.loc[first]),
                "logit_early": float(by_step.loc[early]),
                "early_step": int(early),
            }
        )
    return pd.DataFrame(rows)


def growth_by_seed(growth: pd.DataFrame) -> pd.DataFrame:
    """The registered claim's measure (wortsman-logit-growth): per group and seed, log10 of the
    largest attention logit at the first diagnosed step over the same at step 0, the largest
    over the learning-rate grid (the rates where runs fail are where it grows), for the seeds
    with a diagnosed run at every rate of the study whose growth is defined (``log_growth``:
    a logit that overflowed counts, as float32's largest)."""
    columns = ["qk_norm", "seed", "value"]
    if growth.empty:
        return pd.DataFrame(columns=columns)
    ratio = pd.Series(
        [log_growth(f, e) for f, e in zip(growth["logit_0"], growth["logit_early"], strict=True)],
        index=growth.index,
        dtype=float,
    )
    grid = set(growth["lr"])
    rows = [
        {"qk_norm": qk, "seed": int(seed), "value": float(ratio[part.index].max())}
        for (qk, seed), part in growth.groupby(["qk_norm", "seed"])
        if set(part["lr"]) == grid and ratio[part.index].notna().all()
    ]
    return pd.DataFrame(rows, columns=columns)


def growth_text(growth: pd.DataFrame) -> str:
    if growth.empty:
        return "No diagnostics were recorded."
    parts = []
    for (qk, trained), part in growth.groupby(["qk_norm", "trained"]):
        grew = (part["logit_early"] >= GROWTH * part["logit_0"]).sum()
        state = "trained" if trained else "failed to train"
        parts.append(
            f"qk_norm={qk}, runs that {state}: the largest logit grew {GROWTH:g}-fold by step "
            f"{part['early_step'].iloc[0]} in {grew} of {len(part)} (median step-0 "
            f"{part['logit_0'].median():.3g}, then {part['logit_early'].median():.3g})"
        )
    return "; ".join(parts) + "."


def figures_of(ctx: Context, section: Section, stable_none) -> list[str]:
    """Loss against learning rate per group, and the largest attention logit over steps at the
    highest learning rate at which every seed without QK-norm trained."""
    out = ctx.img / "qk_norm"
    out.mkdir(parents=True, exist_ok=True)
    links = []
    for name, fig in (
        ("loss_vs_lr", loss_against_lr(section)),
        ("attention_logit", logit_over_steps(ctx.runs, section, stable_none)),
    ):
        if fig is not None:
            (out / f"{name}.png").write_bytes(figure_style.to_png(fig))
            links.append(f"![{name.replace('_', ' ')}](img/qk_norm/{name}.png)")
    return links


def loss_against_lr(section: Section):
    """Final validation bits per byte against the learning rate (log scale), mean and 95%
    interval over seeds per group; a diverged run at chance, as the verdicts count it."""
    metric = section.metric
    about = "Final validation bits per byte against the learning rate, mean and 95% CI over seeds"
    fig = figure_style.new_figure(8, 4.5, about)
    ax = fig.subplots()
    runs = section.runs
    for qk, part in runs.groupby(runs["model.qk_norm"].map(label)):
        points = []
        for lr, cell in part.groupby(part["train.lr"].astype(float)):
            values = list(seeded_results(cell, metric.column, metric, Method()).values())
            mean, ci = stats.mean_ci(values)
            points.append((lr, mean, ci if math.isfinite(ci) else 0.0))
        lrs, means, cis = (np.array(v) for v in zip(*points, strict=True))
        ax.errorbar(lrs, means, yerr=cis, marker="o", capsize=3, label=f"qk_norm={qk}")
    ax.set(xscale="log", xlabel="learning rate", ylabel="final val bits per byte", title=about)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure_style.plain_ticks(ax)
    return fig


def logit_over_steps(runs, section: Section, stable_none):
    """The largest attention logit (max over units) per diagnosed step, geometric mean over
    seeds, per group, at the highest learning rate where every seed without QK-norm trained."""
    if stable_none is None:
        return None
    about = (
        f"Largest attention logit over steps at lr {label(stable_none)} (the highest at which "
        "every seed without QK-norm trained), geometric mean over seeds"
    )
    fig = figure_style.new_figure(8, 4.5, about)
    ax = fig.subplots()
    chosen = section.runs[section.runs["train.lr"].map(label) == label(stable_none)]
    for qk, part in chosen.groupby(chosen["model.qk_norm"].map(label)):
        curves = []
        for rid in part["run_id"]:
            try:
                frame = RunDir(runs, rid).read_diagnostics()
            except FileNotFoundError:
                continue
            curves.append(frame.groupby("step")["max_logit"].max())
        if curves:
            joined = pd.concat(curves, axis=1).dropna()
            ax.plot(joined.index, np.exp(np.log(joined).mean(axis=1)), label=f"qk_norm={qk}")
    ax.set(yscale="log", xlabel="step", ylabel="largest attention logit", title=about)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def compact(stability: pd.DataFrame) -> pd.DataFrame:
    """The stability table as a reader wants it in a document: per learning rate the mean
    bits per byte with the seeds that trained, the largest stable rate, the LR sensitivity
    with its 95% interval, and its paired difference to the reference with its interval."""
    rates = [c.removesuffix("_mean") for c in stability.columns if c.endswith("_mean")]
    frame = pd.DataFrame({"qk_norm": stability["model.qk_norm"]})
    for rate in rates:
        frame[f"lr={rate}"] = [
            f"{fmt(mean)} ({trained})"
            for mean, trained in zip(
                stability[f"{rate}_mean"], stability[f"{rate}_trained"], strict=True
            )
        ]
    frame["largest stable lr"] = [
        "none" if rate is None else label(rate) for rate in stability["largest_stable"]
    ]
    frame["LR sensitivity"] = [
        with_ci(value, ci)
        for value, ci in zip(
            stability["lr_sensitivity"], stability["lr_sensitivity_ci95"], strict=True
        )
    ]
    frame["verdict"] = stability["lr_sensitivity_verdict"]
    frame["difference to none [90% CI]"] = [
        "-" if low != low else f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]"
        for diff, low, high in zip(
            stability["lr_sensitivity_diff"],
            stability["lr_sensitivity_diff_ci_low"],
            stability["lr_sensitivity_diff_ci_high"],
            strict=True,
        )
    ]
    return frame
