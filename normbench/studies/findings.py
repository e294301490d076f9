"""Regenerate docs/findings.md (``normbench findings``): run every study's sweep, report it,
and label each registered claim of the literature by the rule of normbench.studies.family.

Runs go to runs/findings (or --runs-dir); they are content-addressed, so a second call only
reports. ``--quick``: fewer seeds and steps; ``--smoke``: tiny runs, for the test suite.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path

from rich.console import Console

from normbench import __version__
from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_text
from normbench.store import records, sweep_record
from normbench.store.rundir import Rerun
from normbench.studies import (
    batch,
    claims,
    depth,
    devices,
    dyt,
    ladders,
    muon,
    norms_2025,
    order,
    placement,
    precision,
    qk_norm,
    suite,
)
from normbench.studies.study import (
    Context,
    Study,
    arguments,
    command_of,
    extends,
    preset_of,
    tune_of,
    tune_seeds_of,
)
from normbench.sweeps import grid as grids
from normbench.sweeps import ladder_plan, tuned_plan
from normbench.sweeps import plan as planning
from normbench.sweeps.flow import Host, SweepRequest, Tuning, run_sweep
from normbench.sweeps.grid import Sweep
from normbench.sweeps.local import LocalLauncher, ranks
from normbench.sweeps.session import Launch

DOCUMENT_LIMIT = 1 << 24  # a findings document to keep sections of (docs/findings.md: 60 KB)

# The document's sections in order, each with the studies whose runs it reads.
SECTIONS = (
    (batch.wu_he, ("batch",)),
    (batch.luo_qiao, ("batch",)),
    (devices.devices, ("devices",)),
    (placement.xiong, ("placement", "xavier")),
    (dyt.greydanus, ("dyt",)),
    (dyt.zhu, ("dyt",)),
    (precision.fp16, ("fp16",)),
    (claims.claims, ("lr", "depth", "claims")),
    (depth.lns, ("depth",)),
    (qk_norm.qk_norm, ("qk_norm",)),
    (muon.muon, ("muon",)),
    (norms_2025.osp, ("norms_2025",)),
    (norms_2025.gated_attention, ("norms_2025",)),
    (norms_2025.gpas, ("norms_2025",)),
    (norms_2025.dyisru, ("norms_2025",)),
    (suite.suite, ("suite",)),
    (ladders.ladder_lm, ("ladder_lm",)),
    (ladders.data_regime, ("data_regime",)),
    (ladders.lr_sensitivity_scaling, ("lr_sensitivity_scaling",)),
)
STUDIES = (
    *batch.STUDIES,
    *devices.STUDIES,
    *placement.STUDIES,
    *dyt.STUDIES,
    *precision.STUDIES,
    *claims.STUDIES,
    *qk_norm.STUDIES,
    *muon.STUDIES,
    *norms_2025.STUDIES,
    *suite.STUDIES,
    *ladders.STUDIES,
)


def run_studies(
    runs: Path, jobs: int, scale: str, console: Console, only: tuple[str, ...] = ()
) -> None:
    """Run every study's sweep, one after another in this process, on one pool of workers (a
    worker imports torch once for them all); a study whose runs are complete trains nothing.
    Each goes the sweep's own path (normbench.sweeps.flow.run_sweep: the design, tuned or
    fixed, its checks, the session, the record, the live view) as the sweep
    ``findings-<study>``, and its record stores the `normbench sweep` command it stands for,
    so that the command reproduces it. Every grid is planned first, so the count of runs to
    train and, once some have, the time left are on screen from the start."""
    launch = Launch("local", {}, jobs, Rerun())
    planned = []
    for study in selected(only):
        request = request_of(study, scale)
        grid, left, exact = planned_of(request, runs, launch.rerun)
        planned.append((study, request, grid, left, exact))
    # A run of N ranks takes N worker slots (the devices study's 4-rank runs): the document's
    # pool widens to the widest run, said once before anything trains, so that `normbench
    # findings` at its default --jobs writes every section (its ranks share the cores).
    widest = max((ranks(job) for _, _, grid, _, _ in planned for job in grid.jobs), default=1)
    if widest > jobs:
        console.print(
            f"--jobs {jobs} widened to {widest}: a run of {widest} ranks takes {widest} worker "
            "slots",
            soft_wrap=not console.is_terminal,
        )
        jobs = widest
    total = sum(left for *_, left, _ in planned)
    runs_in_all = sum(len(grid.jobs) for _, _, grid, _, _ in planned)
    upto = "" if all(exact for *_, exact in planned) else "up to "
    console.print(
        f"findings ({scale}): {len(planned)} studies, {runs_in_all} runs, {upto}{total} to train"
        + (
            " (a tuned study's count is its most: what halving prunes is known as it goes)"
            if upto
            else ""
        ),
        soft_wrap=not console.is_terminal,
    )
    trained, start = 0, time.perf_counter()
    with LocalLauncher(jobs, runs, launch.rerun) as pool:
        for index, (study, request, grid, left, _) in enumerate(planned, start=1):
            command = f"{command_of(study, scale)} --name {grid.name}"
            console.print(f"$ {command}", soft_wrap=not console.is_terminal)
            argv = shlex.split(command)
            remaining = total - trained
            eta = (time.perf_counter() - start) / trained * remaining if trained else None
            title = (
                f"study {study.name} ({index} of {len(planned)}; {upto}{remaining} runs left"
                + (f", about {eta / 60:.0f} min)" if eta is not None else ")")
            )
            claims = {"claims": order.digests(study.name)}  # what its claims were at the start
            host = Host(grid, pool, argv, claims, title)
            run_sweep(request, runs, launch, console, host=host)
            trained += left


def request_of(study: Study, scale: str) -> SweepRequest:
    """The sweep a study is at a scale, built as `normbench sweep` builds it from the same
    arguments (normbench.cli.sweep): the preset's ``ladder:`` or the study's ``--ladder``, the
    preset's ``tune:`` with the study's ``--tune`` replacing a key (each group at its own best:
    tuning, then confirmation), under the name ``findings-<study>``."""
    args = arguments(study, scale)
    preset = preset_of(study)
    overrides = [arg for arg in args if "=" in arg]
    spec, overrides = ladder_plan.parse(study.ladder.get(scale), None, preset, overrides)
    return SweepRequest(
        preset,
        overrides,
        name=f"findings-{study.name}",
        space=tuned_plan.parse_space(tune_of(study, scale), preset),
        tuning=Tuning(seeds=tune_seeds_of(study, scale), extend=extends(scale)),
        ladder=spec,
    )


def planned_of(request: SweepRequest, runs: Path, rerun: Rerun) -> tuple[Sweep, int, bool]:
    """A request's grid (a ladder's: every rung's runs, under one name), how many runs are
    left to train, and whether that count is exact. A plain grid's is. A tuned design's
    confirmation runs sit at choices its tuning has not made yet and halving prunes as it goes,
    so its count is its most (every tuning run, an edge extended, the confirmation) less the
    runs its record has completed; none once its record's phases are done and complete."""
    tuning = request.tuning
    if request.ladder is None:
        grid = grids.expand(request.preset, request.overrides)
        grid.name = request.name
        settings = (tuning.seeds, tuning.eta, tuning.trials, tuning.extend)
        most = tuned_plan.design(grid, request.space, *settings).runs if request.space else None
    else:
        plan = ladder_plan.design(
            request.ladder,
            request.preset,
            request.overrides,
            request.max_runs,
            request.space,
            (tuning.seeds, tuning.eta, tuning.trials, tuning.extend),
            request.name,
        )
        jobs = [job for rung in plan.rungs for job in rung.grid.jobs]
        grid = Sweep(plan.name, plan.version, jobs, plan.rungs[0].grid.axes)
        most = sum(rung.runs for rung in plan.rungs) if request.space else None
    if most is None:  # a plain grid: exact
        return grid, len(planning.plan(grid, runs, rerun).todo), True
    return grid, tuned_left(runs, request.name, most), False


