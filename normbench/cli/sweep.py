"""`normbench sweep`: a grid of runs, locally or on SLURM, until decided if asked. The entry
point parses and checks its input, then hands the grid to its design's path: ``_plain``
(fixed, or until decided) or ``_tuned``; both train on the one rounds loop
(normbench.sweeps.session.run_rounds) through ``_train``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    ConfigDirs,
    RunsDir,
    app,
    board_note,
    check_runs_dir,
    complete_sweep,
    fail,
    interrupt_on_sigterm,
)

# The options of `normbench sweep`, one name each, so that its entry point reads as what it does
Arguments = Annotated[
    list[str] | None,
    typer.Argument(
        help="[PRESET] [OVERRIDE ...]: a preset from conf/sweep or a config directory, or "
        "a preset file (./grids/mine.yaml) (bare `normbench sweep`: batch_sensitivity) and "
        "Hydra sweep overrides, e.g. norm=batchnorm,groupnorm seed=range(3); launcher "
        "settings as launcher.KEY=VALUE",
        show_default=False,
        autocompletion=complete_sweep,
    ),
]
Launcher = Annotated[str, typer.Option("--launcher", help="local | slurm | submitit_local")]
Jobs = Annotated[
    int | None, typer.Option("--jobs", "-j", help="Local worker processes \\[default: cores]")
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", "--cfg", help="Print the grid and what would run; exit.")
]
Force = Annotated[bool, typer.Option("--force", help="Run every run again.")]
RerunStale = Annotated[
    bool, typer.Option("--rerun-stale", help="Run again the runs finished by other code.")
]
Name = Annotated[str | None, typer.Option("--name", help="Sweep name \\[default: the preset's]")]
UntilDecidedFlag = Annotated[
    bool,
    typer.Option(
        "--until-decided",
        help="After the grid, add seeds to groups whose verdict is inconclusive, round "
        "after round.",
    ),
]
MaxSeeds = Annotated[
    int | None,
    typer.Option(
        "--max-seeds",
        help="With --until-decided: seeds per group at most, 2 or more \\[default: 8]",
        show_default=False,
    ),
]
Alpha = Annotated[
    float, typer.Option("--alpha", help="With --until-decided: the verdicts' error rate.")
]
Margin = Annotated[
    float, typer.Option("--margin", help="With --until-decided: the equivalence margin.")
]
Reference = Annotated[
    list[str] | None,
    typer.Option(
        "--reference",
        help="With --until-decided or --tune: compare with this group, named before looking: "
        "KEY=VALUE (repeatable) \\[default: the best group]",
        show_default=False,
    ),
]
MaxRuns = Annotated[
    int, typer.Option("--max-runs", help="Refuse grids with more combinations than this.")
]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help="Bare `normbench sweep`: start without asking.")
]
Tune = Annotated[
    list[str] | None,
    typer.Option(
        "--tune",
        help="Tune this key per group, then confirm on fresh seeds: KEY=v1,v2,... "
        "(repeatable; a preset's tune: too). Chosen on validation by successive halving at "
        "an equal budget; verdicts on test from the confirmation seeds",
        show_default=False,
    ),
]
TuneSeeds = Annotated[
    int, typer.Option("--tune-seeds", help="With --tune: tuning seeds per candidate.")
]
TuneTrials = Annotated[
    int | None,
    typer.Option(
        "--tune-trials",
        help="With --tune: candidates per group \\[default: the smallest group's space]",
    ),
]
Eta = Annotated[
    int, typer.Option("--eta", help="With --tune: successive halving keeps 1/eta per rung.")
]
TuneExtend = Annotated[
    bool,
    typer.Option(
        "--tune-extend/--no-tune-extend",
        help="With --tune: a choice at an edge of a key's values is tried one step beyond "
        "it at the full budget",
    ),
]
LadderAxis = Annotated[
    str | None,
    typer.Option(
        "--ladder",
        help="A scaling ladder over one size: KEY=v1,v2,... with KEY model.width, model.depth "
        "or data.train_samples (a preset's ladder: too); each rung the grid at that size, "
        "smallest first, tuned when --tune is given; train.tokens_per_param=R sets each "
        "rung's steps from its non-embedding parameters",
        show_default=False,
    ),
]
LadderTransfer = Annotated[
    int | None,
    typer.Option(
        "--ladder-transfer",
        help="With --ladder and --tune: tune at the N smallest rungs only; the larger rungs "
        "train at their choice \\[default: 0, every rung tuned]",
        show_default=False,
    ),
]
LadderHeadDim = Annotated[
    int | None,
    typer.Option(
        "--ladder-head-dim",
        help="With --ladder model.width=...: keep this head dimension, each rung's heads "
        "width / D \\[default: model.heads at every rung]",
        show_default=False,
    ),
]


@app.command()
def sweep(
    arguments: Arguments = None,
    launcher: Launcher = "local",
    jobs: Jobs = None,
    dry_run: DryRun = False,
    force: Force = False,
    rerun_stale: RerunStale = False,
    runs_dir: RunsDir = Path("runs"),
    name: Name = None,
    until_decided: UntilDecidedFlag = False,
    max_seeds: MaxSeeds = None,
    alpha: Alpha = 0.05,
    margin: Margin = 0.01,
    reference: Reference = None,
    max_runs: MaxRuns = 10_000,
    yes: Yes = False,
    tune: Tune = None,
    tune_seeds: TuneSeeds = 2,
    tune_trials: TuneTrials = None,
    eta: Eta = 3,
    tune_extend: TuneExtend = True,
    ladder: LadderAxis = None,
    ladder_transfer: LadderTransfer = None,
    ladder_head_dim: LadderHeadDim = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Run a grid of runs: resumable, in parallel, locally or on SLURM."""
    from normbench.core.errors import UsageError
    from normbench.experiment.options import use_config_dirs
    from normbench.store.rundir import Rerun
    from normbench.sweeps import ladder_plan, tuned_plan
    from normbench.sweeps.launchers import launcher_settings
    from normbench.sweeps.presets import DEFAULT_PRESET
    from normbench.sweeps.session import Launch

    arguments = list(arguments or [])
    preset = arguments.pop(0) if arguments and "=" not in arguments[0] else None
    bare = preset is None and not arguments  # the default preset: shown and asked first
    preset = DEFAULT_PRESET if bare else preset
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    try:
        use_config_dirs(config_dir or [])
        check_runs_dir(runs_dir, "--runs-dir")  # in --dry-run too: the sweep would fail there
        _check_quick(preset, jobs, name, max_runs)
        _check_max_seeds(max_seeds, until_decided)
        settings = launcher_settings(launcher, settings_overrides)
        from normbench.report.base import Method  # pandas and scipy: after the quick checks

        method = Method.from_options(alpha, margin, reference=reference or [])
        space = tuned_plan.parse_space(tune or [], preset)
        launch = Launch(launcher, settings, jobs, Rerun(force, rerun_stale))
        seeds = None if not until_decided else max_seeds
        seeds = DEFAULT_MAX_SEEDS if until_decided and seeds is None else seeds
        tuning, sizes = (tune_seeds, eta, tune_trials, tune_extend), (max_runs, seeds)
        given = (ladder, ladder_transfer, preset, overrides, ladder_head_dim)
        spec, overrides = ladder_plan.parse(*given)
        if spec is not None:
            given = (spec, preset, overrides)
            return _ladder(given, space, runs_dir, launch, name, dry_run, sizes, tuning, method)
        if space:
            return _tuned(
                preset, overrides, space, runs_dir, launch, name, dry_run, sizes, tuning, method
            )
        given = (preset, overrides, arguments)
        ask = bare and not yes
        ready = _plain_session(given, runs_dir, launch, name, dry_run, max_runs, seeds, method, ask)
    except UsageError as err:
        raise fail(str(err)) from None
    except OSError as err:  # a read-only or full runs directory: before any run trains
        raise fail(f"cannot write the sweep record in {runs_dir}: {err.strerror}") from None
    if ready is not None:
        _plain(*ready, preset, arguments, runs_dir)


