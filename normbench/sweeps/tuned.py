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
"""

from __future__ import annotations

import difflib
import itertools
import math
import random
import re
from collections import defaultdict
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from rich.console import Console

from normbench.core.errors import UsageError
from normbench.core.keys import shown
from normbench.experiment.compose import parse_overrides
from normbench.experiment.options import schema_for
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import EXECUTION_KEYS, GROUPS, OBSERVATION_KEYS
from normbench.report.base import Method, Metric
from normbench.store import catalog
from normbench.store.rundir import Rerun, run_id
from normbench.sweeps import adaptive, halving, search
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.presets import load_preset
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

TUNING_SEED = 1_000_000  # tuning seeds are TUNING_SEED, TUNING_SEED + 1, ...: never the grid's
# what the choice is made on: the final validation loss (next-byte cross-entropy on the LM,
# whose bits per byte are the same number over ln 2), continuous where accuracy ties
SELECTION = Metric("val_loss", higher_is_better=False)
CHOSEN_BY = "final validation loss, mean over the tuning seeds"
NOT_TUNABLE = ("seed", "train.max_steps", "train.epochs")  # the seeds and the budget itself
MAX_CANDIDATES = 1000  # a group's space composed, or candidates drawn, at most
MAX_TUNING_SEEDS = 100


# ---------------------------------------------------------------------------- the space
def parse_space(given: list[str], preset: str | None) -> dict[str, search.Values]:
    """The tuned keys and their values: the preset's ``tune:`` with ``--tune KEY=v1,v2,...``
    replacing a key of the same name; each key at least two values, none of them the seed or
    the budget. An error names where the key was given (``--tune`` or the preset's ``tune:``)."""
    preset_space = dict(load_preset(preset)["tune"]) if preset else {}
    space: dict[str, search.Values] = {}
    where: dict[str, str] = {}
    texts = [(f"sweep preset {preset}, tune:", f"{k}={v}") for k, v in preset_space.items()]
    for option, text in texts + [("--tune", text) for text in given]:
        (override,) = parse_overrides([text]) if "=" in text else (None,)
        if override is None or override.is_delete() or override.is_add():
            raise UsageError(
                f"{option} {shown(text)}: valid: KEY=v1,v2,... (e.g. train.lr=1e-3,3e-3)"
            )
        if not override.key_or_group:
            raise UsageError(
                f"{option} {shown(text)}: names no key; valid: KEY=v1,v2,... "
                "(e.g. train.lr=1e-3,3e-3)"
            )
        key = override.key_or_group
        space[key], where[key] = search.values_of(key, override, option), option
    for key, values in space.items():
        if key in NOT_TUNABLE:
            raise UsageError(
                f"{where[key]} {key}: not tunable (the seeds and the budget are the design's); "
                "valid: any other config key, e.g. train.lr"
            )
        if isinstance(values, list) and len(set(values)) < 2:
            raise UsageError(f"{where[key]} {key}={','.join(values)}: give at least two values")
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
    space: float  # its distinct candidates; math.inf when a key it takes is an interval
    keys: list[str]  # the tuned keys this group takes (a key its norm ignores is left out)
    max_steps: int  # its runs' train.max_steps: the full budget of its last rung

    @property
    def seeds(self) -> list[int]:
        return sorted(job.cfg["seed"] for job in self.jobs)


@dataclass
class TunedDesign:
    """The tuned comparison's plan: groups, rungs, tuning seeds, the budget. Each group's
    rungs end at its own runs' train.max_steps (the suite's workloads train 400 to 800 steps);
    groups that are compared with each other (one setting) share it, so their budgets are
    equal in steps as well as trials."""

    grid: Sweep
    space: dict[str, list[str]]
    groups: list[Group]
    trials: int
    tuning_seeds: list[int]
    eta: int
    extend: bool = True  # try one step beyond a choice at an edge of the grid
    notes: list[str] = field(default_factory=list)

    @property
    def step_budgets(self) -> list[int]:
        """The distinct train.max_steps of the groups, in increasing order."""
        return sorted({g.max_steps for g in self.groups})

    @property
    def rung_count(self) -> int:
        return len(halving.rungs(self.trials, 1, self.eta))

    def rungs_at(self, max_steps: int) -> list[halving.Rung]:
        return halving.rungs(self.trials, max_steps, self.eta)

    @property
    def equal(self) -> bool:
        """Every group that tunes tries as many candidates (on the same rungs and seeds)."""
        return len({len(g.candidates) for g in self.groups if g.space > 1}) <= 1

    def schedule_of(self, group: Group) -> list[halving.Rung]:
        """A group's rungs, for its own number of candidates (a group with fewer than the
        budget halves only where that saves half its steps, as every group does; it trains
        the design's last rungs); none for a group with one candidate (it takes none of the
        tuned keys: nothing to choose)."""
        if len(group.candidates) < 2:
            return []
        return halving.rungs(len(group.candidates), group.max_steps, self.eta)

    def steps_of(self, group: Group) -> int:
        return halving.steps_spent(self.schedule_of(group), len(self.tuning_seeds))

    def full_grid_steps(self, group: Group) -> int:
        if len(group.candidates) < 2:
            return 0
        return len(group.candidates) * group.max_steps * len(self.tuning_seeds)


def check_keys(space: dict, configs: list[dict]) -> None:
    """Each tuned key names a hyperparameter of these runs, each refusal saying which kind of
    key it got: a config group (its choice is what the grid compares: sweep it), an execution
    setting (no run differs by it), or no key at all (with the closest key)."""
    known = set().union(*(schema_for(cfg) for cfg in configs))
    for key in space:
        if key in GROUPS or (key.endswith(".name") and key.partition(".")[0] in GROUPS):
            group = key.partition(".")[0]
            raise UsageError(
                f"--tune {key}: a config group, whose choice is what a grid compares; valid: "
                f"sweep it ({group}=a,b in the grid) and tune a key of it, e.g. train.lr"
            )
        if key in EXECUTION_KEYS + OBSERVATION_KEYS:
            raise UsageError(
                f"--tune {key}: an execution setting, not part of the experiment (no result "
                "depends on it); valid: a hyperparameter, e.g. train.lr"
            )
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(
                f"--tune {key}: no such key in these runs' configs{hint}; valid: a config key, "
                "e.g. train.lr"
            )


def check_seed_room(grid: Sweep, max_seeds: int) -> None:
    """``--until-decided`` adds the next seeds of each group: they must stay below the
    tuning seeds, or a confirmation would count the runs that chose its value."""
    seeds: dict[str, list[int]] = defaultdict(list)
    for job in grid.jobs:
        seeds[adaptive.group_key(job.cfg)].append(int(job.cfg["seed"]))
    last = max(max(s) + max_seeds - len(s) for s in seeds.values())
    if last >= TUNING_SEED:
        raise UsageError(
            f"--max-seeds {max_seeds}: rounds would add seeds up to {last}, among the tuning "
            f"seeds ({TUNING_SEED} and up); valid: grid seeds that leave room below "
            f"{TUNING_SEED}, or a smaller --max-seeds"
        )


def _strip(overrides: list[str], keys) -> list[str]:
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in keys]


