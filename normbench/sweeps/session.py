"""One sweep on its record: the single path that `normbench sweep`, its ``--until-decided``
rounds, a tuned comparison's phases and `normbench findings` all take.

A session checks where the runs will go (a device the sweep names must exist here; a runs
directory the submitit launchers unpickle from must be private), plans the grid, writes the
record (runs/sweeps/<name>-<time>-<id>.json) with the command that made it, and then launches
round after round under it, each with its live view: ``run_rounds`` is the one loop, and a
design (``Fixed``, ``UntilDecided``, normbench.sweeps.tuned's ``Tuned``) is a strategy that
yields the rounds, each decided from the store after the last. Whatever stops a round
(Ctrl-C, SIGTERM, a cluster that refuses the submission) leaves the record finished with the
counts so far; a
sweep that never started (its first submission refused) leaves no record behind. Keeping this
in one place is what makes every kind of sweep resumable in the same way and recorded in the
same shape.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from normbench.core.errors import UsageError
from normbench.store import sweep_record
from normbench.store.rundir import Rerun
from normbench.sweeps import adaptive, live
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.launchers import check_private, make_launcher
from normbench.sweeps.local import check_slots, cores


@dataclass(frozen=True)
class Launch:
    """Where and how a sweep's runs train: the launcher, its settings, local workers, reruns."""

    launcher: str = "local"  # local | slurm | submitit_local
    settings: dict[str, Any] = field(default_factory=dict)
    jobs: int | None = None
    rerun: Rerun = field(default_factory=Rerun)


def entries(jobs: list[Job]) -> list[sweep_record.RunEntry]:
    """The record's list of runs: each job's run id and overrides."""
    return [{"run_id": job.run_id, "overrides": job.overrides} for job in jobs]


def check_devices(devices: set[str]) -> None:
    """A device the sweep names must exist here (imports torch only when one is named)."""
    wanted = set(devices) - {"auto", "cpu"}
    if wanted:
        from normbench.training.run import resolve_device

        for device in sorted(wanted):
            resolve_device(device)