def tuned_left(runs: Path, name: str, most: int) -> int:
    """A tuned sweep's runs left to train, at most: none once its latest record's phases are
    done with every run complete, else MOST less the runs it counts complete (no record, or
    one that cannot be read: MOST)."""
    try:
        record = records.latest_record(runs, name)
    except UsageError:
        return most
    counts = record.get("counts") if isinstance(record.get("counts"), dict) else {}
    tuning = record.get("tuning") if isinstance(record.get("tuning"), dict) else {}
    if tuning.get("phase") == "done" and set(counts) <= {"complete"}:
        return 0
    complete = counts.get("complete")
    return max(0, most - (complete if isinstance(complete, int) else 0))


def study_names() -> list[str]:
    """Every study's name, in the order the document trains them (`findings --study`'s choices)."""
    return [study.name for study in STUDIES]


def selected(only: tuple[str, ...]) -> tuple[Study, ...]:
    """The studies `--study` named (all of them when it named none), in the document's order."""
    return tuple(study for study in STUDIES if not only or study.name in only)


def section_key(finding: Callable[[Context], str]) -> str:
    """A section's name in the document's markers: its study module and function."""
    return f"{finding.__module__.rsplit('.', 1)[-1]}.{finding.__name__}"


def subject(studies: tuple[str, ...]) -> str:
    """A section's heading while it has none of its own (a section titles itself from its
    runs): the studies it reads."""
    return f"The {', '.join(studies)} stud{'y' if len(studies) == 1 else 'ies'}, not computed"


