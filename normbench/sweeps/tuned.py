"""A tuned comparison: each group of a grid at its own best hyperparameters, at an equal,
stated budget (`normbench sweep PRESET --tune KEY=v1,v2,...`, or a preset's ``tune:``).

Two phases on one sweep record:

1. *Tuning.* The grid's groups are its runs without the seed and the tuned keys (a norm, or
   a norm on a data set). Each group searches its own space (the product of the tuned
   values, less the keys its norm ignores: a candidate that composes to a run id already seen
   is the same run) on *tuning seeds* (from TUNING_SEED, never a seed of the grid) by
   successive halving (normbench.sweeps.halving), and chooses on the final *validation*
   metric, in the metric's direction (bits per byte: lower is better).
2. *Confirmation.* Each group runs at its chosen value on the grid's own seeds, fresh and
   paired across groups; the record lists these runs alone, so `report --sweep NAME` computes
   its verdicts on *test* from them only (the choice cannot leak into the verdict).
   ``--until-decided`` adds seeds to this phase only.

Equal budget: every group gets the same number of trials (``--tune-trials``, default the
smallest group's space) on the same rungs; a group whose space is larger samples that many
candidates from it (a fixed draw per group, so a resume draws the same); one whose space is
smaller gets fewer, and every output says the budgets were unequal. Every decision is a
function of the run store, so rerunning the command after Ctrl-C or kill -9 continues the
phase it was in (the record says which).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from normbench.core.errors import UsageError
from normbench.core.keys import shown
from normbench.experiment.compose import parse_overrides
from normbench.experiment.probe import compose_checked
from normbench.report.base import ACCURACY, Method, Metric, label, metric_of
from normbench.store import catalog
from normbench.store.rundir import Rerun, run_id
from normbench.sweeps import adaptive, halving
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.presets import load_preset
from normbench.sweeps.session import Launch, Looks, Session, check_devices, until_decided

TUNING_SEED = 1_000_000  # tuning seeds are TUNING_SEED, TUNING_SEED + 1, ...: never the grid's
NOT_TUNABLE = ("seed", "train.max_steps", "train.epochs")  # the seeds and the budget itself


# ---------------------------------------------------------------------------- the space
def parse_space(given: list[str], preset: str | None) -> dict[str, list[str]]:
    """The tuned keys and their values: the preset's ``tune:`` with ``--tune KEY=v1,v2,...``
    replacing a key of the same name; each key at least two values, none of them the seed or
    the budget."""
    space = dict(load_preset(preset)["tune"]) if preset else {}
    space = {key: values.split(",") for key, values in space.items()}
    for text in given:
        (override,) = parse_overrides([text]) if "=" in text else (None,)
        if override is None or override.is_delete() or override.is_add():
            raise UsageError(
                f"--tune {shown(text)}: valid: KEY=v1,v2,... (e.g. train.lr=1e-3,3e-3)"
            )
        values = (
            list(override.sweep_string_iterator())
            if override.is_sweep_override()
            else [override.get_value_element_as_str()]
        )
        space[override.key_or_group] = values
    for key, values in space.items():
        if key in NOT_TUNABLE:
            raise UsageError(
                f"--tune {key}: not tunable (the seeds and the budget are the design's); "
                "valid: any other config key, e.g. train.lr"
            )
        if len(set(values)) < 2:
            raise UsageError(f"--tune {key}={','.join(values)}: give at least two values")
    return space


@dataclass
class Group:
    """One group of the grid: its label, its runs in the grid (the confirmation seeds), the
    overrides they share, the candidates it tunes (overrides each; sampled when its space is
    larger than the budget) and the size of its space."""

    key: str
    label: str
    jobs: list[Job]
    base: list[str]
    candidates: list[tuple[str, ...]]
    space: int
    keys: list[str]  # the tuned keys this group takes (a key its norm ignores is left out)

    @property
    def seeds(self) -> list[int]:
        return sorted(job.cfg["seed"] for job in self.jobs)


@dataclass
class Design:
    """The tuned comparison's plan: groups, rungs, tuning seeds, the budget."""

    grid: Sweep
    space: dict[str, list[str]]
    groups: list[Group]
    trials: int
    schedule: list[halving.Rung]
    tuning_seeds: list[int]
    eta: int
    max_steps: int
    notes: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """Every group that tunes tries as many candidates (on the same rungs and seeds)."""
        return len({len(g.candidates) for g in self.groups if g.space > 1}) <= 1

    def schedule_of(self, group: Group) -> list[halving.Rung]:
        """A group's rungs: the design's, capped by its own number of candidates; none for a
        group with one candidate (it takes none of the tuned keys: nothing to choose)."""
        if len(group.candidates) < 2:
            return []
        return [halving.Rung(min(r.keep, len(group.candidates)), r.steps) for r in self.schedule]

    def steps_of(self, group: Group) -> int:
        return halving.steps_spent(self.schedule_of(group), len(self.tuning_seeds))

    def full_grid_steps(self, group: Group) -> int:
        if len(group.candidates) < 2:
            return 0
        return len(group.candidates) * self.max_steps * len(self.tuning_seeds)


