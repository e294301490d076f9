"""The live line of `normbench run` at 80 and 100 columns: the steps, loss, accuracy and speed
stay whole; the run id gives way first."""

from __future__ import annotations

import math
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from normbench.core.text import fitted_id
from normbench.training.progress import LiveLine, progress_bar

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
    assert "3000/3000" in line and "loss  2.345" in line and "val acc 0.312" in line
    assert " 1234 steps/s" in line and line.endswith("0:00:00")
    assert "…" in line and "5c3bb75c" in line  # shortened from the left: the hash stays


def test_the_run_id_shown_at_80_and_100_columns_is_what_docs_running_says():
    # newcomer friction: the doc promised the seed and hash at 80 columns; the hash alone fits
    assert live_line(100).startswith("…pre-fp32-b32-s0-5c3bb75c ")
    assert live_line(80).startswith("…5c3bb75c ")
    out = StringIO()
    console = Console(file=out, width=80)
    progress = progress_bar(show=True)
    progress.columns[0].console = console
    progress.add_task(RUN_ID, total=10000, completed=0, loss="-", val="-", speed="-")
    console.print(progress.make_tasks_table(progress.tasks))
    assert "5c3bb75c" not in out.getvalue()  # 10,000 steps at 80 columns: no run id
    running = (Path(__file__).parents[2] / "docs" / "running.md").read_text()
    said = " ".join(running.split())
    assert "at 100 columns `…pre-fp32-b32-s0-5c3bb75c`" in said
    assert "at 80 columns only the hash, `…5c3bb75c`" in said
    assert "with 10,000 steps or more at 80 columns not even that" in said


def test_a_wide_terminal_shows_the_whole_run_id():
    assert live_line(140).startswith(RUN_ID + " ")


def test_fitted_id_shortens_from_the_left_by_whole_parts_then_drops():
    assert fitted_id("cnn-bn-s0-abc", 20) == "cnn-bn-s0-abc"
    assert fitted_id("cnn-bn-s0-abc", 7) == "…s0-abc"
    assert fitted_id("cnn-bn-s0-abc", 6) == "…abc"  # never "…0-abc": no part cut
    assert fitted_id("cnn-bn-s0-abc", 4) == "…abc"
    assert fitted_id("cnn-bn-s0-abc", 3) == ""


def drawn(line: LiveLine, width: int) -> str:
    out = StringIO()
    console = Console(file=out, width=width)
    line.progress.columns[0].console = console
    console.print(line.progress.make_tasks_table(line.progress.tasks))
    return out.getvalue().rstrip("\n")


ROW = {"train_loss": 2.3456, "val_acc": math.nan, "val_loss": math.nan}


@pytest.mark.parametrize("width", [80, 100])
def test_the_live_line_keeps_the_last_evaluation_and_never_shifts(width):
    # issue 50, frictions 2 and 5: `val acc -` between evaluations, a line that shifted when a
    # value appeared, a run id cut in the middle of a part
    line = LiveLine(RUN_ID, total=3000, first=0, next_byte=False)
    with line.shown(show=False):
        before = drawn(line, width)
        line.update(10, ROW, 1.0, evaluated=False)
        logged = drawn(line, width)
        line.update(20, {**ROW, "val_acc": 0.4567}, 2.0, evaluated=True)
        evaluated = drawn(line, width)
        line.update(30, ROW, 3.0, evaluated=False)
        after = drawn(line, width)
    assert "val acc     -" in logged and "val acc 0.457" in evaluated and "val acc 0.457" in after
    assert len({len(before), len(logged), len(evaluated), len(after)}) == 1
    assert all(len(text) <= width for text in (before, after))
    assert [t.index("loss") for t in (before, after)] == [before.index("loss")] * 2
    shown_id = after.split(" ")[0]
    assert RUN_ID.endswith(shown_id.removeprefix("…")) and shown_id[1] != "-"
    assert RUN_ID.split("-").count(shown_id.removeprefix("…").split("-")[0]) == 1


def test_the_live_line_of_a_next_byte_task_shows_bits_per_byte():
    line = LiveLine(RUN_ID, total=20, first=0, next_byte=True)
    with line.shown(show=False):
        line.update(10, {**ROW, "val_acc": 0.2, "val_bpb": 6.7712}, 1.0, evaluated=True)
        text = drawn(line, 100)
    assert "val bpb 6.771" in text and "val acc" not in text
