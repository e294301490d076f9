"""The `normbench` command line. Thin: parse, call config/train/store, print.

Nothing heavy is imported at module level, so `normbench --help` and `normbench list` start
without torch; `run` imports it only once the config is valid.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException


class OneLineErrors(TyperGroup):
    """Usage errors that the command-line parser finds (an unknown option, a missing argument,
    a value of the wrong type) in the same one line as normbench's own, exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except TyperException as err:
            raise usage_exit(err) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TyperException as err:
            raise usage_exit(err) from None


def usage_exit(err: TyperException) -> typer.Exit:
    """``normbench: error: No such option: -0 (see normbench run --help)``."""
    context = getattr(err, "ctx", None)
    command = context.command_path if context else "normbench"
    message = " ".join(err.format_message().split())
    typer.echo(f"normbench: error: {message} (see {command} --help)", err=True)
    return typer.Exit(getattr(err, "exit_code", 2))


app = typer.Typer(
    cls=OneLineErrors,
    help="Benchmark normalization layers: which norm, placed where, holds up at which batch "
    "size and precision?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
runs_app = typer.Typer(
    help="List, inspect, compare and clean the runs in a runs directory.",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hydra overrides, e.g. model=cnn norm=groupnorm batch_size=8 train.lr=1e-3",
        show_default=False,
    ),
]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where runs are stored.")]
ConfigDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--config-dir",
        help="A directory of your own options (norm/, model/, data/, placement/, sweep/ YAML "
        "files), searched before NORMBENCH_CONFIG_PATH (repeatable).",
        show_default=False,
    ),
]


