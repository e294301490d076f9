"""A tuned comparison: each group of a grid at its own best hyperparameters, at an equal,
stated budget (`normbench sweep PRESET --tune KEY=v1,v2,...`, or a preset's ``tune:``).

Two phases on one sweep record:

1. *Tuning.* The grid's groups are its runs without the seed and the tuned keys (a norm, or
   a norm on a data set). Each group searches its own space (the product of the tuned
   values, less the keys its norm ignores: a candidate that composes to a run id already seen
   is the same run) on *tuning seeds* (from TUNING_SEED, never a seed of the grid) by
   successive halving where it saves at least half the steps, else the full grid
   (normbench.sweeps.halving), each rung's schedule compressed to its budget, and chooses
   on the final *validation loss* (continuous: accuracy ties on a few hundred validation
   samples, the loss hardly ever). A choice at an edge of a key's listed values is tried one
   step beyond it at the full budget (``extend``) and flagged in every output.
2. *Confirmation.* Each group runs at its chosen value on the grid's own seeds, fresh and
   paired across groups; the record lists these runs alone, so `report --sweep NAME` computes
   its verdicts on *test* from them only (the choice cannot leak into the verdict).
   ``--until-decided`` adds seeds to this phase only.

Equal budget: every group gets the same number of trials (``--tune-trials``, default the
smallest group's space) on the same rungs; a group whose space is larger draws that many
candidates from it, stratified so that every value of every key is tried at least once where
the budget allows (a fixed draw per group, so a resume draws the same); one whose space is
smaller gets fewer, and every output says the budgets were unequal. Every output lists the
values each group tried. Every decision is a
function of the run store, so rerunning the command after Ctrl-C or kill -9 continues the
phase it was in (the record says which).

Its plan (the space, the groups and their candidates, the runs of a rung) is
normbench.sweeps.tuned_plan's; this module runs it: the rounds, the choices read off the
store, the record's tuning state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.text import Text

from normbench.core.errors import UsageError
from normbench.report.base import Method, Metric
from normbench.store import catalog
from normbench.store.rundir import Rerun
from normbench.sweeps import adaptive, halving
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.session import (
    Design,
    Fixed,
    Launch,
    Looks,
    Round,
    Session,
    UntilDecided,
    check_devices,
    run_rounds,
)
from normbench.sweeps.tuned_plan import (
    TUNING_SEED,
    Group,
    TunedDesign,
    compose_candidate,
    confirmation_jobs,
    rung_jobs,
)

# what the choice is made on: the final validation loss (next-byte cross-entropy on the LM,
# whose bits per byte are the same number over ln 2), continuous where accuracy ties
SELECTION = Metric("val_loss", higher_is_better=False)
CHOSEN_BY = "final validation loss, mean over the tuning seeds"


# --------------------------------------------------------------------------- phase 1
def tuning_frame(runs_dir: Path, run_ids: list[str]) -> pd.DataFrame:
    """The tuning runs as the report reads them (one row each, by run id)."""
    selection = catalog.select(catalog.load_runs(runs_dir), [], run_ids)
    return selection.runs.set_index("run_id", drop=False)


def values_of(frame: pd.DataFrame, jobs: list[Job]) -> dict[str, float | None]:
    """Each run's final validation loss (``SELECTION``): None when it has none (diverged, or
    a loss that is not finite); a run that failed or is missing raises TuningStopped, since
    it is no result (a killed worker, a full disk) and ranking it would prune a candidate."""
    check_finished(frame, jobs)
    rows = frame[frame.index.isin([job.run_id for job in jobs])]
    out: dict[str, float | None] = {}
    for rid, row in rows.iterrows():
        value = row.get(SELECTION.column)
        finite = row["status"] == "complete" and value is not None and math.isfinite(value)
        out[rid] = float(value) if finite else None
    return out


def check_finished(frame: pd.DataFrame, jobs: list[Job]) -> None:
    """Raise TuningStopped unless every one of ``jobs`` is complete or diverged."""
    rows = frame[frame.index.isin([job.run_id for job in jobs])]
    unfinished = {j.run_id for j in jobs if j.run_id not in rows.index}
    unfinished |= {rid for rid, st in rows["status"].items() if st not in ("complete", "diverged")}
    if unfinished:
        raise TuningStopped(len(unfinished))


class TuningStopped(Exception):
    """Tuning runs that failed or never finished: the rung cannot rank its candidates."""

    def __init__(self, count: int):
        super().__init__(
            f"{count} tuning run(s) failed or did not finish, so no candidate was ranked: "
            "run the command again (completed runs are kept)"
        )


@dataclass
class Choice:
    """What tuning chose for one group, how firmly, what it tried, and whether the choice
    sits at an edge of the grid (``edge``: a sentence, None when inside)."""

    group: Group
    chosen: tuple[str, ...]
    rungs: list[dict]  # per rung: steps and each candidate's mean validation loss
    firm: halving.Firmness
    edge: str | None = None

    @property
    def tuned(self) -> bool:
        """Whether the group had anything to choose (a group taking none of the keys not)."""
        return bool(self.rungs)

    def tried(self) -> dict[str, list[str]]:
        """Per tuned key, the values this group trained at any rung, in increasing order."""
        found: dict[str, set[str]] = {key: set() for key in self.group.keys}
        for rung in self.rungs:
            for candidate in rung["values"]:
                for key, value in group_values(candidate).items():
                    found.setdefault(key, set()).add(value)
        return {key: _ordered(values) for key, values in found.items()}

    def record(self, tuned: TunedDesign) -> dict:
        flat = dict(o.split("=", 1) for o in self.chosen)
        return {
            "group": self.group.label,
            "keys": self.group.keys,
            "space": self.group.space if math.isfinite(self.group.space) else "continuous",
            "trials": len(self.group.candidates),
            "steps": self.steps(tuned),
            "full_grid_steps": tuned.full_grid_steps(self.group),
            "chosen": flat,
            "tried": self.tried(),
            "edge": self.edge,
            "metric": SELECTION.name if self.tuned else None,
            "higher_is_better": SELECTION.higher_is_better if self.tuned else None,
            "value": self.rungs[-1]["values"].get(" ".join(self.chosen)) if self.rungs else None,
            "runner_up": self.firm.runner_up,
            "gap": self.firm.gap,
            "regret_bound": self.firm.regret,
            "rungs": self.rungs,
        }

    def steps(self, tuned: TunedDesign) -> int:
        """Tuning steps spent: the rungs', and the extension beyond an edge at full budget."""
        if not self.rungs:
            return 0
        extra = len(self.rungs[-1]["values"]) - tuned.schedule_of(self.group)[-1].keep
        return tuned.steps_of(self.group) + extra * self.group.max_steps * len(tuned.tuning_seeds)