def _check_quick(preset: str | None, jobs: int | None, name: str | None, max_runs: int) -> None:
    """The checks that need no config: refused in one line before anything is composed."""
    from normbench.core.errors import UsageError
    from normbench.store.records import check_name

    if preset is not None and not preset.strip():
        raise UsageError("sweep '': valid: a preset's name or file, or KEY=VALUE overrides")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    if name is not None:
        check_name(name)
    if max_runs < 1:
        raise UsageError(f"--max-runs {max_runs}: valid: an integer >= 1")


DEFAULT_MAX_SEEDS = 8  # --until-decided without --max-seeds


def _check_max_seeds(max_seeds: int | None, until_decided: bool) -> None:
    """``--max-seeds`` bounds the seeds --until-decided adds: alone it would change nothing
    (its range, 2 seeds or more, is checked against the grid's seeds by
    normbench.sweeps.adaptive.design)."""
    from normbench.core.errors import UsageError

    if max_seeds is not None and not until_decided:
        from normbench.sweeps.adaptive import MAX_SEEDS_CAP

        raise UsageError(
            f"--max-seeds {max_seeds}: applies only with --until-decided, and one seed decides "
            f"nothing; valid: --until-decided --max-seeds 2 to {MAX_SEEDS_CAP}, or a grid's "
            "seeds, e.g. seed=range(4)"
        )


