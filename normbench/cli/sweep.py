"""`normbench sweep`: a grid of runs, locally or on SLURM, until decided if asked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    ConfigDirs,
    RunsDir,
    app,
    board_note,
    complete_sweep,
    fail,
    interrupt_on_sigterm,
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
            autocompletion=complete_sweep,
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
            help="With --until-decided or --tune: compare with this group, named before looking: "
            "KEY=VALUE (repeatable) \\[default: the best group]",
            show_default=False,
        ),
    ] = None,
    max_runs: Annotated[
        int, typer.Option("--max-runs", help="Refuse grids with more combinations than this.")
    ] = 10_000,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Bare `normbench sweep`: start without asking.")
    ] = False,
    tune: Annotated[
        list[str] | None,
        typer.Option(
            "--tune",
            help="Tune this key per group, then confirm on fresh seeds: KEY=v1,v2,... "
            "(repeatable; a preset's tune: too). Chosen on validation by successive halving at "
            "an equal budget; verdicts on test from the confirmation seeds",
            show_default=False,
        ),
    ] = None,
    tune_seeds: Annotated[
        int, typer.Option("--tune-seeds", help="With --tune: tuning seeds per candidate.")
    ] = 2,
    tune_trials: Annotated[
        int | None,
        typer.Option(
            "--tune-trials",
            help="With --tune: candidates per group \\[default: the smallest group's space]",
        ),
    ] = None,
    eta: Annotated[
        int, typer.Option("--eta", help="With --tune: successive halving keeps 1/eta per rung.")
    ] = 3,
    tune_extend: Annotated[
        bool,
        typer.Option(
            "--tune-extend/--no-tune-extend",
            help="With --tune: a choice at an edge of a key's values is tried one step beyond "
            "it at the full budget",
        ),
    ] = True,
    config_dir: ConfigDirs = None,
) -> None:
    """Run a grid of runs: resumable, in parallel, locally or on SLURM."""
    from rich.console import Console

    from normbench.core.errors import UsageError
    from normbench.experiment.options import use_config_dirs
    from normbench.store.records import check_name
    from normbench.store.rundir import Rerun
    from normbench.sweeps import adaptive, live, precheck, tuned
    from normbench.sweeps import grid as grids
    from normbench.sweeps import plan as planning
    from normbench.sweeps.launchers import launcher_settings
    from normbench.sweeps.presets import DEFAULT_PRESET
    from normbench.sweeps.session import (
        Fixed,
        Launch,
        Session,
        UntilDecided,
        check_devices,
        looks_text,
        run_rounds,
    )

    arguments = list(arguments or [])
    preset = arguments.pop(0) if arguments and "=" not in arguments[0] else None
    bare = preset is None and not arguments  # the default preset: shown and asked first
    if bare:
        preset = DEFAULT_PRESET
    console = Console()
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    rerun = Rerun(force, rerun_stale)
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
        from normbench.report.base import Method  # pandas and scipy: after the quick checks

        method = Method.from_options(alpha, margin, reference=reference or [])
        space = tuned.parse_space(tune or [], preset)
        if space:
            return _tuned(
                preset,
                overrides,
                space,
                runs_dir,
                Launch(launcher, settings, jobs, rerun),
                name=name,
                dry_run=dry_run,
                max_runs=max_runs,
                tune_seeds=tune_seeds,
                tune_trials=tune_trials,
                eta=eta,
                extend=tune_extend,
                max_seeds=max_seeds if until_decided else None,
                method=method,
            )
        if dry_run and not until_decided:  # streamed: checked from the jobs' overrides
            devices, folders = precheck.settings_of(preset, overrides, max_runs)
            if launcher == "local":
                check_devices(devices)
            precheck.destinations(folders)
            planning.print_plan(console, preset, overrides, runs_dir, rerun, max_runs)
            if preset is None:
                console.print(live.no_preset_note(arguments), soft_wrap=True, highlight=False)
            return
        grid = grids.expand(preset, overrides, max_runs)
        grid.name = name or grid.name
        plan = adaptive.design(grid, max_seeds, method) if until_decided else None
        if plan is not None:  # what later rounds need, before the first trains
            precheck.sequential_needs(grid, plan)
        precheck.destinations({job.cfg["log"]["tensorboard"] for job in grid.jobs})
        if dry_run:
            if launcher == "local":
                check_devices({job.cfg["device"] for job in grid.jobs})
            planning.print_plan(console, preset, overrides, runs_dir, rerun, max_runs)
            if preset is None:
                console.print(live.no_preset_note(arguments), soft_wrap=True, highlight=False)
            return
        if bare and not yes:
            planned = planning.plan(grid, runs_dir, rerun)
            if not live.confirm_start(console, preset, grid, planned.todo):
                raise typer.Exit(0)
        session = Session(
            grid,
            runs_dir,
            Launch(launcher, settings, jobs, rerun),
            console,
            extra={
                **({"reference": list(method.reference)} if method.reference else {}),
                **({"until_decided": plan.record(looks_taken=1)} if plan else {}),
            },
        )
    except UsageError as err:
        raise fail(str(err)) from None
    except OSError as err:  # a read-only or full runs directory: before any run trains
        raise fail(f"cannot write the sweep record in {runs_dir}: {err.strerror}") from None
    report = f"normbench report --sweep {grid.name}" + (
        f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    )
    if preset is None:
        console.print(live.no_preset_note(arguments), soft_wrap=True, highlight=False)
    console.print(planning.plan_summary(grid, session.planned), soft_wrap=True)
    interrupt_on_sigterm()
    with session:  # the local pool serves every round
        try:
            todo = session.planned.todo
            design = UntilDecided(plan, todo) if plan else Fixed(todo)
            run_rounds(session, design)
            looks = design.looks
        except UsageError as err:  # the cluster refused the submission
            raise fail(str(err)) from None
        except KeyboardInterrupt:
            done = session.views[-1].counts["complete"]
            console.print(
                f"interrupted: {done} runs completed and kept; run the same command again "
                "to finish the rest",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
    summary = session.finish()
    console.line()
    console.print(session.summary())
    if plan:
        console.print(looks_text(plan, looks, session), soft_wrap=True)
    console.print(f"results: {report}", soft_wrap=True)
    boards = {job.cfg["log"]["tensorboard"] for job in grid.jobs} - {None}
    finished = len(grid.jobs) - len(session.planned.todo)
    if len(boards) == 1 and finished:  # runs already finished reached no board: say so
        where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
        (board,) = boards
        console.print(board_note(board, finished, f"--sweep {grid.name}{where}"), soft_wrap=True)
    if summary.get("failed"):
        raise typer.Exit(1)


def _tuned(
    preset,
    overrides,
    space,
    runs_dir,
    launch,
    *,
    name,
    dry_run,
    max_runs,
    tune_seeds,
    tune_trials,
    eta,
    extend,
    max_seeds,
    method,
) -> None:
    """A tuned comparison: tuning on validation, then confirmation on fresh seeds
    (normbench.sweeps.tuned); bad input raises UsageError before anything is written."""
    from rich.console import Console
    from rich.text import Text

    from normbench.core.errors import UsageError
    from normbench.sweeps import adaptive, precheck, tuned, tuned_view
    from normbench.sweeps import grid as grids
    from normbench.sweeps.session import check_devices, looks_text

    console = Console()
    grid = grids.expand(preset, overrides, max_runs)
    grid.name = name or grid.name
    design = tuned.design(grid, space, tune_seeds, eta, tune_trials, extend)
    # the plain sweep's checks, before anything trains (and in --dry-run)
    precheck.check_reference(grid, method.reference)
    rounds = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    if rounds is not None:
        precheck.sequential_needs(grid, rounds)
        tuned.check_seed_room(grid, max_seeds)
    precheck.destinations({job.cfg["log"]["tensorboard"] for job in grid.jobs})
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    if dry_run:
        tuned_view.print_plan(console, design, runs_dir, launch.rerun, rounds)
        return
    session = tuned.session(design, runs_dir, launch, console)
    if method.reference:  # what report --sweep compares against, as the lines below do
        session.save(reference=list(method.reference))
    for note in design.notes:
        console.print(Text(note, style="bold red"), soft_wrap=True)
    interrupt_on_sigterm()
    with session:
        try:
            choices, plan, looks = tuned.run(session, design, launch.rerun, max_seeds, method)
        except UsageError as err:  # the cluster refused the submission
            raise fail(str(err)) from None
        except tuned.TuningStopped as err:  # a failed run is no result: nothing is ranked
            session.finish()
            console.print(session.summary())
            console.print(f"tuning stopped: {err}", soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            phase = session.extra["tuning"]["phase"]
            console.print(
                f"interrupted in the {phase} phase: completed runs are kept; run the same "
                "command again to continue",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
    summary = session.finish()
    console.line()
    console.print(session.summary())
    console.print(tuned_view.choices_table(design, choices))
    for line in tuned_view.edge_lines(choices):
        console.print(Text(line, style="bold yellow"), soft_wrap=True)
    for note in design.notes:
        console.print(Text(note, style="bold red"), soft_wrap=True)
    if plan:
        console.print(looks_text(plan, looks, session), soft_wrap=True)
    for line in tuned_view.verdict_lines(design, session.jobs, runs_dir, method):
        console.print(line, soft_wrap=True)
    where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    console.print(f"results: normbench report --sweep {grid.name}{where}", soft_wrap=True)
    if summary.get("failed"):
        raise typer.Exit(1)