def group_values(text: str) -> dict[str, str]:
    """``train.lr=0.01 norm.alpha_init=1.0`` as {key: value text}."""
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def _numbers(values) -> list[float] | None:
    """A key's values as numbers, or None when one is not a number."""
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return None


def _ordered(values) -> list[str]:
    numbers = _numbers(values)
    if numbers is None:
        return sorted(values)
    return [v for _, v in sorted(zip(numbers, values, strict=True))]


def choose(
    tuned: TunedDesign, group: Group, per_rung: list[dict[tuple, list[Job]]], frame: pd.DataFrame
) -> tuple[list[tuple], Choice | None]:
    """Promotions of one group from the rungs trained so far: the candidates the next rung
    trains, and after the last rung the choice. Only tuning-seed runs are read, and only
    their validation loss: the grid's seeds and every test number are never looked at."""
    alive = list(group.candidates)
    schedule = tuned.schedule_of(group)
    history = []
    values = values_of(frame, [j for r in per_rung for js in r.values() for j in js])
    hib = SELECTION.higher_is_better
    for index, jobs in enumerate(per_rung):
        per_seed = {" ".join(c): [values.get(j.run_id) for j in jobs[c]] for c in jobs}
        history.append(
            {
                "steps": schedule[index].steps,
                "values": {c: _mean(v) for c, v in per_seed.items()},
            }
        )
        if index + 1 < len(schedule):
            keep = halving.promote(per_seed, schedule[index + 1].keep, hib)
            alive = [c for c in jobs if " ".join(c) in keep]
            continue
        (best,) = halving.promote(per_seed, 1, hib)
        chosen = next(c for c in jobs if " ".join(c) == best)
        return [chosen], Choice(group, chosen, history, halving.firmness(per_seed, best, hib))
    return alive, None


