"""A tuned comparison's plan (normbench.sweeps.tuned runs it): the tuned keys and their
values, checked (``parse_space``, ``check_keys``); the groups of the grid and the candidates
each tries within an equal budget, drawn stratified where a space is larger (``design``,
``stratified``); and the runs of a rung or of the confirmation (``rung_jobs``,
``confirmation_jobs``), each rung's warm-up scaled to its steps. Pure planning: nothing here
trains or reads the store."""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from normbench.core.errors import UsageError
from normbench.core.keys import shown
from normbench.core.suggest import did_you_mean
from normbench.experiment.compose import parse_overrides
from normbench.experiment.options import schema_for
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import (
    EXECUTION_KEYS,
    GROUPS,
    OBSERVATION_KEYS,
    OPTION_SCHEMA,
    SCHEMA,
)
from normbench.store.rundir import run_id
from normbench.sweeps import adaptive, halving, search
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.presets import load_preset

TUNING_SEED = 1_000_000  # tuning seeds are TUNING_SEED, TUNING_SEED + 1, ...: never the grid's
NOT_TUNABLE = ("seed", "train.max_steps", "train.epochs")  # the seeds and the budget itself
MAX_CANDIDATES = 1000  # a group's space composed, or candidates drawn, at most
MAX_TUNING_SEEDS = 100
MAX_EXTENSIONS = 3  # steps beyond a listed edge (a round each) before "widen the grid"


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
        if isinstance(values, list):
            _check_numbers(key, values, where[key])
        if isinstance(values, list) and len(set(values)) < 2:
            raise UsageError(f"{where[key]} {key}={','.join(values)}: give at least two values")
    return space


def _check_numbers(key: str, values: list[str], option: str) -> None:
    """A numeric key's values, each a number (``train.lr=abc`` is refused as not a number,
    before it is counted): the key's spec in the schema, any option's where options differ."""
    specs = [SCHEMA.get(key)] + [
        keys.get(key) for by_option in OPTION_SCHEMA.values() for keys in by_option.values()
    ]
    spec = next((s for s in specs if s is not None), None)
    if spec is None or spec.kind not in (int, float):
        return
    for value in values:
        if spec.nullable and value in ("null", "None"):
            continue
        try:
            float(value)
        except ValueError:
            raise UsageError(
                f"{option} {key}={','.join(values)}: {shown(value)} is not a number; valid: "
                f"{spec.describe()}"
            ) from None


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
    extend: bool = True  # try steps beyond a choice at an edge of the grid (MAX_EXTENSIONS)
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

    @property
    def runs(self) -> int:
        """Runs the plan trains at most: every rung's candidates at every tuning seed, up to
        MAX_EXTENSIONS rounds beyond an edge of one candidate per key each (when extending),
        and the grid's confirmation runs."""
        seeds = len(self.tuning_seeds)
        tuning = sum(sum(r.keep for r in self.schedule_of(g)) * seeds for g in self.groups)
        rounds = MAX_EXTENSIONS if self.extend else 0
        beyond = sum(len(g.keys) * seeds * rounds for g in self.groups)
        return tuning + beyond + len(self.grid.jobs)

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
            raise UsageError(
                f"--tune {key}: unknown key{did_you_mean(key, sorted(known))}; valid: a config "
                "key of these runs, e.g. train.lr"
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
                run_id(compose_candidate(base, (f"{name}={v}",), TUNING_SEED, max_steps, label))
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
        cfg = compose_candidate(base, overrides, TUNING_SEED, max_steps, label)
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


def compose_candidate(base: list[str], candidate, seed: int, steps: int, label: str) -> dict:
    """A candidate's config at a seed and a step budget, an error naming the group and it."""
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
            cfg = compose_candidate(base, given, seed, steps, group.label)
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
