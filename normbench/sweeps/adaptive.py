"""Seeds until decided: after a sweep's grid, add seeds only where a verdict is still open.

Round after round, every group whose verdict is ``inconclusive`` (in the convergence table, or
in the batch-sensitivity contrast) gets one more seed, the next seed value, until every group
is decided or has ``--max-seeds`` runs. The best group of a section gets a seed too while any
comparison with it is open: both sides of a comparison carry its noise.

Repeated looks at the same data inflate the error rate, so alpha is split over the looks this
design can take (Bonferroni): with L = 1 + max_seeds - the grid's seeds per group, every look
uses alpha / L, and so does the report of the finished sweep (the sweep record stores L). The
family-wise error over all looks is then at most alpha whatever the stopping rule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import experiment, flatten
from normbench.report import tables
from normbench.store import catalog
from normbench.store.rundir import run_id
from normbench.sweeps.grid import Job, Sweep


@dataclass(frozen=True)
class Design:
    """The adaptive design: the seed cap, how many looks it can take, and the method whose
    alpha is split over them."""

    max_seeds: int
    looks: int
    method: tables.Method
    groups: int  # groups in the grid

    @property
    def fixed_runs(self) -> int:
        """Runs of the fixed design that would answer as surely: every group at max_seeds."""
        return self.groups * self.max_seeds


def group_key(cfg: dict) -> str:
    """What makes runs seeds of one group: the config without seed, execution and
    observation keys."""
    return json.dumps({k: v for k, v in experiment(cfg).items() if k != "seed"}, sort_keys=True)


def design(sweep: Sweep, max_seeds: int, alpha: float, margin: float) -> Design:
    per_group = defaultdict(int)
    for job in sweep.jobs:
        per_group[group_key(job.cfg)] += 1
    most = max(per_group.values())
    if max_seeds < 1 or max_seeds < most:
        raise UsageError(
            f"--max-seeds {max_seeds}: the grid already has {most} seed(s) per group; valid: "
            f"an integer >= {max(1, most)}"
        )
    looks = 1 + max_seeds - min(per_group.values())
    return Design(max_seeds, looks, tables.Method(alpha, margin, looks=looks), len(per_group))


def seeds_to_add(jobs: list[Job], runs_dir: Path, plan: Design) -> tuple[list[Job], int]:
    """The next round's jobs (one more seed for each undecided group below the cap), and how
    many groups are undecided now."""
    selection = catalog.select(catalog.load_runs(runs_dir), [], [job.run_id for job in jobs])
    if selection.runs.empty:
        return [], 0
    report = tables.build(selection, method=plan.method)
    members: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        members[group_key(job.cfg)].append(job)
    undecided = set()
    for section in report.sections:
        undecided |= _open_groups(section, members)
    new = []
    for key in sorted(undecided):
        group = members[key]
        if len(group) >= plan.max_seeds:
            continue
        seed = max(job.cfg["seed"] for job in group) + 1
        overrides = [o for o in group[0].overrides if not o.startswith("seed=")]
        cfg = compose_checked([*overrides, f"seed={seed}"])
        new.append(Job([*overrides, f"seed={seed}"], cfg, run_id(cfg)))
    return new, len(undecided)


def _open_groups(section: tables.Section, members: dict[str, list[Job]]) -> set[str]:
    """The groups of a section whose verdict is open, with the best group when it is part of
    an open comparison."""
    flat = {key: flatten(group[0].cfg) for key, group in members.items()}
    conv = section.tables["convergence"]
    open_rows = conv[conv["verdict"] == "inconclusive"]
    wanted = set()
    if len(open_rows):
        reference = conv[conv["verdict"] == "reference"]
        for _, row in [*open_rows.iterrows(), *reference.iterrows()]:
            wanted |= _matching(flat, {**section.setting, **{k: row[k] for k in section.keys}})
    batch = section.tables.get("batch_sensitivity")
    if batch is not None:
        row_keys = [k for k in section.keys if k not in tables.BATCH_KEYS]
        for _, row in batch[batch["verdict"] == "inconclusive"].iterrows():
            sizes = {row["reference_batch"], row["smallest_batch"]}
            matched = _matching(flat, {**section.setting, **{k: row[k] for k in row_keys}})
            wanted |= {key for key in matched if _device_batch(flat[key]) in sizes}
    return wanted


def _matching(flat: dict[str, dict], values: dict) -> set[str]:
    return {
        key
        for key, cfg in flat.items()
        if all(tables.label(cfg.get(k)) == tables.label(v) for k, v in values.items())
    }


def _device_batch(cfg: dict) -> int:
    ghost = cfg.get("norm.ghost_batch")
    return int(ghost) if ghost else int(cfg["batch_size"])
