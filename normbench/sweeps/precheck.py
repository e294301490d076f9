"""What a sweep will need, checked before its first run trains (and in ``--dry-run``): a
mistake that would surface only at round 2 of ``--until-decided`` (a ``--reference`` that
names no group, a seed past 2^32 - 1) costs the whole first round otherwise, and leaves an
unfinished sweep record behind. Each check raises UsageError with one line."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.experiment.schema import SCHEMA, experiment, flatten
from normbench.report.base import label
from normbench.report.convergence import reference_indices
from normbench.sweeps.adaptive import Design, group_key
from normbench.sweeps.grid import Sweep

MAX_SEED = SCHEMA["seed"].maximum  # numpy's and torch's seed range


def destinations(sweep: Sweep) -> None:
    """Every ``log.tensorboard`` directory the runs will write, usable now."""
    folders = {job.cfg["log"]["tensorboard"] for job in sweep.jobs} - {None}
    if folders:
        from normbench.trackers.tensorboard import check_destination

        for folder in sorted(folders):
            check_destination(Path(folder), "log.tensorboard=")


def until_decided(sweep: Sweep, plan: Design) -> None:
    """Everything ``--until-decided`` will need after round 1, checked now."""
    check_reference(sweep, plan.method.reference)
    check_seed_cap(sweep, plan.max_seeds)


def check_reference(sweep: Sweep, reference: tuple[str, ...]) -> None:
    """``--reference`` must name a group of this grid by keys its groups differ in (what each
    section's table will check at every look), as report's error says it."""
    if not reference:
        return
    rows = list({group_key(job.cfg): flatten(experiment(job.cfg)) for job in sweep.jobs}.values())
    differ = [k for k in rows[0] if len({label(row.get(k)) for row in rows}) > 1]
    keys = sorted(k for k in differ if k != "seed")
    reference_indices(rows, keys, reference)


def check_seed_cap(sweep: Sweep, max_seeds: int) -> None:
    """The seeds rounds may add (one past a group's largest, up to ``--max-seeds`` per
    group) must stay within the seed range."""
    seeds: dict[str, list[int]] = defaultdict(list)
    for job in sweep.jobs:
        seeds[group_key(job.cfg)].append(int(job.cfg["seed"]))
    last = max(max(s) + max_seeds - len(s) for s in seeds.values())
    if last > MAX_SEED:
        raise UsageError(
            f"--max-seeds {max_seeds}: rounds would add seeds up to {last}, past the largest "
            f"seed {MAX_SEED}; valid: a grid whose seeds leave room, or a smaller --max-seeds"
        )
