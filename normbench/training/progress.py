"""What a run draws on the terminal while it trains: the live line (run id, bar, steps, loss,
validation accuracy, speed, elapsed) and the spinner while a first run generates its data.

Apart from the loop (normbench.training.trainer) because it is display only: nothing here
decides a run's numbers, so it is not among the modules the source hash covers
(normbench.store.provenance), and the width arithmetic of the line can be read and tested
without a model.
"""

from __future__ import annotations

import contextlib
import math

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

from normbench.core.text import fitted_id
from normbench.data.base import cache_dir
from normbench.data.generated import will_generate

BAR_WIDTH = 12
# Every value in a field of fixed width, right-aligned, so the line never shifts when a value
# appears or grows (``-`` until the first log row or evaluation).
LOSS_WIDTH = 6  # 12.345, nan
VAL_WIDTH = 5  # 0.912 (accuracy), 4.123 (bits per byte)
SPEED_WIDTH = 5  # up to 99999 steps/s


def progress_bar(show: bool, metric: str = "acc") -> Progress:
    """One live line on stderr: run id, bar, steps, loss, the last validation value (``val
    acc``, or ``val bpb`` on a next-byte task, where every result is in bits per byte), speed,
    elapsed. At 80 columns the steps and speed stay whole; the run id is shortened first
    (RunIdColumn). ``show=False``: a disabled line that draws nothing."""
    console = Console(stderr=True)
    return Progress(
        RunIdColumn(console),
        BarColumn(bar_width=BAR_WIDTH),
        MofNCompleteColumn(),
        TextColumn(f"loss {{task.fields[loss]:>{LOSS_WIDTH}}}"),
        TextColumn(f"val {metric} {{task.fields[val]:>{VAL_WIDTH}}}"),
        TextColumn(f"{{task.fields[speed]:>{SPEED_WIDTH}}} steps/s"),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
    )


class LiveLine:
    """The live line of one run, fed the trainer's log rows: the loss of the last row, the
    validation value of the last evaluation (kept between evaluations), the steps per second
    of training time."""

    def __init__(self, run_id: str, total: int, first: int, next_byte: bool):
        self.run_id, self.total, self.first = run_id, total, first
        self.metric = "bpb" if next_byte else "acc"  # what the run's results are in

    @contextlib.contextmanager
    def shown(self, show: bool):
        """The line on stderr while the block runs (``show=False``: drawn nowhere). Ctrl-C
        erases it: its last frame, cut mid-update with the terminal's ``^C`` in it, would
        stand above the line that says where the run stopped (`normbench run`'s)."""
        with progress_bar(show, self.metric) as self.progress:
            self.task = self.progress.add_task(
                self.run_id, total=self.total, completed=self.first, loss="-", val="-", speed="-"
            )
            try:
                yield self
            except KeyboardInterrupt:
                self.progress.live.transient = True  # read when the line stops, just below
                raise

    def update(self, step: int, row: dict, train_s: float, evaluated: bool) -> None:
        shown = {"loss": f"{row['train_loss']:.3f}", "speed": f"{step / train_s:.0f}"}
        if evaluated:
            value = row[f"val_{self.metric}"]
            shown["val"] = "-" if math.isnan(value) else f"{value:.3f}"
        self.progress.update(self.task, completed=step, **shown)


def generating_note(data: dict, show: bool) -> contextlib.AbstractContextManager:
    """A spinner while a first run on this machine generates its data set (seconds, once;
    otherwise the screen stays blank)."""
    if not (show and will_generate(data)):
        return contextlib.nullcontext()
    message = f"generating {data['name']} once, cached in {cache_dir()}"
    return Console(stderr=True).status(message)


class RunIdColumn(ProgressColumn):
    """The run id in what the line leaves of the terminal's width, shortened from the left by
    whole parts (``…pre-fp32-b32-s0-35545803`` at 100 columns, the hash alone, ``…35545803``,
    at 80), dropped when not even the hash fits: the steps and speed come first."""

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
        len("loss ") + max(LOSS_WIDTH, len(task.fields["loss"])),
        len("val acc ") + max(VAL_WIDTH, len(task.fields["val"])),
        max(SPEED_WIDTH, len(task.fields["speed"])) + len(" steps/s"),
        len("0:00:00"),
    ]
    return sum(cells) + len(cells)  # the run id's separator included
