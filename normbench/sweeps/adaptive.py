"""Seeds until decided: after a sweep's grid, add seeds only where a verdict is still open and
can still be reached.

Round after round, every group whose verdict is ``inconclusive`` (in the convergence table, or
in the batch-sensitivity contrast) gets one more seed, the next seed value, until every group
is decided, stopped, or has ``--max-seeds`` runs. The reference group of a section (the best,
or the one ``--reference`` names) gets a seed too while any comparison with it is open: both
sides of a comparison carry its noise, and pairing by seed needs the same seeds on both.

**Futility.** An open comparison that cannot be decided by --max-seeds stops drawing seeds: its
conditional power, the chance of a verdict at the last look if its difference goes on as
observed (normbench.report.sequential.conditional_power; Lachin 2005), below ``FUTILITY``. It stays
inconclusive and the sweep names it. Seeds go where a decision can still come.

Repeated looks at the same data are repeated chances to be wrong: look l tests at the level
normbench.report.sequential.look_alpha gives it, back-loaded over the looks (alpha t^6) and scaled
so that the family-wise error of the whole procedure, Holm included, stays at alpha whatever
the futility rule does (non-binding: with it obeyed, and with it ignored, every open group
drawing seeds to the cap as when a user adds seeds or a resumed sweep goes on), and so that
the batch contrasts, never stopped for futility, say *sensitive* falsely at most alpha of the
time, measured by simulation (scripts/sequential_design.py; docs/statistics.md has the tables,
and the decisions per run against fixed designs of 4 to 16 seeds). The report of the finished
sweep uses the level of the last look taken (the sweep record stores the design).

Measured, until decided is no cheaper way to verdicts than a fixed design: against every group
at --max-seeds 8 it decides 0.71 to 1.36 times the comparisons per run (median 0.97), and in
30 of the 36 simulated settings a fixed design of 4, 8, 12 or 16 seeds decides more per run.
The default, a fixed number of seeds, stays the default; --until-decided is opt-in.
"""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from normbench.core.errors import UsageError
from normbench.experiment.probe import compose_checked
from normbench.experiment.schema import experiment, flatten
from normbench.report import pipeline, sequential, stats
from normbench.report.base import Method, Report, Section
from normbench.report.batch import BATCH_KEYS
from normbench.report.labels import label
from normbench.store.rundir import run_id
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.plan import plural

if TYPE_CHECKING:
    import pandas as pd

DECIDED = ("worse", "better", "equivalent", "sensitive", "insensitive")
# An open comparison whose conditional power of a verdict by --max-seeds is below this stops
# drawing seeds (normbench.report.sequential.conditional_power). Chosen by simulation with the
# first, binding calibration of the levels (scripts/sequential_design.py; not re-tuned since):
# a lower threshold draws seeds for comparisons that rarely pay, a higher one stops some that
# would. The levels do not count on it (non-binding).
FUTILITY = 0.35
MAX_SEEDS_CAP = 100  # --max-seeds at most: a round per seed, each a report of the whole grid
# Until decided against a fixed design at --max-seeds, decided comparisons per run, measured by
# simulation of the calibrated design with futility obeyed (3 seeds to 8 at alpha 0.05, 2,000
# tables a setting; docs/statistics.md): the smallest, the median and the largest ratio over
# its 36 settings. Below 1 in 22 of them: per run, until decided decides less than the fixed
# design as often as not.
SIMULATED_RATIO = (0.71, 0.97, 1.36)


@dataclass(frozen=True)
class SequentialDesign:
    """The adaptive design: the seed cap, the information fraction of each look it can take,
    the method (alpha, margin, reference) whose alpha it spends, and the grid's size."""

    max_seeds: int
    fractions: tuple[float, ...]
    method: Method
    groups: int  # groups in the grid
    tuned: tuple[str, ...] = ()  # a tuned confirmation's keys: each group at its own value

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
            "spending": sequential.SPENDING,
            "futility": FUTILITY,
            "fractions": list(self.fractions),
            "looks_taken": looks_taken,
            "fixed_design_runs": self.fixed_runs,
        }


