"""The cost section's figure (``report --plots`` and ``--html`` where a section has a cost
table): each group's quality against what its training steps cost, with the Pareto frontier.
Built as normbench.report.plots builds its figures (normbench.report.figure_style).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from normbench.report.base import Section
from normbench.report.figure_style import (
    SMALLEST_FONT,
    WIDEST,
    finish,
    group_name,
    log_scale,
    metric_word,
    new_figure,
)
from normbench.report.labels import label

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def cost_pareto(section: Section) -> Figure | None:
    """Each group's mean metric (95% CI) against its step time (95% CI) and against its FLOPs
    per step, both on log axes, the groups no other beats on both (cheaper and better) joined
    as the Pareto frontier. A section's steps are one setting, so step time orders the groups
    as their training time does. None without a group in both the cost and convergence
    tables. A tuned comparison's cost table has its tuning cost (normbench.report.cost_tuning):
    each group then has a second, hollow marker at its cost per confirmation step with its
    tuning runs included, joined to its own point, and the frontier joins those (the cost a
    reader of the choice paid)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter, NullFormatter

    cost, quality = section.tables["cost"], section.tables["convergence"]
    if cost is None or quality is None or cost.empty:
        return None
    mean, ci = f"{section.metric.name}_mean", f"{section.metric.name}_ci95"

    def named(table: pd.DataFrame) -> list[tuple]:
        return [tuple(label(v) for v in row) for row in table[section.keys].itertuples(False)]

    at = dict(zip(named(quality), range(len(quality)), strict=True))
    joined = [(i, at[name]) for i, name in enumerate(named(cost)) if name in at]
    joined = [(c, q) for c, q in joined if np.isfinite(quality[mean].iloc[q])]
    if not joined:
        return None
    about = (
        f"Final validation {metric_word(section)} (mean, 95% CI) against the cost of a training "
        "step: its time and its FLOPs (matrix products only), each group a point; the line "
        "joins the groups no other is both cheaper and better than"
    )
    tuned = "step_s_with_tuning" in cost
    if tuned:
        about += " (hollow: the cost with the group's tuning runs, per confirmation step)"
    fig = new_figure(WIDEST, 4.6, about)
    axes = fig.subplots(1, 2, sharey=True)
    sign = 1 if section.metric.higher_is_better else -1
    y = np.array([quality[mean].iloc[q] for _, q in joined])
    y_err = np.nan_to_num(np.array([quality[ci].iloc[q] for _, q in joined]))
    rows = [cost.iloc[c] for c, _ in joined]
    names = [group_name(section.keys, {k: row[k] for k in section.keys}) for row in rows]
    step_ms = 1e3 * np.array([row["step_s"] for row in rows])
    step_err = 1e3 * np.nan_to_num(
        np.array(
            [[r["step_s"] - r["step_s_ci_low"], r["step_s_ci_high"] - r["step_s"]] for r in rows]
        ).T
    )
    flops = np.array([row["flops_per_step"] for row in rows])
    with_tuning = {  # per axis: the x with the tuning runs' cost included, where tuned
        0: 1e3 * np.array([row["step_s_with_tuning"] for row in rows]) if tuned else None,
        1: np.array([row["flops_per_step_with_tuning"] for row in rows]) if tuned else None,
    }
    for axis, (ax, x, x_err, xlabel) in enumerate(
        (
            (axes[0], step_ms, step_err, "step time (ms, geometric mean)"),
            (axes[1], flops, None, "FLOPs per step (matrix products)"),
        )
    ):
        for number, name in enumerate(names):
            err = None if x_err is None else x_err[:, [number]]
            ax.errorbar(
                x[number],
                y[number],
                xerr=err,
                yerr=y_err[number],
                fmt="o",
                capsize=3,
                label=name,
                color=f"C{number % 10}",
            )
        paid = x if with_tuning[axis] is None else with_tuning[axis]
        if with_tuning[axis] is not None:
            for number in range(len(names)):
                colour = f"C{number % 10}"
                ax.plot([x[number], paid[number]], [y[number]] * 2, ":", color=colour, label="_")
                ax.plot(paid[number], y[number], "o", mfc="white", color=colour, label="_")
        front = pareto_front(paid, sign * y)
        ax.plot(paid[front], y[front], color="0.3", linestyle="--", linewidth=1, label="_front")
        ax.set_xscale(log_scale(np.concatenate([x, paid])))
        ax.set(xlabel=xlabel)
        # engineering ticks (6M, 10M), few of them: plain digits of close FLOPs overlap
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"final validation {metric_word(section)}")
    fig.suptitle(textwrap.fill(about, 100), fontsize=SMALLEST_FONT + 1)
    handles = axes[0].get_legend_handles_labels()[0]
    if tuned:
        hollow = "with its tuning runs (per confirmation step)"
        handles.append(Line2D([], [], marker="o", mfc="white", color="0.3", ls="", label=hollow))
    return finish(fig, section, handles)


def pareto_front(cost: np.ndarray, score: np.ndarray) -> np.ndarray:
    """The indices, cheapest first, of the points no other is at least as cheap and strictly
    better than, nor strictly cheaper and as good (higher ``score`` is better); NaN costs are
    never on it."""
    order = [i for i in np.argsort(cost, kind="stable") if np.isfinite(cost[i])]
    front, best = [], -np.inf
    for i in order:
        if score[i] > best:
            front.append(i)
            best = score[i]
    return np.array(front, dtype=int)
