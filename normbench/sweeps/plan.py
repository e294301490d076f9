"""What a sweep will do and what it did: the plan (every run's status now, what trains),
``--dry-run``'s listing, and the sweep's record (runs/sweeps/<name>-<time>-<id>.json).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.text import Text

from normbench.core.errors import StoreError
from normbench.core.files import read_json
from normbench.store.provenance import is_stale
from normbench.store.rundir import (
    FINISHED,
    MAX_BYTES,
    Rerun,
    RunDir,
    atomic_write,
    real_directory,
)
from normbench.sweeps.grid import MAX_RUNS, Job, Sweep, compose_jobs, grid_overrides, varying_keys


@dataclass
class Plan:
    """What a sweep will do: the jobs to train, every job's status now (None: missing), and
    which finished runs were made by other code than the installed one (stale)."""

    todo: list[Job]
    statuses: dict[str, str | None]
    stale: set[str]


def plan(sweep: Sweep, runs_dir: Path, rerun: Rerun) -> Plan:
    todo, statuses, stale = [], {}, set()
    for job in sweep.jobs:
        run = RunDir(runs_dir, job.run_id)
        run.check_safe()  # refuse a planted symlink before anything is written
        meta = run.read_meta()
        statuses[job.run_id] = meta.get("status") if meta else None
        if meta and meta.get("status") in FINISHED and is_stale(meta, job.cfg):
            stale.add(job.run_id)
        if run.needs_training(meta, job.cfg, rerun):
            todo.append(job)
    return Plan(todo, statuses, stale)


def print_plan(
    console: Console,
    preset: str | None,
    overrides: list[str],
    runs_dir: Path,
    rerun: Rerun,
    max_runs: int = MAX_RUNS,
) -> None:
    """``--dry-run``: every run, its status now and what will happen, one line each as it is
    composed (a large grid shows its first lines at once), then the summary line."""
    spec, job_overrides = grid_overrides(preset, overrides, max_runs)
    axes = varying_keys(job_overrides)
    name = Path(preset).stem if preset else "-".join(a.split(".")[-1] for a in axes) or "grid"
    console.print(
        Text(
            f"sweep {name}: {len(job_overrides)} combinations; # {' '.join(axes)} run-id now "
            "action",
            style="bold",
        ),
        soft_wrap=True,
    )
    jobs = []
    for index, job in enumerate(compose_jobs(job_overrides), start=1):
        jobs.append(job)
        present = dict(o.split("=", 1) for o in job.overrides)
        run = RunDir(runs_dir, job.run_id)
        meta = run.read_meta()
        status = meta.get("status") if meta else None
        stale = " (stale)" if status in FINISHED and is_stale(meta, job.cfg) else ""
        action = "run again" if status else "run"
        if not run.needs_training(meta, job.cfg, rerun):
            action = "skip"
        values = " ".join(present.get(k, "-") for k in axes)
        console.print(
            Text(f"{index:>4} {values} {job.run_id} {status or '-'}{stale} {action}"),
            soft_wrap=True,
        )
    sweep = Sweep(name, spec["version"], jobs, axes, len(job_overrides))
    console.print(plan_summary(sweep, plan(sweep, runs_dir, rerun)), soft_wrap=True)


def plan_summary(sweep: Sweep, planned: Plan) -> str:
    counts = Counter(status or "missing" for status in planned.statuses.values())
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    same = sweep.combinations - len(sweep.jobs)
    merged = (
        f" from {sweep.combinations} combinations ({same} differ only in keys their norm ignores)"
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
    return f"{len(sweep.jobs)} runs{merged}: {parts}{stale}; {len(todo)} to run"


# ---------------------------------------------------------------------------- the record
def write_record(
    sweep: Sweep,
    runs_dir: Path,
    launcher: str,
    started: datetime,
    command: list[str] | None = None,
    extra: dict | None = None,
) -> Path:
    """runs/sweeps/<name>-<time>.json: what this sweep ran and the command that made it
    (default: this process's argv), so a report can select it. ``extra``: fields of the kind
    of sweep (``until_decided``: the adaptive design, whose alpha the report splits over its
    looks; ``tuning``: a tuned comparison's phase and choices)."""
    stamp = f"{started.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"  # never collides
    path = real_directory(runs_dir / "sweeps") / f"{sweep.name}-{stamp}.json"
    record = {
        "name": sweep.name,
        "preset_version": sweep.version,
        "started": started.isoformat(timespec="microseconds"),
        "finished": None,
        "command": list(sys.argv if command is None else command),
        "launcher": launcher,
        "axes": sweep.axes,
        "runs": [{"run_id": job.run_id, "overrides": job.overrides} for job in sweep.jobs],
        "counts": {},
    }
    record.update(extra or {})
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def discard_record(path: Path, submitit_folder: Path) -> None:
    """Remove a sweep's record and its submission files: the sweep never started."""
    import shutil

    path.unlink(missing_ok=True)
    shutil.rmtree(submitit_folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # the sweeps directory, when this was its only record
        path.parent.rmdir()


def finish_record(
    path: Path,
    counts: dict[str, int],
    jobs: list[Job],
    finished: bool = True,
    **extra,
) -> dict[str, int]:
    """Store the runs (a sweep run until decided adds seeds), the counts so far and the
    fields of its kind (until decided, the design with the looks taken); returns the counts.
    The record is read back through the trusted reader (it lies in the runs directory); one
    damaged meanwhile is written anew."""
    try:
        record = read_json(path, MAX_BYTES["record"], root=path.parent.parent)
    except (OSError, StoreError):
        record = None
    record = record if isinstance(record, dict) else {}
    record.update(
        counts=counts,
        runs=[{"run_id": job.run_id, "overrides": job.overrides} for job in jobs],
    )
    record.update({k: v for k, v in extra.items() if v is not None})
    if finished:
        record["finished"] = datetime.now().isoformat(timespec="seconds")
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return counts


def add_counts(total: dict[str, int], more: Counter) -> dict[str, int]:
    return dict(Counter(total) + Counter(more))
