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

app = typer.Typer(
    help="Benchmark normalization layers: which norm, placed where, holds up at which batch "
    "size and precision?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Hydra overrides, e.g. model=cnn norm=groupnorm batch_size=8 train.lr=1e-3",
        show_default=False,
    ),
]
RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where runs are stored.")]


def fail(message: str) -> typer.Exit:
    """Report bad input in one line on stderr; the caller raises the returned Exit(2)."""
    typer.echo(f"normbench: error: {message}", err=True)
    return typer.Exit(2)


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's kill, a preemption) ends a run like Ctrl-C: recorded, not lost."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@app.command()
def run(
    overrides: Overrides = None,
    cfg: Annotated[bool, typer.Option("--cfg", help="Print the resolved config and exit.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Run again even if complete.")] = False,
    runs_dir: RunsDir = Path("runs"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train one model with one norm, placement, batch size and precision."""
    from normbench.config import UsageError, compose

    try:
        config = compose(overrides or [])
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store import run_id

    if cfg:
        from omegaconf import OmegaConf

        typer.echo(f"# run_id: {run_id(config)}")
        typer.echo(OmegaConf.to_yaml(OmegaConf.create(config)), nl=False)
        return
    from normbench.train import run_experiment

    _interrupt_on_sigterm()
    try:
        outcome = run_experiment(config, runs_dir, force=force, progress=not quiet)
    except UsageError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        typer.echo(f"interrupted: metrics so far kept in {runs_dir / run_id(config)}", err=True)
        raise typer.Exit(130) from None
    typer.echo(summary_line(outcome, config))
    if outcome.status == "failed":
        raise typer.Exit(1)


def summary_line(outcome, config: dict) -> str:
    """One line: status, final val acc, steps to target, wall time, run dir."""
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
    val = "-" if s.get("final_val_acc") is None else f"{s['final_val_acc']:.4f}"
    test = f"  test acc {s['test_acc']:.4f}" if s.get("test_acc") is not None else ""
    prefix = "skipped, already finished (--force runs it again): " if outcome.skipped else ""
    return (
        f"{prefix}{outcome.status}  val acc {val}{test}  "
        f"{target['metric']} {comparison} {target['value']}: {reached}  "
        f"train {s.get('train_s', 0):.1f} s  wall {s.get('wall_s', 0):.1f} s  {outcome.path}"
    )


@app.command()
def sweep(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            help="[PRESET] [OVERRIDE ...]: a preset from conf/sweep (bare `normbench sweep`: "
            "batch_sensitivity) and Hydra sweep overrides, e.g. norm=batchnorm,groupnorm "
            "seed=range(3); launcher settings as launcher.KEY=VALUE",
            show_default=False,
        ),
    ] = None,
    launcher: Annotated[
        str, typer.Option("--launcher", help="local | slurm | submitit_local")
    ] = "local",
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Local worker processes [default: cores]")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "--cfg", help="Print the grid and what would run; exit.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Run every run again.")] = False,
    runs_dir: RunsDir = Path("runs"),
    name: Annotated[
        str | None, typer.Option("--name", help="Sweep name [default: the preset's]")
    ] = None,
) -> None:
    """Run a grid of runs: resumable, in parallel, locally or on SLURM."""
    from datetime import datetime

    from rich.console import Console

    from normbench import sweep as sweeps
    from normbench.config import UsageError
    from normbench.launchers import launcher_settings, make_launcher

    arguments = list(arguments or [])
    preset = arguments.pop(0) if arguments and "=" not in arguments[0] else None
    if preset is None and not arguments:
        preset = sweeps.DEFAULT_PRESET
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    try:
        if jobs is not None and jobs < 1:
            raise UsageError(f"--jobs {jobs}: must be at least 1")
        if name is not None and (not name or "/" in name or name.startswith(".")):
            raise UsageError(f"--name {name!r}: a sweep name is a plain file name")
        settings = launcher_settings(launcher, settings_overrides)
        grid = sweeps.expand(preset, overrides)
        if launcher == "local":
            _check_devices({job.cfg["device"] for job in grid.jobs})
    except UsageError as err:
        raise fail(str(err)) from None
    grid.name = name or grid.name
    todo, statuses = sweeps.plan(grid, runs_dir, force)
    console = Console()
    if dry_run:
        console.print(sweeps.plan_table(grid, statuses, force))
        console.print(sweeps.plan_summary(grid, todo, statuses), soft_wrap=True)
        return
    report = f"normbench report --sweep {grid.name}" + (
        f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    )
    started = datetime.now()
    record = sweeps.write_record(grid, runs_dir, launcher, started)
    folder = runs_dir / "sweeps" / f"{record.stem}.submitit"
    runner = make_launcher(launcher, settings, jobs, runs_dir, force, folder)
    console.print(sweeps.plan_summary(grid, todo, statuses), soft_wrap=True)
    view = sweeps.LiveView(console, grid, todo)
    _interrupt_on_sigterm()
    try:
        if todo:
            with view:
                runner.launch(todo, view)
    except UsageError as err:  # the cluster refused the submission: nothing ran
        sweeps.discard_record(record, folder)
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        sweeps.finish_record(record, dict(view.counts))
        console.print(
            f"interrupted: {view.counts['complete']} runs completed and kept; "
            "run the same command again to finish the rest",
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    sweeps.finish_record(record, dict(view.counts))
    console.line()
    console.print(sweeps.summary_table(grid, view))
    console.print(f"results: {report}", soft_wrap=True)
    if view.counts["failed"]:
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
        str | None, typer.Option("--sweep", help="Only this sweep's runs (its latest record).")
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Group by these keys (comma-separated).")
    ] = None,
    best_over: Annotated[
        str | None,
        typer.Option("--best-over", help="Per group, keep the best value of this key."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="rich | csv | markdown | json")] = "rich",
    table: Annotated[
        str | None,
        typer.Option("--table", help="convergence | batch_sensitivity | precision"),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the tables here.")] = None,
    plots: Annotated[
        Path | None, typer.Option("--plots", help="Write PNG figures into this directory.")
    ] = None,
    diagnostics: Annotated[
        bool,
        typer.Option("--diagnostics", help="Show runs' diagnostics (trained diagnostics=true)."),
    ] = False,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Compare runs: convergence, batch-size sensitivity and precision, seeds aggregated."""
    from normbench import report as reports
    from normbench.config import UsageError

    arguments = list(arguments or [])
    if arguments and "=" not in arguments[0]:
        runs_dir = Path(arguments.pop(0))
    try:
        if fmt not in ("rich", "csv", "markdown", "json"):
            raise UsageError(f"--format {fmt}: valid: rich, csv, markdown, json")
        selection = reports.load_runs(runs_dir)
        ids = reports.sweep_run_ids(runs_dir, sweep_name) if sweep_name else None
        selection = reports.select(selection, arguments, ids)
        result = reports.build(selection, by.split(",") if by else None, best_over)
        if diagnostics:
            found = reports.diagnostics_table(selection.runs, result.keys, runs_dir)
            if found is None:
                raise UsageError(
                    "--diagnostics: none of these runs was trained with diagnostics=true"
                )
            result.tables["diagnostics"] = found
        text = None if fmt == "rich" else reports.render(result, fmt, table)
    except UsageError as err:
        raise fail(str(err)) from None
    for warning in result.warnings:
        typer.secho(f"warning: {warning}", fg="yellow", err=True)
    if text is not None and out is None:
        typer.echo(text, nl=False)
    elif text is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)
    else:
        from rich.console import Console

        # Piped output has no terminal width: give the tables room instead of 80 columns.
        console = Console() if sys.stdout.isatty() else Console(width=160)
        statuses = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
        console.print(
            f"{sum(result.counts.values())} runs ({statuses}); grouped by "
            f"{', '.join(result.keys) or 'nothing (one group)'}",
            soft_wrap=True,
        )
        for renderable in reports.rich_tables(result):
            console.print(renderable)
        if diagnostics:
            console.print(reports.diagnostics_rich(result.tables["diagnostics"], result.keys))
    if plots is not None:
        from normbench.plots import write_plots

        for path in write_plots(selection.runs, result, runs_dir, plots):
            typer.echo(f"wrote {path}", err=True)


def _check_devices(devices: set[str]) -> None:
    """A device the sweep names must exist here (imports torch only when one is named)."""
    wanted = devices - {"auto", "cpu"}
    if wanted:
        from normbench.train import resolve_device

        for device in wanted:
            resolve_device(device)


@app.command("list")
def list_choices() -> None:
    """What can be chosen (models, norms, placements, data, precisions) and what is refused."""
    from rich.console import Console
    from rich.table import Table

    from normbench.config import DEVICES, GROUPS, RULES, describe_option, group_options

    console = Console()
    for group in GROUPS:
        table = Table(title=f"{group}=", title_justify="left", show_header=False)
        for option in group_options(group):
            table.add_row(option, describe_option(group, option))
        console.print(table)
    console.print(f"device=  {' | '.join(DEVICES)}")
    refused = Table(title="Refused before training", title_justify="left", show_header=False)
    for rule in RULES:
        refused.add_row(rule.summary)
    console.print(refused)


def main() -> None:
    app(prog_name="normbench")


if __name__ == "__main__":
    sys.exit(main())