def _mean(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None]
    return sum(finite) / len(finite) if len(finite) == len(values) and values else None


@dataclass(frozen=True)
class Edge:
    """A choice at an edge of a key's listed values, and the candidate one step beyond it
    (None where there is none: the key is not numeric, or the step does not compose)."""

    key: str
    value: str
    side: str  # "top" | "bottom"
    beyond: tuple[str, ...] | None
    why_not: str = ""


def edges(tuned: TunedDesign, group: Group, chosen: tuple[str, ...]) -> list[Edge]:
    """The keys whose chosen value is the largest or smallest of the values listed for them,
    each with the candidate one grid step beyond: the same ratio as the edge's neighbour
    (geometric) where every value is positive, else the same difference; integers stay
    integers. An interval has no listed edge and is not extended."""
    flat = dict(o.split("=", 1) for o in chosen)
    found = []
    for key in group.keys:
        listed = tuned.space.get(key)
        numbers = _numbers(listed) if isinstance(listed, list) else None
        if numbers is None or len(set(numbers)) < 2 or key not in flat:
            continue
        ordered = sorted(set(numbers))
        value = float(flat[key])
        if value not in (ordered[0], ordered[-1]):
            continue
        side = "top" if value == ordered[-1] else "bottom"
        inner = ordered[-2] if side == "top" else ordered[1]
        step = value * (value / inner) if min(ordered) > 0 else value + (value - inner)
        integers = all(re.fullmatch(r"[+-]?\d+", str(v).strip()) for v in listed)
        text = str(round(step)) if integers else f"{float(f'{step:.3g}')!r}"
        beyond = tuple(f"{key}={text}" if o.startswith(f"{key}=") else o for o in chosen)
        try:
            compose_candidate(group.base, beyond, TUNING_SEED, group.max_steps, group.label)
        except UsageError as err:
            found.append(Edge(key, flat[key], side, None, str(err).rpartition(": ")[2]))
            continue
        found.append(Edge(key, flat[key], side, beyond))
    return found


def edge_text(found: list[Edge], chosen: tuple[str, ...], extended: bool) -> str | None:
    """The sentence every output shows for a choice at an edge of the grid."""
    if not found:
        return None
    flat = dict(o.split("=", 1) for o in chosen)
    parts = []
    for edge in found:
        if edge.beyond is not None and edge.beyond == chosen:
            parts.append(
                f"{edge.key}={flat[edge.key]}: one step beyond the grid's {edge.side}, chosen; "
                "nothing was tried further: widen the grid"
            )
        elif edge.beyond is not None and extended:
            step = dict(o.split("=", 1) for o in edge.beyond)[edge.key]
            parts.append(
                f"{edge.key}={edge.value}: at the grid's {edge.side}; {step} beyond it was "
                "tried at the full budget, not better"
            )
        else:
            why = f" ({edge.why_not})" if edge.why_not else ""
            parts.append(f"{edge.key}={edge.value}: at the grid's {edge.side}, not extended{why}")
    return "; ".join(parts)