def _plain_session(given, runs_dir, launch, name, dry_run, max_runs, max_seeds, method, ask):
    """A plain sweep up to its session: checked, planned (``--dry-run`` prints and returns
    None), asked first where the bare command is (``ask``); (grid, plan, session) or None."""
    from rich.console import Console

    from normbench.sweeps import adaptive, live, precheck
    from normbench.sweeps import grid as grids
    from normbench.sweeps import plan as planning
    from normbench.sweeps.session import Session, check_devices

    preset, overrides, arguments = given
    console, rerun = Console(), launch.rerun
    if dry_run and max_seeds is None:  # streamed: checked from the jobs' overrides
        devices, folders = precheck.settings_of(preset, overrides, max_runs)
        if launch.launcher == "local":
            check_devices(devices)
        precheck.destinations(folders)
        planning.print_plan(console, preset, overrides, runs_dir, rerun, max_runs)
        if preset is None:
            live.print_no_preset_note(console, arguments)
        return None
    grid = grids.expand(preset, overrides, max_runs)
    grid.name = name or grid.name
    plan = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    if plan is not None:  # what later rounds need, before the first trains
        precheck.sequential_needs(grid, plan)
    precheck.destinations({job.cfg["log"]["tensorboard"] for job in grid.jobs})
    if dry_run:
        if launch.launcher == "local":
            check_devices({job.cfg["device"] for job in grid.jobs})
        planning.print_plan(console, preset, overrides, runs_dir, rerun, max_runs)
        if preset is None:
            live.print_no_preset_note(console, arguments)
        return None
    if ask and not live.confirm_start(
        console, preset, grid, planning.plan(grid, runs_dir, rerun).todo
    ):
        raise typer.Exit(0)
    extra = {"reference": list(method.reference)} if method.reference else {}
    extra |= {"until_decided": plan.record(looks_taken=1)} if plan else {}
    return grid, plan, Session(grid, runs_dir, launch, console, extra=extra)


