"""`normbench runs list|show|diff|clean`: the runs in a runs directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    RunsDir,
    RunsFilters,
    StatusOption,
    SweepOption,
    collector_paused,
    fail,
    runs_app,
    runs_dir_and_filters,
    scan_started,
    terminal,
)


def _runs_selection(
    arguments: list[str] | None, runs_dir: Path, status: str | None, tag, ctx, sweep=None
):
    """The runs of `runs list` / `runs clean`: a runs directory, filters, statuses, a tag, the
    latest record of each sweep ``--sweep`` names (``ctx``: the command's,
    runs_dir_and_filters says why)."""
    scanning = scan_started(arguments, runs_dir)  # before pandas (store.scan says why)
    from normbench.store import catalog, manage, records

    runs_dir, arguments = runs_dir_and_filters(arguments, runs_dir, ctx)
    statuses = manage.parse_statuses(status)
    ids = records.sweep_run_ids(runs_dir, sweep)[0] if sweep is not None else None
    selection = catalog.load_runs(runs_dir, scanning)
    if selection.runs.empty:
        return runs_dir, selection.runs, selection.warnings
    selection = catalog.select(selection, arguments, ids, tag)
    return runs_dir, manage.narrow(selection, statuses), selection.warnings


NEWEST = 50  # runs `runs list` shows unless told otherwise: 100,000 lines help nobody


@runs_app.command("list")
@collector_paused()
def runs_list(
    ctx: typer.Context,
    arguments: RunsFilters = None,
    sweep_name: SweepOption = None,
    status: StatusOption = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only runs with this tag.")] = None,
    last: Annotated[int, typer.Option("--last", help="Show the newest N runs.")] = NEWEST,
    every: Annotated[bool, typer.Option("--all", help="Show every run.")] = False,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """One line per run: id, status, key choices, result, age, tags (newest first)."""
    from normbench.core.errors import UsageError
    from normbench.core.text import plain

    try:
        if last < 1:
            raise UsageError(f"--last {last}: valid: an integer >= 1 (or --all)")
        runs_dir, runs, warnings = _runs_selection(
            arguments, runs_dir, status, tag, ctx, sweep_name
        )
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store import manage

    for warning in warnings:
        typer.secho(f"warning: {plain(warning)}", fg="yellow", err=True)
    rows, shared = manage.list_rows(runs, None if every else last)
    headers, cells = list(manage.LISTED), [[plain(str(value)) for value in row] for row in rows]
    if not any(row[-1] for row in cells):  # no run has a tag: no empty column
        headers, cells = headers[:-1], [row[:-1] for row in cells]
    width = terminal().width
    lines = columns(headers, cells, width, wrap=("choices", "tags"), below="choices")
    shared = f"; all with {plain(shared)}" if shared and len(rows) > 1 else ""
    lines.extend(_wrap(f"{len(runs)} run(s) in {plain(str(runs_dir))}{shared}", width))
    if len(rows) < len(runs):
        lines.extend(
            _wrap(
                f"showing the newest {len(rows)}, {len(runs) - len(rows)} left out: --all lists "
                "every run, --last N the newest N",
                width,
            )
        )
    typer.echo("\n".join(lines))  # one write: a line at a time costs seconds for 100,000


def columns(
    headers: list[str],
    rows: list[list[str]],
    width: int,
    wrap: tuple[str, ...],
    below: str | None = None,
) -> list[str]:
    """Lines of a plain table, columns two spaces apart, fitted to ``width`` by wrapping the
    ``wrap`` columns (in that order) onto more lines at spaces, never inside a word. When the
    ``below`` column cannot hold its longest word so, or a row's cell would take more than two
    lines (a word a line), it moves under each row, indented (an 80-column terminal lists
    runs whose ids take half of it). Plain text rather than a rich Table: rich lays out a
    table in a millisecond a row, and a store lists 100,000 runs."""
    wrap = tuple(name for name in wrap if name in headers)
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    words = {name: _longest_word(rows, headers.index(name)) for name in wrap}
    for name in wrap:
        i = headers.index(name)
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess > 0:
            widths[i] = max(len(headers[i]), 10, widths[i] - excess)
    if below in words:
        i = headers.index(below)
        if widths[i] < words[below] or any(  # a word does not fit, or a row takes 3+ lines
            len(row[i]) > widths[i] and len(_wrap(row[i], widths[i])) > 2 for row in rows
        ):
            return _stacked(headers, rows, width, wrap, below)
    line = "  ".join(f"{{:<{w}}}" for w in widths).format  # one C call a line
    lines = [line(*headers).rstrip()]
    wrapped = [headers.index(name) for name in wrap]
    for row in rows:
        long = [i for i in wrapped if len(row[i]) > widths[i]]
        if not long:
            lines.append(line(*row).rstrip())
            continue
        pieces = {i: _wrap(row[i], widths[i]) for i in long}
        for j in range(max(len(piece) for piece in pieces.values())):
            cells = [
                (pieces[i][j] if j < len(pieces[i]) else "")
                if i in pieces
                else (cell if not j else "")
                for i, cell in enumerate(row)
            ]
            lines.append(line(*cells).rstrip())
    return lines


def _stacked(
    headers: list[str], rows: list[list[str]], width: int, wrap: tuple[str, ...], below: str
) -> list[str]:
    """The table without the ``below`` column, each row followed by that cell's lines,
    indented by two spaces (the header names it the same way)."""
    i = headers.index(below)
    rest = [h for h in headers if h != below]
    table = columns(rest, [row[:i] + row[i + 1 :] for row in rows], width, wrap)
    lines, rows_iter = [table[0], f"  {below}"], iter(rows)
    for text in table[1:]:
        if text and not text.startswith(" "):  # a row's first line; wrapped lines follow it
            row = next(rows_iter)
            lines.append(text)
            lines.extend(f"  {piece}" for piece in _wrap(row[i], width - 2) if piece)
        else:
            lines.append(text)
    return lines


def _longest_word(rows: list[list[str]], i: int) -> int:
    return max((len(word) for row in rows for word in row[i].split(" ")), default=0)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces; a longer word stays whole on
    its own line (``norm=groupnorm`` is never cut in two)."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line or not lines else lines


@runs_app.command("show")
def runs_show(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A run id or its prefix.")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """A run's config, status, provenance and summary."""
    import json

    from normbench.core.errors import StoreError, UsageError
    from normbench.core.files import read_text
    from normbench.core.text import plain
    from normbench.store import manage
    from normbench.store.rundir import MAX_BYTES, check_meta

    try:
        run = manage.resolve(runs_dir, pasted_path(run_name, runs_dir, "runs show"))
        config = read_text(run.config_path, MAX_BYTES["config.yaml"], root=runs_dir)
    except (UsageError, StoreError) as err:
        raise fail(str(err)) from None
    except OSError as err:
        raise fail(f"{run.config_path}: {err.strerror}") from None
    try:
        meta = check_meta(run.meta_path, run.read_json("meta.json"))
        unreadable = None
    except (OSError, StoreError) as err:
        meta, unreadable = {}, getattr(err, "strerror", None) or str(err)
    typer.echo(f"# {plain(str(run.path))}")
    for line in config.rstrip().splitlines():
        typer.echo(plain(line))
    typer.echo("# meta.json" + (f": unreadable ({plain(unreadable)})" if unreadable else ""))
    shown = {k: v for k, v in meta.items() if k != "traceback"}
    if shown:  # JSON escapes control characters itself (\u001b)
        typer.echo(json.dumps(shown, indent=2, default=str))
    if isinstance(meta.get("traceback"), str):
        typer.echo("# traceback")
        for line in meta["traceback"].rstrip().splitlines():
            typer.echo(plain(line))