def marker(key: str) -> str:
    """The line that opens a section in the document, so that a later `findings --study`
    rewrites its own sections and finds every other one where it left it."""
    return f"<!-- normbench findings section: {key} -->"


def kept_sections(out: Path) -> dict[str, str]:
    """The sections of the document already at OUT, by key (none when it has no markers): what
    `--study` keeps of the studies it does not run."""
    if not out.is_file():
        return {}
    kept, key, lines = {}, None, []
    try:
        text = read_text(out, DOCUMENT_LIMIT)
    except StoreError as err:  # a document it cannot read is none it can keep sections of
        raise UsageError(f"--out {out}: {err}; valid: a findings document, or a new path") from None
    for line in text.splitlines():
        if line.startswith("<!-- normbench findings section: ") and line.endswith(" -->"):
            if key:
                kept[key] = "\n".join(lines).strip("\n")
            key, lines = line.removeprefix("<!-- normbench findings section: ")[:-4], []
        elif key:
            lines.append(line)
    if key:
        kept[key] = "\n".join(lines).strip("\n")
    return kept


def stamped(text: str, studies: tuple[str, ...], scale: str, walls: dict[str, float]) -> str:
    """A computed section with the line that dates it, under its heading: when, by which
    version, from which studies and how long they trained (a document is regenerated study by
    study, so each section says its own)."""
    heading, _, body = text.partition("\n")
    took = [f"{walls[name] / 60:.0f} min" for name in studies if name in walls]
    trained = f", trained in {' + '.join(took)}" if took else ""
    line = (
        f"*Section generated on {date.today().isoformat()} by normbench {__version__} "
        f"(`{study_command(studies, scale)}`{trained}).*"
    )
    return f"{heading}\n\n{line}\n{body}"


def study_command(studies: tuple[str, ...], scale: str) -> str:
    """The `normbench findings` command that trains STUDIES and rewrites their sections."""
    flag = {"full": "", "quick": " --quick", "smoke": " --smoke"}[scale]
    return f"normbench findings{flag} " + " ".join(f"--study {name}" for name in studies)


def training_walls(runs: Path) -> dict[str, float]:
    """Each study's wall time training, in seconds: the start to finish of every sweep record
    it left, summed (a study rerun after its design changed trained twice; a call that found
    its runs complete only reported, in seconds; a record that never finished counts none)."""
    walls = {}
    for study in STUDIES:
        paths = (runs / "sweeps").glob(f"findings-{study.name}-*.json")
        took = [_took(r) for r in map(sweep_record.read, paths) if r]
        if any(t is not None for t in took):
            walls[study.name] = sum(t for t in took if t is not None)
    return walls


