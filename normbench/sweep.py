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
import math
import re
import secrets
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from normbench.config import UsageError, compose, conf_dir, config_dirs, parse_overrides, shown
from normbench.provenance import is_stale
from normbench.store import FINISHED, Rerun, RunDir, atomic_write, real_directory, run_id

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


def presets() -> dict[str, Path]:
    """Preset files by name: shipped (conf/sweep) and from the user's config directories (their
    sweep/ folders); a name defined twice is refused, as for any option."""
    found = {p.stem: p for p in (conf_dir() / "sweep").glob("*.yaml")}
    for directory in config_dirs():
        for path in sorted((directory / "sweep").glob("*.yaml")):
            if path.stem in found:
                raise UsageError(
                    f"sweep preset {path.stem} is defined twice: {found[path.stem]} and {path}; "
                    "rename one"
                )
            found[path.stem] = path
    return dict(sorted(found.items()))


def preset_path(name: str) -> Path:
    """A preset by name (shipped or in a config directory), or a preset file by path
    (``./grids/mine.yaml``)."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"sweep file {shown(name)} does not exist (or is not a file)")
        return path
    if name not in presets():
        raise UsageError(
            f"sweep preset '{shown(name)[1:-1]}' does not exist; valid: {', '.join(presets())}, "
            "or a path to a preset file (./grids/mine.yaml)"
        )
    return presets()[name]


def load_preset(name: str) -> dict:
    """A preset's ``version``, ``params`` and ``grids``, values as override strings."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = preset_path(name)
    try:
        spec = OmegaConf.to_container(OmegaConf.load(path))
    except (OmegaConfBaseException, YAMLError, OSError, UnicodeDecodeError) as err:
        raise UsageError(f"sweep file {path}: not a preset ({type(err).__name__})") from None
    unknown = set(spec) - {"version", "params", "grids"} if isinstance(spec, dict) else {""}
    params, grids = (spec.get("params") or {}, spec.get("grids") or []) if not unknown else ({}, [])
    if unknown or not isinstance(params, dict) or not isinstance(grids, list):
        raise UsageError(
            f"sweep file {path}: a preset has version, params (key: values) and grids (a list "
            "of key: values)"
        )
    return {
        "version": spec.get("version"),
        "params": {k: _as_override_value(v) for k, v in params.items()},
        "grids": [{k: _as_override_value(v) for k, v in grid.items()} for grid in grids],
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


MAX_RUNS = 10_000  # a larger grid is refused unless --max-runs says so
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # sweep names: plain, short file names


def check_name(name: str, option: str = "--name") -> str:
    """A sweep name as the record's file name uses it; anything else is refused."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise UsageError(
            f"{option} {shown(name)}: a sweep name is 1 to 64 of A-Z a-z 0-9 . _ -, starting "
            "with a letter or digit"
        )
    return name


def grid_overrides(
    preset: str | None, overrides: list[str], max_runs: int = MAX_RUNS
) -> tuple[dict, list[list[str]]]:
    """The preset's spec and every job's overrides (Hydra's cartesian product), refused in one
    line when an axis is given twice or the grid has more than ``max_runs`` combinations."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    spec = load_preset(preset) if preset else {"version": None, "params": {}, "grids": []}
    given: dict[str, object] = {}  # a key's first override on the command line
    for override in parse_overrides(overrides):
        key = override.key_or_group
        first = given.setdefault(key, override)
        if first is not override and (first.is_sweep_override() or override.is_sweep_override()):
            raise UsageError(
                f"{key} is given twice ({first.input_line} and {override.input_line}); give one "
                f"axis, e.g. {key}=a,b,c"
            )
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
    key its norm ignores) is the same run and is left out."""
    seen = set()
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
            yield Job(job, cfg, rid)


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
def write_record(sweep: Sweep, runs_dir: Path, launcher: str, started: datetime, plan=None) -> Path:
    """runs/sweeps/<name>-<time>.json: what this sweep ran, so a report can select it. With
    ``--until-decided``, the adaptive design too: the report splits alpha over its looks."""
    stamp = f"{started.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"  # never collides
    path = real_directory(runs_dir / "sweeps") / f"{sweep.name}-{stamp}.json"
    record = {
        "name": sweep.name,
        "preset_version": sweep.version,
        "started": started.isoformat(timespec="microseconds"),
        "finished": None,
        "command": sys.argv,
        "launcher": launcher,
        "axes": sweep.axes,
        "runs": [{"run_id": job.run_id, "overrides": job.overrides} for job in sweep.jobs],
        "counts": {},
        "looks": plan.looks if plan else 1,
    }
    if plan:
        record["until_decided"] = {
            "max_seeds": plan.max_seeds,
            "alpha": plan.method.alpha,
            "margin": plan.method.margin,
            "fixed_design_runs": plan.fixed_runs,
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


def finish_record(
    path: Path, counts: dict[str, int], jobs: list[Job], finished: bool = True
) -> dict[str, int]:
    """Store the runs (a sweep run until decided adds seeds) and the counts so far; returns
    the counts."""
    record = json.loads(path.read_text())
    record.update(
        counts=counts,
        runs=[{"run_id": job.run_id, "overrides": job.overrides} for job in jobs],
    )
    if finished:
        record["finished"] = datetime.now().isoformat(timespec="seconds")
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return counts


def add_counts(total: dict[str, int], more: Counter) -> dict[str, int]:
    return dict(Counter(total) + Counter(more))


# ---------------------------------------------------------------------------- live view
class LiveView:
    """One display for the whole sweep: counts, ETA, and each failure the moment it happens.

    Runs waiting in a cluster's queue count as pending, not running; the display redraws
    itself (elapsed time moves) even while nothing finishes.
    """

    def __init__(self, console: Console, sweep: Sweep, todo: list[Job], title: str | None = None):
        self.console = console
        self.title = title  # "round 2" when seeds are added until decided
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
        if not self.live.console.is_terminal:  # piped, the last frame ends without a newline
            self.live.console.line()

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
        if self.title:
            return Group(Text(self.title, style="bold"), progress, counts)
        return Group(progress, counts)


def summary_table(sweep: Sweep, views: list[LiveView]) -> Table:
    """The end of a sweep: how many runs ended how, and why each failure failed."""
    table = Table(title=f"sweep {sweep.name}", title_justify="left", min_width=40)
    table.add_column("status")
    table.add_column("runs", justify="right")
    if views[0].skipped:
        table.add_row("already complete", str(views[0].skipped))
    labels = {"skipped": "finished meanwhile by another process"}
    counts = sum((view.counts for view in views), Counter())
    for status, count in sorted(counts.items()):
        table.add_row(labels.get(status, status), str(count))
    for view in views:
        for rid, result in view.results.items():
            if result["status"] == "failed":
                error = Text(result["error"] or "", style="red")
                table.add_row(Text(f"  {rid}", style="red"), error)
    return table
