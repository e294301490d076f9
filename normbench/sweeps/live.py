"""A sweep on screen: one live view of counts, ETA and each failure as it happens, and the
summary table at its end.
"""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from normbench.sweeps.grid import Job, Sweep


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
