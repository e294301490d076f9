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

import contextlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from normbench.config import UsageError, compose, conf_dir, parse_overrides
from normbench.store import FINISHED, RunDir, atomic_write, run_id

DEFAULT_PRESET = "batch_sensitivity"


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


def presets() -> list[str]:
    return sorted(p.stem for p in (conf_dir() / "sweep").glob("*.yaml"))


def load_preset(name: str) -> dict:
    """A preset's ``version``, ``params`` and ``grids``, values as override strings."""
    from omegaconf import OmegaConf

    if name not in presets():
        raise UsageError(f"sweep preset '{name}' does not exist; valid: {', '.join(presets())}")
    spec = OmegaConf.to_container(OmegaConf.load(conf_dir() / "sweep" / f"{name}.yaml"))
    return {
        "version": spec.get("version"),
        "params": {k: _as_override_value(v) for k, v in (spec.get("params") or {}).items()},
        "grids": [
            {k: _as_override_value(v) for k, v in grid.items()} for grid in spec.get("grids") or []
        ],
    }


def _as_override_value(value) -> str:
    """YAML values as the override grammar writes them (true, null, 2,4,8)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return ",".join(_as_override_value(v) for v in value)
    return str(value)


def expand(preset: str | None, overrides: list[str]) -> Sweep:
    """Every job of the sweep, composed and validated; duplicates (same run id) dropped."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    spec = load_preset(preset) if preset else {"version": None, "params": {}, "grids": []}
    job_overrides: list[list[str]] = []
    for grid in spec["grids"] or [{}]:
        arguments = [f"{k}={v}" for k, v in {**spec["params"], **grid}.items()] + overrides
        parsed = parse_overrides(arguments, with_group_options=True)
        try:
            (batch,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
        except HydraException as err:
            raise UsageError(
                f"{err}: normbench sweeps grids; interval() needs an optimising sweeper. "
                "Use a,b,c, range(), choice(), glob() or sort()"
            ) from None
        job_overrides.extend(batch)
    jobs, seen = [], set()
    for index, job in enumerate(job_overrides, start=1):
        try:
            cfg = compose(job)
        except UsageError as err:
            raise UsageError(
                f"job {index} of {len(job_overrides)} ({' '.join(job)}): {err}"
            ) from None
        rid = run_id(cfg)
        if rid not in seen:
            seen.add(rid)
            jobs.append(Job(job, cfg, rid))
    return Sweep(preset or "custom", spec["version"], jobs, varying_keys(jobs), len(job_overrides))


def varying_keys(jobs: list[Job]) -> list[str]:
    """Override keys whose value differs between jobs (the axes worth showing)."""
    settings = [dict(o.split("=", 1) for o in job.overrides) for job in jobs]
    keys = {key for present in settings for key in present}
    values = {key: {present.get(key, "-") for present in settings} for key in keys}
    order = [o.split("=", 1)[0] for o in jobs[0].overrides] if jobs else []
    ordered = order + sorted(set(values) - set(order))
    return [key for key in ordered if len(values[key]) > 1]


def plan(sweep: Sweep, runs_dir: Path, force: bool) -> tuple[list[Job], dict[str, str]]:
    """The jobs to run and every job's status now (missing jobs: None)."""
    statuses = {job.run_id: RunDir(runs_dir, job.run_id).status() for job in sweep.jobs}
    todo = [job for job in sweep.jobs if force or statuses[job.run_id] not in FINISHED]
    return todo, statuses


def plan_table(sweep: Sweep, statuses: dict, force: bool) -> Table:
    """The grid as a table: one row a run, its varying overrides, and what will happen."""
    table = Table(title=f"sweep {sweep.name}: {len(sweep.jobs)} runs", title_justify="left")
    table.add_column("#", justify="right")
    for key in sweep.axes:
        table.add_column(key)
    table.add_column("run id", overflow="fold")
    table.add_column("now")
    table.add_column("action")
    for index, job in enumerate(sweep.jobs, start=1):
        present = dict(o.split("=", 1) for o in job.overrides)
        status = statuses[job.run_id]
        action = "run" if status is None else "skip" if status in FINISHED else "run again"
        if force:
            action = "run again" if status else "run"
        table.add_row(
            str(index),
            *(present.get(k, "-") for k in sweep.axes),
            job.run_id,
            status or "-",
            action,
        )
    return table


def plan_summary(sweep: Sweep, todo: list[Job], statuses: dict) -> str:
    counts = Counter(status or "missing" for status in statuses.values())
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    same = sweep.combinations - len(sweep.jobs)
    merged = (
        f" from {sweep.combinations} combinations ({same} differ only in keys their norm ignores)"
        if same
        else ""
    )
    return f"{len(sweep.jobs)} runs{merged}: {parts}; {len(todo)} to run"


# ---------------------------------------------------------------------------- the record
def write_record(sweep: Sweep, runs_dir: Path, launcher: str, started: datetime) -> Path:
    """runs/sweeps/<name>-<time>.json: what this sweep ran, so a report can select it."""
    path = runs_dir / "sweeps" / f"{sweep.name}-{started.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "name": sweep.name,
        "preset_version": sweep.version,
        "started": started.isoformat(timespec="seconds"),
        "finished": None,
        "command": sys.argv,
        "launcher": launcher,
        "axes": sweep.axes,
        "runs": [{"run_id": job.run_id, "overrides": job.overrides} for job in sweep.jobs],
        "counts": {},
    }
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def discard_record(path: Path, submitit_folder: Path) -> None:
    """Remove a sweep's record and its submission files: the sweep never started."""
    import shutil

    path.unlink(missing_ok=True)
    shutil.rmtree(submitit_folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # the sweeps directory, when this was its only record
        path.parent.rmdir()


def finish_record(path: Path, counts: dict[str, int]) -> None:
    record = json.loads(path.read_text())
    record.update(finished=datetime.now().isoformat(timespec="seconds"), counts=counts)
    atomic_write(path, json.dumps(record, indent=2) + "\n")


# ---------------------------------------------------------------------------- live view
class LiveView:
    """One display for the whole sweep: counts, ETA, and each failure the moment it happens.

    Runs waiting in a cluster's queue count as pending, not running; the display redraws
    itself (elapsed time moves) even while nothing finishes.
    """

    def __init__(self, console: Console, sweep: Sweep, todo: list[Job]):
        self.console = console
        self.total = len(todo)
        self.skipped = len(sweep.jobs) - len(todo)
        self.pending: set[str] = set()
        self.running: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.results: dict[str, dict] = {}
        self.start = time.perf_counter()
        self.live = Live(
            console=console, get_renderable=self.render, refresh_per_second=4, transient=False
        )

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.refresh()
        self.live.__exit__(*exc)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def queued(self, rid: str) -> None:
        """Submitted and waiting for the scheduler (again, after a requeue)."""
        self.running.discard(rid)
        self.pending.add(rid)
        self.live.refresh()

    def started(self, rid: str) -> None:
        self.pending.discard(rid)
        self.running.add(rid)
        self.live.refresh()

    def done(
        self, rid: str, status: str, error: str | None = None, summary=None, skipped=False
    ) -> None:
        """A run ended; ``skipped``: another process had finished it while this one waited."""
        self.pending.discard(rid)
        self.running.discard(rid)
        self.counts["skipped" if skipped else status] += 1
        self.results[rid] = {"status": status, "error": error, "summary": summary or {}}
        if status in ("failed", "interrupted", "diverged"):
            style = "red" if status == "failed" else "yellow"
            reason = f": {error}" if error else ""
            self.console.print(Text(f"{status} {rid}{reason}", style=style), soft_wrap=True)
        self.live.refresh()

    def render(self) -> Group:
        elapsed = time.perf_counter() - self.start
        remaining = self.total - self.finished
        eta = f"{elapsed / self.finished * remaining:.0f} s" if self.finished and remaining else "-"
        counts = Text.assemble(
            ("done ", "bold"),
            f"{self.counts['complete']}  ",
            *((("pending ", "bold"), f"{len(self.pending)}  ") if self.pending else ()),
            ("running ", "bold"),
            f"{len(self.running)}  ",
            ("failed ", "bold red"),
            f"{self.counts['failed']}  ",
            ("diverged ", "bold yellow"),
            f"{self.counts['diverged']}  ",
            ("remaining ", "bold"),
            f"{remaining}  ",
            ("ETA ", "bold"),
            f"{eta}  ",
            ("elapsed ", "bold"),
            f"{elapsed:.0f} s",
        )
        progress = Table.grid(padding=(0, 1))
        progress.add_row(
            ProgressBar(total=max(1, self.total), completed=self.finished, width=40),
            f"{self.finished}/{self.total} runs"
            + (f" ({self.skipped} already complete)" if self.skipped else ""),
        )
        return Group(progress, counts)


def summary_table(sweep: Sweep, view: LiveView) -> Table:
    """The end of a sweep: how many runs ended how, and why each failure failed."""
    table = Table(title=f"sweep {sweep.name}", title_justify="left", min_width=40)
    table.add_column("status")
    table.add_column("runs", justify="right")
    if view.skipped:
        table.add_row("already complete", str(view.skipped))
    labels = {"skipped": "finished meanwhile by another process"}
    for status, count in sorted(view.counts.items()):
        table.add_row(labels.get(status, status), str(count))
    for rid, result in view.results.items():
        if result["status"] == "failed":
            table.add_row(Text(f"  {rid}", style="red"), Text(result["error"] or "", style="red"))
    return table
