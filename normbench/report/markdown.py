"""The report as GitHub markdown: per section a heading, the settings held fixed, each table
as a pipe table with its caption, the notes; every stored value escaped.
"""

from __future__ import annotations

import pandas as pd

from normbench.core.text import escape_markdown
from normbench.report.base import Report, label
from normbench.report.text import (
    JSON_ONLY,
    TABLES,
    across_caption,
    across_title,
    caption_of,
    check_table,
    fmt,
    settings_text,
)


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
        for name in TABLES:
            table = section.tables.get(name)
            if table is None or (only and only != name):
                continue
            caption = caption_of(name, table, section, report.method)
            blocks.append(f"### {name.replace('_', ' ').capitalize()}\n\n{to_markdown(table)}")
            blocks.append(escape_markdown(caption))
        blocks.extend(f"Note: {escape_markdown(note)}" for note in section.notes)
    if report.across is not None and only in (None, "across"):
        blocks.append(f"## Across {escape_markdown(across_title(report.across))}")
        blocks.append(to_markdown(report.across.table))
        blocks.append(escape_markdown(across_caption(report.across, report.method)))
    if report.scaling is not None and only in (None, "scaling", "scaling_rungs"):
        blocks.extend(scaling_markdown(report, only))
    return "\n\n".join(blocks) + "\n"
