"""A ladder as a design on the one rounds loop (normbench.sweeps.session.run_rounds): its rungs
smallest first, each the preset's comparison at that size, run by the design a plain sweep
or a tuned one would use: ``Fixed`` or ``UntilDecided`` for a plain grid; ``tuned.Tuned``
(each group tuned on tuning seeds, confirmed on fresh ones) at every rung by default; with
``--ladder-transfer N``, tuned at the N smallest rungs only and the larger rungs trained at the
choice of the largest tuned rung (with ``model.parametrization=mup`` that is muP transfer).

One record holds the whole ladder: its jobs are every rung's confirmation runs (a plain
rung's grid), its ``tuning.runs`` every rung's tuning runs (so that reports over the runs
directory leave them out), and its ``ladder`` the axis, the values, the budget rule, and per
rung its size, steps, tokens per parameter, epochs, whether it was tuned and what each group
chose there. Each rung sees the session through ``RungSession``, which keeps the jobs of the
rungs before it in the record while the rung's design works on its own. Every decision is a
function of the run store, so running the command again after Ctrl-C or kill -9 resumes at
the rung and phase where it stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from normbench.report.base import Method
from normbench.store.rundir import Rerun
from normbench.sweeps import adaptive
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.ladder_plan import LadderPlan, Rung
from normbench.sweeps.session import (
    Design,
    Fixed,
    Launch,
    Looks,
    Round,
    Session,
    UntilDecided,
    check_devices,
)
from normbench.sweeps.tuned import Tuned
from normbench.sweeps.tuned_plan import confirmation_jobs


class RungSession:
    """The session as one rung's design sees it: ``jobs`` are the rung's own (its rounds and
    its looks until decided count them alone), and every save writes the record with the
    earlier rungs' jobs before them, and their tuning runs before this rung's."""

    def __init__(self, session: Session, before: list[Job], tuning_runs: list[str]):
        self.session, self.before, self.tuning_runs = session, before, tuning_runs
        self.jobs: list[Job] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def save(self, more: Counter | None = None, finished: bool = False, **extra: Any):
        if isinstance(extra.get("tuning"), dict):
            state = extra["tuning"]
            extra["tuning"] = {**state, "runs": [*self.tuning_runs, *state["runs"]]}
        self.session.jobs = [*self.before, *self.jobs]
        return self.session.save(more, finished, **extra)


def session(
    plan: LadderPlan,
    runs_dir: Path,
    launch: Launch,
    console: Console,
    extra: dict,
    runner=None,
    command: list[str] | None = None,
) -> Session:
    """The ladder's session: its record lists no run until the first rung's are known
    (``runner``: a launcher the caller keeps, as for any session; ``command``: the one its
    record stores, where a host runs it)."""
    jobs = [job for rung in plan.rungs for job in rung.grid.jobs]
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in jobs})
    first = plan.rungs[0].grid
    shell = Sweep(plan.name, plan.version, [], first.axes)
    start = {"ladder": plan.record(), **extra}
    return Session(shell, runs_dir, launch, console, runner=runner, command=command, extra=start)


@dataclass
class Ladder:
    """The rungs of a ladder, smallest first, as rounds (normbench.sweeps.session.Design)."""

    plan: LadderPlan
    rerun: Rerun
    max_seeds: int | None
    method: Method
    looks: Looks = field(default_factory=lambda: Looks(1, None))
    chosen: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group label -> choice
    designs: list[Design] = field(default_factory=list)  # each rung's, in order

    def rounds(self, session: Session) -> Iterator[Round]:
        before: list[Job] = []
        tuning_runs: list[str] = []
        count = len(self.plan.rungs)
        for index, rung in enumerate(self.plan.rungs):
            heading = f"{self.plan.spec.key}={rung.value} ({index + 1} of {count})"
            view = RungSession(session, before, tuning_runs)
            design = self.rung_design(index, rung, view, heading)
            self.designs.append(design)
            yield from design.rounds(view)  # type: ignore[arg-type]
            self.looks = design.looks
            if isinstance(design, Tuned):
                self.chosen = {c.group.label: c.chosen for c in design.choices}
                tuning_runs = list(session.extra["tuning"]["runs"])
            self.note(session, index, heading)
            before = [*before, *view.jobs]
            view.save()

    def rung_design(self, index: int, rung: Rung, view: RungSession, heading: str) -> Design:
        """A plain rung's grid; a rung that tunes; or a larger rung at the chosen values."""
        if rung.tunes:
            return Tuned(rung.tuned, self.rerun, self.max_seeds, self.method, heading)
        if rung.tuned is not None:  # transfer: each group at its choice at the tuned rung
            jobs = [
                job
                for group in rung.tuned.groups
                for job in confirmation_jobs(group, self.chosen[group.label])
            ]
            grid = Sweep(rung.grid.name, rung.grid.version, jobs, rung.grid.axes)
        else:
            grid = rung.grid
        view.jobs = list(grid.jobs)
        view.save()
        todo = planning.plan(grid, view.runs_dir, self.rerun).todo
        if self.max_seeds is None:
            return Fixed(todo, heading, show_all=False)
        rounds = adaptive.design(grid, self.max_seeds, self.method)
        if rung.tuned is not None:
            rounds = replace(rounds, tuned=tuple(rung.tuned.space))
        return UntilDecided(rounds, todo, f"{heading}, round")

    def note(self, session: Session, index: int, heading: str) -> None:
        """The record's rung: tuned or not, and what each group chose (tuned or taken)."""
        rung = dict(session.extra["ladder"]["rungs"][index])
        choices = {label: dict(o.split("=", 1) for o in c) for label, c in self.chosen.items()}
        rung["chosen"] = choices if self.plan.rungs[index].tuned is not None else None
        rung["done"] = True
        session.extra["ladder"]["rungs"][index] = rung
        if index == self.plan.tuned_rungs - 1 and self.plan.spec.transfer:
            transfer = session.extra["ladder"]["transfer"]
            transfer |= {"from": self.plan.rungs[index].value, "chosen": choices}
            session.console.print(f"{heading}: tuned; the larger rungs train at its choices")
