"""What a sweep will do: the plan (every run's status now, what trains) and ``--dry-run``'s
listing. What it did goes to its record (normbench.store.sweep_record).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.control import strip_control_codes
from rich.text import Text

from normbench.core.text import fitted_id
from normbench.store.provenance import is_stale
from normbench.store.rundir import (
    FINISHED,
    Rerun,
    RunDir,
    stored_run_id,
)
from normbench.sweeps.grid import (
    CHECKED_FIRST,
    MAX_RUNS,
    Job,
    Sweep,
    compose_jobs,
    grid_overrides,
    varying_keys,
)


@dataclass
class Plan:
    """What a sweep will do: the jobs to train, every job's status now (None: missing), and
    which finished runs were made by other code than the installed one (stale)."""

    todo: list[Job]
    statuses: dict[str, str | None]
    stale: set[str]


def plan(sweep: Sweep, runs_dir: Path, rerun: Rerun) -> Plan:
    planned, present = Plan([], {}, set()), run_names(runs_dir)
    for job in sweep.jobs:
        add_job(planned, job, runs_dir, rerun, present)
    return planned


def run_names(runs_dir: Path) -> set[str] | None:
    """The names in the runs directory, listed once: a job whose run is not among them is
    missing without opening its meta.json (most of a new grid's jobs). None when it cannot be
    listed, and every run is then looked up."""
    try:
        return set(os.listdir(runs_dir))
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def add_job(planned: Plan, job: Job, runs_dir: Path, rerun: Rerun, present: set[str] | None) -> str:
    """Add ``job``'s status now to ``planned`` (and the job to its todo when it trains); its
    action: run, run again or skip. A finished run stored under the id an earlier normbench
    gave the job is kept, and the job takes its id (store.rundir.stored_run_id)."""
    job.run_id = stored_run_id(runs_dir, job.cfg, rerun, present, job.run_id)
    if present is not None and job.run_id not in present:
        planned.statuses[job.run_id] = None
        planned.todo.append(job)
        return "run"
    run = RunDir(runs_dir, job.run_id)
    run.check_safe()  # refuse a planted symlink before anything is written
    meta = run.read_meta()
    status = meta.get("status") if meta else None
    planned.statuses[job.run_id] = status
    if status in FINISHED and is_stale(meta, job.cfg):
        planned.stale.add(job.run_id)
    if run.needs_training(meta, job.cfg, rerun):
        planned.todo.append(job)
        return "run again" if status else "run"
    return "skip"


def print_plan(
    console: Console,
    preset: str | None,
    overrides: list[str],
    runs_dir: Path,
    rerun: Rerun,
    max_runs: int = MAX_RUNS,
) -> None:
    """``--dry-run``: every run, its status now and what will happen, one line each as it is
    composed (a large grid shows its first lines at once), then the summary line. The columns
    line up: each axis as wide as its widest value (known before composing), the run id last.
    The lines are plain text written straight to the console's file (rich lays out a line in
    about a millisecond: 10 s for a 10,000-run grid), control codes stripped as rich would.
    A grid of up to CHECKED_FIRST combinations is composed whole before the first line, so
    that a refused combination is the only thing printed, never a plan's header above it."""
    spec, job_overrides = grid_overrides(preset, overrides, max_runs)
    composed = compose_jobs(job_overrides)
    if len(job_overrides) <= CHECKED_FIRST:
        composed = iter(list(composed))
    axes = varying_keys(job_overrides)
    name = Path(preset).stem if preset else "-".join(a.split(".")[-1] for a in axes) or "grid"
    settings = [
        {k: shown_value(v) for k, v in (o.split("=", 1) for o in job)} for job in job_overrides
    ]
    widths = [max(len(k), *(len(s.get(k, "-")) for s in settings)) for k in axes]
    number = len(str(len(job_overrides)))
    console.print(
        Text(f"sweep {name}: {plural(len(job_overrides), 'combination')}"),
        soft_wrap=not console.is_terminal,
    )
    columns = [
        "#".rjust(number),
        *(k.ljust(w) for k, w in zip(axes, widths, strict=True)),
        "now".ljust(STATUS_WIDTH),
        "action".ljust(ACTION_WIDTH),
        "run id",
    ]
    console.print(Text(_row(columns), style="bold"), soft_wrap=not console.is_terminal)
    jobs, planned, present = [], Plan([], {}, set()), run_names(runs_dir)
    for index, job in enumerate(composed, start=1):
        jobs.append(job)
        action = add_job(planned, job, runs_dir, rerun, present)
        status = planned.statuses[job.run_id]
        stale = " (stale)" if job.run_id in planned.stale else ""
        given = {k: shown_value(v) for k, v in (o.split("=", 1) for o in job.overrides)}
        values = [given.get(k, "-").ljust(w) for k, w in zip(axes, widths, strict=True)]
        now, action = (status or "-").ljust(STATUS_WIDTH), f"{action}{stale}".ljust(ACTION_WIDTH)
        row = [str(index).rjust(number), *values, now, action, job.run_id]
        room = console.width - len(_row(row[:-1])) - 2
        if console.is_terminal and len(job.run_id) > room:  # never wrapped by the terminal
            row[-1] = fitted_id(job.run_id, room)
        console.file.write(strip_control_codes(_row(row)) + "\n")
    sweep = Sweep(name, spec["version"], jobs, axes, len(job_overrides))
    console.line()
    console.print(plan_summary(sweep, planned), soft_wrap=not console.is_terminal)


STATUS_WIDTH = len("interrupted")  # the longest status
ACTION_WIDTH = len("skip (stale)")


def _row(cells: list[str]) -> str:
    return "  ".join(cells)


def shown_value(value: str) -> str:
    """An override's value as the user wrote it: Hydra's escapes dropped
    (``mynorms\\:PowerNorm`` is ``mynorms:PowerNorm``)."""
    return re.sub(r"\\(.)", r"\1", value)


def plural(count: int, noun: str) -> str:
    """``1 combination``, ``2 combinations``."""
    return f"{count} {noun}{'s' * (count != 1)}"


def plan_summary(sweep: Sweep, planned: Plan) -> str:
    counts = Counter(status or "missing" for status in planned.statuses.values())
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    same = sweep.combinations - len(sweep.jobs)
    merged = (
        f" from {sweep.combinations} combinations ({same} the same run as another: a key its norm"
        " ignores, or one norm under two names)"
        if same
        else ""
    )
    todo = {job.run_id for job in planned.todo}
    stale = ""
    if planned.stale:
        kept = len(planned.stale - todo)
        stale = f" ({len(planned.stale)} stale: made by other code; " + (
            f"{kept} kept, --rerun-stale trains them again)" if kept else "trained again)"
        )
    return f"{plural(len(sweep.jobs), 'run')}{merged}: {parts}{stale}; {len(todo)} to run"


def add_counts(total: dict[str, int], more: Counter) -> dict[str, int]:
    return dict(Counter(total) + Counter(more))
