"""The sweep's live view: its counts add up to the runs to train, its ETA runs from the first
run's start, and it fits 80 and 100 columns with every number whole."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from normbench.sweeps import live
from normbench.sweeps.grid import Job, Sweep


def view_of(total: int, width: int, skipped: int = 0) -> live.LiveView:
    jobs = [
        Job([f"seed={i}"], {}, f"cnn-batchnorm-pre-fp32-b32-s{i}-{i:08x}") for i in range(total)
    ]
    sweep = Sweep("grid", None, jobs, ["seed"], total)
    console = Console(file=io.StringIO(), width=width)
    return live.LiveView(console, sweep, jobs[skipped:])


def frame(view: live.LiveView) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=view.console.width).print(view.render())
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100])
def test_every_number_fits_and_the_counts_add_up(width, monkeypatch):
    view = view_of(1200, width, skipped=100)
    view.started("r1")
    assert view.first_start is not None
    # made at 100 s, the first run started at 110 (worker start-up is no part of the ETA),
    # drawn at 130
    view.start, view.first_start = 100.0, 110.0
    monkeypatch.setattr(live.time, "perf_counter", lambda: 130.0)
    view.pending |= {"a", "b", "c"}
    view.running |= {"r2", "r3"}
    view.counts.update(complete=380, failed=10, diverged=10)
    bar, counts = frame(view)
    assert all(len(line) <= width for line in (bar, counts)), (bar, counts)
    assert bar.endswith("400/1100 runs (100 already complete)")
    numbers = dict(zip(counts.split()[::2], counts.split()[1::2], strict=False))
    done, failed = int(numbers["done"]), int(numbers["failed"])
    diverged = int(numbers.get("diverged", numbers.get("div")))
    running = int(numbers.get("running", numbers.get("run")))
    remaining = int(numbers.get("remaining", numbers.get("left")))
    assert done + failed + diverged + running + int(numbers["pending"]) + remaining == 1100
    assert remaining == 1100 - 400 - 3 - 3
    assert "ETA 35 s" in counts  # 400 runs in the 20 s since the first start: 700 more in 35


def test_the_wide_form_has_the_full_labels():
    view = view_of(4, 100)
    (counts,) = frame(view)[1:]
    assert counts.startswith("done 0  running 0  failed 0  diverged 0  remaining 4  ETA -")


def test_a_run_finished_by_another_process_is_no_part_of_the_rate(monkeypatch):
    view = view_of(4, 100)
    view.start, view.first_start = 0.0, 1.0
    monkeypatch.setattr(live.time, "perf_counter", lambda: 11.0)
    view.counts.update(complete=1, skipped=1)
    (counts,) = frame(view)[1:]
    assert "other 1" in counts and "ETA 20 s" in counts  # 1 trained in 10 s; 2 left
