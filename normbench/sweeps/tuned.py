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
   step beyond it at the full budget (``extend``), and again from the new choice while it
   stays at the edge, until a step beyond is not better (the choice is bracketed), diverges
   (divergence bounds it) or ``MAX_EXTENSIONS`` steps were taken ("widen the grid"); flagged
   in every output. Where the candidate with the best validation *accuracy* (what the
   verdicts are on) is another than the loss-best chosen, every output says so.
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
from normbench.report.base import BITS_PER_BYTE, Method, Metric
from normbench.report.results import metric_of
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
    MAX_EXTENSIONS,
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
# what the verdicts of a classifier are on: its loss-best candidate may not be its best here
VERDICT_ACCURACY = Metric("val_acc", higher_is_better=True)


# --------------------------------------------------------------------------- phase 1
def tuning_frame(runs_dir: Path, run_ids: list[str]) -> pd.DataFrame:
    """The tuning runs as the report reads them (one row each, by run id)."""
    selection = catalog.select(catalog.load_runs(runs_dir), [], run_ids)
    return selection.runs.set_index("run_id", drop=False)


def values_of(
    frame: pd.DataFrame, jobs: list[Job], metric: Metric = SELECTION
) -> dict[str, float | None]:
    """Each run's final validation ``metric`` (the loss, ``SELECTION``, unless told): None
    when it has none (diverged, or a value that is not finite); a run that failed or is
    missing raises TuningStopped, since it is no result (a killed worker, a full disk) and
    ranking it would prune a candidate."""
    check_finished(frame, jobs)
    rows = frame[frame.index.isin([job.run_id for job in jobs])]
    out: dict[str, float | None] = {}
    for rid, row in rows.iterrows():
        value = row.get(metric.column)
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
    """What tuning chose for one group, how firmly, what it tried, whether the choice sits at
    an edge of the grid (``edge``: a sentence, None when inside) and the candidate with the
    best validation accuracy at the last rung (``acc_best``, None for a language model, whose
    verdicts are on bits per byte: the loss over ln 2, the same ranking)."""

    group: Group
    chosen: tuple[str, ...]
    rungs: list[dict]  # per rung: steps and each candidate's mean validation loss
    firm: halving.Firmness
    edge: str | None = None
    acc_best: dict | None = None

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
            "acc_best": self.acc_best,
            "rungs": self.rungs,
        }

    def steps(self, tuned: TunedDesign) -> int:
        """Tuning steps spent: the rungs', and the extensions beyond an edge at full budget."""
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
        firm = halving.firmness(per_seed, best, hib)
        acc_best = accuracy_best(jobs, frame, best)
        return [chosen], Choice(group, chosen, history, firm, acc_best=acc_best)
    return alive, None


def accuracy_best(jobs: dict[tuple, list[Job]], frame: pd.DataFrame, chosen: str) -> dict | None:
    """The last rung's candidate with the best mean validation accuracy over the tuning seeds
    (a diverged run the worst; a tie goes to the chosen), its mean and the chosen's: the
    choice is on the loss, a classifier's verdicts on accuracy, and the two can pick
    different candidates. None for runs whose verdicts are on bits per byte (the loss over
    ln 2: the same ranking) or that record no accuracy."""
    rows = frame[frame.index.isin([j.run_id for js in jobs.values() for j in js])]
    if metric_of(rows) == BITS_PER_BYTE:
        return None
    acc = values_of(frame, [j for js in jobs.values() for j in js], VERDICT_ACCURACY)
    per_seed = {" ".join(c): [acc.get(j.run_id) for j in js] for c, js in jobs.items()}
    if all(v is None for values in per_seed.values() for v in values):
        return None
    scores = {c: halving.score(v, True) for c, v in per_seed.items()}
    best = max(per_seed, key=lambda c: (scores[c], c == chosen))
    return {
        "candidate": best,
        "metric": VERDICT_ACCURACY.name,
        "value": _mean(per_seed[best]),
        "chosen_value": _mean(per_seed[chosen]),
    }


def _mean(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None]
    return sum(finite) / len(finite) if len(finite) == len(values) and values else None


@dataclass(frozen=True)
class Edge:
    """A choice at or beyond an edge of a key's listed values: the listed edge, the side,
    how many steps beyond it the chosen value lies, and the candidate one step further (None
    where there is none: the key's steps beyond are spent, or the step does not compose:
    ``why_not``)."""

    key: str
    edge: str  # the listed value at the edge, as given
    side: str  # "top" | "bottom"
    steps: int  # how far beyond the edge the chosen value lies, 0: at it
    value: str  # the chosen value
    beyond: tuple[str, ...] | None
    why_not: str = ""


def steps_beyond(listed: list[str], side: str) -> list[str]:
    """The values beyond a key's listed ``side``, nearest first, ``MAX_EXTENSIONS`` of them:
    the ratio of the edge to its neighbour (geometric) where every value is positive, else
    their difference, taken again at each step; integers stay integers."""
    ordered = sorted(set(float(v) for v in listed))
    edge, inner = (ordered[-1], ordered[-2]) if side == "top" else (ordered[0], ordered[1])
    integers = all(re.fullmatch(r"[+-]?\d+", str(v).strip()) for v in listed)
    out = []
    for step in range(1, MAX_EXTENSIONS + 1):
        value = edge * (edge / inner) ** step if ordered[0] > 0 else edge + (edge - inner) * step
        out.append(str(round(value)) if integers else f"{float(f'{value:.3g}')!r}")
    return out


