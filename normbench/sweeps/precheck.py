"""What a sweep will need, checked before its first run trains (and in ``--dry-run``): a
mistake that would surface only at round 2 of ``--until-decided`` (a ``--reference`` that
names no group, a seed past 2^32 - 1) costs the whole first round otherwise, and leaves an
unfinished sweep record behind. Each check raises UsageError with one line."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.experiment.schema import DEVICES, SCHEMA, experiment, flatten
from normbench.report.convergence import reference_indices
from normbench.report.labels import label
from normbench.sweeps.adaptive import SequentialDesign, group_key
from normbench.sweeps.grid import Sweep, grid_overrides

MAX_SEED = SCHEMA["seed"].maximum  # numpy's and torch's seed range


def destinations(folders: set[str | None]) -> None:
    """Every ``log.tensorboard`` directory the runs will write, usable now."""
    folders = folders - {None}
    if folders:
        from normbench.trackers.tensorboard import check_destination

        for folder in sorted(folders):
            check_destination(Path(folder), "log.tensorboard=")


def settings_of(
    preset: str | None, overrides: list[str], max_runs: int
) -> tuple[set[str], set[str | None]]:
    """The devices and ``log.tensorboard`` directories a grid's jobs name, read from their
    overrides without composing them (a ``--dry-run`` streams its plan as it composes):
    a job that names no device gets the default, ``auto``; a value that is no device is left
    to the plan, which refuses it as it composes the job."""
    devices, folders = set(), set()
    for job in grid_overrides(preset, overrides, max_runs)[1]:
        given = dict(override.split("=", 1) for override in job if "=" in override)
        if given.get("device", "auto") in DEVICES:  # any other value: refused as it composes
            devices.add(given.get("device", "auto"))
        if "log.tensorboard" in given:
            folder = given["log.tensorboard"]
            if not folder.strip():
                raise UsageError("log.tensorboard='': name a directory, e.g. log.tensorboard=board")
            folders.add(str(Path(folder).expanduser().resolve()))
    return devices, folders


def sequential_needs(sweep: Sweep, plan: SequentialDesign) -> None:
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
