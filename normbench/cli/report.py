"""`normbench report`: runs into verdicts, as tables, exports, figures and HTML."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    RunsDir,
    SweepOption,
    app,
    collector_paused,
    fail,
    runs_dir_and_filters,
    scan_started,
    terminal,
)
from normbench.report import TABLE_NAMES

# The options of `normbench report`, one name each, so that its entry point reads as what it does
Arguments = Annotated[
    list[str] | None,
    typer.Argument(
        help="[RUNS_DIR] [FILTER ...]: filters in override syntax, e.g. model=cnn "
        "norm=batchnorm,groupnorm",
        show_default=False,
    ),
]
By = Annotated[str | None, typer.Option("--by", help="Group by these keys (comma-separated).")]
BestOver = Annotated[
    str | None,
    typer.Option(
        "--best-over",
        help="Per group, keep the value of this key that is best on validation; verdicts "
        "then use test.",
    ),
]
Alpha = Annotated[
    float, typer.Option("--alpha", help="Error rate of every verdict, strictly between 0 and 0.5.")
]
Margin = Annotated[
    float, typer.Option("--margin", help="Largest difference that counts as equivalent (> 0).")
]
Reference = Annotated[
    list[str] | None,
    typer.Option(
        "--reference",
        help="Compare every group with this one, named before looking: KEY=VALUE "
        "(repeatable), e.g. norm=layernorm \\[default: the best group]",
        show_default=False,
    ),
]
Across = Annotated[
    str | None,
    typer.Option(
        "--across",
        help="After the sections, one table across the workloads these setting keys tell "
        "apart (comma-separated), e.g. data or data,model",
        show_default=False,
    ),
]
Profile = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="With --across: the performance profile's cost: steps | time \\[default: steps]",
    ),
]
ReferenceBatch = Annotated[
    int | None,
    typer.Option(
        "--reference-batch", help="Batch compared with the smallest \\[default: the largest]."
    ),
]
Diverged = Annotated[
    str, typer.Option("--diverged", help="chance: diverged runs count at chance | exclude")
]
Format = Annotated[str, typer.Option("--format", help="rich | csv | markdown | json")]
TableName = Annotated[
    str | None,
    typer.Option("--table", help="Only this table: " + " | ".join(TABLE_NAMES)),
]
Out = Annotated[Path | None, typer.Option("--out", help="Write the tables here.")]
Plots = Annotated[
    Path | None, typer.Option("--plots", help="Write PNG figures into this directory.")
]
Html = Annotated[
    Path | None,
    typer.Option("--html", help="Write one self-contained HTML file: tables, figures, commands."),
]
XAxis = Annotated[
    str | None,
    typer.Option(
        "--x",
        help="Figures' x axis: steps | samples | epochs | time \\[default: samples when "
        "batch sizes differ, else steps]",
    ),
]
Diagnostics = Annotated[
    bool, typer.Option("--diagnostics", help="Show runs' diagnostics (trained diagnostics=true).")
]
Tag = Annotated[str | None, typer.Option("--tag", help="Only runs with this tag.")]
ScalingKey = Annotated[
    str | None,
    typer.Option(
        "--scaling",
        help="Fit the runs as a scaling ladder along this size key (e.g. model.width): "
        "L(C) = E + A C^-alpha per group, compute multipliers against the reference, trend",
        show_default=False,
    ),
]

CostTarget = Annotated[
    float | None,
    typer.Option(
        "--target",
        help="The cost table's time and FLOPs to target: this value of the section's metric "
        "\\[default: the worst run's final]",
        show_default=False,
    ),
]


@app.command()
def report(
    ctx: typer.Context,
    arguments: Arguments = None,
    sweep_name: SweepOption = None,
    by: By = None,
    best_over: BestOver = None,
    alpha: Alpha = 0.05,
    margin: Margin = 0.01,
    reference: Reference = None,
    across: Across = None,
    profile: Profile = None,
    reference_batch: ReferenceBatch = None,
    diverged: Diverged = "chance",
    fmt: Format = "rich",
    table: TableName = None,
    out: Out = None,
    plots: Plots = None,
    html: Html = None,
    x: XAxis = None,
    diagnostics: Diagnostics = False,
    tag: Tag = None,
    scaling: ScalingKey = None,
    target: CostTarget = None,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Compare runs: verdicts against the best, batch-size sensitivity and precision."""
    scanning = scan_started(arguments, runs_dir)  # before pandas (store.scan says why)
    # The verdicts' p-values and intervals need scipy.special (0.1 s to import): imported here,
    # while the scan's child process is still at work, rather than after it.
    import scipy.special  # noqa: F401

    from normbench.core.errors import UsageError
    from normbench.report import pipeline
    from normbench.report.base import Method
    from normbench.report.text import check_table_name

    # The store read and the tables make millions of objects and no cycles worth collecting
    # (cli.app.collector_paused); the figures, which matplotlib links in cycles, are drawn
    # with the collector back.
    with collector_paused():
        try:
            check_table_name(table)  # before any run is read: a typo costs no report
            if arguments and "=" not in arguments[0]:  # [RUNS_DIR]: or a sweep's name?
                check_not_a_sweep_name(Path(arguments[0]), runs_dir)
            runs_dir, arguments = runs_dir_and_filters(arguments, runs_dir, ctx)
            method = Method.from_options(alpha, margin, reference_batch, diverged, reference or [])
            check_outputs(fmt, out, html, plots, x, profile, across)
            if target is not None and not math.isfinite(target):
                raise UsageError(f"--target {target}: a finite value of the section's metric")
            request = pipeline.Request(
                runs_dir,
                tuple(arguments),
                sweep_name,
                tag,
                by=tuple(by.split(",")) if by else (),
                best_over=best_over,
                method=method,
                across=tuple(across.split(",")) if across is not None else (),
                profile=profile or "steps",
                diagnostics=diagnostics,
                scaling=scaling,
                target=target,
                to_target=table in (None, "cost"),
            )
            selected = pipeline.select(request, scanning, warn)
            tuned = selected.tuning
            if table == "tuning" and not tuned:  # before the verdicts are computed
                from normbench.report.text import NOT_TUNED

                raise UsageError(NOT_TUNED)
            result = pipeline.verdicts(request, selected, warn)
            text = as_text(result, tuned, fmt, table, out)
        except UsageError as err:
            raise fail(str(err)) from None
        if text is not None:
            write_text(text, out)
        else:
            print_terminal(result, tuned, table, diagnostics)
    if plots is not None or html is not None:
        draw(result, runs_dir, x, plots, html, tuned, selected.commands)


