"""`normbench sweep`: a grid of runs, locally or on SLURM, until decided, tuned or as a
scaling ladder if asked. The entry point parses and checks its options, hands the request to
normbench.sweeps.flow.run_sweep (the checks, --dry-run, the session, Ctrl-C and the closing
lines, for every kind of sweep) and exits with its code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    ConfigDirs,
    RunsDir,
    app,
    check_runs_dir,
    complete_sweep,
    fail,
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
        "(repeatable; a preset's tune: too). Chosen on the final validation loss at an "
        "equal budget: every candidate at the full budget, or successive halving where that "
        "trains at most half the full grid's steps (10 or more candidates at eta 3); "
        "verdicts on test from the confirmation seeds",
        show_default=False,
    ),
]
TuneSeeds = Annotated[
    int,
    typer.Option(
        "--tune-seeds",
        help="With --tune: tuning seeds per candidate (3 or more give a regret bound).",
    ),
]
TuneTrials = Annotated[
    int | None,
    typer.Option(
        "--tune-trials",
        help="With --tune: candidates per group \\[default: the smallest group's space]",
    ),
]
Eta = Annotated[
    int,
    typer.Option(
        "--eta", help="With --tune, where successive halving is used: it keeps 1/eta per rung."
    ),
]
TuneExtend = Annotated[
    bool,
    typer.Option(
        "--tune-extend/--no-tune-extend",
        help="With --tune: a choice at an edge of a key's values is tried one step beyond "
        "it at the full budget, and again from each new choice, up to 3 steps",
    ),
]
LadderAxis = Annotated[
    list[str] | None,  # a list so that a second --ladder is refused, not silently kept
    typer.Option(
        "--ladder",
        metavar="TEXT",  # one ladder: not TEXT... (the list refuses a second)
        help="A scaling ladder over one size: KEY=v1,v2,... (3 or more values) with KEY "
        "model.width, model.depth or data.train_samples (a preset's ladder: too); each rung "
        "the grid at that size, smallest first, tuned when --tune is given (not of the "
        "ladder's key); train.tokens_per_param=R sets each rung's steps from its "
        "non-embedding parameters, output head included",
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
    bare = preset is None and _settings_alone(arguments)  # the default preset, asked first
    preset = DEFAULT_PRESET if bare else preset
    settings_overrides = [a for a in arguments if a.startswith("launcher.")]
    overrides = [a for a in arguments if not a.startswith("launcher.")]
    try:
        use_config_dirs(config_dir or [])
        check_runs_dir(runs_dir, "--runs-dir")  # in --dry-run too: the sweep would fail there
        _check_quick(preset, jobs, name, max_runs)
        _check_max_seeds(max_seeds, until_decided)
        settings = launcher_settings(launcher, settings_overrides)
        from rich.console import Console  # and pandas, scipy: after the quick checks

        from normbench.report.base import Method
        from normbench.sweeps.flow import SweepRequest, Tuning, run_sweep

        method = Method.from_options(alpha, margin, reference=reference or [])
        space = tuned_plan.parse_space(tune or [], preset)
        launch = Launch(launcher, settings, jobs, Rerun(force, rerun_stale))
        seeds = None if not until_decided else max_seeds
        seeds = DEFAULT_MAX_SEEDS if until_decided and seeds is None else seeds
        given = (_one_ladder(ladder), ladder_transfer, preset, overrides, ladder_head_dim)
        spec, overrides = ladder_plan.parse(*given)
        if spec is not None:
            ladder_plan.refuse_tuned_axis(spec, space, tune or [], preset)
        request = SweepRequest(
            preset,
            overrides,
            name=name,
            max_runs=max_runs,
            max_seeds=seeds,
            method=method,
            space=space,
            tuning=Tuning(tune_seeds, eta, tune_trials, tune_extend),
            ladder=spec,
            arguments=arguments,
        )
        ask = bare and not yes
        code = run_sweep(request, runs_dir, launch, Console(), dry_run=dry_run, ask=ask)
    except UsageError as err:
        raise fail(str(err)) from None
    except OSError as err:  # a read-only or full runs directory: before any run trains
        raise fail(f"cannot write the sweep record in {runs_dir}: {err.strerror}") from None
    raise typer.Exit(code)


def _settings_alone(arguments: list[str]) -> bool:
    """Execution settings alone, or nothing (`normbench sweep threads=1`, as the README advises
    on a shared machine): the default preset with them, not a grid of one default run."""
    from normbench.experiment.schema import EXECUTION_KEYS

    return all(argument.partition("=")[0] in EXECUTION_KEYS for argument in arguments)


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


def _one_ladder(given: list[str] | None) -> str | None:
    """The one ``--ladder`` given (a ladder has one size axis): a second is refused, naming
    both, where it would otherwise replace the first unseen."""
    from normbench.core.errors import UsageError
    from normbench.core.keys import shown

    if given and len(given) > 1:
        raise UsageError(
            f"--ladder given {len(given)} times ({', '.join(shown(g) for g in given)}); valid: "
            "one --ladder KEY=v1,v2,... (a ladder varies one size)"
        )
    return given[0] if given else None


DEFAULT_MAX_SEEDS = 8  # --until-decided without --max-seeds


def _check_max_seeds(max_seeds: int | None, until_decided: bool) -> None:
    """``--max-seeds`` bounds the seeds --until-decided adds: alone it would change nothing
    (its range, 2 seeds or more, is checked against the grid's seeds by
    normbench.sweeps.adaptive.design)."""
    from normbench.core.errors import UsageError

    if max_seeds is not None and not until_decided:
        from normbench.sweeps.adaptive import MAX_SEEDS_CAP

        raise UsageError(
            f"--max-seeds {max_seeds}: applies only with --until-decided; valid: "
            f"--until-decided --max-seeds 2 to {MAX_SEEDS_CAP}, or a grid's seeds, e.g. "
            "seed=range(4)"
        )
