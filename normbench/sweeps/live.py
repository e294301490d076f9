"""A sweep on screen: what it will do before it starts (a bare ``normbench sweep`` asks
first), one live view of counts, ETA and each failure as it happens, and the summary table at
its end.
"""

from __future__ import annotations

import re
import shlex
import time
from collections import Counter
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import YAML_LIMIT, read_text
from normbench.sweeps.grid import (
    CHECKED_FIRST,
    MAX_RUNS,
    Job,
    Sweep,
    compose_jobs,
    grid_overrides,
)
from normbench.sweeps.presets import preset_path

# A preset's header states its measured time so: "5 minutes on 2 cores", "about 21 minutes of
# training on 2 cores".
MEASURED = re.compile(r"(?:about |~)?\d+(?:\.\d+)? (?:seconds|minutes|hours)[^.;]*? on \d+ cores?")


# ---------------------------------------------------------------------------- before it starts
def print_no_preset_note(console: Console, overrides: list[str]) -> None:
    """Overrides without a preset are a grid of their own: say so, and how to add them to the
    default preset instead (``normbench sweep threads=1`` is one default run, not 42). The
    command is suggested only when its grid is accepted (composed here, every combination
    checked, nothing planned; up to CHECKED_FIRST of them): overrides the default preset
    refuses (``batch_size=8`` below its ghost batches) get the reason and `normbench list`.
    On a terminal the prose wraps at its width and the command stands on a line of its own
    (copied whole); piped, it is one line."""
    from normbench.experiment.options import command_line_dirs
    from normbench.sweeps.presets import DEFAULT_PRESET

    dirs = [f"--config-dir {shlex.quote(str(d))}" for d in command_line_dirs()]
    typed = [shlex.quote(override) for override in overrides]  # seed=range(3) needs quotes
    command = " ".join(["normbench sweep", *dirs, DEFAULT_PRESET, *typed])
    try:
        _, jobs = grid_overrides(DEFAULT_PRESET, list(overrides), MAX_RUNS)
        if len(jobs) > CHECKED_FIRST:  # too many to check here: named, not suggested
            raise UsageError(f"{len(jobs)} combinations, more than are checked before a sweep")
        list(compose_jobs(jobs))
    except UsageError as err:
        reason = str(err)
        if reason.startswith("job "):  # "job 46 of 150 (overrides): why": the why alone
            reason = reason.partition("): ")[2] or reason
        note = (
            "no preset named: the grid is these overrides alone, over config.yaml's defaults. "
            f"The default preset, {DEFAULT_PRESET}, with them is not suggested ({reason}); "
            "`normbench list` shows the presets"
        )
        console.print(note, soft_wrap=not console.is_terminal, highlight=False)
        return
    before = ":\n  " if console.is_terminal else ": "
    console.print(
        "no preset named: the grid is these overrides alone, over config.yaml's defaults; to "
        f"add them to the default preset{before}{command}",
        soft_wrap=not console.is_terminal,
        highlight=False,
    )


HEADER_PARTS = ("Design:", "Run:", "Read:")  # after the question, in every preset's header


def preset_header(preset: str) -> str:
    """The comment a preset file opens with, as one paragraph: its question, then ``Design:``,
    ``Run:`` (the command and what it took) and ``Read:`` (how to read it, what it decides)."""
    lines = []
    try:  # by the trusted reader, as load_preset reads it: presets are shared files
        text = read_text(preset_path(preset), YAML_LIMIT)
    except (StoreError, OSError):
        return ""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def preset_question(preset: str) -> str:
    """The question a preset answers: its header up to ``Design:``."""
    return preset_header(preset).partition(f" {HEADER_PARTS[0]}")[0]


def estimate(preset: str, sweep: Sweep, todo: list[Job]) -> str:
    """How long the runs to train take: the preset's own measurement scaled to the runs left,
    and the steps they train (a grid has no other estimate before its first run ends)."""
    steps = sum(job.cfg["train"]["max_steps"] or 0 for job in todo)
    work = f"{len(todo)} runs to train, {steps:,} steps"
    measured = MEASURED.search(preset_header(preset))
    if not measured:
        return f"{work}; no measured time in the preset's header"
    share = "" if len(todo) == len(sweep.jobs) else f" for all {len(sweep.jobs)} runs"
    return f"{work}; the preset measured {measured.group(0)}{share}"