@dataclass(frozen=True)
class Tally:
    """What one look decided: comparisons decided, comparisons made (``batch`` of them batch
    contrasts, the rest groups against their section's reference), and the runs behind them."""

    decided: int
    comparisons: int
    runs: int
    batch: int = 0

    @property
    def per_run(self) -> float:
        return self.decided / self.runs if self.runs else 0.0

    def text(self) -> str:
        return (
            f"{self.decided} of {comparisons_text(self.comparisons, self.batch)} decided from "
            f"{self.runs} runs ({self.per_run:.3f} per run)"
        )


def comparisons_text(comparisons: int, batch: int) -> str:
    """``comparisons`` counted so that they add up with the groups a user sees: k groups make
    k - 1 comparisons with the reference, and each norm's batch contrast is one more."""
    made = plural(comparisons, "comparison")
    if not batch:
        return made
    return f"{made} ({comparisons - batch} against the reference, {batch} batch contrasts)"


WIDTH = 80  # the progress lines are wrapped to fit an 80-column terminal, piped or not


def fit(text: str) -> str:
    """``text`` wrapped to WIDTH columns, the lines after the first indented by two: these
    lines are printed piped too (into a log, a notebook), where nothing else would wrap them."""
    return textwrap.fill(
        text, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def closing(
    final: Tally, plan: SequentialDesign, look: int, jobs: list[Job], runs_dir: Path
) -> str:
    """The end-of-sweep lines, wrapped to fit 80 columns: what until decided decided and what
    it cost, then the fixed design it replaces (every group at --max-seeds, one report at
    alpha), like with like: from the same runs when every group reached the cap (then they
    are the fixed design's runs), else from the simulation of docs/statistics.md, saying
    which."""
    per_group = defaultdict(int)
    for job in jobs:
        per_group[group_key(job.cfg)] += 1
    fixed = f"a fixed design of {plan.max_seeds} seeds per group would take {plan.fixed_runs} runs"
    if min(per_group.values()) >= plan.max_seeds:
        same = tally(look_at(jobs, runs_dir, plan.method, plan.tuned), len(jobs))
        against = (
            f"{fixed}; these runs, reported once at alpha {plan.method.alpha}, decide "
            f"{same.decided} of {same.comparisons}"
        )
    elif sequential.design_scale(plan.method.alpha, plan.fractions) != 1.0:
        low, median, high = SIMULATED_RATIO
        against = (
            f"{fixed}; by simulation (docs/statistics.md), until decided decides {low:.2f} to "
            f"{high:.2f}x (median {median:.2f}x) the fixed design's comparisons per run"
        )
    else:
        against = f"{fixed}; this design was not simulated (its levels: the union bound)"
    level = plan.at(look).level
    decided = (
        f"until decided: {plural(look, 'round')}, {final.text()}; alpha {plan.method.alpha} "
        f"spent over {plan.looks} possible looks ({sequential.SPENDING}), {level:.4g} at look "
        f"{look}"
    )
    return f"{fit(decided)}\n{fit(against)}"


def group_key(cfg: dict) -> str:
    """What makes runs seeds of one group: the config without seed, execution and
    observation keys."""
    return json.dumps({k: v for k, v in experiment(cfg).items() if k != "seed"}, sort_keys=True)


def design(sweep: Sweep, max_seeds: int, method: Method) -> SequentialDesign:
    per_group = defaultdict(int)
    for job in sweep.jobs:
        per_group[group_key(job.cfg)] += 1
    most = max(per_group.values())
    if max_seeds < max(2, most) or max_seeds > MAX_SEEDS_CAP:
        if max_seeds > MAX_SEEDS_CAP:
            why = f"above the cap of {MAX_SEEDS_CAP} (a round per seed, each a report of the grid)"
        elif max_seeds < 2:
            why = "one seed decides nothing" if max_seeds == 1 else "a group needs 2 seeds or more"
        else:
            why = f"the grid already has {most} seeds per group"
        raise UsageError(
            f"--max-seeds {max_seeds}: {why}; valid: an integer from {max(2, most)} to "
            f"{MAX_SEEDS_CAP}"
        )
    first = min(per_group.values())
    fractions = tuple((first + i) / max_seeds for i in range(1 + max_seeds - first))
    return SequentialDesign(max_seeds, fractions, method, len(per_group))


def look_at(
    jobs: list[Job], runs_dir: Path, method: Method, tuned: tuple[str, ...] = ()
) -> Report | None:
    """The report of these jobs' runs, as the sweep sees them at a look, through the report's
    one pipeline (a tuned confirmation's groups, each at its own tuned value, compared with
    each other on test)."""
    ids = tuple(job.run_id for job in jobs)
    request = pipeline.Request(runs_dir, run_ids=ids, method=method, tuned=tuned)
    selected = pipeline.select(request)
    return None if selected.selection.runs.empty else pipeline.verdicts(request, selected)


def tally(report: Report | None, runs: int) -> Tally:
    """Decided comparisons of a report: convergence rows other than the reference, and batch
    rows whose verdict is not decided by construction (same runs)."""
    decided = comparisons = contrasts = 0
    for section in report.sections if report else []:
        verdicts = [v for v in section.tables["convergence"]["verdict"] if v != "reference"]
        batch = section.tables.get("batch_sensitivity")
        if batch is not None:
            made = list(batch.loc[batch["reason"] != "same runs", "verdict"])
            contrasts += len(made)
            verdicts += made
        comparisons += len(verdicts)
        decided += sum(v in DECIDED for v in verdicts)
    return Tally(decided, comparisons, runs, contrasts)


@dataclass(frozen=True)
class Open:
    """What a look leaves open: ``undecided`` groups in an open comparison (as either side),
    ``open`` the open comparisons that still draw seeds, and ``stopped`` those given up for
    futility (their labels)."""

    undecided: int
    stopped: tuple[str, ...] = ()
    open: int = 0

    def stop_text(self, look: int, plan: SequentialDesign) -> str:
        """The line of the look after which the sweep stops: every verdict decided, or the
        comparisons left open and why no seed is added (at --max-seeds, or stopped for
        futility, each such comparison named)."""
        done = f"after round {look}:"
        if not self.undecided:
            return f"{done} every verdict decided"
        still = f"{done} {self._open_text(stopped=False)}"
        if not self.stopped:
            return fit(f"{still}, all at --max-seeds {plan.max_seeds}; no more rounds")
        names = "; ".join(self.stopped[:6]) + ("; ..." if len(self.stopped) > 6 else "")
        return fit(
            f"{still}; no more rounds. {len(self.stopped)} stopped for futility (not decidable "
            f"by --max-seeds {plan.max_seeds}: conditional power below {FUTILITY}): {names}"
        )

    def next_text(self, look: int, seeds: int, plan: SequentialDesign) -> str:
        """The line between two rounds: what the look after round ``look`` left open and what
        the next round trains (one more seed for each of ``seeds`` groups). A comparison
        stopped for futility draws no seed of its own; its groups draw one only for another
        comparison still open (a batch contrast, never stopped), and the line says so."""
        why = f", those of the {self.open} still drawing seeds" if self.stopped else ""
        return fit(
            f"after round {look} of at most {plan.looks}: {self._open_text()}; round "
            f"{look + 1} adds one seed to {'each of ' * (seeds != 1)}{plural(seeds, 'group')}"
            f"{why}"
        )

    def _open_text(self, stopped: bool = True) -> str:
        """The undecided comparisons and the groups in them, counted apart (k groups against
        one reference are k - 1 comparisons), and with ``stopped`` how many of them are
        stopped for futility."""
        undecided = plural(self.open + len(self.stopped), "comparison")
        text = f"{undecided} undecided among {plural(self.undecided, 'group')}"
        if stopped and self.stopped:
            text += f", {len(self.stopped)} of them stopped for futility"
        return text


def seeds_to_add(
    jobs: list[Job], report: Report | None, plan: SequentialDesign
) -> tuple[list[Job], Open]:
    """The next round's jobs (one more seed for each open group below the cap, none for a
    comparison stopped for futility), and what is left open."""
    if report is None:
        return [], Open(0)
    members: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        members[group_key(job.cfg)].append(job)
    undecided, stopped, futile, still_open = set(), [], set(), 0
    for section in report.sections:
        wanted, given_up, names, drawing = _open_groups(section, members, plan)
        undecided |= wanted | given_up
        futile |= given_up - wanted
        stopped += names
        still_open += drawing
    new = []
    for key in sorted(undecided - futile):
        group = members[key]
        if len(group) >= plan.max_seeds:
            continue
        seed = max(job.cfg["seed"] for job in group) + 1
        overrides = [o for o in group[0].overrides if not o.startswith("seed=")]
        cfg = compose_checked([*overrides, f"seed={seed}"])
        new.append(Job([*overrides, f"seed={seed}"], cfg, run_id(cfg)))
    return new, Open(len(undecided), tuple(stopped), still_open)


def power(at: int, table: pd.DataFrame, plan: SequentialDesign) -> float:
    """The conditional power of the open convergence row at position ``at``
    (sequential.conditional_power), from the stats.Difference the table keeps for it
    (``attrs["differences"]``, stats.difference_rows). Holm's multipliers: the family's
    tests not yet shown (every pair against the best, else the comparisons made; the k - 1
    equivalence tests). 1 for a row it cannot judge (unpaired, or no known noise)."""
    d = stats.difference_at(table.attrs["differences"], at)
    if d is None or not (d.paired and d.known_noise):
        return 1.0
    best = "diff_vs_best" in table
    tested = table["reason"].astype(str).str.startswith(("paired, ", "unpaired"))
    made = table[(table["verdict"] != "reference") & tested]
    testable = int((table["results"] >= 2).sum())
    tests = testable * (testable - 1) // 2 if best else len(made)
    shown = int(made["verdict"].isin(("worse", "better")).sum())
    same = int((made["verdict"] == "equivalent").sum())
    last = plan.at(plan.looks).level
    tests, same = max(1, tests - shown), max(1, len(made) - same)
    return sequential.conditional_power(d, plan.max_seeds, last, plan.method.margin, tests, same)


def _open_groups(
    section: Section, members: dict[str, list[Job]], plan: SequentialDesign
) -> tuple[set[str], set[str], list[str], int]:
    """The groups of a section whose verdict is open and can still be decided, with the
    reference group when it is part of such a comparison; the groups of open comparisons
    stopped for futility; those comparisons' labels; and how many open comparisons still
    draw seeds. Batch contrasts are never stopped."""
    flat = {key: flatten(group[0].cfg) for key, group in members.items()}
    conv = section.tables["convergence"]
    open_rows = conv[(conv["verdict"] == "inconclusive") | (conv["reason"] == stats.ONE_RUN)]
    wanted, given_up, names = set(), set(), []
    drawing = 0
    for at, row in open_rows.iterrows():
        matched = _matching(flat, {**section.setting, **{k: row[k] for k in section.keys}})
        chance = power(int(at), conv, plan)
        if chance < FUTILITY:
            given_up |= matched
            group = " ".join(f"{k.removesuffix('.name')}={label(row[k])}" for k in section.keys)
            names.append(f"{group} (conditional power {chance:.2f})")
        else:
            wanted |= matched
            drawing += 1
    if drawing:
        for _, row in conv[conv["verdict"] == "reference"].iterrows():
            wanted |= _matching(flat, {**section.setting, **{k: row[k] for k in section.keys}})
    batch = section.tables.get("batch_sensitivity")
    if batch is not None:
        row_keys = [k for k in section.keys if k not in BATCH_KEYS]
        for _, row in batch[batch["verdict"] == "inconclusive"].iterrows():
            sizes = {row["reference_batch"], row["smallest_batch"]}
            matched = _matching(flat, {**section.setting, **{k: row[k] for k in row_keys}})
            wanted |= {key for key in matched if _device_batch(flat[key]) in sizes}
            drawing += 1
    return wanted, given_up, names, drawing


def _matching(flat: dict[str, dict], values: dict) -> set[str]:
    return {
        key
        for key, cfg in flat.items()
        if all(label(cfg.get(k)) == label(v) for k, v in values.items())
    }


def _device_batch(cfg: dict) -> int:
    ghost = cfg.get("norm.ghost_batch")
    return int(ghost) if ghost else int(cfg["batch_size"])