def show_version(value: bool) -> None:
    if value:
        from normbench import __version__

        typer.echo(f"normbench {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Benchmark normalization layers: which norm, placed where, holds up at which batch size
    and precision?"""


def fail(message: str) -> typer.Exit:
    """Report bad input in one line on stderr; the caller raises the returned Exit(2)."""
    typer.echo(f"normbench: error: {message}", err=True)
    return typer.Exit(2)


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's kill, a preemption) ends a run like Ctrl-C: recorded, not lost.
    SIGINT is Ctrl-C again whatever the shell did with it (a script's background job starts
    with SIGINT ignored, and Python then leaves it ignored)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@app.command()
def run(
    overrides: Overrides = None,
    cfg: Annotated[bool, typer.Option("--cfg", help="Print the resolved config and exit.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Run again even if complete.")] = False,
    rerun_stale: Annotated[
        bool, typer.Option("--rerun-stale", help="Run again if finished by other code.")
    ] = False,
    runs_dir: RunsDir = Path("runs"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="A label for the run (repeatable).")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="A note kept with the run.")] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Train one model with one norm, placement, batch size and precision."""
    from normbench.config import UsageError, compose, use_config_dirs

    try:
        use_config_dirs(config_dir or [])
        config = compose(overrides or [])
        tags = check_tags(tag or [])
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store import run_id

    if cfg:
        from omegaconf import OmegaConf

        typer.echo(f"# run_id: {run_id(config)}")
        typer.echo(OmegaConf.to_yaml(OmegaConf.create(config)), nl=False)
        return
    from normbench.store import Labels, Rerun
    from normbench.train import run_experiment

    _interrupt_on_sigterm()
    try:
        labels = Labels(tags, note)
        outcome = run_experiment(config, runs_dir, Rerun(force, rerun_stale), not quiet, labels)
    except UsageError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        typer.echo(f"interrupted: metrics so far kept in {runs_dir / run_id(config)}", err=True)
        raise typer.Exit(130) from None
    typer.echo(summary_line(outcome, config))
    if outcome.status == "failed":
        raise typer.Exit(1)


def check_tags(tags: list[str]) -> tuple[str, ...]:
    """Tags are plain words ([A-Za-z0-9._-], at most 64 characters)."""
    import re

    from normbench.config import UsageError

    for tag in tags:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", tag):
            raise UsageError(f"--tag {tag!r}: valid: 1 to 64 of A-Z a-z 0-9 . _ -")
    return tuple(tags)


def summary_line(outcome, config: dict) -> str:
    """One line: status, final val acc (bits per byte for next-byte tasks), steps to target,
    wall time, run dir."""
    s = outcome.summary
    if outcome.status == "failed":
        return f"failed: {outcome.error}  ({outcome.path})"
    target = config["target"]
    comparison = ">=" if target["metric"] == "val_acc" else "<="
    reached = (
        f"step {s['steps_to_target']} ({s['time_to_target_s']:.1f} s)"
        if s.get("steps_to_target")
        else "not reached"
    )
    metric = "bpb" if s.get("final_val_bpb") is not None else "acc"  # next-byte: bits per byte
    val = "-" if s.get(f"final_val_{metric}") is None else f"{s[f'final_val_{metric}']:.4f}"
    test = (
        f"  test {metric} {s[f'test_{metric}']:.4f}" if s.get(f"test_{metric}") is not None else ""
    )
    prefix = ""
    if outcome.skipped and outcome.stale:
        prefix = "skipped, finished by other code (stale; --rerun-stale runs it again): "
    elif outcome.skipped:
        prefix = "skipped, already finished (--force runs it again): "
    return (
        f"{prefix}{outcome.status}  val {metric} {val}{test}  "
        f"{target['metric']} {comparison} {target['value']}: {reached}  "
        f"train {s.get('train_s', 0):.1f} s  wall {s.get('wall_s', 0):.1f} s  {outcome.path}"
    )


@app.command()
def sweep(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            help="[PRESET] [OVERRIDE ...]: a preset from conf/sweep or a config directory, or "
            "a preset file (./grids/mine.yaml) (bare `normbench sweep`: batch_sensitivity) and "
            "Hydra sweep overrides, e.g. norm=batchnorm,groupnorm seed=range(3); launcher "
            "settings as launcher.KEY=VALUE",
            show_default=False,
        ),
    ] = None,
    launcher: Annotated[
        str, typer.Option("--launcher", help="local | slurm | submitit_local")
    ] = "local",
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Local worker processes \\[default: cores]")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "--cfg", help="Print the grid and what would run; exit.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Run every run again.")] = False,
    rerun_stale: Annotated[
        bool, typer.Option("--rerun-stale", help="Run again the runs finished by other code.")
    ] = False,
    runs_dir: RunsDir = Path("runs"),
    name: Annotated[
        str | None, typer.Option("--name", help="Sweep name \\[default: the preset's]")
    ] = None,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="After the grid, add seeds to groups whose verdict is inconclusive, round "
            "after round.",
        ),
    ] = False,
    max_seeds: Annotated[
        int, typer.Option("--max-seeds", help="With --until-decided: seeds per group at most.")
    ] = 8,
    alpha: Annotated[
        float, typer.Option("--alpha", help="With --until-decided: the verdicts' error rate.")
    ] = 0.05,
    margin: Annotated[
        float, typer.Option("--margin", help="With --until-decided: the equivalence margin.")
    ] = 0.01,
    max_runs: Annotated[
        int, typer.Option("--max-runs", help="Refuse grids with more combinations than this.")
    ] = 10_000,
    config_dir: ConfigDirs = None,
) -> None:
    """Run a grid of runs: resumable, in parallel, locally or on SLURM."""
    from datetime import datetime

    from rich.console import Console

    from normbench import adaptive
    from normbench import sweep as sweeps
    from normbench.config import UsageError, use_config_dirs
    from normbench.launchers import check_private, launcher_settings, make_launcher
    from normbench.store import Rerun

    arguments = list(arguments or [])
    preset = arguments.pop(0) if arguments and "=" not in arguments[0] else None
    if preset is None and not arguments:
        preset = sweeps.DEFAULT_PRESET
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    try:
        use_config_dirs(config_dir or [])
        if jobs is not None and jobs < 1:
            raise UsageError(f"--jobs {jobs}: must be at least 1")
        if name is not None:
            sweeps.check_name(name)
        if max_runs < 1:
            raise UsageError(f"--max-runs {max_runs}: valid: an integer >= 1")
        settings = launcher_settings(launcher, settings_overrides)
        if dry_run:
            sweeps.print_plan(
                Console(), preset, overrides, runs_dir, Rerun(force, rerun_stale), max_runs
            )
            return
        grid = sweeps.expand(preset, overrides, max_runs)
        if launcher == "local":
            _check_devices({job.cfg["device"] for job in grid.jobs})
        method = report_method(alpha, margin, None, "chance")
        plan = (
            adaptive.design(grid, max_seeds, method.alpha, method.margin) if until_decided else None
        )
    except UsageError as err:
        raise fail(str(err)) from None
    grid.name = name or grid.name
    rerun = Rerun(force, rerun_stale)
    try:
        planned = sweeps.plan(grid, runs_dir, rerun)
        if launcher != "local":
            check_private(runs_dir)
        record = sweeps.write_record(grid, runs_dir, launcher, datetime.now(), plan)
    except UsageError as err:
        raise fail(str(err)) from None
    console = Console()
    report = f"normbench report --sweep {grid.name}" + (
        f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    )
    folder = runs_dir / "sweeps" / f"{record.stem}.submitit"
    runner = make_launcher(launcher, settings, jobs, runs_dir, rerun, folder)
    console.print(sweeps.plan_summary(grid, planned), soft_wrap=True)
    _interrupt_on_sigterm()
    jobs_so_far, counts, views = list(grid.jobs), {}, []
    todo = planned.todo
    for look in range(1, plan.looks + 1 if plan else 2):
        view = sweeps.LiveView(console, grid, todo, title=f"round {look}" if plan else None)
        views.append(view)
        try:
            if todo:
                with view:
                    runner.launch(todo, view)
        except UsageError as err:  # the cluster refused the submission
            if look == 1 and not view.finished:  # nothing ran: leave nothing behind
                sweeps.discard_record(record, folder)
            else:
                sweeps.finish_record(record, sweeps.add_counts(counts, view.counts), jobs_so_far)
            raise fail(str(err)) from None
        except KeyboardInterrupt:
            sweeps.finish_record(record, sweeps.add_counts(counts, view.counts), jobs_so_far)
            console.print(
                f"interrupted: {view.counts['complete']} runs completed and kept; "
                "run the same command again to finish the rest",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        counts = sweeps.add_counts(counts, view.counts)
        if plan is None or look == plan.looks:
            break
        todo, undecided = adaptive.seeds_to_add(jobs_so_far, runs_dir, plan)
        if not todo:
            console.print(
                f"round {look}: every verdict decided"
                if not undecided
                else f"round {look}: {undecided} group(s) undecided, all at "
                f"--max-seeds {plan.max_seeds}",
                soft_wrap=True,
            )
            break
        console.print(
            f"round {look + 1}: {undecided} group(s) undecided; {len(todo)} more seed(s)",
            soft_wrap=True,
        )
        jobs_so_far += todo
        sweeps.finish_record(record, counts, jobs_so_far, finished=False)
    summary = sweeps.finish_record(record, counts, jobs_so_far)
    console.line()
    console.print(sweeps.summary_table(grid, views))
    if plan:
        _, undecided = adaptive.seeds_to_add(jobs_so_far, runs_dir, plan)
        console.print(
            f"until decided: {len(views)} round(s), {len(jobs_so_far)} runs against "
            f"{plan.fixed_runs} for the fixed design ({plan.groups} groups x {plan.max_seeds} "
            f"seeds); {undecided} group(s) still inconclusive; alpha {plan.method.alpha} split "
            f"over {plan.looks} possible looks",
            soft_wrap=True,
        )
    console.print(f"results: {report}", soft_wrap=True)
    if summary.get("failed"):
        raise typer.Exit(1)


@app.command()
def report(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            help="[RUNS_DIR] [FILTER ...]: filters in override syntax, e.g. model=cnn "
            "norm=batchnorm,groupnorm",
            show_default=False,
        ),
    ] = None,
    sweep_name: Annotated[
        str | None,
        typer.Option("--sweep", help="Only this sweep's runs (its latest record); a,b: several."),
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Group by these keys (comma-separated).")
    ] = None,
    best_over: Annotated[
        str | None,
        typer.Option(
            "--best-over",
            help="Per group, keep the value of this key that is best on validation; verdicts "
            "then use test.",
        ),
    ] = None,
    alpha: Annotated[
        float, typer.Option("--alpha", help="Error rate of every verdict, in (0, 1).")
    ] = 0.05,
    margin: Annotated[
        float,
        typer.Option("--margin", help="Largest difference that counts as equivalent (> 0)."),
    ] = 0.01,
    reference_batch: Annotated[
        int | None,
        typer.Option(
            "--reference-batch", help="Batch compared with the smallest \\[default: the largest]."
        ),
    ] = None,
    diverged: Annotated[
        str,
        typer.Option("--diverged", help="chance: diverged runs count at chance | exclude"),
    ] = "chance",
    fmt: Annotated[str, typer.Option("--format", help="rich | csv | markdown | json")] = "rich",
    table: Annotated[
        str | None,
        typer.Option(
            "--table",
            help="convergence | batch_sensitivity | precision | lr_stability | depth_stability"
            " | diagnostics_init | diagnostics",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the tables here.")] = None,
    plots: Annotated[
        Path | None, typer.Option("--plots", help="Write PNG figures into this directory.")
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Write one self-contained HTML file: tables, figures, commands."
        ),
    ] = None,
    x: Annotated[
        str | None,
        typer.Option(
            "--x",
            help="Figures' x axis: steps | samples | epochs | time \\[default: samples when "
            "batch sizes differ, else steps]",
        ),
    ] = None,
    diagnostics: Annotated[
        bool,
        typer.Option("--diagnostics", help="Show runs' diagnostics (trained diagnostics=true)."),
    ] = False,
    tag: Annotated[str | None, typer.Option("--tag", help="Only runs with this tag.")] = None,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Compare runs: verdicts against the best, batch-size sensitivity and precision."""
    from normbench import catalog, render, tables
    from normbench.config import UsageError

    arguments = list(arguments or [])
    if arguments and "=" not in arguments[0]:
        runs_dir = Path(arguments.pop(0))
    try:
        method = report_method(alpha, margin, reference_batch, diverged)
        if fmt not in ("rich", "csv", "markdown", "json"):
            raise UsageError(f"--format {fmt}: valid: rich, csv, markdown, json")
        if x is not None:
            from normbench.plots import check_x

            check_x(x)
            if plots is None and html is None:
                raise UsageError(f"--x {x}: for figures; add --plots DIR or --html FILE")
        selection = catalog.load_runs(runs_dir)
        if sweep_name:
            ids, looks, sweep_commands = catalog.sweep_run_ids(runs_dir, sweep_name)
            method = tables.Method(**{**method.__dict__, "looks": looks})
        else:
            ids, sweep_commands = None, []
        selection = catalog.select(selection, arguments, ids, tag)
        result = tables.build(selection, by.split(",") if by else None, best_over, method)
        if diagnostics:
            attach_diagnostics(result, runs_dir)
        text = None if fmt == "rich" else render_text(result, fmt, table, out)
    except UsageError as err:
        raise fail(str(err)) from None
    for warning in result.warnings:
        typer.secho(f"warning: {render.plain(warning)}", fg="yellow", err=True)
    if text is not None and out is None:
        typer.echo(text, nl=False)
    elif text is not None:
        for path, content in text.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            typer.echo(f"wrote {path}", err=True)
    else:
        console = terminal()
        statuses = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
        console.print(f"{sum(result.counts.values())} runs ({statuses})", soft_wrap=True)
        for renderable in render.rich_renderables(result, table):
            console.print(renderable)
        if diagnostics:
            for section in result.sections:
                for name, when in render.DIAGNOSTICS_WHEN.items():
                    if section.tables[name] is not None:
                        table = render.diagnostics_rich(section.tables[name], section.keys, when)
                        for renderable in render.caption_below(table):
                            console.print(renderable)
    if plots is not None or html is not None:
        from normbench import plots as figures

        drawings = figures.draw(result, runs_dir, x, lambda line: typer.echo(line, err=True))
        try:
            for path in figures.write_pngs(result, drawings, plots) if plots else []:
                typer.echo(f"wrote {path}", err=True)
            if html is not None:
                from normbench.html import write_html

                write_html(html, result, drawings, sys.argv, sweep_commands)
                typer.echo(f"wrote {html}", err=True)
        except OSError as err:
            raise fail(f"cannot write {err.filename}: {err.strerror}") from None


def report_method(alpha: float, margin: float, reference_batch: int | None, diverged: str):
    """The report's options as a tables.Method, each refused in one line when out of range."""
    import math

    from normbench.config import UsageError
    from normbench.tables import Method

    if not 0 < alpha < 1:
        raise UsageError(f"--alpha {alpha}: valid: a number strictly between 0 and 1")
    if not (margin > 0 and math.isfinite(margin)):
        raise UsageError(f"--margin {margin}: valid: a positive number (in the metric's units)")
    if reference_batch is not None and reference_batch < 1:
        raise UsageError(f"--reference-batch {reference_batch}: valid: a per-device batch >= 1")
    if diverged not in ("chance", "exclude"):
        raise UsageError(f"--diverged {diverged}: valid: chance, exclude")
    return Method(alpha, margin, diverged, reference_batch=reference_batch)


def attach_diagnostics(result, runs_dir: Path) -> None:
    from normbench.config import UsageError
    from normbench.tables import diagnostics_table

    found = False
    for section in result.sections:
        for name, at in (("diagnostics_init", "first"), ("diagnostics", "last")):
            section.tables[name] = diagnostics_table(section.runs, section.keys, runs_dir, at)
        found = found or section.tables["diagnostics"] is not None
    if not found:
        raise UsageError("--diagnostics: none of these runs was trained with diagnostics=true")


def render_text(result, fmt: str, table: str | None, out: Path | None):
    """The report as text: a string for stdout, or {path: text} when writing ``--out``. CSV
    holds one table: several go to one file each (FILE-NAME.csv), or --table picks one."""
    from normbench import render
    from normbench.config import UsageError

    if fmt == "markdown":
        text = render.markdown(result, table)
    elif fmt == "json":
        text = render.to_json(result, table)
    else:
        chosen = render.chosen_tables(result, table)
        if len(chosen) > 1 and out is None:
            raise UsageError(
                f"--format csv: this report has {len(chosen)} tables; pick one with --table "
                f"({', '.join(chosen)}) or write one file each with --out FILE.csv"
            )
        if out is not None and len(chosen) > 1:
            return {
                out.with_name(f"{out.stem}-{name}{out.suffix or '.csv'}"): render.to_csv(frame)
                for name, frame in chosen.items()
            }
        text = render.to_csv(next(iter(chosen.values())))
    return text if out is None else {out: text}


def terminal():
    """A rich console; piped output honours COLUMNS (default 100) rather than 80."""
    import os

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 20 else 100)