def _plain(grid, plan, session, preset, arguments, runs_dir: Path) -> None:
    """A plain sweep's rounds (fixed, or until decided) and its closing lines."""
    from normbench.sweeps import live
    from normbench.sweeps import plan as planning
    from normbench.sweeps.session import Fixed, UntilDecided, looks_text

    console = session.console
    if preset is None:
        live.print_no_preset_note(console, arguments)
    console.print(planning.plan_summary(grid, session.planned), soft_wrap=not console.is_terminal)
    todo = session.planned.todo
    design = UntilDecided(plan, todo) if plan else Fixed(todo)

    def interrupted() -> str:
        done = session.views[-1].counts["complete"]
        return (
            f"interrupted: {done} runs completed and kept; run the same command again to "
            "finish the rest"
        )

    summary = _train(session, design, interrupted)
    if plan:
        console.print(looks_text(plan, design.looks, session), soft_wrap=not console.is_terminal)
    where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    console.print(
        f"results: normbench report --sweep {grid.name}{where}", soft_wrap=not console.is_terminal
    )
    boards = {job.cfg["log"]["tensorboard"] for job in grid.jobs} - {None}
    finished = len(grid.jobs) - len(todo)
    if len(boards) == 1 and finished:  # runs already finished reached no board: say so
        (board,) = boards
        console.print(
            board_note(board, finished, f"--sweep {grid.name}{where}"),
            soft_wrap=not console.is_terminal,
        )
    if summary.get("failed"):
        raise typer.Exit(1)


def _train(session, design, interrupted: Callable[[], str]) -> dict[str, int]:
    """Train a design's rounds on its session (SIGTERM as Ctrl-C), then the record finished
    and the summary table: every sweep's one way to stop. A refused submission is one line
    (exit 2), Ctrl-C says what ``interrupted`` says (exit 130), tuning runs that failed stop
    the sweep with nothing ranked (exit 1)."""
    from normbench.core.errors import UsageError
    from normbench.sweeps.session import run_rounds
    from normbench.sweeps.tuned import TuningStopped

    console = session.console
    interrupt_on_sigterm()
    with session:  # the local pool serves every round
        try:
            run_rounds(session, design)
        except UsageError as err:  # the cluster refused the submission
            raise fail(str(err)) from None
        except TuningStopped as err:  # a failed run is no result: nothing is ranked
            session.finish()
            console.print(session.summary())
            console.print(f"tuning stopped: {err}", soft_wrap=not console.is_terminal)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            console.print(interrupted(), soft_wrap=not console.is_terminal)
            raise typer.Exit(130) from None
    summary = session.finish()
    console.line()
    console.print(session.summary())
    return summary


