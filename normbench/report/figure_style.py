"""What every report figure shares: its size and smallest font (legible in an 800-pixel
HTML page), a figure made without pyplot (no global state, no backend to select), the legend
outside the data, the settings held fixed in a footer, tick labels as plain numbers, a
group's name, and the PNG a figure is rendered to (``Drawing``). normbench.report.plots,
cost_plots and scaling_plots build their figures with these.
"""

from __future__ import annotations

import functools
import io
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from normbench.core.text import plain
from normbench.report.base import Section
from normbench.report.labels import label
from normbench.report.text import settings_text, short

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_CURVES = 12  # more lines than this on one axis is noise, not a figure
DPI = 110
# Legible in the HTML page in an 800-pixel window, where a figure shrinks to about 770 pixels:
# no text under 10 points and no figure over 10 inches (1100 pixels at DPI) keeps every
# letter at 10.7 pixels or more (10 * DPI / 72 * 770 / 1100); the page's own small text is
# 13 pixels. Legends, footers and annotations were 7 to 9 points on figures up to 13 inches,
# 5 to 7 pixels at that width.
SMALLEST_FONT = 10
WIDEST = 10  # inches


@dataclass(frozen=True)
class Drawing:
    """One rendered figure: its file stem, what it shows (the HTML's caption) and its PNG."""

    name: str
    about: str
    png: bytes


def log_scale(values: np.ndarray) -> str:
    """``log`` when some value is finite and positive, else ``linear``: every run diverged at
    its first logged step (a NaN or infinite loss) leaves nothing a log axis can show, and
    matplotlib refuses to draw one."""
    finite = values[np.isfinite(values)]
    return "log" if (finite > 0).any() else "linear"


def to_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def new_figure(width: float, height: float, about: str) -> Figure:
    """A figure laid out by matplotlib's constrained layout (room for an outside legend and
    the footer); ``about`` (its label) says in one sentence what it shows."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained", label=about)


def metric_word(section: Section) -> str:
    return {"val_acc": "accuracy", "val_bpb": "bits per byte"}[section.metric.name]


def seeds(count: int) -> str:
    return f"{count} seed" + ("" if count == 1 else "s")


def group_name(keys: list[str], values: dict) -> str:
    """A group's label in a figure: its keys that apply to it (``norm=groupnorm``, not
    ``norm=groupnorm, ghost=-``: GroupNorm has no ghost batch)."""
    named = [f"{short(k)}={label(values[k])}" for k in keys if label(values[k]) != "-"]
    return plain(", ".join(named) or "all runs")


def finish(fig: Figure, section: Section, handles: list | None = None) -> Figure:
    """The touches every figure gets: the legend (the first axes' lines, or ``handles``)
    outside the data, right of the last axes and below any title; the settings held fixed in
    a footer wrapped to the figure's width; plain tick labels."""
    handles = handles or fig.axes[0].get_legend_handles_labels()[0]
    if handles:
        fig.axes[-1].legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1),
            borderaxespad=0,
            fontsize=SMALLEST_FONT,
        )
    text = settings_text({**section.setting, **section.fixed})
    if text:
        width = int(fig.get_figwidth() * 12)  # characters of 10-point text per figure width
        fig.supxlabel(
            textwrap.fill(plain(f"fixed: {text}"), width), fontsize=SMALLEST_FONT, color="0.3"
        )
    for ax in fig.axes:
        plain_ticks(ax)
    return fig


def plain_ticks(ax) -> None:
    """Tick labels as plain numbers (2.4, 0.001, 30000), never 2.4×10^0 or an offset:
    log axes keep matplotlib's choice of which ticks to label, with plain text; linear axes
    lose scientific notation and offsets. Fixed labels (set by hand) are left alone."""
    from matplotlib.ticker import LogFormatter, ScalarFormatter

    for axis in (ax.xaxis, ax.yaxis):
        for formatter, setter in (
            (axis.get_major_formatter(), axis.set_major_formatter),
            (axis.get_minor_formatter(), axis.set_minor_formatter),
        ):
            if isinstance(formatter, LogFormatter):
                plain_log = plain_log_formatter()
                setter(
                    plain_log(
                        base=axis.get_transform().base,
                        labelOnlyBase=formatter.labelOnlyBase,
                        minor_thresholds=formatter.minor_thresholds,
                    )
                )
            elif isinstance(formatter, ScalarFormatter):
                formatter.set_useOffset(False)
                formatter.set_scientific(False)


def plain_number(value: float) -> str:
    """3 significant digits, positional: 2.4, 0.001, 30000."""
    return np.format_float_positional(float(f"{value:.3g}"), trim="-")


@functools.cache
def plain_log_formatter() -> type:
    """matplotlib's log formatter (it decides which ticks get a label) writing plain numbers;
    made on first use, so that importing this module does not import matplotlib."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            return plain_number(x) if super().__call__(x, pos) else ""

    return PlainLogFormatter