def tuning_rounds(
    session: Session, tuned: TunedDesign, rerun: Rerun, heading: str | None = None
) -> Generator[Round, None, list[Choice]]:
    """Phase 1 as rounds (normbench.sweeps.session.run_rounds trains each): every group's
    rung at once, then each group's promotions read off the store; a choice at an edge of the
    grid then tried one step beyond, at the full budget (``tuned.extend``). Returns the
    choices. ``heading``: what each round's title starts with (a study's name)."""
    alive = {g.key: list(g.candidates) for g in tuned.groups}
    trained: dict[str, list[dict[tuple, list[Job]]]] = {g.key: [] for g in tuned.groups}
    runs: list[str] = []
    choices: list[Choice] = []
    lead = f"{heading}: " if heading else ""

    def launch(jobs: list[Job], title: str, rung: int) -> Generator[Round, None, pd.DataFrame]:
        # planned first: a run kept under its earlier id names the job (store.rundir)
        todo = planning.plan(Sweep(tuned.grid.name, None, jobs), session.runs_dir, rerun).todo
        runs.extend(job.run_id for job in jobs)
        session.save(tuning=state(tuned, "tuning", rung, runs, choices))
        yield Round(todo, jobs, lead + title)
        frame = tuning_frame(session.runs_dir, runs)
        check_finished(frame, jobs)
        return frame

    for index in range(tuned.rung_count):
        jobs = []
        for group in tuned.groups:
            schedule = tuned.schedule_of(group)
            at = index - (tuned.rung_count - len(schedule))  # fewer rungs: the last ones
            if not schedule or at < 0:
                continue
            rung = schedule[at]
            batch = rung_jobs(tuned, group, alive[group.key][: rung.keep], rung.steps)
            trained[group.key].append(batch)
            jobs += [job for js in batch.values() for job in js]
        steps = "/".join(
            str(r.steps) for r in (tuned.rungs_at(m)[index] for m in tuned.step_budgets)
        )
        title = f"tuning, rung {index + 1} of {tuned.rung_count}: {steps} steps"
        frame = yield from launch(jobs, title, index + 1)
        choices = []
        for group in tuned.groups:
            if not tuned.schedule_of(group):  # one candidate: it is the choice
                untuned = halving.Firmness(None, None, None)
                choices.append(Choice(group, group.candidates[0], [], untuned))
                continue
            alive[group.key], choice = choose(tuned, group, trained[group.key], frame)
            if choice:
                choices.append(choice)
    at_edge = {c.group.key: edges(tuned, c.group, c.chosen) for c in choices if c.tuned}
    beyond = {
        key: [e.beyond for e in found if e.beyond is not None] for key, found in at_edge.items()
    }
    if tuned.extend and any(beyond.values()):
        jobs = []
        for group in tuned.groups:
            if beyond.get(group.key):
                batch = rung_jobs(tuned, group, beyond[group.key], group.max_steps)
                trained[group.key][-1] = {**trained[group.key][-1], **batch}
                jobs += [job for js in batch.values() for job in js]
        title = f"tuning, one step beyond the grid's edge: {len(jobs)} runs at the full budget"
        frame = yield from launch(jobs, title, tuned.rung_count + 1)
        choices = [
            choose(tuned, c.group, trained[c.group.key], frame)[1] if beyond.get(c.group.key) else c
            for c in choices
        ]
    for choice in choices:
        found = at_edge.get(choice.group.key, [])
        choice.edge = edge_text(found, choice.chosen, tuned.extend)
    session.save(tuning=state(tuned, "confirmation", tuned.rung_count, runs, choices))
    return choices


def state(
    tuned: TunedDesign, phase: str, rung: int, runs: list[str], choices: list[Choice]
) -> dict:
    """The record's ``tuning``: the phase the sweep is in, the design and, once tuning has
    ended, each group's choice. ``rungs``: at the longest step budget (a group of a shorter
    one trains its rungs in proportion: a note says so)."""
    longest = tuned.step_budgets[-1]
    return {
        "phase": phase,
        "rung": rung,
        "rungs": [{"keep": r.keep, "steps": r.steps} for r in tuned.rungs_at(longest)],
        "space": {k: v if isinstance(v, list) else str(v) for k, v in tuned.space.items()},
        "trials": tuned.trials,
        "eta": tuned.eta,
        "tuning_seeds": tuned.tuning_seeds,
        "max_steps": longest if len(tuned.step_budgets) == 1 else tuned.step_budgets,
        "equal_budget": tuned.equal,
        "notes": tuned.notes,
        "extend": tuned.extend,
        "max_share": halving.MAX_SHARE,
        "selection": f"{CHOSEN_BY}; verdicts on test from the confirmation seeds only",
        "groups": [choice.record(tuned) for choice in choices],
        "runs": runs,
    }


