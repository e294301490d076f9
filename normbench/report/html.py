"""The report as one self-contained HTML file that a person can mail or attach to a review:
per section the settings held fixed, each table with its caption and verdict colours, the
figures (embedded PNG), diagnostics when asked for, the notes, the warnings, and the commands
that reproduce it.

Rendering only. The tables are normbench.report.terminal's (the rich tables the terminal
shows, turned into HTML cells), so captions and numbers are written in one place. A runs
directory is untrusted input: every stored value (run ids, config values, errors, commands)
is escaped, and the page's Content-Security-Policy forbids scripts and every network
request, so a value that slipped through could neither run nor call out.
"""

from __future__ import annotations

import base64
import shlex
from datetime import datetime
from html import escape
from pathlib import Path

from rich.text import Text

from normbench import __version__
from normbench.core.text import plain
from normbench.report.base import Method, Report, Section
from normbench.report.plots import Drawing
from normbench.report.terminal import VERDICT_STYLE, across_rich, rich_tables
from normbench.report.text import DIAGNOSTICS_WHEN, across_title, settings_text, short
from normbench.store.rundir import atomic_write

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
# VERDICT_STYLE's rich colour names as CSS colours readable on white.
COLOURS = {
    "green": "#1a7f37",
    "red": "#cf222e",
    "yellow": "#9a6700",
    "blue": "#0969da",
    "dim": "#57606a",
}
VERDICTS = {
    "convergence": ("reference", "better", "equivalent", "worse", "inconclusive"),
    "batch_sensitivity": ("sensitive", "insensitive", "inconclusive"),
    "cost": ("reference", "faster", "equivalent", "slower", "inconclusive", "not compared"),
}
# The scaling table's answer (does the gap shrink, and where do the curves cross), put just
# after its group column: last, as the terminal has them, an 800-pixel window showed neither,
# with only the box's edge shadow to say that more columns lay to the right.
SCALING_ANSWER = ("trend", "cross")
# The cost table's answer, the step-time ratio and its verdict, put just after its grouping
# keys for the same reason: at 800 pixels they were off-screen to the right.
COST_ANSWER = ("vs ref", "vs fastest", "verdict")
FIGURES_AFTER = {  # which figures follow which table
    "convergence": ("seed_results", "learning_curves"),
    "batch_sensitivity": ("batch_sensitivity",),
    "diagnostics": ("gradient_depth",),
    "cost": ("cost_pareto",),
}
STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328;
       max-width: 1200px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
h3 { margin-top: 1.6em; }
code, pre { font: 13px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f6f8fa; padding: .7em 1em; overflow-x: auto; white-space: pre-wrap;
      word-break: break-all; border-radius: 6px; }