def check_not_a_sweep_name(named: Path, runs_dir: Path) -> None:
    """``normbench report smoke``: a first argument that is no directory but a sweep's name
    (a preset, or a sweep recorded in the runs directory) is refused saying so, with the
    command meant, rather than "does not exist; train something first"."""
    from normbench.core.errors import UsageError
    from normbench.store.records import recorded_sweeps
    from normbench.sweeps.presets import presets

    name = str(named)
    if named.exists() or len(named.parts) != 1:
        return
    if name in recorded_sweeps(runs_dir) or name in presets():
        where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
        raise UsageError(
            f"runs directory {name} does not exist; {name} is a sweep's name: normbench "
            f"report --sweep {name}{where}"
        )


def warn(message: str, kind: str) -> None:
    """A warning of the report's pipeline on stderr as it arises: a tuned comparison's notes
    in red, others (with control characters from stored values shown as escapes) yellow."""
    from normbench.core.text import plain

    color = "red" if kind == "tuning" else "yellow"
    text = plain(message) if kind != "tuning" else message
    typer.secho(f"warning: {text}", fg=color, err=True)


def check_outputs(fmt, out, html, plots, x, profile, across) -> None:
    """Every output option, refused in one line before any work."""
    from normbench.core.errors import UsageError

    if fmt not in ("rich", "csv", "markdown", "json"):
        raise UsageError(f"--format {fmt}: valid: rich, csv, markdown, json")
    if out is not None:
        check_out(out, fmt)
    if html is not None:
        check_out(html, "html", "--html")
    if plots is not None:
        if str(plots) in ("", "."):
            raise UsageError(f"--plots {plots}: name a directory for the figures, e.g. img")
        check_folder(plots, "--plots")
    if profile is not None and across is None:
        raise UsageError(f"--profile {profile}: for the table across workloads; add --across")
    if x is not None:
        from normbench.report.plots import check_x

        check_x(x)
        if plots is None and html is None:
            raise UsageError(f"--x {x}: for figures; add --plots DIR or --html FILE")