def _check_devices(devices: set[str]) -> None:
    """A device the sweep names must exist here (imports torch only when one is named)."""
    wanted = devices - {"auto", "cpu"}
    if wanted:
        from normbench.train import resolve_device

        for device in wanted:
            resolve_device(device)


RunsFilters = Annotated[
    list[str] | None,
    typer.Argument(
        help="[RUNS_DIR] [FILTER ...]: filters in override syntax, e.g. norm=batchnorm",
        show_default=False,
    ),
]
StatusOption = Annotated[
    str | None,
    typer.Option("--status", help="Only these statuses, e.g. failed,interrupted."),
]


def _runs_selection(arguments: list[str] | None, runs_dir: Path, status: str | None, tag):
    """The runs of `runs list` / `runs clean`: a runs directory, filters, statuses, a tag."""
    from normbench import catalog, manage

    arguments = list(arguments or [])
    if arguments and "=" not in arguments[0]:
        runs_dir = Path(arguments.pop(0))
    statuses = manage.parse_statuses(status)
    selection = catalog.load_runs(runs_dir)
    if selection.runs.empty:
        return runs_dir, selection.runs, selection.warnings
    selection = catalog.select(selection, arguments, None, tag)
    return runs_dir, manage.narrow(selection, statuses), selection.warnings


