"""Seeds until decided: after a sweep's grid, add seeds only where a verdict is still open.

Round after round, every group whose verdict is ``inconclusive`` (in the convergence table, or
in the batch-sensitivity contrast) gets one more seed, the next seed value, until every group
is decided or has ``--max-seeds`` runs. The reference group of a section (the best, or the one
``--reference`` names) gets a seed too while any comparison with it is open: both sides of a
comparison carry its noise, and pairing by seed needs the same seeds on both.

Repeated looks at the same data are repeated chances to be wrong, so the design spends its
alpha over the looks it can take (Lan and DeMets' O'Brien-Fleming-type spending function,
normbench.report.stats.spent_alpha): look l tests at alpha(t_l) - alpha(t_l-1), where t_l is
the share of the seeds in at that look, t_l = seeds per group at look l / max seeds. Early looks
spend almost nothing, the last look most; the error over all looks is at most alpha whatever
the stopping rule (the union bound). The report of the finished sweep uses the level of the
last look taken (the sweep record stores the design). tests/sweeps/test_adaptive.py and
docs/statistics.md compare it with the even split it replaced, by simulation.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import experiment, flatten
from normbench.report.base import Method, Report, Section, label
from normbench.report.batch import BATCH_KEYS
from normbench.report.sections import build
from normbench.store import catalog
from normbench.store.rundir import run_id
from normbench.sweeps.grid import Job, Sweep

DECIDED = ("worse", "better", "equivalent", "sensitive", "insensitive")


@dataclass(frozen=True)
class Design:
    """The adaptive design: the seed cap, the information fraction of each look it can take,
    the method (alpha, margin, reference) whose alpha it spends, and the grid's size."""

    max_seeds: int
    fractions: tuple[float, ...]
    method: Method
    groups: int  # groups in the grid
    first_seeds: int  # seeds per group in the grid (the fewest)

    @property
    def looks(self) -> int:
        return len(self.fractions)

    @property
    def fixed_runs(self) -> int:
        """Runs of the fixed design with every group at the cap."""
        return self.groups * self.max_seeds

    def at(self, look: int) -> Method:
        """The method of look ``look`` (1-based): alpha spent up to it."""
        return self.method.with_(fractions=self.fractions, look=look)

    def record(self, looks_taken: int) -> dict:
        """What the sweep record keeps, so that a report of the sweep uses the last look's
        level (normbench.store.records.sequential_design)."""
        return {
            "max_seeds": self.max_seeds,
            "alpha": self.method.alpha,
            "margin": self.method.margin,
            "reference": list(self.method.reference),
            "spending": "O'Brien-Fleming type (Lan-DeMets)",
            "fractions": list(self.fractions),
            "looks_taken": looks_taken,
            "fixed_design_runs": self.fixed_runs,
        }


@dataclass(frozen=True)
class Tally:
    """What one look decided: comparisons decided, comparisons made, and the runs behind them."""

    decided: int
    comparisons: int
    runs: int

    @property
    def per_run(self) -> float:
        return self.decided / self.runs if self.runs else 0.0

    def text(self) -> str:
        return (
            f"{self.decided} of {self.comparisons} comparisons decided from {self.runs} runs "
            f"({self.per_run:.3f} per run)"
        )


def group_key(cfg: dict) -> str:
    """What makes runs seeds of one group: the config without seed, execution and
    observation keys."""
    return json.dumps({k: v for k, v in experiment(cfg).items() if k != "seed"}, sort_keys=True)


def design(sweep: Sweep, max_seeds: int, method: Method) -> Design:
    per_group = defaultdict(int)
    for job in sweep.jobs:
        per_group[group_key(job.cfg)] += 1
    most = max(per_group.values())
    if max_seeds < 1 or max_seeds < most:
        raise UsageError(
            f"--max-seeds {max_seeds}: the grid already has {most} seed(s) per group; valid: "
            f"an integer >= {max(1, most)}"
        )
    first = min(per_group.values())
    fractions = tuple((first + i) / max_seeds for i in range(1 + max_seeds - first))
    return Design(max_seeds, fractions, method, len(per_group), first)


def look_at(jobs: list[Job], runs_dir: Path, method: Method) -> Report | None:
    """The report of these jobs' runs, as the sweep sees them at a look."""
    selection = catalog.select(catalog.load_runs(runs_dir), [], [job.run_id for job in jobs])
    return None if selection.runs.empty else build(selection, method=method)


def tally(report: Report | None, runs: int) -> Tally:
    """Decided comparisons of a report: convergence rows other than the reference, and batch
    rows whose verdict is not decided by construction (same runs)."""
    decided = comparisons = 0
    for section in report.sections if report else []:
        verdicts = [v for v in section.tables["convergence"]["verdict"] if v != "reference"]
        batch = section.tables.get("batch_sensitivity")
        if batch is not None:
            verdicts += list(batch.loc[batch["reason"] != "same runs", "verdict"])
        comparisons += len(verdicts)
        decided += sum(v in DECIDED for v in verdicts)
    return Tally(decided, comparisons, runs)


def seeds_to_add(jobs: list[Job], report: Report | None, plan: Design) -> tuple[list[Job], int]:
    """The next round's jobs (one more seed for each undecided group below the cap), and how
    many groups are undecided now."""
    if report is None:
        return [], 0
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


def _open_groups(section: Section, members: dict[str, list[Job]]) -> set[str]:
    """The groups of a section whose verdict is open, with the reference group when it is
    part of an open comparison."""
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
        row_keys = [k for k in section.keys if k not in BATCH_KEYS]
        for _, row in batch[batch["verdict"] == "inconclusive"].iterrows():
            sizes = {row["reference_batch"], row["smallest_batch"]}
            matched = _matching(flat, {**section.setting, **{k: row[k] for k in row_keys}})
            wanted |= {key for key in matched if _device_batch(flat[key]) in sizes}
    return wanted


def _matching(flat: dict[str, dict], values: dict) -> set[str]:
    return {
        key
        for key, cfg in flat.items()
        if all(label(cfg.get(k)) == label(v) for k, v in values.items())
    }


def _device_batch(cfg: dict) -> int:
    ghost = cfg.get("norm.ghost_batch")
    return int(ghost) if ghost else int(cfg["batch_size"])