class Session:
    """A sweep's record and the rounds launched under it.

    ``runner``: a launcher the caller keeps across sessions (`normbench findings` feeds every
    study to one pool of workers); without one the session makes its own and ``close`` ends
    it. ``command``: the command line the record stores (default: this process's argv), so
    that a record made by `normbench findings` names the sweep it stands for.
    """

    def __init__(
        self,
        grid: Sweep,
        runs_dir: Path,
        launch: Launch,
        console: Console,
        *,
        runner=None,
        command: list[str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        if launch.launcher == "local":
            check_devices({job.cfg["device"] for job in grid.jobs})
            if runner is None:  # a runner handed in checks its own slots when it launches
                check_slots(grid.jobs, launch.jobs or launch.settings.get("jobs") or cores())
        self.grid, self.runs_dir, self.launch, self.console = grid, runs_dir, launch, console
        self.planned = planning.plan(grid, runs_dir, launch.rerun)
        if launch.launcher != "local":
            check_private(runs_dir)
        self.extra: dict[str, Any] = dict(extra or {})
        self.path = sweep_record.write(
            grid.name,
            grid.version,
            grid.axes,
            entries(grid.jobs),
            runs_dir,
            launch.launcher,
            datetime.now(),
            command=list(sys.argv if command is None else command),
            parts=self.extra,
        )
        self.folder = runs_dir / "sweeps" / f"{self.path.stem}.submitit"
        self.own_runner = runner is None
        self.runner = runner or make_launcher(
            launch.launcher, launch.settings, launch.jobs, runs_dir, launch.rerun, self.folder
        )
        self.jobs: list[Job] = list(grid.jobs)  # what the record lists (rounds add to it)
        self.counts: dict[str, int] = {}
        self.views: list[live.LiveView] = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.own_runner:
            self.runner.close()

    def run(self, todo: list[Job], title: str | None = None, among: list[Job] | None = None):
        """Launch one round (``todo``, of the jobs ``among``: the grid's by default) with its
        live view; returns the view. Stopped, the record is finished with what ran, or removed
        when nothing ever ran; the exception goes on to the caller."""
        shown = Sweep(self.grid.name, self.grid.version, among if among is not None else todo)
        view = live.LiveView(self.console, shown, todo, title=title)
        self.views.append(view)
        try:
            if todo:
                with view:
                    self.runner.launch(todo, view)
        except UsageError:  # the cluster refused the submission
            if len(self.views) == 1 and not view.finished:  # nothing ran: leave nothing
                sweep_record.discard(self.path, self.folder)
            else:
                self.save(view.counts, finished=True)
            raise
        except KeyboardInterrupt:
            self.save(view.counts, finished=True)
            raise
        self.counts = planning.add_counts(self.counts, view.counts)
        return view

    def save(
        self, more: Counter | None = None, finished: bool = False, **extra: Any
    ) -> dict[str, int]:
        """Write the record: the jobs so far, the counts (with ``more``, a round stopped
        midway), and ``extra`` fields (the adaptive design, a tuned comparison's phase)."""
        self.extra.update(extra)
        counts = planning.add_counts(self.counts, more or Counter())
        sweep_record.update(self.path, counts, entries(self.jobs), finished, **self.extra)
        return counts

    def finish(self, **extra: Any) -> dict[str, int]:
        """The record finished; on a full disk the counts so far, with a warning (the runs
        say what they did; only the record could not)."""
        try:
            return self.save(finished=True, **extra)
        except OSError as err:
            warning = f"warning: cannot update {self.path}: {err.strerror}"
            self.console.print(
                Text(warning, style="yellow"), soft_wrap=not self.console.is_terminal
            )
            return planning.add_counts(self.counts, Counter())

    def summary(self):
        return live.summary_table(self.grid, self.views)


@dataclass
class Looks:
    """What rounds until decided did: looks taken, and the tally of the last."""

    taken: int
    final: adaptive.Tally | None


@dataclass(frozen=True)
class Round:
    """One round of a design: the runs to train, the jobs its live view counts (None: those
    to train), and its title."""

    todo: list[Job]
    among: list[Job] | None = None
    title: str | None = None


class Design(Protocol):
    """A design as a strategy (fixed, until decided, tuned): ``rounds`` yields each round,
    and ``run_rounds`` trains it before asking for the next, so that a round is decided from
    what the store holds after the last one (a resumed sweep decides the same). ``looks``:
    what its looks did, for the closing line."""

    looks: Looks

    def rounds(self, session: Session) -> Iterator[Round]: ...


def run_rounds(session: Session, design: Design) -> None:
    """The one rounds loop of every sweep: each round the design yields, trained on the
    session (Ctrl-C and SIGTERM stop it there, the record finished with what ran)."""
    for step in design.rounds(session):
        session.run(step.todo, title=step.title, among=step.among)


@dataclass
class Fixed:
    """A fixed design: one round, the runs the session planned (``show_all``: its view counts
    the whole grid, those already complete included)."""

    todo: list[Job]
    title: str | None = None
    show_all: bool = True
    looks: Looks = field(default_factory=lambda: Looks(1, None))

    def rounds(self, session: Session) -> Iterator[Round]:
        yield Round(self.todo, session.jobs if self.show_all else None, self.title)


@dataclass
class UntilDecided:
    """Seeds until decided: round after round on one session, the jobs ``first`` (what the
    session planned to train), then one more seed for each undecided group, until every
    verdict is decided or at ``--max-seeds`` (normbench.sweeps.adaptive)."""

    plan: adaptive.SequentialDesign
    first: list[Job]
    title: str = "round"
    looks: Looks = field(default_factory=lambda: Looks(1, None))

    def rounds(self, session: Session) -> Iterator[Round]:
        plan, todo, look = self.plan, self.first, 1
        for look in range(1, plan.looks + 1):
            session.extra.update({"until_decided": plan.record(look)})
            yield Round(todo, session.jobs, f"{self.title} {look}")
            jobs, runs_dir = session.jobs, session.runs_dir
            now = adaptive.look_at(jobs, runs_dir, plan.at(look), plan.tuned)
            todo, left = adaptive.seeds_to_add(jobs, now, plan)
            if not todo or look == plan.looks:
                session.console.print(
                    left.stop_text(look, plan), soft_wrap=not session.console.is_terminal
                )
                break
            session.console.print(
                left.next_text(look, len(todo), plan), soft_wrap=not session.console.is_terminal
            )
            session.jobs += todo
            session.save(until_decided=plan.record(look + 1))
        final = adaptive.look_at(session.jobs, session.runs_dir, plan.at(look), plan.tuned)
        self.looks = Looks(look, adaptive.tally(final, len(session.jobs)))


def looks_text(plan: adaptive.SequentialDesign, looks: Looks, session: Session) -> str:
    """The closing line of a sweep run until decided: what it decided and what it cost,
    against the fixed design at --max-seeds (normbench.sweeps.adaptive.closing)."""
    return adaptive.closing(looks.final, plan, looks.taken, session.jobs, session.runs_dir)
