"""A local sweep over train.devices: a run of N ranks takes N of the pool's worker slots, and a
run wider than the pool is refused before anything starts."""

from __future__ import annotations

import io
from collections import deque

import pytest
from rich.console import Console

from normbench.core.errors import UsageError
from normbench.store.rundir import Rerun, RunDir
from normbench.sweeps.grid import expand
from normbench.sweeps.live import LiveView
from normbench.sweeps.local import LocalLauncher, check_slots, ranks, take_fitting
from tests.helpers import QUICK, invoke, one_line


def test_a_wide_run_waits_for_its_slots_while_a_narrower_one_behind_it_starts():
    wide, narrow, other = expand(None, [*QUICK, "train.devices=2,1", "seed=0,1"]).jobs[:3]
    assert [ranks(job) for job in (wide, narrow, other)] == [2, 2, 1]
    pending = deque([wide, narrow, other])
    assert take_fitting(pending, 1) is other  # the first that fits, out of the queue
    assert list(pending) == [wide, narrow]
    assert take_fitting(pending, 1) is None and len(pending) == 2  # none fits: all wait
    assert take_fitting(pending, 2) is wide


def test_a_run_wider_than_the_slots_is_refused_naming_jobs():
    jobs = expand(None, [*QUICK, "train.devices=1,4"]).jobs
    check_slots(jobs, 4)
    with pytest.raises(UsageError, match=r"train.devices=4: .* has 3 \(--jobs 3\)"):
        check_slots(jobs, 3)


def test_the_sweep_refuses_a_run_wider_than_its_jobs_before_anything_is_written(tmp_path):
    runs = tmp_path / "runs"
    result = invoke("sweep", *QUICK, "train.devices=1,2", "--jobs", "1", "--runs-dir", str(runs))
    one_line(result, "train.devices=2", "--jobs 1", "valid:")
    assert not runs.exists()


@pytest.mark.slow
def test_a_sweep_over_devices_never_trains_more_ranks_than_its_slots(tmp_path):
    """One run of 1 rank and one of 2 on two slots: both complete, one after the other (the
    pool's own count of the ranks it had training at once never passes 2)."""
    runs = tmp_path / "runs"
    sweep = expand(None, [*QUICK, "threads=1", "norm=batchnorm", "train.devices=1,2"])
    view = LiveView(Console(file=io.StringIO(), width=200), sweep, sweep.jobs)
    with LocalLauncher(2, runs, Rerun()) as pool:
        pool.launch(sweep.jobs, view)
    statuses = {RunDir(runs, job.run_id).read_meta()["status"] for job in sweep.jobs}
    assert statuses == {"complete"}
    assert pool.peak_ranks == 2