.scroll { overflow-x: auto; max-width: 100%;
          background: linear-gradient(to right, #fff 40%, rgba(255,255,255,0)) left / 3em 100%,
                      linear-gradient(to left, #fff 40%, rgba(255,255,255,0)) right / 3em 100%,
                      linear-gradient(to right, rgba(0,0,0,.3), rgba(0,0,0,0)) left / 1.5em 100%,
                      linear-gradient(to left, rgba(0,0,0,.3), rgba(0,0,0,0)) right / 1.5em 100%;
          background-repeat: no-repeat; background-attachment: local, local, scroll, scroll; }
.scroll th { background: rgba(246,248,250,.6); }
table { border-collapse: collapse; margin: .5em 0; font-size: 14px; }
th, td { padding: .25em .7em; border-bottom: 1px solid #d0d7de; vertical-align: top;
         white-space: nowrap; }
th { text-align: left; background: #f6f8fa; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
p.caption { font-size: 13px; color: #57606a; margin-top: .3em; max-width: 75em; }
.legend span { display: inline-block; margin-right: 1em; }
.fixed, .meta { color: #57606a; }
.warning { color: #9a6700; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
figcaption { font-size: 13px; color: #57606a; }
"""


def write_html(
    path: Path,
    report: Report,
    drawings: list[list[Drawing]],
    report_argv: list[str],
    sweep_argvs: list,
    across: list[Drawing] = (),
    extra: list[str] = (),
    extra_says: tuple[str, ...] = (),
) -> Path:
    """``extra``: HTML blocks, already escaped, put before the sections (a tuned sweep's
    section, normbench.report.tuning); ``extra_says``: the warnings those blocks show, left
    out of the page's top (a tuned sweep's notes were shown twice, one above the other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    html = page(report, drawings, report_argv, sweep_argvs, across, extra, extra_says)
    atomic_write(path, html)  # a write cut short leaves the previous page, not a fragment
    return path


def page(
    report: Report,
    drawings: list[list[Drawing]],
    report_argv: list[str],
    sweep_argvs: list,
    across: list[Drawing] = (),
    extra: list[str] = (),
    extra_says: tuple[str, ...] = (),
) -> str:
    """The whole document: each warning once (those ``extra`` shows are left to it)."""
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(report.counts.items()))
    body = [
        "<h1>normbench report</h1>",
        f'<p class="meta">{sum(report.counts.values())} runs ({esc(statuses)}); written '
        f"{datetime.now().isoformat(timespec='minutes')} by normbench {esc(__version__)}</p>",
        *(
            f'<p class="warning">warning: {esc(w)}</p>'
            for w in dict.fromkeys(report.warnings)
            if w not in extra_says
        ),
        *extra,
        *(
            section_html(section, report.method, drawn, len(report.sections) > 1)
            for section, drawn in zip(report.sections, drawings, strict=True)
        ),
        *([across_html(report, across)] if report.across is not None else []),
        *([scaling_html(report, across)] if report.scaling is not None else []),
        reproduce_html(report, report_argv, sweep_argvs),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>normbench report</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def across_html(report: Report, drawn: list[Drawing]) -> str:
    """The table of ``report --across`` with its caption and the performance profile."""
    result = report.across
    parts = [
        f"<h2>Across {esc(across_title(result))}</h2>",
        table_html(across_rich(result, report.method)),
        *(figure_html(d) for d in drawn if not d.name.startswith("scaling_")),
    ]
    return "<section>\n" + "\n".join(parts) + "\n</section>"


def scaling_html(report: Report, drawn: list[Drawing]) -> str:
    """The scaling section: its table with the caption, the figures, the notes."""
    from normbench.report.terminal import scaling_rich

    result = report.scaling
    parts = [
        f"<h2>Scaling along {esc(result.key)}</h2>",
        table_html(scaling_rich(result, report.method), answer=SCALING_ANSWER),
        *(figure_html(d) for d in drawn if d.name.startswith("scaling_")),
        *(f'<p class="fixed">note: {esc(note)}</p>' for note in result.notes),
    ]
    return "<section>\n" + "\n".join(parts) + "\n</section>"


def cell_lines(cell) -> str:
    """A table cell's lines (a tuned group's items, a chosen value each) apart by <br>."""
    return "<br>".join(esc(line) for line in text_of(cell).split("\n"))


def esc(value) -> str:
    """A stored value as HTML text: control characters shown as escapes (plain),
    markup characters escaped."""
    return escape(plain(str(value)), quote=True)


# ----------------------------------------------------------------------------- sections
def section_html(section: Section, method: Method, drawn: list[Drawing], titled: bool) -> str:
    figures = {drawing.name: drawing for drawing in drawn}
    parts = []
    if titled:
        parts.append(f"<h2>{esc(settings_text(section.setting))}</h2>")
    else:
        parts.append("<h2>Results</h2>")
    if section.fixed:
        parts.append(
            '<p class="fixed">Settings held fixed: '
            f"<code>{esc(settings_text(section.fixed))}</code></p>"
        )
    if section.keys:
        grouped = ", ".join(short(k) for k in section.keys)
        parts.append(f'<p class="fixed">Groups: runs that share {esc(grouped)} (seeds pooled)</p>')
    if section.notes:  # they qualify the tables (a --by that pools a key): read first
        parts.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in section.notes))
        parts[-1] += "</ul>"
    for name, table in rich_tables(section, method):
        parts.append(f"<h3>{esc(title_of(name))}</h3>")
        if name in VERDICTS:
            parts.append(legend_html(VERDICTS[name]))
        keys = tuple(short(k) for k in section.keys)
        parts.append(table_html(table, COST_ANSWER if name == "cost" else (), keys))
        for figure in FIGURES_AFTER.get(name, ()):
            if figure in figures:
                parts.append(figure_html(figures[figure]))
    return "<section>\n" + "\n".join(parts) + "\n</section>"


def title_of(name: str) -> str:
    """A table's heading; a diagnostics or activations table's says at which step."""
    when = DIAGNOSTICS_WHEN.get(name.replace("activations", "diagnostics"))
    if when:
        return f"{name.split('_')[0].capitalize()} {when}"
    return name.replace("_", " ").capitalize()


def legend_html(verdicts: tuple[str, ...]) -> str:
    """The verdict words in the colours the table uses (what they mean: the caption)."""
    chips = "".join(f'<span style="{css(VERDICT_STYLE[v])}">{v}</span>' for v in verdicts)
    return f'<p class="legend">Verdicts: {chips}</p>'


def table_html(table, answer: tuple[str, ...] = (), keys: tuple[str, ...] = ("group",)) -> str:
    """A rich Table as an HTML table in a box of its own that scrolls sideways (headers, cells:
    styled text keeps its colour; a cell's lines, as the terminal shows them, kept apart by
    <br>, each escaped), then its caption. ``answer``: the headers of the columns that give
    the table's answer, moved to just after its key columns (headed by a name in ``keys``; or
    first), so that a narrow window shows them without scrolling."""
    columns = answer_first(list(table.columns), answer, keys)
    numeric = [' class="num"' if column.justify == "right" else "" for column in columns]
    head = "".join(
        f"<th{kind}>{esc(text_of(column.header))}</th>"
        for column, kind in zip(columns, numeric, strict=True)
    )
    rows = zip(*(list(column.cells) for column in columns), strict=True)
    body = "\n".join(
        "<tr>"
        + "".join(
            f"<td{kind}{style_of(cell)}>{cell_lines(cell)}</td>"
            for cell, kind in zip(row, numeric, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    # the table scrolls in its own box on a narrow window; its caption, below it, wraps at
    # the page's width (a <caption> is as wide as its table: clipped with it)
    caption = f'\n<p class="caption">{esc(text_of(table.caption))}</p>' if table.caption else ""
    return (
        f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n'
        f"</tbody>\n</table></div>{caption}"
    )


def answer_first(
    columns: list, answer: tuple[str, ...], keys: tuple[str, ...] = ("group",)
) -> list:
    """``columns`` with those headed by a name in ``answer`` (in its order) just after the
    last column headed by a name in ``keys``, or first where there is none."""
    named = sorted(
        (c for c in columns if text_of(c.header) in answer),
        key=lambda c: answer.index(text_of(c.header)),
    )
    rest = [c for c in columns if c not in named]
    at = max((i + 1 for i, c in enumerate(rest) if text_of(c.header) in keys), default=0)
    return rest[:at] + named + rest[at:]


def text_of(renderable) -> str:
    return renderable.plain if isinstance(renderable, Text) else str(renderable)


def style_of(cell) -> str:
    if isinstance(cell, Text) and isinstance(cell.style, str) and cell.style:
        return f' style="{css(cell.style)}"'
    return ""


def css(style: str) -> str:
    """A rich style of this project's ("bold green", "red") as inline CSS."""
    words = style.split()
    rules = ["font-weight: 600"] if "bold" in words else []
    rules += [f"color: {COLOURS[w]}" for w in words if w in COLOURS]
    return "; ".join(rules)


def figure_html(drawing: Drawing) -> str:
    data = base64.b64encode(drawing.png).decode("ascii")
    about = esc(drawing.about)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{about}">'
        f"<figcaption>{about}</figcaption></figure>"
    )


# ---------------------------------------------------------------------------- reproduce
def reproduce_html(report: Report, report_argv: list[str], sweep_argvs: list) -> str:
    """The commands that made this report: the report command itself, then the sweep's
    recorded command, or else the distinct commands recorded in the runs' meta.json."""
    parts = ["<section>", "<h2>Reproduce</h2>", "<h3>This report</h3>"]
    parts.append(pre([shell_line(report_argv) or "(not recorded)"]))
    sweeps = [line for argv in sweep_argvs if (line := shell_line(argv))]
    if sweeps:
        parts.append("<h3>The sweep</h3>")
        parts.append(pre(sweeps))
    else:
        commands = run_commands(report)
        parts.append("<h3>The runs</h3>")
        if commands:
            parts.append(
                f"<p>{len(commands)} distinct command(s) recorded in the runs' meta.json:</p>"
            )
            parts.append(pre(commands))
        else:
            parts.append("<p>The runs did not record their commands.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def pre(lines: list[str]) -> str:
    """Lines of a stored text in a <pre>, one per line, each escaped."""
    return "<pre>" + "\n".join(esc(line) for line in lines) + "</pre>"


def run_commands(report: Report) -> list[str]:
    """The distinct run commands of the report's runs, sorted."""
    lines = []
    for section in report.sections:
        if section.runs is None or "command" not in section.runs:
            continue
        lines.extend(line for argv in section.runs["command"] if (line := shell_line(argv)))
    return sorted(set(lines))


def shell_line(argv) -> str | None:
    """A recorded argv as a line to paste into a shell; the program as ``normbench`` when it
    is the installed script or ``normbench/__main__.py`` (python -m normbench). None when the
    record is not a list of strings (absent, or not written by normbench)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    program = argv[0]
    if Path(program).name == "normbench" or Path(program).parts[-2:] == (
        "normbench",
        "__main__.py",
    ):
        program = "normbench"
    return shlex.join([program, *argv[1:]])