def _strip(overrides: list[str], keys) -> list[str]:
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in keys]


def design(
    grid: Sweep,
    space: dict[str, list[str]],
    tuning_seeds: int = 2,
    eta: int = halving.ETA,
    trials: int | None = None,
) -> Design:
    """Plan both phases: the groups of the grid, each group's distinct candidates, the equal
    budget and the rungs. Refused in one line: a tuned key that is also an axis of the grid,
    a grid seed among the tuning seeds, a grid without a step budget, bad counts."""
    if tuning_seeds < 1:
        raise UsageError(f"--tune-seeds {tuning_seeds}: valid: an integer >= 1")
    if eta < 2:
        raise UsageError(f"--eta {eta}: valid: an integer >= 2")
    if trials is not None and trials < 1:
        raise UsageError(f"--tune-trials {trials}: valid: an integer >= 1")
    axes = [axis for axis in grid.axes if axis in space]
    if axes:
        raise UsageError(
            f"--tune {axes[0]}: also an axis of the grid; tune it or sweep it, not both "
            f"(drop {axes[0]}=... from the grid)"
        )
    if any(job.cfg["seed"] >= TUNING_SEED for job in grid.jobs):
        raise UsageError(
            f"seed: the tuning seeds are {TUNING_SEED} and up; the grid's seeds must be below"
        )
    steps = {job.cfg["train"]["max_steps"] for job in grid.jobs}
    if None in steps or len(steps) > 1:
        raise UsageError(
            "--tune: the tuning budget is in steps: every run of the grid needs the same "
            f"train.max_steps (found {', '.join(sorted(map(str, steps)))})"
        )
    (max_steps,) = steps
    members: dict[str, list[Job]] = defaultdict(list)
    for job in grid.jobs:
        members[adaptive.group_key(job.cfg)].append(job)
    shown_axes = [axis for axis in grid.axes if axis != "seed"]
    groups = []
    for key, jobs in members.items():
        present = dict(o.split("=", 1) for o in jobs[0].overrides)
        label = " ".join(f"{a}={present[a]}" for a in shown_axes if a in present) or "all"
        base = _strip(jobs[0].overrides, {"seed", "train.max_steps", *space})
        groups.append(_group(key, label, jobs, base, space, max_steps))
    tuning = [g.space for g in groups if g.space > 1]
    if not tuning:
        raise UsageError(
            f"--tune {', '.join(space)}: no group of the grid takes these keys (its norm "
            "ignores them); valid: a key some group reads, e.g. train.lr"
        )
    budget = trials or min(tuning)
    for group in groups:
        if group.space > budget:  # sample within the budget: a fixed draw per group
            drawn = random.Random(f"normbench-tune {group.key}").sample(range(group.space), budget)
            group.candidates = [group.candidates[i] for i in sorted(drawn)]
    seeds = [TUNING_SEED + i for i in range(tuning_seeds)]
    result = Design(
        grid, space, groups, budget, halving.rungs(budget, max_steps, eta), seeds, eta, max_steps
    )
    if not result.equal:
        result.notes.append(unequal_note(result))
    return result


def _group(key, label, jobs, base, space, max_steps) -> Group:
    """A group's distinct candidates: every combination of the tuned values, composed once;
    one that composes to a run id already seen is the same run (a key its norm ignores)."""
    seen, candidates = {}, []
    for values in itertools.product(*space.values()):
        overrides = tuple(f"{k}={v}" for k, v in zip(space, values, strict=True))
        cfg = _compose(base, overrides, TUNING_SEED, max_steps, label)
        rid = run_id(cfg)
        if rid not in seen:
            seen[rid] = overrides
            candidates.append(overrides)
    flat = [dict(o.split("=", 1) for o in c) for c in candidates]
    taken = [k for k in space if len({f[k] for f in flat}) > 1]
    candidates = [tuple(f"{k}={f[k]}" for k in taken) for f in flat]
    return Group(key, label, jobs, base, candidates, len(candidates), taken)