@runs_app.command("list")
def runs_list(
    arguments: RunsFilters = None,
    status: StatusOption = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only runs with this tag.")] = None,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """One line per run: id, status, key choices, result, age, tags (newest first)."""
    from rich.table import Table

    from normbench import manage, render
    from normbench.config import UsageError

    try:
        runs_dir, runs, warnings = _runs_selection(arguments, runs_dir, status, tag)
    except UsageError as err:
        raise fail(str(err)) from None
    for warning in warnings:
        typer.secho(f"warning: {render.plain(warning)}", fg="yellow", err=True)
    rows, shared = manage.list_rows(runs)
    table = Table(box=None, pad_edge=False)
    table.add_column("run id", no_wrap=True)
    for column in ("status", "choices", "result", "age", "tags"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(render.cell(value) for value in row.values()))
    console = terminal()
    console.print(table)
    shared = f"; all with {render.plain(shared)}" if shared and len(rows) > 1 else ""
    console.print(f"{len(runs)} run(s) in {render.plain(str(runs_dir))}{shared}", soft_wrap=True)


@runs_app.command("show")
def runs_show(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="A run id or its prefix.")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """A run's config, status, provenance and summary."""
    import json

    from normbench import manage
    from normbench.config import UsageError

    try:
        run = manage.resolve(runs_dir, run_name)
        meta = run.read_meta()
        config = (run.path / "config.yaml").read_text()
    except (UsageError, OSError) as err:
        raise fail(str(err)) from None
    typer.echo(f"# {run.path}")
    typer.echo(config.rstrip())
    shown = {k: v for k, v in (meta or {}).items() if k != "traceback"}
    typer.echo("# meta.json")
    typer.echo(json.dumps(shown, indent=2, default=str))
    if meta and meta.get("traceback"):
        typer.echo("# traceback")
        typer.echo(meta["traceback"].rstrip())


@runs_app.command("diff")
def runs_diff(
    first: Annotated[str, typer.Argument(metavar="A", help="A run id or its prefix.")],
    second: Annotated[str, typer.Argument(metavar="B", help="Another run id or prefix.")],
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """The config keys (and code, torch, device) that differ between two runs."""
    from rich.table import Table

    from normbench import manage, render
    from normbench.config import UsageError

    try:
        a, b = manage.resolve(runs_dir, first), manage.resolve(runs_dir, second)
        rows = manage.diff(a, b)
    except (UsageError, OSError) as err:
        raise fail(str(err)) from None
    if not rows:
        typer.echo(f"{a.run_id} and {b.run_id} have the same config, code, torch and device")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("key")
    table.add_column(a.run_id, overflow="fold")
    table.add_column(b.run_id, overflow="fold")
    for row in rows:
        table.add_row(*(render.cell(value) for value in row))
    terminal().print(table)


@runs_app.command("clean")
def runs_clean(
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
    """Delete runs by status (failed and interrupted by default), after asking."""
    from normbench import manage, render
    from normbench.config import UsageError

    try:
        runs_dir, runs, _ = _runs_selection(arguments, runs_dir, status, None)
    except UsageError as err:
        raise fail(str(err)) from None
    doomed = manage.clean_candidates(runs_dir, runs) if len(runs) else []
    for run in doomed:
        typer.echo(f"{'would delete' if dry_run else 'delete'} {render.plain(run.run_id)}")
    if not doomed:
        typer.echo("nothing to delete")
        return
    if dry_run:
        typer.echo(f"{len(doomed)} run(s) would be deleted (--dry-run)")
        return
    if not yes and not typer.confirm(f"Delete these {len(doomed)} run(s)?", default=False):
        typer.echo("nothing deleted")
        raise typer.Exit(1)
    for run in doomed:
        manage.delete(run)
    typer.echo(f"deleted {len(doomed)} run(s)")


@app.command(
    "list", short_help="What can be chosen, where each choice comes from, what is refused."
)
def list_choices(config_dir: ConfigDirs = None) -> None:
    """What can be chosen (models, norms, placements, data, precisions, sweep presets), where
    each comes from, and what is refused."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from normbench.config import (
        DEVICES,
        GROUPS,
        PLUGIN_GROUPS,
        RULES,
        UsageError,
        describe_option,
        options,
        use_config_dirs,
    )
    from normbench.sweep import presets

    try:
        use_config_dirs(config_dir or [])
        choices = {group: options(group) for group in GROUPS}
        preset_files = presets()
    except UsageError as err:
        raise fail(str(err)) from None
    console = Console()
    for group in GROUPS:
        table = Table(title=f"{group}=", title_justify="left", show_header=False)
        for name, option in choices[group].items():
            description = Text(describe_option(group, name))
            if option.source != "normbench":  # where a plugin comes from, on its own line
                description.append(f"\nfrom {option.source}", style="dim")
            table.add_row(name, description)
        if group in PLUGIN_GROUPS:
            table.add_row(
                "package.module:Object", f"your own {group} by import path (docs/your-own-norm.md)"
            )
        console.print(table)
    console.print(f"device=  {' | '.join(DEVICES)}")
    console.print(f"sweep presets:  {' | '.join(preset_files)}", soft_wrap=True)
    refused = Table(title="Refused before training", title_justify="left", show_header=False)
    for rule in RULES:
        refused.add_row(rule.summary)
    console.print(refused)


@app.command(
    "check-norm", short_help="Does a norm keep the contract every model relies on? (exit 0: yes)"
)
def check_norm(
    target: Annotated[
        str,
        typer.Argument(
            metavar="NORM",
            help="A norm: a shipped one (groupnorm), an installed plugin or config-directory "
            "option by name, or an import path (mypkg.norms:PowerNorm).",
        ),
    ],
    keys: Annotated[
        list[str] | None,
        typer.Argument(
            help="The norm's options as key=value, e.g. groups=4 p=3.", show_default=False
        ),
    ] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Does a norm keep the contract every model relies on? One row per check and layout;
    exit 0 only when every check holds (1 when one fails, 2 for bad input)."""
    from normbench.config import UsageError, compose, use_config_dirs

    overrides = [f"norm={target}"] + [
        key if key.startswith("norm.") else f"norm.{key}" for key in keys or []
    ]
    try:
        use_config_dirs(config_dir or [])
        config = compose(["device=cpu", *overrides], probe=False)
    except UsageError as err:
        raise fail(str(err)) from None
    from rich.table import Table
    from rich.text import Text

    from normbench import conformance
    from normbench.norms import norm_options
    from normbench.store import plain

    cls, norm_keys = norm_options(config["norm"])
    rows = conformance.check_norm(cls, norm_keys)
    cells: dict[str, dict[str, Text]] = {}
    for row in rows:
        mark = (
            Text("holds", "green")
            if row.passed
            else Text.assemble(("FAILS ", "red"), plain(row.detail))
        )
        cells.setdefault(row.name, {})[row.layout] = mark
    table = Table(title=Text(f"norm={plain(config['norm']['name'])}"), title_justify="left")
    table.add_column("check", no_wrap=True)
    for layout in conformance.LAYOUTS:
        table.add_column(layout, overflow="fold")
    for name, by_layout in cells.items():
        table.add_row(name, *(by_layout.get(layout, "-") for layout in conformance.LAYOUTS))
    console = terminal()
    console.print(table)
    failed = [row for row in rows if not row.passed]
    console.print(
        f"{len(rows) - len(failed)} of {len(rows)} checks hold"
        + ("" if failed else ": the norm keeps the contract"),
        soft_wrap=True,
    )
    if failed:
        raise typer.Exit(1)


def main() -> None:
    app(prog_name="normbench")


if __name__ == "__main__":
    sys.exit(main())