STAMP = re.compile(r"^\*Section generated on .*?\(`([^`]*)`(?:, trained in ([^)]*))?\)\.\*$", re.M)


def stated_walls(sections: list[str]) -> set[tuple[str, float]]:
    """Each study's training, (name, seconds), as the document's sections state it on their
    first lines (``stamped``): a kept section may have trained in another run store, whose
    records the store at hand does not hold. The same time stated for a study by two sections
    (one that reads two studies) is one training, counted once."""
    walls: set[tuple[str, float]] = set()
    for section in sections:
        found = STAMP.search(section)
        if not found or not found.group(2):
            continue
        studies = re.findall(r"--study (\S+)", found.group(1))
        minutes = [60.0 * float(m) for m in re.findall(r"(\d+) min", found.group(2))]
        if len(studies) == len(minutes):
            walls.update(zip(studies, minutes, strict=True))
        else:  # a study without a time of its own: the section's time, once
            walls.add((" ".join(studies), sum(minutes)))
    return walls


def total_text(walls: set[tuple[str, float]]) -> str:
    """The training time the document's sections state, summed, for its header."""
    if not walls:
        return "no section states a training time"
    studies = len({name for name, _ in walls})
    count = f"{studies} {'study' if studies == 1 else 'studies'}"
    return (
        f"{sum(seconds for _, seconds in walls) / 60:.0f} min in all: the training each "
        f"section states, over {count}; a sweep stopped before its end is not counted"
    )


def _took(record: dict) -> float | None:
    """A record's start to finish in seconds; None unless both are ISO times of the same kind
    (a record is untrusted: a number, or a zone on one end only, is no time)."""
    try:
        started, finished = (datetime.fromisoformat(record.get(k)) for k in ("started", "finished"))
        return max(0.0, (finished - started).total_seconds())  # never "-0 min"
    except (TypeError, ValueError):
        return None


def write(
    runs: Path, out: Path, jobs: int, scale: str, console: Console, only: tuple[str, ...] = ()
) -> bool:
    """Run the studies (those ONLY names, else all), compute the sections that read only
    them and write the document, keeping every other section of the one already at OUT;
    False when a section could not be computed (its study's runs are missing or failed)."""
    run_studies(runs, jobs, scale, console, only)
    walls = training_walls(runs)
    ctx = Context(runs, scale, out.parent / "img")
    kept = kept_sections(out) if only else {}
    sections, complete = [], True
    for finding, studies in SECTIONS:
        key = section_key(finding)
        if only and not set(studies) <= set(only):
            command = study_command(studies, scale)
            console.print(
                f"kept section {key} as it was (`{command}` rewrites it)",
                soft_wrap=not console.is_terminal,
            )
            sections.append(
                marker(key)
                + "\n"
                + kept.get(
                    key, f"## {subject(studies)}\n\nNot computed yet: `{command}` computes it."
                )
            )
            continue
        try:
            sections.append(marker(key) + "\n" + stamped(finding(ctx), studies, scale, walls))
        except (KeyError, IndexError, ValueError, TypeError, OSError, UsageError) as err:
            complete = False
            sections.append(
                f"{marker(key)}\n## {subject(studies)}\n\nNot computed: {type(err).__name__}: "
                f"{err} (a study's runs are missing or failed)."
            )
    header = [
        "# Findings",
        "",
        "Generated by `normbench findings` (2-core CPU, "
        f"{jobs} worker processes), study by study: each section's first line says when, at "
        f"which scale and how long its study trained ({total_text(stated_walls(sections))}). "
        "Every number "
        "below comes from runs in "
        "the run store; every verdict is computed with the statistics of docs/statistics.md (alpha "
        "0.05, margin 0.01), not written. A registered claim (normbench/studies/registered/) is "
        "labelled by the rule its section states, and only when it was registered before its "
        "runs began (`normbench findings --check`); any other claim is exploratory. "
        "Parameter counts: every norm adds at most 2d parameters per unit except AdaLN "
        "(2d^2 + 2d: 8.3k at width 64 against 128 for LayerNorm), which only the suite runs, so "
        "no difference below but AdaLN's can come from capacity.",
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    return complete
