"""How the report's rich tables are laid out, for the terminal and for html.py and
markdown.py alike: a column's cells (``Column``), a table that fits the width it is printed at
(``fit``: the columns that do not fit left out in a stated order, named in the caption), the
grouping keys' columns, the caption printed below, and the colour of each verdict word.
Layout only: the question modules give the numbers, normbench.report.text the captions.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from normbench.core.text import plain
from normbench.report.labels import label
from normbench.report.text import short

VERDICT_STYLE = {
    "reference": "bold green",
    "better": "bold blue",
    "equivalent": "green",
    "worse": "red",
    "inconclusive": "yellow",
    "sensitive": "red",
    "insensitive": "green",
    "faster": "bold blue",
    "slower": "red",
    "not compared": "dim",
}


def cell(value):
    """A stored value as a rich cell: escaped, and never read as rich markup."""
    from rich.text import Text

    return Text(plain(label(value)))


@dataclass
class Column:
    """A column of a table laid out by ``fit``: its header, alignment, and the cells of each
    row (text or rich Text, possibly of two lines)."""

    header: str
    cells: list
    justify: str = "right"
    key: bool = False  # a grouping key: as wide as its longest value, up to 24 (key_columns)
    wraps: bool = False  # may wrap when even the table's essential columns do not fit


def cell_width(value) -> int:
    from rich.cells import cell_len

    text = value.plain if hasattr(value, "plain") else str(value)
    return max(cell_len(line) for line in text.split("\n"))


def fit(columns: list[Column], optional: list[str], width: int | None, caption) -> object:
    """A rich table of ``columns`` whose every row is one line at ``width``: the ``optional``
    columns (by header) are left out, the first named first, until it fits; ``caption(left
    out headers)`` is its caption. When even the essential columns are too wide, the columns
    that may wrap do (an interval under its mean). ``width`` None (HTML): every column."""
    widths = {
        c.header: max(cell_width(c.header), *(cell_width(v) for v in c.cells)) for c in columns
    }
    widths.update({c.header: min(widths[c.header], 24) for c in columns if c.key})
    left_out: list[str] = []
    kept = list(columns)
    if width is not None:
        for header in (h for h in optional if h in widths):  # a column this table has
            if sum(widths[c.header] for c in kept) + len(kept) + 1 <= width:
                break
            kept = [c for c in kept if c.header != header]
            left_out.append(header)
    fits = width is None or sum(widths[c.header] for c in kept) + len(kept) + 1 <= width
    table = new_table(caption(tuple(left_out)))
    for column in kept:
        if column.key and longest_cell(column) > 24:  # a long name folds, never truncated
            table.add_column(column.header, min_width=24, overflow="fold")
        elif column.key:
            table.add_column(column.header, width=widths[column.header], no_wrap=True)
        else:
            wraps = column.wraps and not fits
            table.add_column(column.header, justify=column.justify, no_wrap=not wraps)
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(column.cells[i] for column in kept))
    return table


def longest_cell(column: Column) -> int:
    return max(cell_width(column.header), *(cell_width(v) for v in column.cells))


def key_cells(keys: list[str], data: pd.DataFrame) -> list[Column]:
    """The grouping keys' columns of a table laid out by ``fit``."""
    return [
        Column(short(key), [cell(v) for v in data[key]], justify="left", key=True) for key in keys
    ]


def caption_below(table) -> list:
    """The table, then its caption as text of its own: wrapped at the terminal's width rather
    than the table's (rich crops a caption wider than its table)."""
    from rich.text import Text

    caption, table.caption = table.caption, None
    return [table, Text(caption, style="dim")] if caption else [table]


def new_table(caption: str):
    from rich import box
    from rich.table import Table

    # One space between columns (the box's blank separator, no padding): a table of eleven
    # columns fits 80; intervals wrap under their means when it must.
    return Table(
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        pad_edge=False,
    )


def key_columns(table, keys: list[str], data: pd.DataFrame) -> None:
    """Grouping-key columns as wide as their longest value, up to 24 characters (a longer
    name folds onto a second line, never truncated). Fixed widths: when a table must narrow,
    the intervals wrap under their numbers first."""
    for key in keys:
        longest = max([len(short(key)), *(len(label(v)) for v in data[key])])
        if longest <= 24:  # fixed: a narrow table wraps its intervals, never its names
            table.add_column(short(key), width=longest, no_wrap=True)
        else:
            table.add_column(short(key), min_width=24, overflow="fold")
