"""Figures a reader understands without the command: learning curves per group (mean line,
band over the seeds present at each point), the final metric against the per-device batch
size, each group's per-seed results beside its mean and 95% CI, and gradient norm against
depth; the cost figure is normbench.report.cost_plots', what every figure shares
normbench.report.figure_style's.

Each figure is built by a function that returns a matplotlib Figure (tests inspect its axes);
``draw`` renders a report's figures to PNG once, for ``--plots`` files and the HTML report
alike. Every figure names the settings held fixed in a footer, keeps its legend outside the
data, and writes tick labels as plain numbers. Figures are made without pyplot (no global
state, no backend to select), and text from a runs directory is never read as mathtext.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from normbench.core.errors import StoreError, UsageError
from normbench.core.text import plain
from normbench.report.base import Method, Report, Section
from normbench.report.cost_plots import cost_pareto
from normbench.report.figure_style import (
    MAX_CURVES,
    SMALLEST_FONT,
    WIDEST,
    Drawing,
    finish,
    group_name,
    log_scale,
    metric_word,
    new_figure,
    seeds,
    to_png,
)
from normbench.report.grouping import groups
from normbench.report.labels import label
from normbench.report.text import batch_sizes, bounded_interval, settings_text, short
from normbench.store.rundir import atomic_write, read_metric_columns

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# --x: the metrics column each choice plots, and its axis label.
X_AXES = {
    "steps": ("step", "step"),
    "samples": ("samples", "training samples seen"),
    "epochs": ("epoch", "epochs (passes over the training set)"),
    "time": ("elapsed_s", "training time (s, mean over the seeds at each point)"),
}
VERDICT_COLOURS = {
    "reference": "#1a7f37",
    "better": "#0969da",
    "equivalent": "#4ac26b",
    "worse": "#cf222e",
    "inconclusive": "#bf8700",
}


def check_x(x: str | None) -> None:
    if x is not None and x not in X_AXES:
        raise UsageError(f"--x {x}: valid: {', '.join(X_AXES)}")


def default_x(section: Section) -> str:
    """Samples when the section's batch sizes differ (step 100 of batch 8 and of batch 32 are
    4x different amounts of data), steps otherwise."""
    return "samples" if section.runs["batch_size"].map(label).nunique() > 1 else "steps"


# ----------------------------------------------------------------------------- rendering
def draw(
    report: Report,
    runs_dir: Path,
    x: str | None = None,
    progress: Callable[[str], None] | None = None,
    only: tuple[str, ...] = (),
) -> list[list[Drawing]]:
    """Every figure that applies (or those named in ``only``), per section, as PNG;
    ``progress`` hears a line before each figure (they take a second or more each), and a
    warning for each run a figure had to leave out (also added to the report's warnings)."""
    from matplotlib import rc_context

    planned, skipped = [], []
    for section in report.sections:
        planned.append(
            ("learning_curves", section, lambda s: learning_curves(s, runs_dir, x, skipped))
        )
        planned.append(("seed_results", section, lambda s: seed_results(s, report.method)))
        if section.tables.get("batch_sensitivity") is not None:
            planned.append(("batch_sensitivity", section, batch_curve))
        if section.tables.get("diagnostics_init") is not None:
            planned.append(
                (
                    "gradient_depth_init",
                    section,
                    lambda s: gradient_depth(s, "at initialisation (step 0)", "diagnostics_init"),
                )
            )
        if section.tables.get("diagnostics") is not None:
            planned.append(("gradient_depth", section, gradient_depth))
        if section.tables.get("cost") is not None:
            planned.append(("cost_pareto", section, cost_pareto))
    planned = [plan for plan in planned if not only or plan[0] in only]
    drawings: dict[int, list[Drawing]] = {id(s): [] for s in report.sections}
    with rc_context({"text.parse_math": False}):
        for number, (name, section, build) in enumerate(planned, 1):
            where = f" ({settings_text(section.setting)})" if len(report.sections) > 1 else ""
            if progress:
                progress(f"drawing figure {number}/{len(planned)}: {name}{where}")
            fig = build(section)
            if fig is not None:
                drawings[id(section)].append(Drawing(name, fig.get_label(), to_png(fig)))
            for warning in skipped:
                if progress:
                    progress(f"warning: {warning}")
                report.warnings.append(warning)
            skipped.clear()
    return [drawings[id(s)] for s in report.sections]


def write_pngs(
    report: Report, drawings: list[list[Drawing]], out_dir: Path, across: list[Drawing] = ()
) -> list[Path]:
    """The drawings as PNG files; a section's files carry its setting in their name when the
    report has several sections; the figures across sections come last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for drawing in across:
        path = out_dir / f"{drawing.name}.png"
        atomic_write(path, drawing.png)
        written.append(path)
    for section, drawn in zip(report.sections, drawings, strict=True):
        suffix = _suffix(section) if len(report.sections) > 1 else ""
        for drawing in drawn:
            path = out_dir / f"{drawing.name}{suffix}.png"
            atomic_write(path, drawing.png)
            written.append(path)
    return written


def _suffix(section: Section) -> str:
    text = "-".join(f"{short(k)}_{label(v)}" for k, v in section.setting.items())
    return "-" + re.sub(r"[^A-Za-z0-9._-]", "_", text)


# ------------------------------------------------------------------------ learning curves
def learning_curves(
    section: Section, runs_dir: Path, x: str | None = None, skipped: list[str] | None = None
) -> Figure | None:
    """Training loss and the validation metric against steps, samples, epochs or time, one
    line per group (the best groups when there are many): the mean over the seeds present at
    each point, shaded between their min and max; a marker and a count where the number of
    seeds changes (a seed that ended early). A run whose metrics file cannot be read is left
    out, and named in ``skipped``."""
    check_x(x)
    x = x or default_x(section)
    x_column, x_label = X_AXES[x]
    order = section.tables["convergence"]
    wanted = [
        tuple(label(row[k]) for k in section.keys) for _, row in order.head(MAX_CURVES).iterrows()
    ]
    by_label = {
        tuple(label(v) for v in values.values()): (values, part)
        for values, part in groups(section.runs, section.keys)
    }
    metric = section.metric.name
    about = (
        f"Learning curves against {x}: training loss and validation {metric_word(section)}, "
        "mean over seeds, band from the lowest to the highest seed present at each point"
    )
    fig = new_figure(WIDEST, 5.2, about)
    ax_loss, ax_val = fig.subplots(1, 2)
    from matplotlib import colormaps

    tab20 = colormaps["tab20"].colors
    for ax in (ax_loss, ax_val):  # up to MAX_CURVES distinguishable colours
        ax.set_prop_cycle(color=tab20[::2] + tab20[1::2])
    drawn, losses = 0, []
    for labels in wanted:
        if labels not in by_label:
            continue
        values, part = by_label[labels]
        curves = [_metrics(runs_dir, rid, [metric, x_column], skipped) for rid in part["run_id"]]
        curves = [c for c in curves if c is not None and len(c)]
        if not curves:
            continue
        name = f"{group_name(section.keys, values)} ({seeds(len(curves))})"
        for ax, column in ((ax_loss, "train_loss"), (ax_val, metric)):
            band = seed_band(curves, column, x_column)
            if column == "train_loss":
                losses.append(band["mean"])
            (line,) = ax.plot(band["x"], band["mean"], label=name)
            # arrays, not Series: numpy 1.24's masked arrays read a Series' deprecated _data
            x, low, high = (band[name].to_numpy() for name in ("x", "low", "high"))
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
            mark_seed_changes(ax, band, line.get_color())
        drawn += 1
    if not drawn:
        return None
    measure = f"validation {metric_word(section)}"
    ax_loss.set(
        title="Training loss",
        xlabel=x_label,
        ylabel="training loss",
        yscale=log_scale(np.concatenate([np.asarray(v, dtype=float) for v in losses])),
    )
    ax_val.set(title=measure.capitalize(), xlabel=x_label, ylabel=measure)
    shown = f", best {drawn} of {len(order)} groups" if len(order) > drawn else ""
    fig.suptitle(
        f"Learning curves{shown}: mean over seeds; band: lowest to highest seed; "
        "marker: the number of seeds changes"
    )
    return finish(fig, section)


def _metrics(
    runs_dir: Path, rid: str, columns: list[str], skipped: list[str] | None
) -> pd.DataFrame | None:
    """A run's metrics, the ``columns`` of them, through the trusted reader (bounded in bytes
    and rows, numbers only); None, and the run named in ``skipped``, when they cannot be
    read."""
    wanted = list(dict.fromkeys(["step", "train_loss", *columns]))
    try:
        return read_metric_columns(runs_dir, rid, wanted)
    except (OSError, StoreError) as err:
        if skipped is not None:
            reason = str(err) if isinstance(err, StoreError) else err.strerror
            skipped.append(f"learning curves: skipped {rid}: {plain(str(reason))}")
        return None


def seed_band(curves: list[pd.DataFrame], column: str, x_column: str) -> pd.DataFrame:
    """Per step any seed logged (an outer join: a seed that ended early does not cut the
    others short): x (the mean over the seeds present, for time), the mean, min and max of
    ``column``, and how many seeds are present."""
    values, xs = [], []
    for curve in curves:
        logged = curve.dropna(subset=[column]).drop_duplicates("step", keep="last")
        logged = logged.set_index("step", drop=False)
        values.append(logged[column])
        xs.append(logged[x_column])
    table = pd.concat(values, axis=1, join="outer").sort_index()
    x = pd.concat(xs, axis=1, join="outer").sort_index()
    return pd.DataFrame(
        {
            "x": x.mean(axis=1),
            "mean": table.mean(axis=1),
            "low": table.min(axis=1),
            "high": table.max(axis=1),
            "seeds": table.notna().sum(axis=1),
        }
    )


def mark_seed_changes(ax, band: pd.DataFrame, colour) -> None:
    """A hollow marker and 'n seeds' where the number of seeds behind the mean changes."""
    counts = band["seeds"].to_numpy()
    changes = np.flatnonzero(counts[1:] != counts[:-1]) + 1
    for i in changes:
        point = (band["x"].iloc[i], band["mean"].iloc[i])
        ax.plot(*point, marker="o", markersize=6, markerfacecolor="white", color=colour)
        ax.annotate(
            seeds(counts[i]),
            point,
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=SMALLEST_FONT,
            color=colour,
        )


# -------------------------------------------------------------------------- seed results
def seed_results(section: Section, method: Method) -> Figure | None:
    """Each group's per-seed results (dots, coloured by its verdict) beside its mean and 95%
    CI (black), best group on top: what the verdicts are computed from."""
    from matplotlib.lines import Line2D

    table = section.tables["convergence"]
    if table is None or table.empty or not any(len(v) for v in table["values"]):
        return None
    split = "test" if method.test else "validation"
    measure = f"final {split} {metric_word(section)}"
    about = f"{measure.capitalize()} of each seed (dots) and the group's mean with its 95% CI"
    about += " (clipped to [0, 1])" * section.metric.higher_is_better
    fig = new_figure(WIDEST, 1.6 + 0.45 * len(table), about)
    ax = fig.subplots()
    positions = np.arange(len(table))[::-1]
    for y, (_, row) in zip(positions, table.iterrows(), strict=True):
        values = np.asarray(row["values"], dtype=float)
        if not len(values):
            ax.text(0.01, y, "no results", transform=ax.get_yaxis_transform(), va="center")
        strip = y + np.linspace(0.12, 0.32, len(values))  # above the mean's line, none hidden
        colour = VERDICT_COLOURS.get(row["verdict"], "0.4")
        ax.scatter(values, strip, s=22, color=colour, alpha=0.8, zorder=3)
        mean, ci = row[f"{section.metric.name}_mean"], row[f"{section.metric.name}_ci95"]
        if method.test:
            mean = row[f"{section.metric.test_column}_mean"]
            ci = row[f"{section.metric.test_column}_ci95"]
        if np.isfinite(mean):
            low, high = bounded_interval(mean, ci if np.isfinite(ci) else 0.0, section.metric)
            bar = [[mean - low], [high - mean]]
            ax.errorbar(mean, y, xerr=bar, fmt="D", color="black", capsize=4, zorder=4)
    names = [
        group_name(section.keys, {k: row[k] for k in section.keys}) for _, row in table.iterrows()
    ]
    ax.set_yticks(positions, names, fontsize=SMALLEST_FONT)
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.set(xlabel=measure, title=textwrap.fill(f"{about}; best group on top", 80))
    ax.grid(axis="x", alpha=0.3)
    present = [v for v in VERDICT_COLOURS if v in set(table["verdict"])]
    handles = [
        Line2D([], [], marker="o", linestyle="", color=VERDICT_COLOURS[v], label=f"seed, {v}")
        for v in present
    ] + [Line2D([], [], marker="D", color="black", label="mean, 95% CI")]
    return finish(fig, section, handles)


# ---------------------------------------------------------------------- batch sensitivity
def batch_curve(section: Section) -> Figure:
    """The mean metric (95% CI bars) against the per-device batch size, one line per row of
    the batch-size table, its verdict in the legend."""
    from matplotlib.ticker import NullLocator

    table = section.tables["batch_sensitivity"]
    sizes = batch_sizes(table)
    row_keys = [k for k in table.columns if k in section.keys]
    clipped = " (clipped to [0, 1])" * section.metric.higher_is_better
    about = (
        f"Final validation {metric_word(section)} at each per-device batch size: mean over "
        f"seeds, bars 95% CI{clipped}, one line per group (its batch-sensitivity verdict in "
        "the legend)"
    )
    fig = new_figure(WIDEST, 5.2, about)
    ax = fig.subplots()
    for number, (_, row) in enumerate(table.iterrows()):
        mean = np.array([row[f"b{s}_mean"] for s in sizes], dtype=float)
        ci = np.nan_to_num(np.array([row[f"b{s}_ci95"] for s in sizes], dtype=float))
        bounds = np.array(
            [bounded_interval(m, c, section.metric) for m, c in zip(mean, ci, strict=True)]
        ).reshape(-1, 2)
        bar = np.array([mean - bounds[:, 0], bounds[:, 1] - mean])
        name = group_name(row_keys, {k: row[k] for k in row_keys}) + f" ({row['verdict']})"
        dodge = 2 ** (0.03 * (number - (len(table) - 1) / 2))  # overlapping bars side by side
        ax.errorbar(np.array(sizes) * dodge, mean, yerr=bar, marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set(
        xlabel="per-device batch size (samples in the norm's batch statistics)",
        ylabel=f"final validation {metric_word(section)}",
        title=textwrap.fill(about, 80),
    )
    return finish(fig, section)


# --------------------------------------------------------------------------- diagnostics
def gradient_depth(
    section: Section, when: str = "at the last evaluation", table_name: str = "diagnostics"
) -> Figure:
    """Gradient norm of each unit's sublayer against its place among the units of the same
    type (attention, MLP, conv), one line per group and type: Xiong et al.'s (2020) picture,
    where Post-LN's gradients grow toward the last layers; like is compared with like."""
    table = section.tables[table_name]
    about = (
        f"Gradient norm of each residual unit's sublayer against its depth {when} "
        "(mean over seeds; one line per group and sublayer type)"
    )
    fig = new_figure(WIDEST, 5.2, about)
    ax = fig.subplots()
    styles = {"attention": "-", "mlp": "--", "convblock": ":"}
    for values, part in groups(table, [*section.keys, "sublayer"]):
        keys = {k: v for k, v in values.items() if k != "sublayer"}
        name = f"{group_name(section.keys, keys)} ({values['sublayer']})"
        style = styles.get(str(values["sublayer"]), "-")
        ax.plot(part["layer"], part["grad_norm"], style, marker="o", label=name)
    ax.set(
        xlabel="layer: the unit's place among units of its sublayer type (0 = nearest the input)",
        ylabel="gradient norm of the unit's sublayer weights",
        title=textwrap.fill(about, 80),
        yscale=log_scale(table["grad_norm"].to_numpy(dtype=float)),
    )
    return finish(fig, section)


