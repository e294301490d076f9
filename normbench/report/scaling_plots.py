"""The scaling section's figures (``report --scaling KEY`` with ``--plots`` or ``--html``):
per ladder, each group's loss against compute on log axes (the rung means and each seed; the
fitted curve to 100x the top rung with its bootstrap band, dashed where extrapolated, only
where a form fits), and each group's compute multiplier against the reference: measured at
the rungs with its interval (a triangle for a bound: up for "more than", down for "less
than"), then the fitted curve's beyond the top rung, dashed, where a form fits.
Built as normbench.report.plots builds its figures (normbench.report.figure_style)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np

from normbench.core.text import plain
from normbench.report import scaling
from normbench.report.base import Report
from normbench.report.figure_style import (
    MAX_CURVES,
    SMALLEST_FONT,
    Drawing,
    new_figure,
    plain_ticks,
    to_png,
)
from normbench.report.text import settings_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def scaling_drawings(report: Report) -> list[Drawing]:
    """The figures of ``report --scaling`` (none without it), two per ladder."""
    if report.scaling is None:
        return []
    from matplotlib import rc_context

    drawn = []
    with rc_context({"text.parse_math": False}):
        for number, ladder in enumerate(report.scaling.ladders):
            suffix = f"_{number + 1}" if len(report.scaling.ladders) > 1 else ""
            for name, build in (("loss", loss_figure), ("multiplier", multiplier_figure)):
                fig = build(report.scaling, ladder, report.method.level)
                drawn.append(Drawing(f"scaling_{name}{suffix}", fig.get_label(), to_png(fig)))
    return drawn


def _grid(ladder) -> np.ndarray:
    compute = np.array([[c.compute for c in row] for row in ladder.cells])
    return np.geomspace(compute.min(), scaling.WINDOW * compute[:, -1].max(), 200)


def _title(result, ladder, what: str) -> str:
    where = f" ({settings_text(ladder.setting)})" if ladder.setting else ""
    return f"{what} along {result.key}{where}; fit: {ladder.fit.mode}"


def loss_figure(result, ladder, alpha: float) -> Figure:
    """Loss against compute per group: seeds (dots), rung means (circles), the fit and its
    1 - 2 alpha band (dashed beyond the top rung)."""
    about = _title(result, ladder, f"Final {result.loss.removeprefix('final_')} against compute")
    fig = new_figure(8, 4.8, about)
    ax = fig.subplots()
    grid = _grid(ladder)
    fitted = ladder.fit.point is not None
    if fitted:
        curve = ladder.fit.point.loss(grid)
        low, high = scaling.interval(ladder.fit.refits.loss(grid), 1 - 2 * alpha)
    for g, name in enumerate(ladder.names[:MAX_CURVES]):
        cells = ladder.cells[g]
        compute = np.array([c.compute for c in cells])
        (line,) = ax.plot(
            compute, [c.values.mean() for c in cells], "o", color=f"C{g}", label=plain(name)
        )
        for cell in cells:
            ax.plot(
                [cell.compute] * len(cell.values),
                cell.values,
                ".",
                color=line.get_color(),
                alpha=0.4,
            )
        if not fitted:  # the rung means joined: no curve to draw
            ax.plot(compute, [c.values.mean() for c in cells], ":", color=line.get_color())
            continue
        inside = grid <= compute[-1]
        ax.plot(grid[inside], curve[g][inside], "-", color=line.get_color())
        ax.plot(grid[~inside], curve[g][~inside], "--", color=line.get_color())
        ax.fill_between(grid, low[g], high[g], color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="compute C = 6 N D (FLOPs)",
        ylabel=result.loss.removeprefix("final_").replace("_", " "),
        title=textwrap.fill(about, 80),
    )
    return _finish(fig, ax)


def multiplier_figure(result, ladder, alpha: float) -> Figure:
    """Each group's compute multiplier against the reference: measured at the rungs with its
    interval, bounds as open triangles, the fitted form's beyond the top rung (dashed, with
    its band) where one fits; 1 is parity, above 1 the group needs less compute."""
    reference = ladder.names[ladder.reference]
    about = _title(result, ladder, f"Compute multiplier against {reference}")
    fig = new_figure(8, 4.8, about)
    ax = fig.subplots()
    grid = _grid(ladder)
    top = max(c.compute for row in ladder.cells for c in row[-1:])
    beyond = grid[grid >= top]
    rungs = len(ladder.rungs)
    for g, name in enumerate(ladder.names[:MAX_CURVES]):
        if g == ladder.reference:
            continue
        answer = ladder.answers[g]
        compute = answer.compute[:rungs]
        values = 10.0 ** answer.multiplier[:rungs]
        low, high = (10.0 ** part[:rungs] for part in answer.multiplier_ci)
        kinds = np.array(answer.kind[:rungs])
        measured = kinds == scaling.MEASURED
        (line,) = ax.plot(
            compute[measured], values[measured], "o-", color=f"C{g}", label=plain(name)
        )
        ax.vlines(compute[measured], low[measured], high[measured], color=line.get_color())
        for kind, marker in ((scaling.ABOVE, "^"), (scaling.BELOW, "v")):
            at = kinds == kind
            ax.plot(compute[at], values[at], marker, color=line.get_color(), fillstyle="none")
        if ladder.fit.point is not None:
            point = scaling.log10_multiplier(ladder.fit.point, g, ladder.reference, beyond)
            refits = scaling.log10_multiplier(ladder.fit.refits, g, ladder.reference, beyond)
            band_low, band_high = scaling.interval(refits, 1 - 2 * alpha)
            ax.plot(beyond, 10.0**point, "--", color=line.get_color())
            ax.fill_between(
                beyond,
                10.0**band_low,
                10.0**band_high,
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
            )
    ax.axhline(1.0, color="0.4", linewidth=0.8)
    ax.axvline(top, color="0.6", linestyle=":", linewidth=0.8, label="top rung")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="compute C = 6 N D (FLOPs)",
        ylabel=f"compute {reference} needs / group's",
        title=textwrap.fill(about, 80),
    )
    return _finish(fig, ax)


def _finish(fig: Figure, ax) -> Figure:
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=SMALLEST_FONT, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    plain_ticks(ax)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.0e}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    return fig