@runs_app.command("diff")
def runs_diff(
    first: Annotated[str, typer.Argument(metavar="A", help="A run id or its prefix.")],
    second: Annotated[str, typer.Argument(metavar="B", help="Another run id or prefix.")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """The config keys (and code, torch, device, data fingerprint) that differ between two
    runs."""
    from rich.table import Table

    from normbench.core.errors import UsageError
    from normbench.report.terminal import cell
    from normbench.store import manage

    try:
        first, second = (pasted_path(name, runs_dir, "runs diff") for name in (first, second))
        a, b = manage.resolve(runs_dir, first), manage.resolve(runs_dir, second)
        rows = manage.diff(a, b)
    except (UsageError, OSError) as err:
        raise fail(str(err)) from None
    if not rows:
        typer.echo(f"{a.run_id} and {b.run_id} have the same config, code, torch, device and data")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("key")
    table.add_column(a.run_id, overflow="fold")
    table.add_column(b.run_id, overflow="fold")
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    terminal().print(table)


@runs_app.command("clean")
def runs_clean(
    ctx: typer.Context,
    arguments: RunsFilters = None,
    status: Annotated[
        str, typer.Option("--status", help="Delete runs with these statuses, e.g. failed.")
    ] = "failed,interrupted,abandoned",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before deleting.")] = False,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Delete runs by status (failed, interrupted and abandoned by default), after asking."""
    from normbench.core.errors import UsageError
    from normbench.core.text import plain

    try:
        runs_dir, runs, warnings = _runs_selection(arguments, runs_dir, status, None, ctx)
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store import manage

    doomed, kept = manage.clean_candidates(runs_dir, runs) if len(runs) else ([], [])
    if "failed" in status.split(",") and not runs_dir_and_filters(arguments, runs_dir)[1]:
        halves = [run for run in manage.half_written(runs_dir) if manage.deletable(run) is None]
        doomed += halves  # named in the selection's warnings as skipped: say what is done
        named = {run.run_id for run in halves}
        warnings = [w for w in warnings if not any(f"skipped {n}:" in w for n in named)]
    for warning in [*warnings, *kept]:
        typer.secho(f"warning: {plain(warning)}", fg="yellow", err=True)
    if doomed and not dry_run and not os.access(runs_dir, os.W_OK):
        raise fail(f"runs clean: {plain(str(runs_dir))} is read-only; nothing deleted")
    for run in doomed:
        typer.echo(f"{'would delete' if dry_run else 'delete'} {plain(run.run_id)}")
    if not doomed:
        typer.echo("nothing to delete")
        return
    if dry_run:
        typer.echo(f"{len(doomed)} run(s) would be deleted (--dry-run)")
        return
    if not yes and not typer.confirm(f"Delete these {len(doomed)} run(s)?", default=False):
        typer.echo("nothing deleted")
        raise typer.Exit(1)
    deleted = 0
    for run in doomed:
        why = manage.delete(run)
        if why is None:
            deleted += 1
        else:
            typer.secho(f"warning: kept {run.run_id}: {plain(why)}", fg="yellow", err=True)
    typer.echo(f"deleted {deleted} run(s)")


@runs_app.command("export")
def runs_export(
    ctx: typer.Context,
    destination: Annotated[
        str,
        typer.Argument(
            metavar="DIR|URI",
            help="tensorboard: a directory (one directory of event files per run); mlflow: a "
            "tracking URI, e.g. sqlite:///mlflow.db",
        ),
    ],
    to: Annotated[str, typer.Option("--to", help="tensorboard | mlflow", show_default=False)],
    arguments: RunsFilters = None,
    experiment: Annotated[
        str, typer.Option("--experiment", help="mlflow: the experiment the runs go to.")
    ] = "normbench",
    sweep_name: SweepOption = None,
    status: StatusOption = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only runs with this tag.")] = None,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Export runs to TensorBoard event files or an MLflow tracking store (again: updated)."""
    from normbench.core.errors import StoreError, UsageError
    from normbench.core.text import plain
    from normbench.store import catalog, manage
    from normbench.store.rundir import real_directory
    from normbench.trackers import mlflow, tensorboard
    from normbench.trackers.runs import tracked_run

    try:
        runs_dir, arguments = runs_dir_and_filters(arguments, runs_dir, ctx)
        statuses = _check_export(to, destination, experiment, runs_dir, status)
        selection, _, _ = catalog.select_runs(runs_dir, arguments, sweep_name, tag)
        runs = manage.narrow(selection, statuses).sort_values("run_id")
        if runs.empty:
            raise UsageError("no runs match: check the runs directory, --sweep, --status, filters")
        # Validated first, written after: the destination is made (the directory, the MLflow
        # store) only once every input is valid and there are runs to export.
        log_dir = Path(destination)
        if to == "tensorboard":  # one that cannot be made is one line, not a skip per run
            real_directory(log_dir.expanduser().resolve())
        if to == "mlflow":
            _quiet_mlflow()
        store = mlflow.MlflowExport(destination, experiment) if to == "mlflow" else None
    except UsageError as err:
        raise fail(str(err)) from None
    for warning in selection.warnings:
        typer.secho(f"warning: {plain(warning)}", fg="yellow", err=True)
    exported = 0
    for row in runs.to_dict("records"):
        try:
            run = tracked_run(row, runs_dir)
            if run.dropped:
                typer.secho(f"warning: {plain(run.run_id)}: {run.dropped}", fg="yellow", err=True)
            if store is None:
                typer.echo(f"wrote {plain(str(tensorboard.export(run, log_dir)))}")
            else:
                typer.echo(f"{store.export(run)} {plain(run.run_id)}")
            exported += 1
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):  # every run after would fail too
                raise fail(
                    f"--to {to} {plain(destination)}: no space left on device "
                    f"({exported} run(s) exported, {plain(row['run_id'])} not)"
                ) from None
            reason = plain(err.strerror or str(err))
            typer.secho(f"warning: skipped {plain(row['run_id'])}: {reason}", fg="yellow", err=True)
        except StoreError as err:
            reason = plain(str(err))
            typer.secho(f"warning: skipped {plain(row['run_id'])}: {reason}", fg="yellow", err=True)
    where = destination if store is None else f"{destination}, experiment {experiment}"
    typer.echo(f"exported {exported} run(s) to {to} {plain(where)}")
    if not exported:  # every run skipped: the warnings above say why
        raise typer.Exit(1)


def _check_export(
    to: str, destination: str, experiment: str, runs_dir: Path, status
) -> list[str] | None:
    """``runs export``'s tracker, its packages, its destination and experiment, refused in one
    line before any run is read; the statuses to export (``--status``)."""
    from normbench.core.errors import UsageError
    from normbench.core.extras import missing
    from normbench.store import manage
    from normbench.trackers import mlflow, tensorboard

    if to not in ("tensorboard", "mlflow"):
        raise UsageError(f"--to {to}: valid: tensorboard, mlflow")
    needs = tensorboard.REQUIRES if to == "tensorboard" else mlflow.requires(destination)
    absent = missing(needs, f"--to {to}")
    if absent:
        raise UsageError(absent)
    statuses = manage.parse_statuses(status)
    if to == "tensorboard":
        check_export_dir(destination, runs_dir)
    if to == "mlflow" and destination.rstrip("/") in ("sqlite:", "sqlite:/", "sqlite:///"):
        raise UsageError(
            f"--to mlflow {destination}: an in-memory database keeps nothing; valid: "
            "sqlite:///FILE.db"
        )
    if to == "mlflow" and not experiment.strip():  # MLflow would refuse it after making the store
        raise UsageError(f"--experiment {experiment!r}: valid: a name, e.g. normbench")
    return statuses


def _quiet_mlflow() -> None:
    """MLflow's INFO lines (``Creating initial MLflow database tables...``) are not the
    export's: warnings only, unless MLFLOW_LOGGING_LEVEL asks for its own level."""
    import logging
    import os

    if "MLFLOW_LOGGING_LEVEL" in os.environ:
        return
    import mlflow  # noqa: F401  (importing it sets its loggers' level: INFO)

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def pasted_path(name: str, runs_dir: Path, command: str) -> str:
    """``runs show runs/<run_id>``: a run's path pasted where its id belongs; refused with the
    command that shows it."""
    from normbench.core.errors import UsageError
    from normbench.store.rundir import is_run_id

    path = Path(name)
    if "/" not in name or not is_run_id(path.name):
        return name
    where = "" if path.parent == runs_dir else f" --runs-dir {path.parent}"
    raise UsageError(
        f"run {name}: a path; {command} takes the run id: normbench {command} {path.name}{where}"
    )


def check_export_dir(destination: str, runs_dir: Path) -> None:
    """A TensorBoard destination named (not ''), outside the runs directory (its folders
    would land among the runs), and usable now (made once the runs to export are known)."""
    from normbench.core.errors import UsageError
    from normbench.trackers.tensorboard import check_destination

    if not destination.strip():
        raise UsageError("--to tensorboard '': name a directory, e.g. board")
    where = Path(destination).expanduser().resolve()
    runs = runs_dir.resolve()
    if where == runs or runs in where.parents:
        raise UsageError(
            f"--to tensorboard {destination}: inside the runs directory {runs_dir}; valid: a "
            "directory outside it"
        )
    check_destination(where, "--to tensorboard ")
