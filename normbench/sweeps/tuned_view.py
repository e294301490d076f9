"""What a tuned comparison prints (normbench.sweeps.tuned): its plan for ``--dry-run``, the
choices once tuning has ended, and the confirmation's verdicts on test, one line per group."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.text import Text

from normbench.report import tuning
from normbench.report.base import Method
from normbench.report.labels import label
from normbench.store.rundir import FINISHED, Rerun, RunDir
from normbench.sweeps import adaptive, halving
from normbench.sweeps import plan as planning
from normbench.sweeps.grid import Job, Sweep
from normbench.sweeps.tuned import Choice
from normbench.sweeps.tuned_plan import MAX_EXTENSIONS, TunedDesign, rung_jobs


def choices_table(name: str, state: dict):
    """What tuning chose, per group, as ``report --sweep NAME`` shows it (the same table,
    columns and names: normbench.report.tuning reads the state this sweep recorded)."""
    return tuning.parse(name, state).rich()


def edge_lines(choices: list[Choice]) -> list[str]:
    """One line per group whose choice sits at or beyond an edge of the grid."""
    return [f"at an edge: {c.group.label}: {c.edge}" for c in choices if c.edge]


def verdict_lines(
    tuned: TunedDesign,
    jobs: list[Job],
    runs_dir: Path,
    method: Method,
    choices: list[Choice] = (),
):
    """The confirmation's verdicts on test, one line per group: what a tuned comparison
    answers (``report --sweep NAME`` has the full tables). A group whose choice ends at an
    edge of the grid that no step beyond bounded (``choices``; tuning.unbracketed) says
    "unbracketed" in its line, and so does every line against it as the reference."""
    result = adaptive.look_at(jobs, runs_dir, method, tuple(tuned.space))  # on test
    open_groups = [set(c.group.label.split()) for c in choices if tuning.unbracketed(c.edge)]
    lines = []
    sections = result.sections if result else []
    for section in sections:
        table = section.tables["convergence"]
        against = "reference" if "diff_vs_reference" in table else "best"
        where = " ".join(  # what tells this section from the others (data.name=tokens)
            f"{k.removesuffix('.name')}={label(v)}"
            for k, v in section.setting.items()
            if label(v) != "-" and len({label(s.setting.get(k)) for s in sections}) > 1
        )
        keys = [k for k in section.keys if k not in tuned.space]
        reference = next(
            (_named(row, keys) for _, row in table.iterrows() if row["verdict"] == "reference"),
            None,
        )
        for _, row in table.iterrows():
            group = _named(row, keys)
            diff = row[f"diff_vs_{against}"]
            text = (
                f"{row['verdict']}"
                if row["verdict"] == "reference" or not math.isfinite(diff)
                else f"{row['verdict']} against the {against}: {diff:+.4g} "
                f"[{row['diff_ci_low']:.4g}, {row['diff_ci_high']:.4g}] test "
                f"{section.metric.label.replace('val ', '')}"
            )
            said = ""
            if _is_open(where, group, open_groups):
                said = ", unbracketed (its choice at an edge: widen the grid)"
            against_open = reference is not None and _is_open(where, reference, open_groups)
            if row["verdict"] != "reference" and against_open:
                text += f" (the {against}, {reference}, unbracketed: widen the grid)"
            lines.append(f"{where + ': ' if where else ''}{group or 'all'}, tuned{said}: {text}")
    return lines


def _named(row, keys: list[str]) -> str:
    """A convergence row's group as a verdict line names it (``norm=dyt``)."""
    return " ".join(f"{k.removesuffix('.name')}={label(row[k])}" for k in keys)


