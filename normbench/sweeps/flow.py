"""A sweep from request to closing line: ``run_sweep``, the one function that `normbench sweep`
(fixed, ``--until-decided``, ``--tune``, ``--ladder``) and `normbench findings` call.

It owns every rule of a sweep's flow in one place: which design a request asks for (a ladder,
a tuned comparison, or a grid fixed or until decided), the checks before anything trains
(normbench.sweeps.precheck, devices, tensorboard destinations, the run bound), ``--dry-run``
(the plan printed, nothing written), the question a bare `normbench sweep` asks first, the
session and its record, SIGTERM as Ctrl-C, and the lines that close a sweep: the summary
table, what a tuned or sequential design decided, where the results are. The designs stay
strategies on the one rounds loop (normbench.sweeps.session.run_rounds); this module only
opens each design's session, runs it, and says what happened.

Bad input raises UsageError before anything is written (the caller prints it, exit 2); what a
sweep ends with is its exit code: 0, 1 (runs failed, or tuning could rank nothing) or 130
(interrupted: the record is finished with what ran, and the same command continues).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from normbench.core.errors import UsageError
from normbench.core.interrupt import interrupt_on_sigterm
from normbench.report.base import Method
from normbench.store.sweep_record import listed_group
from normbench.sweeps import adaptive, halving, live, precheck, tuned, tuned_plan
from normbench.sweeps import grid as grids
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.ladder_plan import LadderSpec
from normbench.sweeps.session import (
    Design,
    Fixed,
    Launch,
    Session,
    UntilDecided,
    check_devices,
    looks_text,
    run_rounds,
)


@dataclass(frozen=True)
class Tuning:
    """``--tune``'s settings besides its space: tuning seeds per candidate, the share
    successive halving keeps (1/eta), candidates per group (None: the smallest group's space),
    and whether a choice at an edge of a key's values is tried one step beyond it."""

    seeds: int = 2
    eta: int = halving.ETA
    trials: int | None = None
    extend: bool = True


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep is asked to run: its grid (a preset and overrides; ``arguments``: as typed,
    for the note a grid without a preset gets), its name, the bound on its runs, and its
    design: ``ladder`` (a scaling ladder), ``space`` (a tuned comparison), ``max_seeds``
    (seeds until decided, the verdicts by ``method``)."""

    preset: str | None
    overrides: list[str]
    name: str | None = None
    max_runs: int = grids.MAX_RUNS
    max_seeds: int | None = None
    method: Method = field(default_factory=Method)
    space: dict[str, Any] = field(default_factory=dict)
    tuning: Tuning = field(default_factory=Tuning)
    ladder: LadderSpec | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Host:
    """A sweep run inside another command (`normbench findings`): its grid, already expanded;
    the pool of workers it shares with the others; the command its record stores; more parts
    of its record; the heading of its live view. The host prints its own lines and decides
    what stops it: no summary or closing lines, and Ctrl-C goes on to it."""

    grid: Sweep
    runner: Any
    command: list[str]
    extra: dict[str, Any]
    heading: str


@dataclass
class Opened:
    """A design's session, ready to train: the lines before its first round (``opening``),
    the line Ctrl-C prints (``interrupted``) and the lines after its last (``closing``)."""

    session: Session
    design: Design
    opening: Callable[[], None]
    interrupted: Callable[[], str]
    closing: Callable[[], None]


def run_sweep(
    request: SweepRequest,
    runs_dir: Path,
    launch: Launch,
    console: Console,
    *,
    dry_run: bool = False,
    ask: bool = False,
    host: Host | None = None,
) -> int:
    """Check, plan and run one sweep; its exit code. ``dry_run``: print the plan and write
    nothing; ``ask``: show the grid and ask before starting (the bare `normbench sweep`);
    ``host``: the command it runs inside. Raises UsageError on bad input or a refused
    submission (nothing is written unless a round ran)."""
    args = (request, runs_dir, launch, console, dry_run)
    if request.ladder is not None:
        opened = _open_ladder(*args, host)
    elif request.space:
        opened = _open_tuned(*args, host)
    else:
        opened = _open_plain(*args, ask, host)
    if opened is None:  # --dry-run printed the plan, or the answer was no
        return 0
    session = opened.session
    if host is not None:
        with session:
            run_rounds(session, opened.design)
            session.finish()
        return 0
    opened.opening()
    interrupt_on_sigterm()
    with session:  # the local pool serves every round
        try:
            run_rounds(session, opened.design)
        except tuned.TuningStopped as err:  # a failed run is no result: nothing is ranked
            session.finish()
            console.print(session.summary())
            console.print(f"tuning stopped: {err}", soft_wrap=not console.is_terminal)
            return 1
        except KeyboardInterrupt:
            console.print(opened.interrupted(), soft_wrap=not console.is_terminal)
            return 130
    summary = session.finish()
    console.line()
    console.print(session.summary())
    opened.closing()
    return 1 if summary.get("failed") else 0


def _open_plain(request, runs_dir, launch, console, dry_run, ask, host) -> Opened | None:
    """A grid, fixed or until decided: checked, planned (``--dry-run`` prints it), asked
    first where ``ask`` says, then its session and design."""
    preset, overrides, rerun = request.preset, request.overrides, launch.rerun
    if dry_run and request.max_seeds is None:  # streamed: checked from the jobs' overrides
        devices, folders = precheck.settings_of(preset, overrides, request.max_runs)
        if launch.launcher == "local":
            check_devices(devices)
        precheck.destinations(folders)
        return _print_plain_plan(request, runs_dir, rerun, console)
    grid = host.grid if host is not None else _expand(request)
    method, max_seeds = request.method, request.max_seeds
    plan = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    if plan is not None:  # what later rounds need, before the first trains
        precheck.sequential_needs(grid, plan)
    precheck.destinations(_boards(grid.jobs))
    if dry_run:
        if launch.launcher == "local":
            check_devices({job.cfg["device"] for job in grid.jobs})
        return _print_plain_plan(request, runs_dir, rerun, console)
    if ask and not live.confirm_start(
        console, preset, grid, planning.plan(grid, runs_dir, rerun).todo
    ):
        return None
    extra = _reference(method) | ({"until_decided": plan.record(looks_taken=1)} if plan else {})
    session = Session(grid, runs_dir, launch, console, **_hosted(host, extra))
    todo = session.planned.todo
    if host is not None:
        design: Design = Fixed(todo, host.heading, show_all=False)
    else:
        design = UntilDecided(plan, todo) if plan else Fixed(todo)

    def opening() -> None:
        if preset is None:
            live.print_no_preset_note(console, request.arguments)
        _line(console, planning.plan_summary(grid, session.planned))

    def interrupted() -> str:
        done = session.views[-1].counts["complete"]
        return (
            f"interrupted: {done} runs completed and kept; run the same command again to "
            "finish the rest"
        )

    def closing() -> None:
        if plan:
            _line(console, looks_text(plan, design.looks, session))
        _results_line(console, grid.name, runs_dir, method.reference)
        boards = _boards(grid.jobs) - {None}
        finished = len(grid.jobs) - len(todo)
        if len(boards) == 1 and finished:  # runs already finished reached no board: say so
            from normbench.trackers.tensorboard import board_note

            (board,) = boards
            _line(console, board_note(board, finished, f"--sweep {grid.name}{_where(runs_dir)}"))

    return Opened(session, design, opening, interrupted, closing)


def _print_plain_plan(request, runs_dir, rerun, console) -> None:
    """``--dry-run`` of a grid: its plan, and the note a grid without a preset gets."""
    preset = request.preset
    planning.print_plan(console, preset, request.overrides, runs_dir, rerun, request.max_runs)
    if preset is None:
        live.print_no_preset_note(console, request.arguments)


def _open_tuned(request, runs_dir, launch, console, dry_run, host) -> Opened | None:
    """A tuned comparison: tuning on validation, then confirmation on fresh seeds
    (normbench.sweeps.tuned); checked as a plain sweep is, before anything trains."""
    from normbench.sweeps import tuned_view

    grid = host.grid if host is not None else _expand(request)
    setting = request.tuning
    plan = tuned_plan.design(
        grid, request.space, setting.seeds, setting.eta, setting.trials, setting.extend
    )
    method, max_seeds, max_runs = request.method, request.max_seeds, request.max_runs
    if plan.runs > max_runs:  # as a plain grid over --max-runs is refused
        raise UsageError(
            f"--tune: the tuned comparison trains up to {plan.runs:,} runs, more than "
            f"--max-runs {max_runs:,}; valid: fewer values or --tune-seeds, or a larger --max-runs"
        )
    precheck.check_reference(grid, method.reference)
    rounds = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    if rounds is not None:
        precheck.sequential_needs(grid, rounds)
        tuned_plan.check_seed_room(grid, max_seeds)
    precheck.destinations(_boards(grid.jobs))
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    if dry_run:
        return tuned_view.print_plan(console, plan, runs_dir, launch.rerun, rounds)
    session = tuned.session(plan, runs_dir, launch, console, **_hosted(host, {}))
    if method.reference:  # what report --sweep compares against, as the lines below do
        session.save(reference=list(method.reference))
    heading = host.heading if host is not None else None
    design = tuned.Tuned(plan, launch.rerun, max_seeds, method, heading=heading)

    def notes() -> None:
        for note in plan.notes:
            _line(console, Text(note, style="bold red"))

    def interrupted() -> str:
        phase = session.extra["tuning"]["phase"]
        return (
            f"interrupted in the {phase} phase: completed runs are kept; run the same "
            "command again to continue"
        )

    def closing() -> None:
        console.print(tuned_view.choices_table(grid.name, session.extra["tuning"]))
        for line in tuned_view.edge_lines(design.choices):
            _line(console, Text(line, style="bold yellow"))
        notes()
        if design.plan:
            _line(console, looks_text(design.plan, design.looks, session))
        for line in tuned_view.verdict_lines(plan, session.jobs, runs_dir, method, design.choices):
            _line(console, line)
        _results_line(console, grid.name, runs_dir, method.reference)

    return Opened(session, design, notes, interrupted, closing)


def _open_ladder(request, runs_dir, launch, console, dry_run, host) -> Opened | None:
    """A ladder: every rung checked before any trains (``--dry-run`` prints the plan), then
    the rungs smallest first (normbench.sweeps.ladder); inside a host (`normbench findings`)
    on its pool, with its command and record parts."""
    from normbench.sweeps import ladder_plan, ladder_view
    from normbench.sweeps.ladder import Ladder
    from normbench.sweeps.ladder import session as ladder_session

    method, max_seeds, space, setting = (
        request.method,
        request.max_seeds,
        request.space,
        request.tuning,
    )
    tuning = (setting.seeds, setting.eta, setting.trials, setting.extend)
    preset, overrides, max_runs = request.preset, request.overrides, request.max_runs
    plan = ladder_plan.design(
        request.ladder, preset, overrides, max_runs, space, tuning, request.name
    )
    for rung in plan.rungs:  # what every rung's design needs, before the first trains
        precheck.check_reference(rung.grid, method.reference)
        if max_seeds is not None:
            precheck.sequential_needs(rung.grid, adaptive.design(rung.grid, max_seeds, method))
            if space:
                tuned_plan.check_seed_room(rung.grid, max_seeds)
    jobs = [job for rung in plan.rungs for job in rung.grid.jobs]
    precheck.destinations(_boards(jobs))
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in jobs})
    if dry_run:
        workers = launch.jobs or os.cpu_count() or 1
        return ladder_view.print_plan(console, plan, runs_dir, launch.rerun, workers)
    hosted = _hosted(host, _reference(method))
    session = ladder_session(plan, runs_dir, launch, console, **hosted)
    design = Ladder(plan, launch.rerun, max_seeds, method)

    def interrupted() -> str:
        done = sum(1 for rung in session.extra["ladder"]["rungs"] if rung.get("done"))
        return (
            f"interrupted after {done} of {len(plan.rungs)} rungs: completed runs are kept; "
            "run the same command again to continue where it stopped"
        )

    def closing() -> None:
        table = ladder_view.choices_table(plan, session.extra["ladder"])
        if table is not None:
            console.print(table)
        first = plan.rungs[0].grid  # the report's default: the group the ladder lists first
        listed = listed_group(first.axes, first.jobs[0].overrides, (plan.spec.key,))
        _results_line(console, plan.name, runs_dir, method.reference or listed)

    return Opened(session, design, lambda: None, interrupted, closing)


def _expand(request: SweepRequest) -> Sweep:
    """The request's grid, every job composed, under its ``--name`` where one is given."""
    grid = grids.expand(request.preset, request.overrides, request.max_runs)
    grid.name = request.name or grid.name
    return grid


def _reference(method: Method) -> dict[str, Any]:
    """The record's reference part: the group ``report --sweep`` compares against."""
    return {"reference": list(method.reference)} if method.reference else {}


def _hosted(host: Host | None, extra: dict[str, Any]) -> dict[str, Any]:
    """A session's keyword arguments: its record's ``extra`` parts, and the host's pool,
    command and parts when it runs inside one."""
    if host is None:
        return {"extra": extra}
    return {"runner": host.runner, "command": host.command, "extra": extra | host.extra}


def _boards(jobs: list[Job]) -> set[str | None]:
    """The tensorboard directories the jobs log to (None: a job that logs to none)."""
    return {job.cfg["log"]["tensorboard"] for job in jobs}


def _where(runs_dir: Path) -> str:
    """The ``--runs-dir`` a follow-up command needs: none for the default."""
    return f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""


def _results_line(
    console: Console, name: str, runs_dir: Path, reference: tuple[str, ...] = ()
) -> None:
    """The report command to run next, with the reference its report compares against (the
    record keeps a named one too: the command says it, so that a reader sees it)."""
    named = f" --reference {' '.join(reference)}" if reference else ""
    _line(console, f"results: normbench report --sweep {name}{_where(runs_dir)}{named}")


def _line(console: Console, line) -> None:
    """One line: wrapped on a terminal, whole when piped (a command copied from it works)."""
    console.print(line, soft_wrap=not console.is_terminal)