def _compose(base: list[str], candidate, seed: int, steps: int, label: str) -> dict:
    try:
        return compose_checked([*base, *candidate, f"seed={seed}", f"train.max_steps={steps}"])
    except UsageError as err:
        raise UsageError(f"--tune, group {label}, {' '.join(candidate)}: {err}") from None


def unequal_note(tuned: Design) -> str:
    tuning = [g for g in tuned.groups if g.space > 1]
    most = max(len(g.candidates) for g in tuning)
    short = ", ".join(f"{g.label} {len(g.candidates)}" for g in tuning if len(g.candidates) < most)
    return (
        f"UNEQUAL BUDGETS: {most} trials per group, but {short} (a space smaller than "
        "--tune-trials): these groups were tuned less"
    )


def rung_jobs(tuned: Design, group: Group, candidates, steps: int) -> dict[tuple, list[Job]]:
    """A rung's runs of one group: each candidate at each tuning seed, ``steps`` long."""
    out = {}
    for candidate in candidates:
        out[candidate] = []
        for seed in tuned.tuning_seeds:
            overrides = [*group.base, *candidate, f"seed={seed}", f"train.max_steps={steps}"]
            cfg = _compose(group.base, candidate, seed, steps, group.label)
            out[candidate].append(Job(overrides, cfg, run_id(cfg)))
    return out


def confirmation_jobs(group: Group, chosen: tuple[str, ...]) -> list[Job]:
    """The group's runs of the grid (its seeds) at the chosen value."""
    jobs = []
    for job in group.jobs:
        overrides = [*_strip(job.overrides, set(group.keys)), *chosen]
        cfg = compose_checked(overrides)
        jobs.append(Job(overrides, cfg, run_id(cfg)))
    return jobs


# --------------------------------------------------------------------------- phase 1
def tuning_frame(runs_dir: Path, run_ids: list[str]) -> pd.DataFrame:
    """The tuning runs as the report reads them (one row each, by run id)."""
    selection = catalog.select(catalog.load_runs(runs_dir), [], run_ids)
    return selection.runs.set_index("run_id", drop=False)


def values_of(frame: pd.DataFrame, jobs: list[Job]) -> tuple[dict[str, float | None], Metric]:
    """Each run's final validation metric (None when it has none: diverged, failed, missing),
    in the metric the report would use for these runs (bits per byte where they record it)."""
    rows = frame[frame.index.isin([job.run_id for job in jobs])]
    metric = metric_of(rows) if not rows.empty else ACCURACY
    out: dict[str, float | None] = {}
    for rid, row in rows.iterrows():
        value = row.get(metric.column)
        finite = row["status"] == "complete" and value is not None and math.isfinite(value)
        out[rid] = float(value) if finite else None
    return out, metric


@dataclass
class Choice:
    """What tuning chose for one group, and how firmly."""

    group: Group
    chosen: tuple[str, ...]
    rungs: list[dict]  # per rung: steps and each candidate's mean validation metric
    metric: Metric | None  # None: a group with nothing to tune
    firm: halving.Firmness

    def record(self, tuned: Design) -> dict:
        flat = dict(o.split("=", 1) for o in self.chosen)
        return {
            "group": self.group.label,
            "keys": self.group.keys,
            "space": self.group.space,
            "trials": len(self.group.candidates),
            "steps": self.steps(tuned),
            "full_grid_steps": tuned.full_grid_steps(self.group),
            "chosen": flat,
            "metric": self.metric.name if self.metric else None,
            "higher_is_better": self.metric.higher_is_better if self.metric else None,
            "value": self.rungs[-1]["values"].get(" ".join(self.chosen)) if self.rungs else None,
            "runner_up": self.firm.runner_up,
            "gap": self.firm.gap,
            "win_rate": self.firm.win_rate,
            "rungs": self.rungs,
        }

    def steps(self, tuned: Design) -> int:
        return tuned.steps_of(self.group)


def choose(
    tuned: Design, group: Group, per_rung: list[dict[tuple, list[Job]]], frame: pd.DataFrame
) -> tuple[list[tuple], Choice | None]:
    """Promotions of one group from the rungs trained so far: the candidates the next rung
    trains, and after the last rung the choice. Only tuning-seed runs are read, and only
    their validation metric: the grid's seeds and every test number are never looked at."""
    alive = list(group.candidates)
    schedule = tuned.schedule_of(group)
    history = []
    values, metric = values_of(frame, [j for r in per_rung for js in r.values() for j in js])
    for index, jobs in enumerate(per_rung):
        per_seed = {" ".join(c): [values.get(j.run_id) for j in jobs[c]] for c in jobs}
        hib = metric.higher_is_better
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
        return [chosen], Choice(
            group, chosen, history, metric, halving.firmness(per_seed, best, hib)
        )
    return alive, None


