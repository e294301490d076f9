"""Grids of runs: expand a preset and overrides into jobs, show the plan, run what is missing.

Expansion is Hydra's: its override parser and its basic sweeper's cartesian product, so every
piece of Hydra's sweep syntax works (``a,b``, ``range()``, ``choice()``, ``glob()``,
``sort()``). A preset (``conf/sweep/NAME.yaml``) holds ``params`` (axes and fixed values, like
Hydra's ``hydra.sweeper.params``) and optionally ``grids``, alternatives each crossed with the
params and concatenated (GroupNorm + Weight Standardization beside five plain norms).
Overrides on the command line replace an axis of the same key or add one.

Every job is composed and validated before anything trains; the run store's content-addressed
ids make the sweep resumable: what is complete is skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.experiment.compose import parse_overrides, refuse_repeated
from normbench.experiment.probe import compose_checked
from normbench.store.rundir import run_id
from normbench.sweeps.presets import load_preset


@dataclass
class Job:
    """One run of a sweep: the overrides that define it and its resolved config."""

    overrides: list[str]
    cfg: dict
    run_id: str


@dataclass
class Sweep:
    name: str
    version: int | None
    jobs: list[Job]
    axes: list[str] = field(default_factory=list)  # keys whose value varies across jobs
    combinations: int = 0  # before removing combinations that are the same run


MAX_RUNS = 10_000  # a larger grid is refused unless --max-runs says so


def grid_overrides(
    preset: str | None, overrides: list[str], max_runs: int = MAX_RUNS
) -> tuple[dict, list[list[str]]]:
    """The preset's spec and every job's overrides (Hydra's cartesian product), refused in one
    line when a key is given twice or the grid has more than ``max_runs`` combinations."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    spec = load_preset(preset) if preset else {"version": None, "params": {}, "grids": []}
    refuse_repeated(overrides)
    batches = []
    for grid in spec["grids"] or [{}]:
        arguments = [f"{k}={v}" for k, v in {**spec["params"], **grid}.items()] + overrides
        parsed = parse_overrides(arguments, with_group_options=True)
        size = math.prod(
            len(list(o.sweep_iterator())) if o.is_sweep_override() and o.is_discrete_sweep() else 1
            for o in parsed
        )
        batches.append((parsed, size))
    total = sum(size for _, size in batches)
    if total > max_runs:
        raise UsageError(
            f"the grid has {total} combinations, more than --max-runs {max_runs}; narrow it, "
            "or raise --max-runs to run it"
        )
    job_overrides: list[list[str]] = []
    for parsed, _ in batches:
        try:
            (batch,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
        except HydraException as err:
            raise UsageError(
                f"{err}: normbench sweeps grids; interval() needs an optimising sweeper. "
                "Use a,b,c, range(), choice(), glob() or sort()"
            ) from None
        job_overrides.extend(batch)
    return spec, job_overrides


def compose_jobs(job_overrides: list[list[str]]) -> Iterator[Job]:
    """Each job composed and validated, in order; a job with the run id of an earlier one (a
    key its norm ignores, one norm under two names) is the same run and is left out."""
    seen = set()
    for index, job in enumerate(job_overrides, start=1):
        try:
            cfg = compose_checked(job)
        except UsageError as err:
            why = another_norms_option(str(err), job, job_overrides) or str(err)
            raise UsageError(
                f"job {index} of {len(job_overrides)} ({' '.join(job)}): {why}"
            ) from None
        rid = run_id(cfg)
        if rid not in seen:
            seen.add(rid)
            yield Job(job, cfg, rid)


# What is composed whole before a line is printed (about 2 ms a combination: 2 s at most,
# measured on 2 cores): --dry-run's grid, so that a refusal is printed alone (a larger one
# streams its lines as they are composed), and the default preset's grid a no-preset note
# suggests (a larger one is not suggested).
CHECKED_FIRST = 1000
UNKNOWN_NORM_KEY = re.compile(r"^unknown key 'norm\.(\w+)'")


def another_norms_option(error: str, job: list[str], jobs: list[list[str]]) -> str | None:
    """The refusal of ``norm.KEY`` that another norm of the grid takes (a plugin's option
    beside shipped norms, ``norm=layernorm,mynorms:PowerNorm norm.p=3``): an override applies
    to every norm of the sweep, and "did you mean norm.eps" sent a user the wrong way. Says
    so, and how to give the option to that norm alone: by a name of its own in a config
    directory. None when no other norm of the grid takes the key (composed to find out)."""
    match = UNKNOWN_NORM_KEY.match(error)
    if match is None:
        return None
    key = match.group(1)
    norm, value = _value(job, "norm"), _value(job, f"norm.{key}") or "VALUE"
    for other in jobs:
        named = _value(other, "norm")
        if named in (None, norm):
            continue
        try:
            cfg = compose_checked(other)
        except UsageError:
            continue
        if key not in cfg["norm"]:
            continue
        target = cfg["norm"].get("_target_") or named
        return (
            f"norm.{key} is an option of norm={named}, not of norm={norm}, and an override "
            f"applies to every norm of a sweep; to give it to norm={named} alone, name that "
            f"setting: a file NAME.yaml in a config directory's norm/ folder holding "
            f"'_target_: {target}' and '{key}: {value}', then --config-dir DIR "
            f'norm={norm},NAME (docs/your-own-norm.md, "Give it a name")'
        )
    return None


def _value(job: list[str], key: str) -> str | None:
    """The value a job's overrides give ``key``, as the user wrote it (Hydra's escapes
    dropped: ``mynorms\\:PowerNorm`` is ``mynorms:PowerNorm``); None when none does."""
    given = next((o.partition("=")[2] for o in job if o.partition("=")[0] == key), None)
    return None if given is None else re.sub(r"\\(.)", r"\1", given)


def expand(preset: str | None, overrides: list[str], max_runs: int = MAX_RUNS) -> Sweep:
    """Every job of the sweep, composed and validated; duplicates (same run id) dropped."""
    spec, job_overrides = grid_overrides(preset, overrides, max_runs)
    jobs = list(compose_jobs(job_overrides))
    name = Path(preset).stem if preset else default_name(jobs)
    return Sweep(name, spec["version"], jobs, varying_keys(jobs), len(job_overrides))


def default_name(jobs: list[Job]) -> str:
    """A grid without a preset is named after its axes (norm-seed), or 'grid'."""
    axes = [key.split(".")[-1] for key in varying_keys(jobs)]
    name = "-".join(re.sub(r"[^A-Za-z0-9._-]", "_", axis) for axis in axes)[:64].strip("-")
    return name or "grid"


def varying_keys(jobs: list[Job] | list[list[str]]) -> list[str]:
    """Override keys whose value differs between jobs (the axes worth showing)."""
    lists = [job.overrides if isinstance(job, Job) else job for job in jobs]
    settings = [dict(o.split("=", 1) for o in overrides) for overrides in lists]
    keys = {key for present in settings for key in present}
    values = {key: {present.get(key, "-") for present in settings} for key in keys}
    order = [o.split("=", 1)[0] for o in lists[0]] if lists else []
    ordered = order + sorted(set(values) - set(order))
    return [key for key in ordered if len(values[key]) > 1]
