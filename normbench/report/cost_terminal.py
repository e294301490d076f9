"""The cost table for the terminal (and, at no width limit, for html.py and markdown.py):
per group what a training step costs and the step-time verdict against the reference, laid
out by normbench.report.table_layout.fit; the numbers are normbench.report.cost's.
"""

from __future__ import annotations

import math

from normbench.report.base import Method, Section
from normbench.report.cost_target import NOT_REACHED
from normbench.report.table_layout import VERDICT_STYLE, Column, fit, key_cells
from normbench.report.text import cost_caption


def cost_rich(section: Section, method: Method, width: int | None = None):
    """The cost table: per group FLOPs and bytes saved per step (peak memory where measured),
    the step time [95% CI], examples per second, the step-time ratio to the reference
    [(1 - 2 alpha) CI] with its verdict and reason, then the time and FLOPs to target and their
    ratios to the reference (to_target_columns); at a narrow width the reason, the hosts, peak
    memory, throughput, the FLOPs to target, its ratio, the time to target, its ratio, bytes
    saved and FLOPs per step give way, in that order, then the intervals wrap."""
    from rich.text import Text

    data = section.tables["cost"]
    rows = [row for _, row in data.iterrows()]
    steps = [
        f"{1e3 * r['step_s']:.3g} ms"
        + (
            ""
            if math.isnan(r["step_s_ci_low"])
            else f" [{1e3 * r['step_s_ci_low']:.3g}, {1e3 * r['step_s_ci_high']:.3g}]"
        )
        for r in rows
    ]
    ratios = [
        "-"
        if math.isnan(r["step_ratio"])
        else f"{r['step_ratio']:.2f}"
        + (
            ""
            if math.isnan(r["ratio_ci_low"])
            else f" [{r['ratio_ci_low']:.2f}, {r['ratio_ci_high']:.2f}]"
        )
        for r in rows
    ]
    against = "vs ref" if data.attrs.get("against") == "reference" else "vs fastest"
    columns = [
        *key_cells([k for k in section.keys if k in data], data),
        Column("seeds", [str(r["seeds"]) for r in rows]),
        Column("FLOPs/step", [magnitude(r["flops_per_step"]) for r in rows]),
        Column("saved", [magnitude(r["saved_bytes_per_step"], "B") for r in rows]),
        Column("step", steps, wraps=True),
        Column("ex/s", [magnitude(r["examples_per_s"]) for r in rows]),
        Column(against, ratios, wraps=True),
        Column(
            "verdict",
            [Text(v, style=VERDICT_STYLE.get(v, "")) for v in data["verdict"]],
            justify="left",
        ),
        Column("reason", [f"({r})" if r else "" for r in data["reason"]], justify="left"),
        Column("host", [r["hosts"] for r in rows], justify="left"),
    ]
    if data["peak_memory_bytes"].notna().any():
        columns.insert(-5, Column("peak", [magnitude(r["peak_memory_bytes"], "B") for r in rows]))
    if "target" in data:  # normbench.report.cost_target: after the step verdict
        columns[-2:-2] = to_target_columns(rows, against)
    return fit(
        columns,
        [
            "reason",
            "host",
            "peak",
            "ex/s",
            "FLOPs to target",
            "FLOPs " + against,
            "to target",
            "time " + against,
            "saved",
            "FLOPs/step",
        ],
        width,
        lambda left_out: cost_caption(data, method, left_out),
    )


def to_target_columns(rows: list, against: str) -> list[Column]:
    """The time to target [95% CI] ("not reached k/n" where a seed did not reach it), its
    ratio and the FLOPs ratio to the reference [(1 - 2 alpha) CI], and the FLOPs to target."""

    def to_target(r) -> str:
        if r["reached"] < r["seeds"]:
            return f"{NOT_REACHED} {r['seeds'] - r['reached']}/{r['seeds']}"
        return with_interval(r, "time_to_target", lambda v: f"{v:.3g}", "_s") + " s"

    return [
        Column("to target", [to_target(r) for r in rows], wraps=True),
        Column("time " + against, [with_interval(r, "time_ratio") for r in rows], wraps=True),
        Column("FLOPs " + against, [with_interval(r, "flops_ratio") for r in rows], wraps=True),
        Column("FLOPs to target", [magnitude(r["flops_to_target"]) for r in rows]),
    ]


def with_interval(row, name: str, show=lambda v: f"{v:.2f}", unit: str = "") -> str:
    """``row[name + unit]`` and its interval (``name_ci_low``, ``name_ci_high``): 0.82 [0.75,
    0.90]; the value alone without one, "-" without a value."""
    value = row[name + unit]
    if value is None or math.isnan(value):
        return "-"
    low, high = row[f"{name}_ci_low"], row[f"{name}_ci_high"]
    return show(value) + ("" if math.isnan(low) else f" [{show(low)}, {show(high)}]")


def magnitude(value: float, unit: str = "") -> str:
    """A count with a metric prefix, three significant digits: 1.23 G, 45.6 MB."""
    if value is None or math.isnan(value):
        return "-"
    for power, prefix in ((12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(value) >= 10**power:
            return f"{value / 10**power:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()
