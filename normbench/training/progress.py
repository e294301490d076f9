"""What a run draws on the terminal while it trains: the live line (run id, bar, steps, loss,
validation accuracy, speed, elapsed) and the spinner while a first run generates its data.

Apart from the loop (normbench.training.trainer) because it is display only: nothing here
decides a run's numbers, so it is not among the modules the source hash covers
(normbench.store.provenance), and the width arithmetic of the line can be read and tested
without a model.
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from normbench.data.base import cache_dir
from normbench.data.generated import will_generate

BAR_WIDTH = 12


def progress_bar(show: bool) -> Progress:
    """One live line on stderr: run id, bar, steps, loss, validation accuracy, speed, elapsed.
    At 80 columns the steps and speed stay whole; the run id is shortened first (RunIdColumn).
    ``show=False``: a disabled line that draws nothing."""
    console = Console(stderr=True)
    return Progress(
        RunIdColumn(console),
        BarColumn(bar_width=BAR_WIDTH),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("val acc {task.fields[val]}"),
        TextColumn("{task.fields[speed]} steps/s"),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
    )


def generating_note(data: dict, show: bool) -> contextlib.AbstractContextManager:
    """A spinner while a first run on this machine generates its data set (seconds, once;
    otherwise the screen stays blank)."""
    if not (show and will_generate(data)):
        return contextlib.nullcontext()
    message = f"generating {data['name']} once, cached in {cache_dir()}"
    return Console(stderr=True).status(message)


class RunIdColumn(ProgressColumn):
    """The run id in what the line leaves of the terminal's width, shortened from the left
    (``…-s0-35545803``: the seed and hash that tell runs apart), dropped when not even the hash
    fits: the steps and speed come first."""

    def __init__(self, console: Console):
        super().__init__()
        self.console = console

    def render(self, task: Task) -> Text:
        return Text(fitted_id(task.description, self.console.width - line_width(task)), "bold")


def line_width(task: Task) -> int:
    """The width of everything on the live line but the run id (one space between columns)."""
    total = len(str(int(task.total or 0)))
    cells = [
        BAR_WIDTH,
        2 * total + 1,  # 3000/3000
        len(f"loss {task.fields['loss']}"),
        len(f"val acc {task.fields['val']}"),
        len(f"{task.fields['speed']} steps/s"),
        len("0:00:00"),
    ]
    return sum(cells) + len(cells)  # the run id's separator included


def fitted_id(run_id: str, room: int) -> str:
    """``run_id`` in ``room`` characters: whole, or its end after an ellipsis (at least the
    hash), or nothing."""
    if len(run_id) <= room:
        return run_id
    if room < 1 + len(run_id.rsplit("-", 1)[-1]):
        return ""
    return "…" + run_id[len(run_id) - room + 1 :]