def _tuned(preset, overrides, space, runs_dir, launch, name, dry_run, sizes, tuning, method):
    """A tuned comparison: tuning on validation, then confirmation on fresh seeds
    (normbench.sweeps.tuned); bad input raises UsageError before anything is written.
    ``sizes``: (--max-runs, --max-seeds or None); ``tuning``: (--tune-seeds, --eta,
    --tune-trials, --tune-extend)."""
    from rich.console import Console
    from rich.text import Text

    from normbench.core.errors import UsageError
    from normbench.sweeps import adaptive, precheck, tuned, tuned_plan, tuned_view
    from normbench.sweeps import grid as grids
    from normbench.sweeps.session import check_devices, looks_text

    console = Console()
    max_runs, max_seeds = sizes
    grid = grids.expand(preset, overrides, max_runs)
    grid.name = name or grid.name
    seeds, eta, trials, extend = tuning
    plan = tuned_plan.design(grid, space, seeds, eta, trials, extend)
    if plan.runs > max_runs:  # as a plain grid over --max-runs is refused
        raise UsageError(
            f"--tune: the tuned comparison trains up to {plan.runs:,} runs, more than "
            f"--max-runs {max_runs:,}; valid: fewer values or --tune-seeds, or a larger --max-runs"
        )
    # the plain sweep's checks, before anything trains (and in --dry-run)
    precheck.check_reference(grid, method.reference)
    rounds = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    if rounds is not None:
        precheck.sequential_needs(grid, rounds)
        tuned_plan.check_seed_room(grid, max_seeds)
    precheck.destinations({job.cfg["log"]["tensorboard"] for job in grid.jobs})
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    if dry_run:
        return tuned_view.print_plan(console, plan, runs_dir, launch.rerun, rounds)
    session = tuned.session(plan, runs_dir, launch, console)
    if method.reference:  # what report --sweep compares against, as the lines below do
        session.save(reference=list(method.reference))
    for note in plan.notes:
        console.print(Text(note, style="bold red"), soft_wrap=not console.is_terminal)
    design = tuned.Tuned(plan, launch.rerun, max_seeds, method)

    def interrupted() -> str:
        phase = session.extra["tuning"]["phase"]
        return (
            f"interrupted in the {phase} phase: completed runs are kept; run the same "
            "command again to continue"
        )

    summary = _train(session, design, interrupted)
    console.print(tuned_view.choices_table(grid.name, session.extra["tuning"]))
    for line in tuned_view.edge_lines(design.choices):
        console.print(Text(line, style="bold yellow"), soft_wrap=not console.is_terminal)
    for note in plan.notes:
        console.print(Text(note, style="bold red"), soft_wrap=not console.is_terminal)
    if design.plan:
        console.print(
            looks_text(design.plan, design.looks, session), soft_wrap=not console.is_terminal
        )
    for line in tuned_view.verdict_lines(plan, session.jobs, runs_dir, method):
        console.print(line, soft_wrap=not console.is_terminal)
    where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    console.print(
        f"results: normbench report --sweep {grid.name}{where}", soft_wrap=not console.is_terminal
    )
    if summary.get("failed"):
        raise typer.Exit(1)


def _ladder(given, space, runs_dir, launch, name, dry_run, sizes, tuning, method) -> None:
    """A ladder: every rung checked before any trains (``--dry-run`` prints the plan), then
    the rungs smallest first on the one rounds loop (normbench.sweeps.ladder). ``given``:
    (the ladder, preset, overrides without the budget rule)."""
    import os

    from rich.console import Console

    from normbench.sweeps import adaptive, ladder_plan, ladder_view, precheck, tuned_plan
    from normbench.sweeps.ladder import Ladder
    from normbench.sweeps.ladder import session as ladder_session
    from normbench.sweeps.session import check_devices

    spec, preset, overrides = given
    console, (max_runs, max_seeds) = Console(), sizes
    plan = ladder_plan.design(spec, preset, overrides, max_runs, space, tuning, name)
    for rung in plan.rungs:  # what every rung's design needs, before the first trains
        precheck.check_reference(rung.grid, method.reference)
        if max_seeds is not None:
            precheck.sequential_needs(rung.grid, adaptive.design(rung.grid, max_seeds, method))
            if space:
                tuned_plan.check_seed_room(rung.grid, max_seeds)
    jobs = [job for rung in plan.rungs for job in rung.grid.jobs]
    precheck.destinations({job.cfg["log"]["tensorboard"] for job in jobs})
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in jobs})
    if dry_run:
        workers = launch.jobs or os.cpu_count() or 1
        return ladder_view.print_plan(console, plan, runs_dir, launch.rerun, workers)
    extra = {"reference": list(method.reference)} if method.reference else {}
    session = ladder_session(plan, runs_dir, launch, console, extra)
    design = Ladder(plan, launch.rerun, max_seeds, method)

    def interrupted() -> str:
        done = sum(1 for rung in session.extra["ladder"]["rungs"] if rung.get("done"))
        return (
            f"interrupted after {done} of {len(plan.rungs)} rungs: completed runs are kept; "
            "run the same command again to continue where it stopped"
        )

    summary = _train(session, design, interrupted)
    table = ladder_view.choices_table(plan, session.extra["ladder"])
    if table is not None:
        console.print(table)
    where = f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""
    console.print(f"results: normbench report --sweep {plan.name}{where}", soft_wrap=True)
    if summary.get("failed"):
        raise typer.Exit(1)