def _mean(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None]
    return sum(finite) / len(finite) if len(finite) == len(values) and values else None


def tune(session: Session, tuned: Design, rerun: Rerun) -> list[Choice]:
    """Phase 1, rung after rung on the session: every group's rung trains at once (one
    launch), then each group's promotions are read off the store."""
    alive = {g.key: list(g.candidates) for g in tuned.groups}
    trained: dict[str, list[dict[tuple, list[Job]]]] = {g.key: [] for g in tuned.groups}
    tuning_runs: list[str] = []
    choices: list[Choice] = []
    for index, rung in enumerate(tuned.schedule):
        jobs = []
        for group in tuned.groups:
            if not tuned.schedule_of(group):
                continue
            keep = min(rung.keep, len(group.candidates))
            batch = rung_jobs(tuned, group, alive[group.key][:keep], rung.steps)
            trained[group.key].append(batch)
            jobs += [job for js in batch.values() for job in js]
        tuning_runs += [job.run_id for job in jobs]
        session.save(tuning=state(tuned, "tuning", index + 1, tuning_runs, choices))
        todo = planning.plan(Sweep(tuned.grid.name, None, jobs), session.runs_dir, rerun).todo
        title = f"tuning, rung {index + 1} of {len(tuned.schedule)}: {rung.steps} steps"
        session.run(todo, title=title, among=jobs)
        choices = []
        frame = tuning_frame(session.runs_dir, tuning_runs)
        for group in tuned.groups:
            if not tuned.schedule_of(group):  # one candidate: it is the choice
                untuned = halving.Firmness(None, None, None)
                choices.append(Choice(group, group.candidates[0], [], None, untuned))
                continue
            alive[group.key], choice = choose(tuned, group, trained[group.key], frame)
            if choice:
                choices.append(choice)
    session.save(tuning=state(tuned, "confirmation", len(tuned.schedule), tuning_runs, choices))
    return choices


def state(tuned: Design, phase: str, rung: int, runs: list[str], choices: list[Choice]) -> dict:
    """The record's ``tuning``: the phase the sweep is in, the design and, once tuning has
    ended, each group's choice."""
    return {
        "phase": phase,
        "rung": rung,
        "rungs": [{"keep": r.keep, "steps": r.steps} for r in tuned.schedule],
        "space": tuned.space,
        "trials": tuned.trials,
        "eta": tuned.eta,
        "tuning_seeds": tuned.tuning_seeds,
        "max_steps": tuned.max_steps,
        "equal_budget": tuned.equal,
        "notes": tuned.notes,
        "selection": "final validation metric, mean over the tuning seeds; verdicts on test "
        "from the confirmation seeds only",
        "groups": [choice.record(tuned) for choice in choices],
        "runs": runs,
    }


# --------------------------------------------------------------------------- both phases
def session(
    tuned: Design,
    runs_dir: Path,
    launch: Launch,
    console: Console,
    *,
    runner=None,
    command: list[str] | None = None,
) -> Session:
    """The tuned comparison's session: its record lists no run until the confirmation phase
    (a report of it reads the confirmation runs only) and says which phase it is in."""
    grid = tuned.grid
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    start = {"tuning": state(tuned, "tuning", 1, [], [])}
    shell = Sweep(grid.name, grid.version, [], grid.axes)
    return Session(shell, runs_dir, launch, console, runner=runner, command=command, extra=start)


def run(
    session: Session,
    tuned: Design,
    rerun: Rerun,
    max_seeds: int | None,
    method: Method,
) -> tuple[list[Choice], adaptive.Design | None, Looks]:
    """Tuning, then confirmation (until decided when ``max_seeds`` is given)."""
    choices = tune(session, tuned, rerun)
    by_key = {choice.group.key: choice for choice in choices}
    confirm = [j for g in tuned.groups for j in confirmation_jobs(g, by_key[g.key].chosen)]
    grid = Sweep(tuned.grid.name, tuned.grid.version, confirm, tuned.grid.axes)
    plan = adaptive.design(grid, max_seeds, method) if max_seeds is not None else None
    session.jobs = confirm
    if plan:
        session.extra["until_decided"] = plan.record(1)
    session.save()
    todo = planning.plan(grid, session.runs_dir, rerun).todo
    looks = until_decided(session, plan, todo, title="confirmation, round")
    session.extra["tuning"]["phase"] = "done"
    return choices, plan, looks