def edges(tuned: TunedDesign, group: Group, chosen: tuple[str, ...]) -> list[Edge]:
    """The keys whose chosen value is the largest or smallest of the values listed for them,
    or one of the steps beyond (``steps_beyond``), each with the candidate one step further:
    the chosen with that key's value replaced. An interval has no listed edge and is not
    extended."""
    flat = dict(o.split("=", 1) for o in chosen)
    found = []
    for key in group.keys:
        listed = tuned.space.get(key)
        numbers = _numbers(listed) if isinstance(listed, list) else None
        if numbers is None or len(set(numbers)) < 2 or key not in flat:
            continue
        value = float(flat[key])
        if min(numbers) < value < max(numbers):
            continue
        side = "top" if value >= max(numbers) else "bottom"
        edge = listed[numbers.index(max(numbers) if side == "top" else min(numbers))]
        further = steps_beyond(listed, side)
        steps = next((i + 1 for i, v in enumerate(further) if float(v) == value), 0)
        if steps == len(further):
            found.append(Edge(key, edge, side, steps, flat[key], None, "the step limit"))
            continue
        beyond = tuple(f"{key}={further[steps]}" if o.startswith(f"{key}=") else o for o in chosen)
        try:
            compose_candidate(group.base, beyond, TUNING_SEED, group.max_steps, group.label)
        except UsageError as err:
            why = str(err).rpartition(": ")[2]
            found.append(Edge(key, edge, side, steps, flat[key], None, why))
            continue
        found.append(Edge(key, edge, side, steps, flat[key], beyond))
    return found


def edge_text(found: list[Edge], last_rung: dict[str, float | None], extended: bool) -> str | None:
    """The sentence every output shows for a choice at or beyond an edge of the grid:
    bracketed (the step beyond was tried at the full budget and was not better), bounded by
    a divergence (the step beyond diverged on a tuning seed), or open ("widen the grid": the
    step limit reached, the extension rounds spent, or not extended). ``last_rung``: each
    candidate's mean validation loss at the full budget (None: a run of it diverged)."""
    if not found:
        return None
    parts = []
    for edge in found:
        if edge.steps:
            where = (
                f"{edge.key}={edge.value}: {edge.steps} step{'s' if edge.steps > 1 else ''} "
                f"beyond the grid's {edge.side} ({edge.edge}), chosen"
            )
        else:
            where = f"{edge.key}={edge.value}: at the grid's {edge.side}"
        text = " ".join(edge.beyond) if edge.beyond is not None else None
        step = dict(o.split("=", 1) for o in edge.beyond)[edge.key] if edge.beyond else None
        if edge.beyond is None and edge.why_not == "the step limit":
            parts.append(
                f"{where}; nothing was tried further ({MAX_EXTENSIONS} steps beyond, the "
                "limit): widen the grid"
            )
        elif edge.beyond is None or not extended:
            why = f" ({edge.why_not})" if edge.why_not else ""
            parts.append(f"{where}, not extended{why}: widen the grid")
        elif text not in last_rung:
            parts.append(
                f"{where}; {step} beyond it was not tried (the {MAX_EXTENSIONS} extension "
                "rounds were spent): widen the grid"
            )
        elif last_rung[text] is None:
            parts.append(f"{where}; {step} beyond it diverged at the full budget: bounded")
        else:
            parts.append(f"{where}; {step} beyond it was tried at the full budget, not better")
    return "; ".join(parts)


def tuning_rounds(
    session: Session, tuned: TunedDesign, rerun: Rerun, heading: str | None = None
) -> Generator[Round, None, list[Choice]]:
    """Phase 1 as rounds (normbench.sweeps.session.run_rounds trains each): every group's
    rung at once, then each group's promotions read off the store; a choice at an edge of the
    grid then tried one step beyond, at the full budget, round after round from each new
    choice, up to ``MAX_EXTENSIONS`` rounds (``tuned.extend``). Every round is a function of
    the store, so a resumed sweep replays the rounds it finished and trains what is missing.
    Returns the choices. ``heading``: what each round's title starts with (a study's name)."""
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
    extensions = MAX_EXTENSIONS if tuned.extend else 0
    for extension in range(1, extensions + 1):
        beyond = {c.group.key: untried_beyond(tuned, c, trained) for c in choices if c.tuned}
        if not any(beyond.values()):
            break
        jobs = []
        for group in tuned.groups:
            if beyond.get(group.key):
                batch = rung_jobs(tuned, group, beyond[group.key], group.max_steps)
                trained[group.key][-1] = {**trained[group.key][-1], **batch}
                jobs += [job for js in batch.values() for job in js]
        title = (
            f"tuning, extension {extension} of at most {MAX_EXTENSIONS} beyond the grid's "
            f"edge: {len(jobs)} runs at the full budget"
        )
        frame = yield from launch(jobs, title, tuned.rung_count + extension)
        choices = [
            choose(tuned, c.group, trained[c.group.key], frame)[1] if beyond.get(c.group.key) else c
            for c in choices
        ]
    for choice in choices:
        found = edges(tuned, choice.group, choice.chosen) if choice.tuned else []
        last = choice.rungs[-1]["values"] if choice.rungs else {}
        choice.edge = edge_text(found, last, tuned.extend)
    session.save(tuning=state(tuned, "confirmation", tuned.rung_count, runs, choices))
    return choices


def untried_beyond(
    tuned: TunedDesign, choice: Choice, trained: dict[str, list[dict[tuple, list[Job]]]]
) -> list[tuple[str, ...]]:
    """The candidates one step beyond the edges a choice sits at that its group has not yet
    trained at the full budget: the next extension round's."""
    done = trained[choice.group.key][-1]
    found = edges(tuned, choice.group, choice.chosen)
    return [e.beyond for e in found if e.beyond is not None and e.beyond not in done]


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
