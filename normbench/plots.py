"""Figures a reader understands without the command: learning curves per group (mean line,
band over seeds), accuracy against the per-device batch size, gradient norm against depth.

One set of figures per report section; a section's files carry its setting in their name
when the report has several sections.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.render import batch_sizes, settings_text, short
from normbench.tables import Report, Section, groups, label

MAX_CURVES = 12  # more lines than this on one axis is noise, not a figure


def write_plots(report: Report, runs_dir: Path, out_dir: Path) -> list[Path]:
    """Write the figures that apply to each section; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for section in report.sections:
        suffix = _suffix(section) if len(report.sections) > 1 else ""
        written.append(learning_curves(section, runs_dir, out_dir / f"learning_curves{suffix}.png"))
        if section.tables.get("batch_sensitivity") is not None:
            written.append(batch_curve(section, out_dir / f"batch_sensitivity{suffix}.png"))
        if section.tables.get("diagnostics") is not None:
            written.append(gradient_depth(section, out_dir / f"gradient_depth{suffix}.png"))
    return [path for path in written if path is not None]


def _suffix(section: Section) -> str:
    text = "-".join(f"{short(k)}_{label(v)}" for k, v in section.setting.items())
    return "-" + re.sub(r"[^A-Za-z0-9._-]", "_", text)


def save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def group_name(keys: list[str], values: dict) -> str:
    return ", ".join(f"{short(k)}={label(values[k])}" for k in keys) or "all runs"


def footer(fig, section: Section) -> None:
    """The settings held fixed, under the figure."""
    text = settings_text({**section.setting, **section.fixed})
    if text:
        fig.text(0.01, 0.005, f"fixed: {text}", fontsize=7, color="0.35")


def learning_curves(section: Section, runs_dir: Path, path: Path) -> Path | None:
    """Training loss and the validation metric against steps, one line per group (the best
    groups when there are many), shaded between the seeds' min and max."""
    import matplotlib.pyplot as plt

    order = section.tables["convergence"]
    wanted = [
        tuple(label(row[k]) for k in section.keys) for _, row in order.head(MAX_CURVES).iterrows()
    ]
    by_label = {
        tuple(label(v) for v in values.values()): (values, part)
        for values, part in groups(section.runs, section.keys)
    }
    metric = section.metric.name
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(13, 5))
    for ax in (ax_loss, ax_val):  # up to MAX_CURVES distinguishable colours
        ax.set_prop_cycle(color=plt.cm.tab20.colors[::2] + plt.cm.tab20.colors[1::2])
    drawn = 0
    for labels in wanted:
        if labels not in by_label:
            continue
        values, part = by_label[labels]
        curves = [_metrics(runs_dir, rid, metric) for rid in part["run_id"]]
        curves = [c for c in curves if c is not None and len(c)]
        if not curves:
            continue
        name = group_name(section.keys, values)
        for ax, column in ((ax_loss, "train_loss"), (ax_val, metric)):
            steps, mean, low, high = _band(curves, column)
            (line,) = ax.plot(steps, mean, label=name)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax_loss.set(
        title="Training loss (mean over seeds; band: min to max)",
        xlabel="step",
        ylabel="training loss",
        yscale="log",
    )
    ax_val.set(
        title=f"Validation {section.metric.label} (mean over seeds; band: min to max)",
        xlabel="step",
        ylabel=section.metric.label,
    )
    ax_val.legend(fontsize=8, loc="best")
    shown = f" (best {drawn} of {len(order)} groups)" if len(order) > drawn else ""
    fig.suptitle(f"Learning curves{shown}")
    footer(fig, section)
    return save(fig, path)


def _metrics(runs_dir: Path, rid: str, metric: str) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(
            runs_dir / rid / "metrics.parquet", columns=["step", "train_loss", metric]
        )
    except (OSError, ValueError, KeyError):
        return None


def _band(curves: list[pd.DataFrame], column: str):
    """Mean, min and max over seeds at the steps every seed logged."""
    frames = [c.dropna(subset=[column]).set_index("step")[column] for c in curves]
    table = pd.concat(frames, axis=1, join="inner")
    values = table.to_numpy()
    return table.index.to_numpy(), values.mean(1), values.min(1), values.max(1)


def batch_curve(section: Section, path: Path) -> Path:
    """The mean metric (95% CI bars) against the per-device batch size, one line per row of
    the batch-size table (per norm)."""
    import matplotlib.pyplot as plt

    table = section.tables["batch_sensitivity"]
    sizes = batch_sizes(table)
    row_keys = [k for k in table.columns if k in section.keys]
    fig, ax = plt.subplots(figsize=(7, 5))
    for _, row in table.iterrows():
        mean = np.array([row[f"b{s}_mean"] for s in sizes], dtype=float)
        ci = np.nan_to_num(np.array([row[f"b{s}_ci95"] for s in sizes], dtype=float))
        name = group_name(row_keys, {k: row[k] for k in row_keys}) + f" ({row['verdict']})"
        ax.errorbar(sizes, mean, yerr=ci, marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set(
        xlabel="per-device batch size (samples in the norm's batch statistics)",
        ylabel=f"final {section.metric.label} (mean, 95% CI)",
        title="Final validation metric against the per-device batch size",
    )
    ax.legend(fontsize=8)
    footer(fig, section)
    return save(fig, path)


def gradient_depth(section: Section, path: Path, when: str = "at the last evaluation") -> Path:
    """Gradient norm of each unit's sublayer against its depth, one line per group: the
    picture of Xiong et al. (2020), where Post-LN's gradients grow toward the last layers."""
    import matplotlib.pyplot as plt

    table = section.tables["diagnostics"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for values, part in groups(table, section.keys):
        ax.plot(part["unit"], part["grad_norm"], marker="o", label=group_name(section.keys, values))
    ax.set(
        xlabel="residual unit (0 = nearest the input)",
        ylabel="gradient norm of the unit's sublayer weights",
        title=f"Gradient norm against depth {when} (mean over seeds)",
        yscale="log",
    )
    ax.legend(fontsize=8)
    footer(fig, section)
    return save(fig, path)
