"""`normbench findings`: run the studies of the literature and write the findings document."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import app, fail
from normbench.core.interrupt import interrupt_on_sigterm


@app.command(short_help="Reproduce the literature's claims: run the studies, write findings.md.")
def findings(
    quick: Annotated[bool, typer.Option("--quick", help="Fewer seeds and steps.")] = False,
    smoke: Annotated[
        bool,
        typer.Option(
            "--smoke", help="Tiny runs of every study: does it all work? (minutes, not seconds)"
        ),
    ] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes per study.")] = 2,
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Where the studies' runs are stored.")
    ] = Path("runs/findings"),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="The document to write \\[default: docs/findings.md; with --quick or --smoke "
            "RUNS_DIR/findings-quick.md or findings-smoke.md, so that a smaller scale never "
            "replaces the full-scale document of a checkout]",
            show_default=False,
        ),
    ] = None,
    study: Annotated[
        list[str] | None,
        typer.Option(
            "--study",
            help="Train only this study and rewrite the sections that read nothing else "
            "(the Xiong section reads placement and xavier: name both), keeping the "
            "document's other sections as they are (repeat for several).",
            show_default=False,
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Train nothing: check that every registered claim was registered before the "
            "runs it reads (exit 1 with a line per claim that was not, or that cannot be "
            "checked).",
        ),
    ] = False,
) -> None:
    """Run every study (a batch-size, placement, no-norm, precision and LayerNorm-claims sweep;
    a second call only reports), then write the findings document: per claim of the
    literature its command, tables, figures (beside it, in img/) and a computed verdict."""
    from rich.console import Console

    from normbench.core.errors import UsageError
    from normbench.studies import findings as document

    if check:
        raise typer.Exit(check_order(runs_dir))
    scale, only, out = checked_request(quick, smoke, jobs, study, runs_dir, out)
    interrupt_on_sigterm()
    try:
        complete = document.write(runs_dir, out, jobs, scale, Console(stderr=True), only)
    except UsageError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        typer.echo("interrupted: completed runs are kept; run the same command again", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"wrote {out}")
    if not complete:
        raise typer.Exit(1)


def checked_request(
    quick: bool, smoke: bool, jobs: int, study: list[str] | None, runs_dir: Path, out: Path | None
) -> tuple[str, tuple[str, ...], Path]:
    """The scale, the studies named and the document's path, each checked before any study
    trains (the document's place too); a bad one is refused in one line."""
    from normbench.cli.report import check_out
    from normbench.core.errors import UsageError
    from normbench.studies import findings as document

    if quick and smoke:
        raise fail("--quick and --smoke: choose one scale")
    if jobs < 1:
        raise fail(f"--jobs {jobs}: must be at least 1")
    only = tuple(dict.fromkeys(study or ()))
    names = document.study_names()
    for name in only:
        if name not in names:
            raise fail(f"--study {name}: no such study; valid: {', '.join(names)}")
    scale = "smoke" if smoke else "quick" if quick else "full"
    if out is None:
        out = Path("docs/findings.md") if scale == "full" else runs_dir / f"findings-{scale}.md"
    try:
        check_out(out, "markdown")
    except UsageError as err:
        raise fail(str(err)) from None
    return scale, only, out


def check_order(runs_dir: Path) -> int:
    """`findings --check`: one line per claim that was registered after its runs, or that
    cannot be checked (its study's record unreadable or malformed); 1 if any."""
    from normbench.cli.app import check_runs_dir
    from normbench.core.errors import UsageError
    from normbench.studies import order, registry

    try:
        check_runs_dir(runs_dir, "--runs-dir")
        if not runs_dir.is_dir():
            raise UsageError(f"--runs-dir {runs_dir}: does not exist; valid: a runs directory")
        checked = order.check(runs_dir)
        count = len(registry.claims())
    except UsageError as err:
        raise fail(str(err)) from None
    for line in checked.problems:
        typer.echo(line, err=True)
    if checked.problems:
        return 1
    if not checked.claims:
        typer.echo(
            f"0 of {count} registered claims have runs in {runs_dir}: nothing to check "
            "(normbench findings trains them)"
        )
        return 0
    typer.echo(
        f"{checked.claims} of {count} registered claims have runs in {runs_dir} "
        f"({checked.runs} runs): each registered before the runs it reads"
    )
    return 0
