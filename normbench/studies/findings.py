"""Regenerate docs/findings.md (``normbench findings``): run every study's sweep, report it,
and label each registered claim of the literature by the rule of normbench.studies.family.

Runs go to runs/findings (or --runs-dir); they are content-addressed, so a second call only
reports. ``--quick``: fewer seeds and steps; ``--smoke``: tiny runs, for the test suite.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path

from rich.console import Console

from normbench.core.errors import UsageError
from normbench.store import sweep_record
from normbench.store.rundir import Rerun
from normbench.studies import (
    batch,
    claims,
    depth,
    dyt,
    muon,
    order,
    placement,
    precision,
    qk_norm,
    suite,
)
from normbench.studies.study import Context, arguments, command_of, tune_of
from normbench.sweeps import grid as grids
from normbench.sweeps import plan as planning
from normbench.sweeps import tuned_plan
from normbench.sweeps.flow import Host, SweepRequest, Tuning, run_sweep
from normbench.sweeps.local import LocalLauncher
from normbench.sweeps.session import Launch

# The document's sections in order, and every study whose sweep they read.
SECTIONS = (
    batch.wu_he,
    batch.luo_qiao,
    placement.xiong,
    dyt.greydanus,
    dyt.zhu,
    precision.fp16,
    claims.claims,
    depth.lns,
    qk_norm.qk_norm,
    muon.muon,
    suite.suite,
)
STUDIES = (
    *batch.STUDIES,
    *placement.STUDIES,
    *dyt.STUDIES,
    *precision.STUDIES,
    *claims.STUDIES,
    *qk_norm.STUDIES,
    *muon.STUDIES,
    *suite.STUDIES,
)


def run_studies(runs: Path, jobs: int, scale: str, console: Console) -> None:
    """Run every study's sweep, one after another in this process, on one pool of workers (a
    worker imports torch once for them all); a study whose runs are complete trains nothing.
    Each goes the sweep's own path (normbench.sweeps.flow.run_sweep: the design, tuned or
    fixed, its checks, the session, the record, the live view) as the sweep
    ``findings-<study>``, and its record stores the `normbench sweep` command it stands for,
    so that the command reproduces it. Every grid is planned first, so the count of runs to
    train and, once some have, the time left are on screen from the start."""
    launch = Launch("local", {}, jobs, Rerun())
    planned = []
    for study in STUDIES:
        args = arguments(study, scale)
        preset = None if "=" in args[0] else args[0]
        request = SweepRequest(preset, [arg for arg in args if "=" in arg])
        if study.tune:  # each group at its own best: tuning, then confirmation
            space = tuned_plan.parse_space(tune_of(study, scale), preset)
            request = replace(request, space=space, tuning=Tuning(seeds=study.tune_seeds))
        grid = grids.expand(preset, request.overrides)
        grid.name = f"findings-{study.name}"
        planned.append((study, request, grid, planning.plan(grid, runs, launch.rerun).todo))
    total = sum(len(todo) for *_, todo in planned)
    runs_in_all = sum(len(grid.jobs) for _, _, grid, _ in planned)
    console.print(
        f"findings ({scale}): {len(planned)} studies, {runs_in_all} runs, {total} to train",
        soft_wrap=not console.is_terminal,
    )
    trained, start = 0, time.perf_counter()
    with LocalLauncher(jobs, runs, launch.rerun) as pool:
        for index, (study, request, grid, todo) in enumerate(planned, start=1):
            command = f"{command_of(study, scale)} --name {grid.name}"
            console.print(f"$ {command}", soft_wrap=not console.is_terminal)
            argv = shlex.split(command)
            left = total - trained
            eta = (time.perf_counter() - start) / trained * left if trained else None
            title = f"study {study.name} ({index} of {len(planned)}; {left} runs left" + (
                f", about {eta / 60:.0f} min)" if eta is not None else ")"
            )
            claims = {"claims": order.digests(study.name)}  # what its claims were at the start
            host = Host(grid, pool, argv, claims, title)
            run_sweep(request, runs, launch, console, host=host)
            trained += len(todo)


def training_walls(runs: Path) -> dict[str, float]:
    """Each study's wall time when it trained, in seconds: its first sweep record's start to
    finish (a later call finds the runs complete and only reports)."""
    walls = {}
    for study in STUDIES:
        paths = (runs / "sweeps").glob(f"findings-{study.name}-*.json")
        found = [r for r in map(sweep_record.read, paths) if r and _took(r) is not None]
        if found:
            first = min(found, key=lambda record: str(record["started"]))
            walls[study.name] = _took(first)
    return walls


def _took(record: dict) -> float | None:
    """A record's start to finish in seconds; None unless both are ISO times of the same kind
    (a record is untrusted: a number, or a zone on one end only, is no time)."""
    try:
        started, finished = (datetime.fromisoformat(record.get(k)) for k in ("started", "finished"))
        return (finished - started).total_seconds()
    except (TypeError, ValueError):
        return None


def write(runs: Path, out: Path, jobs: int, scale: str, console: Console) -> bool:
    """Run the studies, compute every section and write the document; False when a section
    could not be computed (its study's runs are missing or failed)."""
    start = time.perf_counter()
    run_studies(runs, jobs, scale, console)
    walls = training_walls(runs)
    ctx = Context(runs, scale, out.parent / "img")
    sections = []
    for finding in SECTIONS:
        try:
            sections.append(finding(ctx))
        except (KeyError, IndexError, ValueError, TypeError, UsageError) as err:
            sections.append(
                f"## {finding.__name__}\n\nNot computed: {type(err).__name__}: "
                f"{err} (a study's runs are missing or failed)."
            )
    total = time.perf_counter() - start
    flag = {"full": "", "quick": " --quick", "smoke": " --smoke"}[scale]
    timing = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in walls.items())
    header = [
        "# Findings",
        "",
        f"Generated by `normbench findings{flag}` on {date.today().isoformat()} "
        f"({scale} scale, 2-core CPU, {jobs} worker processes). Training took "
        f"{sum(walls.values()) / 60:.0f} minutes (studies, minutes: {timing}); this report "
        f"{total / 60:.0f}. Every number below comes from runs in the run "
        "store; every verdict is computed with the statistics of docs/statistics.md (alpha "
        "0.05, margin 0.01), not written. A registered claim (normbench/studies/registered/) is "
        "labelled by the rule its section states, and only when it was registered before its "
        "runs began (`normbench findings --check`); any other claim is exploratory. "
        "Parameter counts: every norm adds at most 2d parameters per unit except AdaLN "
        "(2d^2 + 2d: 8.3k at width 64 against 128 for LayerNorm), which no study here uses, so "
        "no difference below can come from capacity.",
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header) + "\n\n".join(sections) + "\n")
    return not any("Not computed" in s for s in sections)