# --------------------------------------------------------------------------- both phases
def session(
    tuned: TunedDesign,
    runs_dir: Path,
    launch: Launch,
    console: Console,
    *,
    runner=None,
    command: list[str] | None = None,
    extra: dict | None = None,
) -> Session:
    """The tuned comparison's session: its record lists no run until the confirmation phase
    (a report of it reads the confirmation runs only) and says which phase it is in.
    ``extra``: more fields of its record (`normbench findings`: the claims' hashes)."""
    grid = tuned.grid
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    start = {**(extra or {}), "tuning": state(tuned, "tuning", 1, [], [])}
    shell = Sweep(grid.name, grid.version, [], grid.axes)
    return Session(shell, runs_dir, launch, console, runner=runner, command=command, extra=start)


@dataclass
class Tuned:
    """A tuned comparison as a design (normbench.sweeps.session.Design): the tuning rounds,
    then the confirmation at the chosen values, fixed or until decided (``max_seeds``)."""

    tuned: TunedDesign
    rerun: Rerun
    max_seeds: int | None
    method: Method
    heading: str | None = None  # each round's title starts with it
    choices: list[Choice] = field(default_factory=list)
    plan: adaptive.SequentialDesign | None = None
    looks: Looks = field(default_factory=lambda: Looks(1, None))

    def rounds(self, session: Session) -> Iterator[Round]:
        tuned = self.tuned
        self.choices = yield from tuning_rounds(session, tuned, self.rerun, self.heading)
        by_key = {choice.group.key: choice for choice in self.choices}
        confirm = [j for g in tuned.groups for j in confirmation_jobs(g, by_key[g.key].chosen)]
        grid = Sweep(tuned.grid.name, tuned.grid.version, confirm, tuned.grid.axes)
        seeds = self.max_seeds
        plan = adaptive.design(grid, seeds, self.method) if seeds is not None else None
        self.plan = replace(plan, tuned=tuple(tuned.space)) if plan else None
        todo = planning.plan(grid, session.runs_dir, self.rerun).todo  # before the record
        session.jobs = confirm
        if self.plan:
            session.extra["until_decided"] = self.plan.record(1)
        session.save()
        lead = f"{self.heading}: " if self.heading else ""
        header = lead + confirmation_header(self.choices, confirm)
        session.console.print(Text(header, style="bold"), soft_wrap=True)
        confirmation: Design = (
            UntilDecided(self.plan, todo, f"{lead}confirmation, round")
            if self.plan
            else Fixed(todo, f"{lead}confirmation" if self.heading else None)
        )
        yield from confirmation.rounds(session)
        self.looks = confirmation.looks
        session.extra["tuning"]["phase"] = "done"


def confirmation_header(choices: list[Choice], jobs: list[Job]) -> str:
    """The line that opens the confirmation phase: the values it confirms, group by group,
    and its seeds (the tuned table comes only at the end of the sweep)."""
    seeds = ", ".join(map(str, sorted({job.cfg["seed"] for job in jobs})))
    values = "; ".join(
        f"{choice.group.label} at {' '.join(choice.chosen) or 'its only value'}"
        for choice in choices
    )
    return f"confirmation ({len(jobs)} runs, seeds {seeds}): {values}"


def run(
    session: Session,
    tuned: TunedDesign,
    rerun: Rerun,
    max_seeds: int | None,
    method: Method,
) -> tuple[list[Choice], adaptive.SequentialDesign | None, Looks]:
    """Tuning, then confirmation (until decided when ``max_seeds`` is given), on the one
    rounds loop."""
    design = Tuned(tuned, rerun, max_seeds, method)
    run_rounds(session, design)
    return design.choices, design.plan, design.looks
