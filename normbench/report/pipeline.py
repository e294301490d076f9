"""One path from a runs directory to a report. `normbench report`, ``normbench.api.report``
and a sweep's own looks (normbench.sweeps.adaptive.look_at) all call ``build_report``, so each
rule about which runs a verdict reads, and on which split, is written here once (the studies
of `normbench findings`, which select subsets of their sweeps' runs themselves, hand them to
``given``):

- a whole directory's report leaves the tuning runs of tuned sweeps out of its verdicts
  (catalog.select_runs, ``verdicts=True``), with a note;
- ``--sweep NAME`` honours the sequential design the sweep recorded, and the ``--reference``
  it named unless the request names one;
- a tuned comparison's verdicts are on test (its values were chosen on validation of the
  tuning seeds) and group by none of its tuned keys; a tuned sweep stopped before any
  confirmation run is refused with the phase it stopped in;
- ``--best-over`` verdicts are on test and say the choice was made on the same runs
  (report.sections.build);
- ``--scaling KEY`` fits the selected runs as a ladder along KEY (report.scaling_section),
  whatever sweep made them, against the request's (or the sweep's) reference; ``--sweep NAME``
  of a ladder sweep does so along the ladder's own key (a note where it cannot); either way
  each rung is a section of its own, with its own verdicts (report.sections.build).

The caller renders what comes back; warnings go to its ``warn`` as they arise, with their kind
(``selection``, ``tuning``, ``across``, ``scaling``, ``diagnostics``), so that a terminal can
colour them and a library can raise them as Python warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.report import sections
from normbench.report.base import Method, Report
from normbench.report.grouping import is_setting
from normbench.report.labels import labels
from normbench.report.tuning import Tuning, tuning_of
from normbench.store import catalog, records
from normbench.store.catalog import Selection
from normbench.store.scan import Scan

Warn = Callable[[str, str], None]  # (message, kind)


def _quiet(message: str, kind: str) -> None:
    """The default ``warn``: the warnings stay in the report's own lists."""


@dataclass(frozen=True)
class Request:
    """What a report is asked for: the runs (a directory narrowed by sweep, filters and tag,
    or exactly ``run_ids``), the grouping, the method, and what is attached to it."""

    runs_dir: Path | None  # None: runs selected by the caller (``given``)
    filters: tuple[str, ...] = ()
    sweep: str | None = None
    tag: str | None = None
    run_ids: tuple[str, ...] | None = None  # exactly these runs: a sweep's look
    by: tuple[str, ...] = ()
    best_over: str | None = None
    method: Method = field(default_factory=Method)
    tuned: tuple[str, ...] = ()  # a tuned comparison's keys, where no record names them (a look)
    across: tuple[str, ...] = ()
    profile: str = "steps"
    diagnostics: bool = False
    scaling: str | None = None  # --scaling KEY: the size axis of a ladder
    target: float | None = None  # --target VALUE: the cost table's time and FLOPs to target
    # Read each timed run's metrics for them (about 10 ms a run): not for a report that shows
    # another table alone (--table convergence)
    to_target: bool = True


@dataclass
class Selected:
    """The runs of a request, the method their verdicts use, and the tuned section."""

    selection: Selection
    method: Method
    tuning: Tuning | None
    tuned: tuple[str, ...]
    commands: list = field(default_factory=list)
    ladder: str | None = None  # the size axis a ladder sweep's record names


@dataclass
class Built:
    """A report with what it was built from."""

    report: Report
    tuning: Tuning | None
    commands: list


def select(request: Request, scanning: Scan | None = None, warn: Warn = _quiet) -> Selected:
    """The runs a request's verdicts read, and the method they are read with."""
    catalog.check_grouping(list(request.by), request.best_over)
    if request.run_ids is not None:
        loaded = catalog.load_runs(request.runs_dir, scanning)
        selection, design, commands = catalog.select(loaded, [], list(request.run_ids)), {}, []
    else:
        selection, design, commands = catalog.select_runs(
            request.runs_dir,
            list(request.filters),
            request.sweep,
            request.tag,
            scanning,
            verdicts=True,
        )
    for warning in selection.warnings:
        warn(warning, "selection")
    if request.method.reference:  # named here: it wins over the one the sweep named
        design.pop("reference", None)
    elif "reference" in design:  # its errors say where it came from: none was typed
        design["reference_origin"] = f"--sweep {request.sweep}: its recorded reference"
    tuning = tuning_of(request.runs_dir, request.sweep)
    if tuning and tuning.phase != "done" and selection.runs.empty:
        raise UsageError(
            f"--sweep {request.sweep}: a tuned comparison stopped in its {tuning.phase} "
            "phase, with no confirmation run yet; run the same sweep command again to "
            "continue it"
        )
    if selection.runs.empty and not selection.warnings:
        refuse_empty(request.runs_dir)
    if tuning:  # unequal budgets, choices at an edge: said in every output
        selection.warnings.extend(tuning.notes)
        for note in tuning.notes:
            warn(note, "tuning")
    ladder = records.ladder_key(request.runs_dir, request.sweep) if request.sweep else None
    if ladder and not request.method.reference and "reference" not in design:
        design |= ladder_reference(request, selection, warn)
    selected = _resolved(selection, request, design, tuning, commands)
    selected.ladder = ladder
    return selected


