"""`normbench run`: train one model, or print its resolved config (--cfg).

What trains nothing answers without importing torch (about a second): a refused override,
``--cfg`` and a finished run that is kept (normbench.experiment.probe imports torch only to
build a plugin; normbench.training only when something trains).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from normbench.cli.app import (
    ConfigDirs,
    Overrides,
    RunsDir,
    app,
    check_runs_dir,
    echo_error,
    fail,
    terminal,
)
from normbench.core.interrupt import interrupt_on_sigterm


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
    from normbench.core.errors import UsageError
    from normbench.experiment.compose import refuse_repeated
    from normbench.experiment.options import use_config_dirs
    from normbench.experiment.probe import compose_checked

    try:
        use_config_dirs(config_dir or [])
        refuse_repeated(overrides or [])
        config = compose_checked(overrides or [])
        tags = check_tags(tag or [])
        check_runs_dir(runs_dir, "--runs-dir")
        if config["log"]["tensorboard"] is not None:  # before the run, not found by it
            from normbench.trackers.tensorboard import check_destination

            check_destination(Path(config["log"]["tensorboard"]), "log.tensorboard=")
    except UsageError as err:
        raise fail(str(err)) from None
    from normbench.store.rundir import run_id

    if cfg:
        from omegaconf import OmegaConf

        typer.echo(f"# run_id: {run_id(config)}")
        typer.echo(OmegaConf.to_yaml(OmegaConf.create(config)), nl=False)
        return
    from normbench.store.rundir import Labels, Rerun, RunDir

    labels, rerun = Labels(tags, note), Rerun(force, rerun_stale)
    kept = kept_run(config, runs_dir, rerun, labels)
    if kept is not None:
        echo_fields(summary_line(kept, config))
        board_unused(config, runs_dir, kept.path.name)
        return
    import torch

    from normbench.training.run import resolve_device, run_experiment

    interrupt_on_sigterm()
    try:
        on_cpu = resolve_device(config["device"]).type == "cpu"
        warning = load_warning(config["threads"], torch.get_num_threads(), on_cpu)
        if warning:
            echo_error(warning)
        outcome = run_experiment(config, runs_dir, rerun, not quiet, labels)
    except UsageError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:  # broken between words on a terminal, as an error is
        echo_error(interrupted_note(RunDir(runs_dir, run_id(config)), force))
        raise typer.Exit(130) from None
    echo_fields(summary_line(outcome, config))
    if outcome.skipped:
        board_unused(config, runs_dir, outcome.run_id)
    if outcome.status == "failed":
        raise typer.Exit(1)


# A CPU run whose torch threads (one per core by default) meet a machine where this many
# processes per core already wait or run (the 1-minute load average over the cores) is warned:
# torch's threads wait for each other at every operation, so one thread held up by another
# process holds up all of them (two threads on two shared cores: many times slower, README).
LOADED_PER_CORE = 0.5


def load_warning(
    threads: int | None,
    torch_threads: int,
    on_cpu: bool,
    load: float | None = None,
    cores: int | None = None,
) -> str | None:
    """One line when a CPU run leaves ``threads`` unset (torch runs ``torch_threads``, more
    than one) on a machine already loaded (``load``: the 1-minute load average, read from
    os.getloadavg when not given; ``cores``: os.cpu_count's); else None. Never an error: the
    run's numbers do not depend on it, only its speed."""
    if threads is not None or torch_threads <= 1 or not on_cpu:
        return None
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # no load average here (Windows)
            return None
    if load < LOADED_PER_CORE * cores:
        return None
    return (
        f"warning: this machine is busy (load average {load:.1f} on {cores} cores) and torch "
        f"runs {torch_threads} threads that wait for each other: threads=1 can be many times "
        "faster here"
    )


def board_unused(config: dict, runs_dir: Path, skipped_id: str) -> None:
    """``log.tensorboard=DIR`` on a run that was not trained again logged nothing: say so on
    stderr, with the export that adds the finished run to the board."""
    if not config["log"]["tensorboard"]:
        return
    from normbench.trackers.tensorboard import board_note

    where = "" if runs_dir == Path("runs") else f"{runs_dir} "
    note = board_note(config["log"]["tensorboard"], 1, f"{where}run_id={skipped_id}")
    typer.echo(note, err=True)


@dataclass(frozen=True)
class Kept:
    """A finished run this command keeps: what ``summary_line`` reads of it (the fields of
    normbench.training.run.Outcome, whose module imports torch)."""

    path: Path
    status: str
    summary: dict = field(default_factory=dict)
    error: str | None = None
    skipped: bool = True
    stale: bool = False


def kept_run(config: dict, runs_dir: Path, rerun, labels) -> Kept | None:
    """The finished run ``config`` names when nothing is to train and nothing is to be written,
    read without torch; None sends the run to ``run_experiment``, which decides again under the
    run's lock. Labels to add (written under that lock) and a device other than auto or cpu
    (which ``run_experiment`` checks is there) take that path too."""
    from normbench.core.errors import StoreError
    from normbench.store.provenance import is_stale
    from normbench.store.rundir import RunDir, stored_run_id

    if labels.tags or labels.note or config["device"] not in ("auto", "cpu"):
        return None
    run = RunDir(runs_dir, stored_run_id(runs_dir, config, rerun))
    try:
        run.check_safe()
    except StoreError:
        return None  # run_experiment refuses it in its own words
    meta = run.read_meta()
    if run.needs_training(meta, config, rerun):
        return None
    return Kept(run.path, meta["status"], meta.get("summary", {}), stale=is_stale(meta, config))


def interrupted_note(run, force: bool) -> str:
    """The line of an interrupted run: what it kept, as its files say. A forced rerun of a
    finished run trains beside it and is discarded, the finished result staying; any other
    run keeps its metrics so far (the step it reached: its live line is erased), and running
    it again resumes from its checkpoint if it saved one."""
    from normbench.store.rundir import FINISHED

    meta = run.read_meta() or {}
    if force and meta.get("status") in FINISHED:
        return (
            f"interrupted: the forced rerun was discarded; {run.path} keeps its previous result "
            f"({meta['status']})"
        )
    steps = meta.get("summary", {}).get("steps")
    where = f" at step {steps}" if isinstance(steps, int) else ""  # the erased bar said it
    return (
        f"interrupted{where}: metrics so far kept in {run.path}; running it again resumes from "
        "its last "
        "checkpoint if it saved one (train.checkpoint_every), else starts it over"
    )


def check_tags(tags: list[str]) -> tuple[str, ...]:
    """Tags are plain words ([A-Za-z0-9._-], at most 64 characters)."""
    import re

    from normbench.core.errors import UsageError

    for tag in tags:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", tag):
            raise UsageError(f"--tag {tag!r}: valid: 1 to 64 of A-Z a-z 0-9 . _ -")
    return tuple(tags)


def echo_fields(line: str) -> None:
    """The closing line: on a terminal, its fields (two spaces apart) packed into lines of the
    terminal's width, a field never cut (the run's path stays whole); piped, one line, as
    scripts read it."""
    if not sys.stdout.isatty():
        typer.echo(line)
        return
    width, lines = terminal().width, [""]
    for part in line.split("  "):
        if lines[-1] and len(lines[-1]) + 2 + len(part) > width:
            lines.append(part)
        else:
            lines[-1] = f"{lines[-1]}  {part}" if lines[-1] else part
    typer.echo("\n".join(lines))


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
