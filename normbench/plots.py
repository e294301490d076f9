"""Figures a reader understands without the command: learning curves per group (mean line,
band over seeds) and accuracy against the per-device batch size on a log2 axis per norm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report import Report, group_frame, short

MAX_CURVES = 12  # more lines than this on one axis is noise, not a figure


def write_plots(runs: pd.DataFrame, report: Report, runs_dir: Path, out_dir: Path) -> list[Path]:
    """Write the figures that apply to this selection; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [learning_curves(runs, report, runs_dir, out_dir)]
    if report.tables["batch_sensitivity"] is not None:
        written.append(batch_curve(report, out_dir))
    if report.tables.get("diagnostics") is not None:
        written.append(gradient_depth(report, out_dir))
    return [path for path in written if path is not None]


def save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def group_name(keys: list[str], labels: tuple) -> str:
    return ", ".join(f"{short(k)}={v}" for k, v in zip(keys, labels, strict=True)) or "all runs"


def learning_curves(
    runs: pd.DataFrame, report: Report, runs_dir: Path, out_dir: Path
) -> Path | None:
    """Training loss and validation accuracy against steps, one line per group (the best
    groups by accuracy when there are many), shaded between the seeds' min and max."""
    import matplotlib.pyplot as plt

    order = report.tables["convergence"]
    keys = report.keys
    wanted = [tuple(str(row[k]) for k in keys) for _, row in order.head(MAX_CURVES).iterrows()]
    groups = {
        tuple(str(x) for x in (labels if isinstance(labels, tuple) else (labels,))): g
        for labels, g in group_frame(runs, keys)
    }
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(13, 5))
    for ax in (ax_loss, ax_acc):  # up to MAX_CURVES distinguishable colours
        ax.set_prop_cycle(color=plt.cm.tab20.colors[::2] + plt.cm.tab20.colors[1::2])
    drawn = 0
    for labels in wanted:
        group = groups.get(labels) if keys else runs
        if group is None:
            continue
        curves = [_metrics(runs_dir, rid) for rid in group["run_id"]]
        curves = [c for c in curves if c is not None and len(c)]
        if not curves:
            continue
        name = group_name(keys, labels)
        for ax, column in ((ax_loss, "train_loss"), (ax_acc, "val_acc")):
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
    ax_acc.set(
        title="Validation accuracy (mean over seeds; band: min to max)",
        xlabel="step",
        ylabel="validation accuracy",
    )
    ax_acc.legend(fontsize=8, loc="lower right")
    shown = f" (best {drawn} of {len(order)} groups)" if len(order) > drawn else ""
    fig.suptitle(f"Learning curves{shown}")
    return save(fig, out_dir / "learning_curves.png")


def _metrics(runs_dir: Path, rid: str) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(
            runs_dir / rid / "metrics.parquet", columns=["step", "train_loss", "val_acc"]
        )
    except (OSError, ValueError):
        return None


def _band(curves: list[pd.DataFrame], column: str):
    """Mean, min and max over seeds at the steps every seed logged."""
    frames = [c.dropna(subset=[column]).set_index("step")[column] for c in curves]
    table = pd.concat(frames, axis=1, join="inner")
    values = table.to_numpy()
    return table.index.to_numpy(), values.mean(1), values.min(1), values.max(1)


def batch_curve(report: Report, out_dir: Path) -> Path:
    """Mean accuracy (± sd over seeds) against the per-device batch size, one line per row of
    the batch-size table (per norm)."""
    import matplotlib.pyplot as plt

    table = report.tables["batch_sensitivity"]
    sizes = sorted(int(c[1:-5]) for c in table.columns if c.endswith("_mean"))
    row_keys = [k for k in report.keys if k not in ("batch_size", "norm.ghost_batch")]
    fig, ax = plt.subplots(figsize=(7, 5))
    for _, row in table.iterrows():
        mean = np.array([row[f"b{s}_mean"] for s in sizes], dtype=float)
        sd = np.nan_to_num(np.array([row[f"b{s}_sd"] for s in sizes], dtype=float))
        name = group_name(row_keys, tuple(row[k] for k in row_keys))
        style = "--" if row["batch_independent"] else "-"
        (line,) = ax.plot(sizes, mean, style, marker="o", label=name)
        ax.fill_between(sizes, mean - sd, mean + sd, color=line.get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set(
        xlabel="per-device batch size (samples in the norm's batch statistics)",
        ylabel="final validation accuracy (mean ± sd over seeds)",
        title="Accuracy against batch size (dashed: the norm does not depend on it)",
    )
    ax.legend(fontsize=8)
    return save(fig, out_dir / "batch_sensitivity.png")


def gradient_depth(report: Report, out_dir: Path, when: str = "at the last evaluation") -> Path:
    """Gradient norm of each unit's sublayer against its depth, one line per group: the
    picture of Xiong et al. (2020), where Post-LN's gradients grow toward the last layers."""
    import matplotlib.pyplot as plt

    table = report.tables["diagnostics"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for labels, group in group_frame(table, report.keys):
        labels = labels if isinstance(labels, tuple) else (labels,)
        ax.plot(
            group["unit"], group["grad_norm"], marker="o", label=group_name(report.keys, labels)
        )
    ax.set(
        xlabel="residual unit (0 = nearest the input)",
        ylabel="gradient norm of the unit's sublayer weights",
        title=f"Gradient norm against depth {when} (mean over seeds)",
        yscale="log",
    )
    ax.legend(fontsize=8)
    return save(fig, out_dir / "gradient_depth.png")
