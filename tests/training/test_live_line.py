"""The live line of `normbench run` at 80 and 100 columns: the steps, loss, accuracy and speed
stay whole; the run id gives way first."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from normbench.training.progress import fitted_id, progress_bar

RUN_ID = "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c"


def live_line(width: int, run_id: str = RUN_ID) -> str:
    """The line as the trainer draws it at the end of a 3000-step run, at ``width`` columns."""
    out = StringIO()
    console = Console(file=out, width=width)
    progress = progress_bar(show=True)
    progress.columns[0].console = console  # the width it fits: this console's, not stderr's
    progress.add_task(run_id, total=3000, completed=3000, loss="2.345", val="0.312", speed="1234")
    console.print(progress.make_tasks_table(progress.tasks))
    return out.getvalue().rstrip("\n")


@pytest.mark.parametrize("width", [80, 100])
def test_the_live_line_keeps_steps_and_speed(width):
    line = live_line(width)
    assert len(line) <= width
    assert "3000/3000" in line and "loss 2.345" in line and "val acc 0.312" in line
    assert "1234 steps/s" in line and line.endswith("0:00:00")
    assert "…" in line and "5c3bb75c" in line  # shortened from the left: the hash stays


def test_a_wide_terminal_shows_the_whole_run_id():
    assert live_line(140).startswith(RUN_ID + " ")


def test_fitted_id_shortens_from_the_left_then_drops():
    assert fitted_id("cnn-bn-s0-abc", 20) == "cnn-bn-s0-abc"
    assert fitted_id("cnn-bn-s0-abc", 7) == "…s0-abc"
    assert fitted_id("cnn-bn-s0-abc", 4) == "…abc"
    assert fitted_id("cnn-bn-s0-abc", 3) == ""
