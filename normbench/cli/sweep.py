"""`normbench sweep`: a grid of runs, locally or on SLURM, until decided if asked."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import ConfigDirs, RunsDir, app, fail, interrupt_on_sigterm


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
    reference: Annotated[
        list[str] | None,
        typer.Option(
            "--reference",
            help="With --until-decided: compare with this group, named before looking: "
            "KEY=VALUE (repeatable) \\[default: the best group]",
            show_default=False,
        ),
    ] = None,
    max_runs: Annotated[
        int, typer.Option("--max-runs", help="Refuse grids with more combinations than this.")
    ] = 10_000,
    config_dir: ConfigDirs = None,
) -> None:
    """Run a grid of runs: resumable, in parallel, locally or on SLURM."""
    from datetime import datetime

    from rich.console import Console

    from normbench.core.errors import UsageError
    from normbench.experiment.options import use_config_dirs
    from normbench.report.tables import Method
    from normbench.store.records import check_name
    from normbench.store.rundir import Rerun
    from normbench.sweeps import adaptive, live, precheck
    from normbench.sweeps import grid as grids
    from normbench.sweeps import plan as planning
    from normbench.sweeps.launchers import check_private, launcher_settings, make_launcher
    from normbench.sweeps.presets import DEFAULT_PRESET

    arguments = list(arguments or [])
    preset = arguments.pop(0) if arguments and "=" not in arguments[0] else None
    if preset is None and not arguments:
        preset = DEFAULT_PRESET
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    try:
        use_config_dirs(config_dir or [])
        if preset is not None and not preset.strip():
            raise UsageError("sweep '': valid: a preset's name or file, or KEY=VALUE overrides")
        if jobs is not None and jobs < 1:
            raise UsageError(f"--jobs {jobs}: must be at least 1")
        if name is not None:
            check_name(name)
        if max_runs < 1:
            raise UsageError(f"--max-runs {max_runs}: valid: an integer >= 1")
        settings = launcher_settings(launcher, settings_overrides)
        if dry_run and not until_decided:  # streamed: checked from the jobs' overrides
            devices, folders = precheck.settings_of(preset, overrides, max_runs)
            if launcher == "local":
                _check_devices(devices)
            precheck.destinations(folders)
            planning.print_plan(
                Console(), preset, overrides, runs_dir, Rerun(force, rerun_stale), max_runs
            )
            return
        grid = grids.expand(preset, overrides, max_runs)
        if launcher == "local":
            _check_devices({job.cfg["device"] for job in grid.jobs})
        method = Method.from_options(alpha, margin, reference=reference or [])
        plan = adaptive.design(grid, max_seeds, method) if until_decided else None
        if plan is not None:  # what later rounds need, before the first trains
            precheck.until_decided(grid, plan)
        precheck.destinations({job.cfg["log"]["tensorboard"] for job in grid.jobs})
        if dry_run:
            planning.print_plan(
                Console(), preset, overrides, runs_dir, Rerun(force, rerun_stale), max_runs
            )
            return
    except UsageError as err:
        raise fail(str(err)) from None
    grid.name = name or grid.name
    rerun = Rerun(force, rerun_stale)
    try:
        planned = planning.plan(grid, runs_dir, rerun)
        if launcher != "local":
            check_private(runs_dir)
        record = planning.write_record(grid, runs_dir, launcher, datetime.now(), plan)
    except UsageError as err:
        raise fail(str(err)) from None
    except OSError as err:  # a read-only or full runs directory: before any run trains
        raise fail(f"cannot write the sweep record in {runs_dir}: {err.strerror}") from None
    console = Console()
    report = f"normbench report --sweep {grid.name}" + (
        f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    )
    folder = runs_dir / "sweeps" / f"{record.stem}.submitit"
    runner = make_launcher(launcher, settings, jobs, runs_dir, rerun, folder)
    console.print(planning.plan_summary(grid, planned), soft_wrap=True)
    interrupt_on_sigterm()
    with contextlib.closing(runner):  # the local pool serves every round
        jobs_so_far, counts, views = list(grid.jobs), {}, []
        todo, first, look = planned.todo, None, 1
        for look in range(1, plan.looks + 1 if plan else 2):
            view = live.LiveView(console, grid, todo, title=f"round {look}" if plan else None)
            views.append(view)
            design = plan.record(look) if plan else None
            try:
                if todo:
                    with view:
                        runner.launch(todo, view)
            except UsageError as err:  # the cluster refused the submission
                if look == 1 and not view.finished:  # nothing ran: leave nothing behind
                    planning.discard_record(record, folder)
                else:
                    planning.finish_record(
                        record, planning.add_counts(counts, view.counts), jobs_so_far, True, design
                    )
                raise fail(str(err)) from None
            except KeyboardInterrupt:
                planning.finish_record(
                    record, planning.add_counts(counts, view.counts), jobs_so_far, True, design
                )
                console.print(
                    f"interrupted: {view.counts['complete']} runs completed and kept; "
                    "run the same command again to finish the rest",
                    soft_wrap=True,
                )
                raise typer.Exit(130) from None
            counts = planning.add_counts(counts, view.counts)
            if plan is None:
                break
            now = adaptive.look_at(jobs_so_far, runs_dir, plan.at(look))
            if look == 1:  # the grid alone, reported as a fixed design (full alpha)
                first = adaptive.tally(
                    adaptive.look_at(jobs_so_far, runs_dir, method), len(jobs_so_far)
                )
            todo, undecided = adaptive.seeds_to_add(jobs_so_far, now, plan)
            if not todo or look == plan.looks:
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
            planning.finish_record(record, counts, jobs_so_far, False, plan.record(look + 1))
    try:
        summary = planning.finish_record(
            record, counts, jobs_so_far, True, plan.record(look) if plan else None
        )
    except OSError as err:  # a full disk: the runs say what they did; the record could not
        summary = counts
        typer.secho(f"warning: cannot update {record}: {err.strerror}", fg="yellow", err=True)
    console.line()
    console.print(live.summary_table(grid, views))
    if plan:
        final = adaptive.tally(
            adaptive.look_at(jobs_so_far, runs_dir, plan.at(look)), len(jobs_so_far)
        )
        console.print(
            f"until decided: {look} round(s): {final.text()}; the grid alone, a fixed design "
            f"of {plan.first_seeds} seed(s) per group: {first.text()}; a fixed design of "
            f"{plan.max_seeds} seeds per group would take {plan.fixed_runs} runs; alpha "
            f"{plan.method.alpha} spent over {plan.looks} possible looks (O'Brien-Fleming "
            f"type), {plan.at(look).level:.4g} at look {look}",
            soft_wrap=True,
        )
    console.print(f"results: {report}", soft_wrap=True)
    if summary.get("failed"):
        raise typer.Exit(1)


def _check_devices(devices: set[str]) -> None:
    """A device the sweep names must exist here (imports torch only when one is named)."""
    wanted = devices - {"auto", "cpu"}
    if wanted:
        from normbench.training.run import resolve_device

        for device in wanted:
            resolve_device(device)