def choices_table(tuned: Design, choices: list[Choice]) -> Table:
    """What tuning chose, per group: the budget, the value, how firm."""
    table = Table(title="tuned: each group at its own best (chosen on validation)", min_width=40)
    for column in ("group", "trials", "steps", "chosen", "val", "gap", "wins"):
        text = column in ("group", "chosen")
        table.add_column(column, justify="left" if text else "right", overflow="fold")
    for choice in choices:
        record = choice.record(tuned)
        table.add_row(
            record["group"],
            str(record["trials"]),
            f"{record['steps']:,}",
            " ".join(choice.chosen) or "-",
            _num(record["value"]),
            _num(record["gap"]),
            "-" if record["win_rate"] is None else f"{record['win_rate']:.0%}",
        )
    return table


def verdict_lines(tuned: Design, jobs: list[Job], runs_dir: Path, method: Method):
    """The confirmation's verdicts on test, one line per group: what a tuned comparison
    answers (``report --sweep NAME`` has the full tables)."""
    result = adaptive.look_at(jobs, runs_dir, method.with_(test=True))
    lines = []
    for section in result.sections if result else []:
        table = section.tables["convergence"]
        against = "reference" if "diff_vs_reference" in table else "best"
        where = " ".join(f"{k}={label(v)}" for k, v in section.setting.items())
        for _, row in table.iterrows():
            keys = [k for k in section.keys if k not in tuned.space]
            group = " ".join(f"{k.removesuffix('.name')}={label(row[k])}" for k in keys)
            diff = row[f"diff_vs_{against}"]
            text = (
                f"{row['verdict']}"
                if row["verdict"] == "reference" or not math.isfinite(diff)
                else f"{row['verdict']} against the {against}: {diff:+.4g} "
                f"[{row['diff_ci_low']:.4g}, {row['diff_ci_high']:.4g}] test "
                f"{section.metric.label.replace('val ', '')}"
            )
            lines.append(f"{where + ': ' if where else ''}{group or 'all'}, tuned: {text}")
    return lines


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def print_plan(console: Console, tuned: Design, runs_dir: Path, rerun: Rerun) -> None:
    """``--dry-run`` of a tuned comparison: both phases and the budget."""
    seeds = len(tuned.tuning_seeds)
    console.print(
        Text(
            f"tuned sweep {tuned.grid.name}: {len(tuned.groups)} groups; tuning "
            f"{', '.join(tuned.space)} on seeds {', '.join(map(str, tuned.tuning_seeds))} "
            f"by successive halving (eta {tuned.eta}), chosen on validation",
            style="bold",
        ),
        soft_wrap=True,
    )
    rungs = "; ".join(
        f"rung {i + 1}: {r.keep} candidate(s) x {r.steps} steps"
        for i, r in enumerate(tuned.schedule)
    )
    console.print(
        f"phase 1, tuning: {tuned.trials} trials per group x {seeds} seed(s); {rungs}",
        soft_wrap=True,
    )
    total = full = 0
    for group in tuned.groups:
        steps, grid_steps = tuned.steps_of(group), tuned.full_grid_steps(group)
        total, full = total + steps, full + grid_steps
        sampled = f" (sampled from {group.space})" if group.space > len(group.candidates) else ""
        if group.space < 2:
            console.print(
                f"  {group.label}: takes none of the tuned keys: confirmed at its only value",
                soft_wrap=True,
            )
            continue
        keys = ", ".join(group.keys)
        console.print(
            f"  {group.label}: tunes {keys}; {len(group.candidates)} candidates{sampled}: "
            f"{' | '.join(' '.join(c) for c in group.candidates)}; {steps:,} steps",
            soft_wrap=True,
        )
    first = [
        j
        for g in tuned.groups
        if tuned.schedule_of(g)
        for js in rung_jobs(tuned, g, g.candidates, tuned.schedule[0].steps).values()
        for j in js
    ]
    done = len(first) - len(planning.plan(Sweep("rung", None, first), runs_dir, rerun).todo)
    console.print(
        f"  budget: {total:,} steps of tuning in all (the full grid: {full:,}); rung 1: "
        f"{len(first)} runs, {done} already complete",
        soft_wrap=True,
    )
    for note in tuned.notes:
        console.print(Text(note, style="bold red"), soft_wrap=True)
    runs = sum(len(g.jobs) for g in tuned.groups)
    seeds_text = sorted({s for g in tuned.groups for s in g.seeds})
    console.print(
        f"phase 2, confirmation: each group at its chosen value on seeds "
        f"{', '.join(map(str, seeds_text))} (fresh, paired across groups): {runs} runs of "
        f"{tuned.max_steps} steps; verdicts on test from these runs only",
        soft_wrap=True,
    )