def as_text(result, tuned, fmt: str, table: str | None, out: Path | None):
    """The report as text in ``fmt`` (a dict of files with ``--out`` CSV), None for the
    terminal; ``--table tuning``: the tuned section alone."""
    from normbench.report import tuning
    from normbench.report.text import check_table
    from normbench.report.tidy import as_text as tidy_text

    if table != "tuning":
        check_table(result, table)
    if fmt == "rich":
        return None
    if table == "tuning":
        text = tuning.alone(fmt, tuned)
        return text if out is None else {out: text}
    text = tidy_text(result, fmt, table, out)
    return tuning.attach(text, fmt, tuned, out) if tuned else text


def write_text(text, out: Path | None) -> None:
    """Text on stdout, or each file written atomically (``--out``)."""
    if out is None:
        typer.echo(text, nl=False)
        return
    from normbench.store.rundir import atomic_write

    for path, content in text.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, content)
        except OSError as err:
            raise fail(f"--out {path}: cannot write it ({err.strerror})") from None
        typer.echo(f"wrote {path}", err=True)


def print_terminal(result, tuned, table: str | None, diagnostics: bool) -> None:
    """The report's rich rendering: counts, the tuned section, the tables, diagnostics."""
    from normbench.report.terminal import caption_below, diagnostics_tables, rich_renderables

    console = terminal()
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
    total = sum(result.counts.values())
    console.print(
        f"{total} run{'s' * (total != 1)} ({statuses})", soft_wrap=not console.is_terminal
    )
    if tuned:
        console.print(tuned.rich())
    for renderable in [] if table == "tuning" else rich_renderables(result, table):
        console.print(renderable)
    for section in result.sections if diagnostics else []:
        for _, shown in diagnostics_tables(section, console.width):
            for renderable in caption_below(shown):
                console.print(renderable)


def draw(result, runs_dir: Path, x, plots, html, tuned, commands: list) -> None:
    """The figures as PNGs (``--plots``) and the HTML page (``--html``)."""
    from normbench.report import plots as figures

    drawings = figures.draw(result, runs_dir, x, lambda line: typer.echo(line, err=True))
    from normbench.report.scaling_plots import scaling_drawings

    overall = figures.across_drawings(result) + scaling_drawings(result)
    try:
        for path in figures.write_pngs(result, drawings, plots, overall) if plots else []:
            typer.echo(f"wrote {path}", err=True)
        if html is not None:
            from normbench.report.html import write_html

            extra, says = ([tuned.html()], tuple(tuned.notes)) if tuned else ([], ())
            write_html(html, result, drawings, sys.argv, commands, overall, extra, says)
            typer.echo(f"wrote {html}", err=True)
    except OSError as err:
        where = err.filename or (html if plots is None else plots)
        raise fail(f"cannot write {where}: {err.strerror}") from None


def check_out(out: Path, fmt: str, option: str = "--out") -> None:
    """A file to write (``--out``, ``--html``), before any work: not a directory, not '', in
    a directory that is or can be made writable; for ``--out`` a format that writes text
    (rich is for the terminal)."""
    from normbench.core.errors import UsageError

    if fmt == "rich":
        raise UsageError(f"{option} {out}: writes csv, markdown or json; add --format")
    if str(out) in ("", ".") or out.is_dir():
        raise UsageError(f"{option} {out}: a directory; valid: a file name")
    if out.exists() and not out.is_file():  # /dev/null, a FIFO: never replaced by a file
        raise UsageError(f"{option} {out}: not a regular file; valid: a file name")
    check_folder(out.parent, option, out)


def check_folder(folder: Path, option: str, named: Path | None = None) -> None:
    """A directory to write in (``--plots``, or a file's), before any work: one that exists
    or can be made, writable."""
    import os

    from normbench.core.errors import UsageError

    named = named or folder
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == Path("/"))
    if not existing.is_dir():
        raise UsageError(f"{option} {named}: {existing} is not a directory")
    if not os.access(existing, os.W_OK) or _read_only(existing):
        raise UsageError(f"{option} {named}: cannot write in {existing} (not writable)")


def _read_only(path: Path) -> bool:
    """A read-only file system (root's os.access says writable there too)."""
    import os

    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