def design(
    grid: Sweep,
    space: dict[str, list[str]],
    tuning_seeds: int = 2,
    eta: int = halving.ETA,
    trials: int | None = None,
    extend: bool = True,
) -> TunedDesign:
    """Plan both phases: the groups of the grid, each group's distinct candidates, the equal
    budget and the rungs. Refused in one line: a tuned key that is also an axis of the grid,
    a grid seed among the tuning seeds, a grid without a step budget, groups of one setting
    with different step budgets, bad counts."""
    if not 1 <= tuning_seeds <= MAX_TUNING_SEEDS:
        raise UsageError(
            f"--tune-seeds {tuning_seeds}: valid: an integer from 1 to {MAX_TUNING_SEEDS}"
        )
    if eta < 2:
        raise UsageError(f"--eta {eta}: valid: an integer >= 2")
    if trials is not None and not 2 <= trials <= MAX_CANDIDATES:
        raise UsageError(
            f"--tune-trials {trials}: valid: an integer from 2 to {MAX_CANDIDATES} "
            "(one candidate is no choice)"
        )
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
    if any(job.cfg["train"]["max_steps"] is None for job in grid.jobs):
        raise UsageError(
            "--tune: the tuning budget is in steps: every run of the grid needs "
            "train.max_steps (found train.epochs)"
        )
    members: dict[str, list[Job]] = defaultdict(list)
    for job in grid.jobs:
        members[adaptive.group_key(job.cfg)].append(job)
    check_keys(space, [jobs[0].cfg for jobs in members.values()])
    shown_axes = [axis for axis in grid.axes if axis != "seed"]
    groups = []
    for key, jobs in members.items():
        present = dict(o.split("=", 1) for o in jobs[0].overrides)
        label = " ".join(f"{a}={present[a]}" for a in shown_axes if a in present) or "all"
        steps = {job.cfg["train"]["max_steps"] for job in jobs}
        if len(steps) > 1:
            raise UsageError(
                f"--tune, group {label}: its runs train {', '.join(map(str, sorted(steps)))} "
                "steps; valid: one train.max_steps per group (the tuning budget is in steps)"
            )
        base = _strip(jobs[0].overrides, {"seed", "train.max_steps", *space})
        groups.append(_group(key, label, jobs, base, space, steps.pop()))
    tuning = [g.space for g in groups if g.space > 1]
    if not tuning:
        raise UsageError(
            f"--tune {', '.join(space)}: no group of the grid takes these keys (its norm "
            "ignores them); valid: a key some group reads, e.g. train.lr"
        )
    if trials is None and not any(math.isfinite(size) for size in tuning):
        continuous = ", ".join(k for k, v in space.items() if isinstance(v, search.Interval))
        raise UsageError(
            f"--tune {continuous}: an interval has no size to set the budget; valid: "
            "--tune-trials N (candidates per group)"
        )
    finite = [size for size in tuning if math.isfinite(size)]
    if trials is not None and len(finite) == len(tuning) and trials > max(finite):
        raise UsageError(
            f"--tune-trials {trials}: more than any group's space (the largest has "
            f"{int(max(finite))} candidates); valid: 2 to {int(max(finite))}"
        )
    budget = trials or int(min(tuning))
    for group in groups:
        if math.isinf(group.space):  # an interval: the budget's worth of points, drawn
            taken = {k: space[k] for k in group.keys}
            group.candidates = search.draw(taken, budget, f"normbench-tune {group.key}")
        elif group.space > budget:  # sample within the budget: a fixed draw per group
            seed = f"normbench-tune {group.key}"
            group.candidates = stratified(group.candidates, budget, seed)
    seeds = [TUNING_SEED + i for i in range(tuning_seeds)]
    _same_budget_per_setting(groups)
    result = TunedDesign(grid, space, groups, budget, seeds, eta, extend)
    if not result.equal:
        result.notes.append(unequal_note(result))
    if len(result.step_budgets) > 1:
        budgets = ", ".join(map(str, result.step_budgets))
        result.notes.append(
            f"step budgets per setting: {budgets}; the rungs shown are the longest's, and each "
            "group trains its rungs in proportion to its own (equal within a setting)"
        )
    return result


