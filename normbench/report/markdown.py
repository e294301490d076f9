"""The report as GitHub markdown: per section a heading, the settings held fixed, each table
as a pipe table with its caption, the notes; every stored value escaped.

A table holds the terminal's columns, every one (the tables of normbench.report.terminal at no
width limit, as the HTML shows them), and its caption is theirs: the full frames, every
p-value and interval bound, are in the CSV and JSON formats.
"""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from normbench.core.text import escape_markdown
from normbench.report.base import Report
from normbench.report.labels import label
from normbench.report.terminal import across_rich, rich_tables
from normbench.report.text import JSON_ONLY, across_title, check_table, fmt, settings_text


def to_markdown(frame: pd.DataFrame) -> str:
    """A pipe table (GitHub markdown) of a frame, numbers rounded to 4 places, every header
    and cell escaped (a stored name is text, never markup or HTML)."""
    frame = frame.drop(columns=[c for c in JSON_ONLY if c in frame])
    header = "| " + " | ".join(escape_markdown(str(c)) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    cells = (
        [escape_markdown(fmt(v, 4) if isinstance(v, float) else label(v)) for v in row]
        for row in frame.itertuples(index=False)
    )
    body = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join([header, rule, *body])


def scaling_markdown(report: Report, only: str | None) -> list[str]:
    """The scaling section: the per-group table, its caption, the per-rung table, notes."""
    from normbench.report.scaling_section import caption

    result = report.scaling
    blocks = [f"## Scaling along {escape_markdown(result.key)}"]
    if only in (None, "scaling"):
        blocks.append(to_markdown(result.table))
        blocks.append(escape_markdown(caption(result, report.method)))
    if only in (None, "scaling_rungs"):
        blocks.append(f"### Multiplier per rung\n\n{to_markdown(result.rungs)}")
    blocks.extend(f"Note: {escape_markdown(note)}" for note in result.notes)
    return blocks


def rich_markdown(table) -> list[str]:
    """A table of normbench.report.terminal as a pipe table, then its caption: the terminal's
    headers and cells (a cell of two lines on one), every one escaped."""

    def text(value) -> str:
        shown = value.plain if isinstance(value, Text) else str(value)
        return escape_markdown(" ".join(shown.split("\n")))

    header = "| " + " | ".join(text(c.header) for c in table.columns) + " |"
    rule = "| " + " | ".join("---:" if c.justify == "right" else "---" for c in table.columns)
    rows = zip(*(list(column.cells) for column in table.columns), strict=True)
    body = ["| " + " | ".join(text(cell) for cell in row) + " |" for row in rows]
    caption = [text(table.caption)] if table.caption else []
    return ["\n".join([header, rule + " |", *body]), *caption]


def markdown(report: Report, only: str | None) -> str:
    """The report as GitHub markdown: per section a heading, the settings held fixed, each
    table with its caption, the notes; every stored value escaped (``escape_markdown``)."""
    check_table(report, only)
    blocks = []
    for section in report.sections:
        if section.setting:
            blocks.append(f"## {escape_markdown(settings_text(section.setting))}")
        if section.fixed:
            blocks.append(f"Fixed: {escape_markdown(settings_text(section.fixed))}")
        blocks.extend(f"Note: {escape_markdown(note)}" for note in section.notes)
        for name, table in rich_tables(section, report.method):
            if only and only != name:
                continue
            table_text, *caption = rich_markdown(table)
            blocks.append(f"### {name.replace('_', ' ').capitalize()}\n\n{table_text}")
            blocks.extend(caption)
    if report.across is not None and only in (None, "across"):
        blocks.append(f"## Across {escape_markdown(across_title(report.across))}")
        blocks.extend(rich_markdown(across_rich(report.across, report.method)))
    if report.scaling is not None and only in (None, "scaling", "scaling_rungs"):
        blocks.extend(scaling_markdown(report, only))
    return "\n\n".join(blocks) + "\n"