# ----------------------------------------------------------------------------- across tasks
def performance_profile(result) -> Figure:
    """Dolan and More's performance profile across the tasks of ``report --across``: for each
    group, the fraction of tasks it reaches the target within tau times the best group's cost,
    tau from 1 to 4 (normbench.report.across); higher and further left is better."""
    cost = "steps" if result.profile_x == "steps" else "time"
    about = (
        f"Performance profile over {len(result.tasks)} tasks: fraction of tasks whose target "
        f"a group reaches within tau times the best group's {cost} to target"
    )
    fig = new_figure(8, 4.8, about)
    ax = fig.subplots()
    groups = list(dict.fromkeys(result.profile["group"]))[:MAX_CURVES]
    for group in groups:
        curve = result.profile[result.profile["group"] == group]
        ax.step(curve["tau"], curve["fraction"], where="post", label=plain(group), alpha=0.85)
    ax.set(
        xlabel=f"tau: {cost} to target over the best group's",
        ylabel="fraction of tasks",
        ylim=(-0.03, 1.03),
        xlim=(1, float(result.profile["tau"].max())),
        title=textwrap.fill(about, 80),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALLEST_FONT, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


def across_drawings(report: Report) -> list[Drawing]:
    """The figure of ``report --across`` (none without it)."""
    if report.across is None:
        return []
    from matplotlib import rc_context

    with rc_context({"text.parse_math": False}):
        fig = performance_profile(report.across)
        return [Drawing("performance_profile", fig.get_label(), to_png(fig))]