def stratified(
    candidates: list[tuple[str, ...]], count: int, seed_text: str
) -> list[tuple[str, ...]]:
    """``count`` of ``candidates``, drawn so that every value of every key is in at least one
    (where ``count`` allows: at least as many as the key with the most values has), in the
    space's order. Greedy cover in a seeded random order: each pick is the candidate, first in
    that order, that adds the most values not yet drawn; once all are drawn, the rest follow
    the random order. A fixed function of the seed text: a resume draws the same."""
    left = list(range(len(candidates)))
    random.Random(seed_text).shuffle(left)
    missing = {item for candidate in candidates for item in candidate}
    picked: list[int] = []
    while len(picked) < count:
        at = max(range(len(left)), key=lambda j: len(missing.intersection(candidates[left[j]])))
        picked.append(left.pop(at))  # the first in the random order among the best
        missing -= set(candidates[picked[-1]])
    return [candidates[i] for i in sorted(picked)]


def _group(key, label, jobs, base, space, max_steps) -> Group:
    """A group's distinct candidates: every combination of the tuned values it takes (a key
    that is not in its config's schema, ``norm.alpha_init`` for LayerNorm, is left out),
    composed once; one that composes to a run id already seen is the same run (a key its norm
    reads but ignores at these settings)."""
    keys = schema_for(jobs[0].cfg)
    space = {key: values for key, values in space.items() if key in keys}
    if any(isinstance(values, search.Interval) for values in space.values()):
        taken = []  # the keys that change this group's runs (each value checked now)
        for name, values in space.items():
            probes = [values.low, values.high] if isinstance(values, search.Interval) else values
            ids = {
                run_id(_compose(base, (f"{name}={v}",), TUNING_SEED, max_steps, label))
                for v in probes
            }
            taken += [name] if len(ids) > 1 else []
        if not taken:  # every key it would tune is one its norm ignores: nothing to choose
            return Group(key, label, jobs, base, [()], 1, [], max_steps)
        return Group(key, label, jobs, base, [], math.inf, taken, max_steps)
    size = math.prod(len(values) for values in space.values())
    if size > MAX_CANDIDATES:
        raise UsageError(
            f"--tune {', '.join(space)}: {size:,} combinations for group {label}; valid: at "
            f"most {MAX_CANDIDATES} (list fewer values, or give an interval and --tune-trials)"
        )
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
    return Group(key, label, jobs, base, candidates, len(candidates), taken, max_steps)