def _is_open(where: str, group: str, open_groups: list[set[str]]) -> bool:
    """Whether the group a line names (its section's setting and its own keys) is one whose
    choice is unbracketed (each of ``open_groups``: a group label's KEY=VALUE items)."""
    items = set(f"{where} {group}".split())
    return any(found <= items for found in open_groups)


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def print_plan(
    console: Console,
    tuned: TunedDesign,
    runs_dir: Path,
    rerun: Rerun,
    rounds: adaptive.SequentialDesign | None = None,
) -> None:
    """``--dry-run`` of a tuned comparison: both phases, the budget, and the rounds
    ``--until-decided`` may add to the confirmation."""
    seeds = len(tuned.tuning_seeds)
    halves = tuned.rung_count > 1
    how = f"successive halving (eta {tuned.eta})" if halves else "the full grid"
    console.print(
        Text(
            f"tuned sweep {tuned.grid.name}: {len(tuned.groups)} groups; tuning "
            f"{', '.join(tuned.space)} on seeds {', '.join(map(str, tuned.tuning_seeds))} "
            f"by {how}, chosen on validation loss",
            style="bold",
        ),
        soft_wrap=not console.is_terminal,
    )
    at = [tuned.rungs_at(steps) for steps in tuned.step_budgets]
    rungs = "; ".join(
        f"rung {i + 1}: {r.keep} candidate(s) x {'/'.join(str(a[i].steps) for a in at)} steps"
        for i, r in enumerate(at[-1])
    )
    why = (
        "each rung's schedule, warm-up included, compressed to its steps"
        if halves
        else f"halving would train more than {halving.MAX_SHARE:.0%} of the full grid's steps"
    )
    beyond = (
        "; a choice at an edge of a key's values is tried one step beyond at the full budget, "
        f"again from each new choice, up to {MAX_EXTENSIONS} steps (then: widen the grid)"
        if tuned.extend
        else ""
    )
    console.print(
        f"phase 1, tuning: {tuned.trials} trials per group x {seeds} seed(s); {rungs} "
        f"({why}){beyond}",
        soft_wrap=not console.is_terminal,
    )
    total = full = 0
    for group in tuned.groups:
        steps, grid_steps = tuned.steps_of(group), tuned.full_grid_steps(group)
        total, full = total + steps, full + grid_steps
        sampled = f" (sampled from {group.space})" if group.space > len(group.candidates) else ""
        if math.isinf(group.space):
            sampled = " (drawn by Optuna's QMC sampler from an interval)"
        if group.space < 2:
            console.print(
                f"  {group.label}: takes none of the tuned keys: confirmed at its only value",
                soft_wrap=not console.is_terminal,
            )
            continue
        keys = ", ".join(group.keys)
        console.print(
            f"  {group.label}: tunes {keys}; {len(group.candidates)} candidates{sampled}: "
            f"{' | '.join(' '.join(c) for c in group.candidates)}; {steps:,} steps",
            soft_wrap=not console.is_terminal,
        )
    first = [
        j
        for g in tuned.groups
        if tuned.schedule_of(g)
        for js in rung_jobs(tuned, g, g.candidates, tuned.schedule_of(g)[0].steps).values()
        for j in js
    ]
    done = len(first) - len(planning.plan(Sweep("rung", None, first), runs_dir, rerun).todo)
    console.print(
        f"  budget: {total:,} steps of tuning in all (every candidate at the full budget: "
        f"{full:,}); rung 1: {len(first)} runs, {done} already complete",
        soft_wrap=not console.is_terminal,
    )
    earlier = earlier_record(tuned.grid.name, runs_dir)
    if earlier:
        console.print(f"  {earlier}", soft_wrap=True)
    for note in tuned.notes:
        console.print(Text(note, style="bold red"), soft_wrap=not console.is_terminal)
    runs = sum(len(g.jobs) for g in tuned.groups)
    seeds_text = sorted({s for g in tuned.groups for s in g.seeds})
    console.print(
        f"phase 2, confirmation: each group at its chosen value on seeds "
        f"{', '.join(map(str, seeds_text))} (fresh, paired across groups): {runs} runs of "
        f"{'/'.join(map(str, tuned.step_budgets))} steps; verdicts on test from these runs only",
        soft_wrap=not console.is_terminal,
    )
    if rounds is not None:
        looks = ", ".join(str(round(f * rounds.max_seeds)) for f in rounds.fractions)
        console.print(
            f"  until decided: one more seed per open group and round, up to "
            f"{rounds.max_seeds} seeds; {rounds.looks} possible looks (at {looks} seeds per "
            f"group), each on test at its level ({rounds.at(1).level:.2g} "
            "at the first; docs/statistics.md)",
            soft_wrap=not console.is_terminal,
        )


def earlier_record(name: str, runs_dir: Path) -> str | None:
    """What the last record of this sweep holds, for ``--dry-run`` (which plans rung 1 alone:
    later rungs depend on what it ranks): its phase, and of the tuning and confirmation runs it
    lists, how many are finished. None when the sweep has no record yet."""
    from normbench.core.errors import UsageError
    from normbench.store.records import latest_record
    from normbench.store.sweep_record import tuning_runs as tuning_runs_of

    try:
        record = latest_record(runs_dir, name)
    except UsageError:
        return None
    tuning = record.get("tuning") if isinstance(record.get("tuning"), dict) else {}
    tuning_runs = tuning_runs_of(record)
    confirmation = [r["run_id"] for r in record["runs"]]

    def finished(ids: list[str]) -> int:
        return sum(
            (RunDir(runs_dir, rid).read_meta() or {}).get("status") in FINISHED for rid in ids
        )

    return (
        f"this sweep's last record: phase {tuning.get('phase', 'unknown')}; tuning "
        f"{finished(tuning_runs)} of {len(tuning_runs)} runs finished, confirmation "
        f"{finished(confirmation)} of {len(confirmation)} (a rerun keeps finished runs)"
    )