def ladder_reference(request: Request, selection: Selection, warn: Warn) -> dict:
    """A ladder named no reference: its verdicts per rung and its scaling section compare
    with the group it lists first (the preset's first norm, not the first by name), said in a
    note; nothing (the report's own default) when that group does not name one of the groups
    compared here (filtered out, or its key held fixed, a setting, or left out of ``--by``)."""
    listed = records.listed_reference(request.runs_dir, request.sweep)
    runs = selection.runs
    for item in listed:
        key, _, value = item.partition("=")
        (column,) = catalog.as_columns([key], runs)
        shown = set(labels(runs[column])) if column in runs else set()
        grouped = column in request.by or key in request.by if request.by else True
        if value not in shown or len(shown) < 2 or is_setting(column) or not grouped:
            return {}
    if not listed:
        return {}
    note = (
        f"no --reference named: each rung's verdicts and the scaling section compare with "
        f"{' '.join(listed)}, the group the ladder lists first (named before looking); name "
        "another with --reference"
    )
    selection.warnings.append(note)
    warn(note, "selection")
    origin = f"--sweep {request.sweep}: the group its ladder lists first,"
    return {"reference": listed, "reference_origin": origin}


def refuse_empty(runs_dir: Path) -> None:
    """A runs directory with no runs at all is named, with what writes runs there: "no runs
    match" sent a newcomer looking at filters they never gave. Read again only when nothing
    was selected (the index makes it quick)."""
    if catalog.load_runs(runs_dir).runs.empty:
        raise UsageError(
            f"runs directory {runs_dir} has no runs; normbench run or normbench sweep writes "
            f"runs there (--runs-dir {runs_dir}), or name the directory that has them"
        )


def given(selection: Selection, request: Request) -> Selected:
    """Runs a caller selected itself (a study's subsets of its sweep), under the request's
    rules, for ``verdicts``."""
    return _resolved(selection, request, {}, None, [])


def _resolved(
    selection: Selection, request: Request, design: dict, tuning: Tuning | None, commands: list
) -> Selected:
    """The method the verdicts use: the request's, with the sweep's recorded design, on test
    when the runs are a tuned comparison's (its values were chosen on validation)."""
    tuned = tuning.keys if tuning else request.tuned
    if tuning is not None or request.tuned:
        design = {**design, "test": True}
    return Selected(selection, request.method.with_(**design), tuning, tuned, commands)


def verdicts(request: Request, selected: Selected, warn: Warn = _quiet) -> Report:
    """The report of selected runs: its sections, and what the request attaches."""
    runs = selected.selection.runs
    by = catalog.as_columns(list(request.by), runs) if request.by else None
    best_over = request.best_over
    if best_over and not runs.empty:
        best_over = catalog.best_over_column(best_over, runs)
    key = request.scaling or selected.ladder  # a ladder's size: a section, so verdicts, per rung
    result = sections.build(selected.selection, by, best_over, selected.method, selected.tuned, key)
    if request.across:
        from normbench.report.across import across

        before = len(result.warnings)
        result.across = across(result, list(request.across), request.profile)
        for warning in result.warnings[before:]:  # the workloads left out, named
            warn(warning, "across")
    if key is not None:
        from normbench.report.scaling_section import build as scaling

        try:  # ``by``: --by's keys as the runs' columns (``norm`` is ``norm.name``)
            result.scaling = scaling(runs, key, selected.method, by, selected.tuned)
        except UsageError as err:
            if request.scaling is not None:  # asked for: refused; a ladder's own: a note
                raise
            note = f"the ladder's scaling section (--scaling {key}) was not computed: {err}"
            result.warnings.append(note)
            warn(note, "scaling")
        for note in result.scaling.notes if result.scaling is not None else []:
            warn(note, "scaling")
    if request.runs_dir is not None and request.to_target:  # the cost tables' to target
        from normbench.report.cost_target import attach_to_target

        before = len(result.warnings)
        attach_to_target(result, request.runs_dir, selected.method, request.target)
        for warning in result.warnings[before:]:
            warn(warning, "cost")
        if selected.tuning is not None:  # the tuning runs' cost, summed into the chosen's
            from normbench.report.cost_tuning import attach_tuning_cost

            attach_tuning_cost(result, request.runs_dir, selected.tuning.sweep)
    if request.diagnostics:
        from normbench.report.diagnostics import attach_diagnostics

        before = len(result.warnings)
        try:
            attach_diagnostics(result, request.runs_dir)
        finally:  # the runs whose diagnostics were skipped, named even when none remain
            for warning in result.warnings[before:]:
                warn(warning, "diagnostics")
    return result


def build_report(request: Request, scanning: Scan | None = None, warn: Warn = _quiet) -> Built:
    """The report a request asks for: ``select``, then ``verdicts``."""
    selected = select(request, scanning, warn)
    return Built(verdicts(request, selected, warn), selected.tuning, selected.commands)