def _same_budget_per_setting(groups: list[Group]) -> None:
    """Groups compared with each other share a step budget: the groups of one setting (the
    data set and model, as the report's sections split them) all train as many steps."""
    by_setting: dict[str, set[int]] = defaultdict(set)
    for group in groups:
        cfg = group.jobs[0].cfg
        by_setting[f"data={cfg['data']['name']} model={cfg['model']['name']}"].add(group.max_steps)
    for setting, steps in by_setting.items():
        if len(steps) > 1:
            raise UsageError(
                f"--tune: the groups of {setting} train {', '.join(map(str, sorted(steps)))} "
                "steps; valid: one train.max_steps per setting (an equal budget in steps)"
            )


def _compose(base: list[str], candidate, seed: int, steps: int, label: str) -> dict:
    try:
        return compose_checked([*base, *candidate, f"seed={seed}", f"train.max_steps={steps}"])
    except UsageError as err:
        raise UsageError(f"--tune, group {label}, {' '.join(candidate)}: {err}") from None


def unequal_note(tuned: TunedDesign) -> str:
    tuning = [g for g in tuned.groups if g.space > 1]
    most = max(len(g.candidates) for g in tuning)
    short = ", ".join(f"{g.label} {len(g.candidates)}" for g in tuning if len(g.candidates) < most)
    return (
        f"UNEQUAL BUDGETS: {most} trials per group, but {short} (a space smaller than "
        "--tune-trials): these groups were tuned less"
    )


def rung_jobs(tuned: TunedDesign, group: Group, candidates, steps: int) -> dict[tuple, list[Job]]:
    """A rung's runs of one group: each candidate at each tuning seed, ``steps`` long, its
    warm-up scaled to the rung (halving.scaled_warmup: a rung is the full run compressed)."""
    out = {}
    for candidate in candidates:
        out[candidate] = []
        warmup = halving.scaled_warmup(_warmup(group, candidate), steps, group.max_steps)
        shorter = () if steps >= group.max_steps else (f"train.warmup_steps={warmup}",)
        base = _strip(group.base, {"train.warmup_steps"}) if shorter else group.base
        for seed in tuned.tuning_seeds:
            given = (*candidate, *shorter)
            overrides = [*base, *given, f"seed={seed}", f"train.max_steps={steps}"]
            cfg = _compose(base, given, seed, steps, group.label)
            out[candidate].append(Job(overrides, cfg, run_id(cfg)))
    return out


def _warmup(group: Group, candidate: tuple[str, ...]) -> int:
    """The full-budget warm-up of a candidate: its own when it tunes train.warmup_steps."""
    own = dict(o.split("=", 1) for o in candidate).get("train.warmup_steps")
    return int(float(own)) if own is not None else group.jobs[0].cfg["train"]["warmup_steps"]


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
            _compose(group.base, beyond, TUNING_SEED, group.max_steps, group.label)
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
        runs.extend(job.run_id for job in jobs)
        session.save(tuning=state(tuned, "tuning", rung, runs, choices))
        todo = planning.plan(Sweep(tuned.grid.name, None, jobs), session.runs_dir, rerun).todo
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
) -> Session:
    """The tuned comparison's session: its record lists no run until the confirmation phase
    (a report of it reads the confirmation runs only) and says which phase it is in."""
    grid = tuned.grid
    if launch.launcher == "local":
        check_devices({job.cfg["device"] for job in grid.jobs})
    start = {"tuning": state(tuned, "tuning", 1, [], [])}
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
        session.jobs = confirm
        if self.plan:
            session.extra["until_decided"] = self.plan.record(1)
        session.save()
        todo = planning.plan(grid, session.runs_dir, self.rerun).todo
        lead = f"{self.heading}: " if self.heading else ""
        confirmation: Design = (
            UntilDecided(self.plan, todo, f"{lead}confirmation, round")
            if self.plan
            else Fixed(todo, f"{lead}confirmation" if self.heading else None)
        )
        yield from confirmation.rounds(session)
        self.looks = confirmation.looks
        session.extra["tuning"]["phase"] = "done"


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