def confirm_start(console: Console, preset: str, sweep: Sweep, todo: list[Job]) -> bool:
    """A bare ``normbench sweep``: the preset's question and the estimate, then, on a terminal,
    a question (a newcomer trying the command should not start minutes of training unasked).
    Piped, it only says what it starts."""
    import typer

    console.print(
        f"{Path(preset).stem}: {preset_question(preset)}",
        soft_wrap=not console.is_terminal,
        highlight=False,
    )
    console.print(estimate(preset, sweep, todo), soft_wrap=not console.is_terminal, highlight=False)
    if not todo or not interactive():
        return True
    if typer.confirm("start it? (--yes skips this question)", default=True):
        return True
    console.print("not started; nothing written")
    return False


def interactive() -> bool:
    """Someone at a terminal, who can answer a question (not a pipe, a script or a job)."""
    import sys

    return sys.stdin.isatty() and sys.stdout.isatty()


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
        trains = {job.run_id for job in todo}
        self.kept = {job.run_id for job in sweep.jobs} - trains  # finished before this round
        self.skipped = len(sweep.jobs) - len(todo)
        self.pending: set[str] = set()
        self.running: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.results: dict[str, dict] = {}
        self.start = time.perf_counter()
        self.first_start: float | None = None  # the first run's start: the ETA's clock
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
        self.first_start = self.first_start or time.perf_counter()
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
            self.console.print(
                Text(f"{status} {rid}{reason}", style=style), soft_wrap=not self.console.is_terminal
            )
        self.live.refresh()

    def render(self) -> Group:
        """The bar and one line of counts that add up to the runs to train: done, failed,
        pending, running, failed, diverged, any other end, and ``remaining`` (not started);
        the ETA from the rate runs finished since the first one started (worker start-up and
        runs another process had finished are not part of it). Fits the console's width."""
        now = time.perf_counter()
        elapsed = now - self.start
        started = self.first_start or self.start
        trained = self.finished - self.counts["skipped"]
        left = self.total - self.finished
        eta = f"{(now - started) / trained * left:.0f} s" if trained and left else "-"
        other = self.finished - sum(self.counts[s] for s in ("complete", "failed", "diverged"))
        remaining = left - len(self.running) - len(self.pending)
        cells = [
            ("done", self.counts["complete"], "bold"),
            *((("pending", len(self.pending), "bold"),) if self.pending else ()),
            ("running", len(self.running), "bold"),
            ("failed", self.counts["failed"], "bold red"),
            ("diverged", self.counts["diverged"], "bold yellow"),
            *((("other", other, "bold"),) if other else ()),
            ("remaining", remaining, "bold"),
            ("ETA", eta, "bold"),
            ("elapsed", f"{elapsed:.0f} s", "bold"),
        ]
        counts = counts_line(cells, self.console.width)
        runs = f"{self.finished}/{self.total} runs" + (
            f" ({self.skipped} already complete)" if self.skipped else ""
        )
        progress = Table.grid(padding=(0, 1))
        bar = max(10, min(40, self.console.width - len(runs) - 1))
        progress.add_row(
            ProgressBar(total=max(1, self.total), completed=self.finished, width=bar), runs
        )
        if self.title:
            return Group(Text(self.title, style="bold"), progress, counts)
        return Group(progress, counts)


def counts_line(cells: list[tuple[str, object, str]], width: int) -> Text:
    """``done 4  failed 0  ...`` in ``width`` columns: two spaces between cells, one when that
    is too wide, then the labels' short forms (an 80-column terminal keeps every number)."""
    short = {"diverged": "div", "running": "run", "remaining": "left", "elapsed": "time"}
    for gap, labels in (("  ", {}), (" ", {}), (" ", short)):
        text = Text(gap.join(f"{labels.get(k, k)} {v}" for k, v, _ in cells))
        if len(text) <= width:
            break
    line = Text()
    for index, (label, value, style) in enumerate(cells):
        line.append(gap * (index > 0))
        line.append(f"{labels.get(label, label)} ", style)
        line.append(str(value))
    return line


def summary_table(sweep: Sweep, views: list[LiveView]) -> Table:
    """The end of a sweep: how many runs ended how, and why each failure failed."""
    table = Table(title=f"sweep {sweep.name}", title_justify="left", min_width=40)
    table.add_column("status")
    table.add_column("runs", justify="right")
    # finished before the sweep started: kept by some round and trained by none (a later
    # round may show the runs of an earlier one as already there)
    trained = {rid for view in views for rid in view.results}
    kept = set().union(*(view.kept for view in views)) - trained
    if kept:
        table.add_row("already complete", str(len(kept)))
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
