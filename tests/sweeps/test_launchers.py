"""Launcher settings, what submitit is asked to submit, and the live view (no cluster needed;
tests/test_slurm.py runs the same paths on a real one)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from normbench.cli import app
from normbench.store.rundir import Rerun, RunDir
from normbench.sweeps.cluster import SubmititLauncher, job_shape
from normbench.sweeps.grid import expand
from normbench.sweeps.launchers import launcher_settings
from normbench.sweeps.live import LiveView
from normbench.sweeps.local import LocalLauncher

runner = CliRunner()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["launcher.time_min=1"],  # the default 90 s warning would come before the start
            "launcher.signal_delay_s=90 is not shorter than launcher.time_min=1 (60 s): the "
            "time-limit warning would come before the run starts; valid: 0..59",
        ),
        (["launcher.python=3"], "launcher.python=3 is not valid; valid: a string or null"),
        (["launcher.time_min=0"], "launcher.time_min=0 is not valid; valid: an integer >= 1"),
        (["launcher.signal_delay_s=-1"], "launcher.signal_delay_s=-1 is not valid"),
        (["launcher.timeout_requeues=x"], "launcher.timeout_requeues='x' is not valid"),
        (["launcher.setup=5"], "launcher.setup=5 is not valid; valid: a list of shell lines"),
        (["launcher.additional=[a]"], "launcher.additional=['a'] is not valid; valid: a mapping"),
        (  # the ranks of a run meet over 127.0.0.1: one node
            ["launcher.additional={nodes:2}"],
            "launcher.additional.nodes=2 is not allowed: each run is one job on one node",
        ),
    ],
)
def test_bad_launcher_settings_are_one_line_and_exit_2(tmp_path, settings, message):
    args = ["sweep", "smoke", "--launcher", "slurm", *settings, "--runs-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"normbench: error: {message}"), result.output
    assert result.output.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_python_signal_delay_and_requeues_reach_the_submission(tmp_path, monkeypatch):
    """submitit's SLURM executor only checks that srun exists: a stand-in will do to read the
    sbatch script it would submit."""
    from submitit.slurm.slurm import _make_sbatch_string

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)  # the launcher makes runs/sweeps/x.submitit where it runs
    settings = launcher_settings(
        "slurm",
        [
            "launcher.python=/shared/venv/bin/python",
            "launcher.time_min=30",
            "launcher.signal_delay_s=120",
            "launcher.timeout_requeues=5",
        ],
    )
    launcher = SubmititLauncher(settings, Path("runs"), Rerun(), Path("runs/sweeps/x.submitit"))
    assert launcher.runs_dir == Path.cwd() / "runs"  # absolute: jobs may start elsewhere
    executor = launcher.executor()._executor
    command = executor._submitit_command_str
    assert command.startswith("/shared/venv/bin/python -u -m submitit.core._submit ")
    assert executor.max_num_timeout == 5
    script = _make_sbatch_string(command=command, folder=tmp_path, **executor.parameters)
    assert "#SBATCH --signal=USR2@120" in script and "#SBATCH --time=30" in script


def test_a_run_of_n_ranks_asks_for_n_tasks_on_one_node_and_a_gpu_for_each(tmp_path, monkeypatch):
    from submitit.slurm.slurm import _make_sbatch_string

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    settings = launcher_settings("slurm", ["launcher.gpus_per_node=1"])
    launcher = SubmititLauncher(settings, tmp_path / "runs", Rerun(), tmp_path / "x.submitit")
    executor = launcher.executor()
    executor.update_parameters(**job_shape(settings, 4))
    slurm = executor._executor
    script = _make_sbatch_string(command="python", folder=tmp_path, **slurm.parameters)
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks-per-node=4" in script
    assert "#SBATCH --gpus-per-node=4" in script


def test_the_live_view_counts_pending_apart_from_running_and_its_clock_moves():
    sweep = expand(None, ["seed=0,1,2", "model=cnn"])
    view = LiveView(Console(file=io.StringIO(), width=200), sweep, sweep.jobs)
    first, second, third = (job.run_id for job in sweep.jobs)
    for rid in (first, second, third):
        view.queued(rid)
    view.started(first)
    view.start -= 7  # seven seconds on, nothing finished: the view must say so by itself
    shown = "".join(segment.text for segment in view.live.console.render(view.live.renderable))
    assert "pending 2  running 1" in shown and "elapsed 7 s" in shown
    view.queued(first)  # requeued: waiting again
    view.done(second, "complete")
    shown = "".join(segment.text for segment in view.live.console.render(view.live.renderable))
    assert "done 1  pending 2  running 0" in shown


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_submitit_local_keeps_the_real_error_of_a_run_that_fails_before_training(tmp_path):
    runs = tmp_path / "runs"
    result = subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", "model=cnn", "model.width=8"]
        + ["model.depth=1", "device=cuda", "--launcher", "submitit_local"]
        + ["--runs-dir", str(runs)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    error = "UsageError: device=cuda is not available on this machine; valid: auto, cpu"
    assert error in result.stdout and "_log.out" not in result.stdout
    (run_dir,) = [p for p in runs.iterdir() if p.name.startswith("cnn-")]
    meta = RunDir(runs, run_dir.name).read_meta()
    assert meta["status"] == "failed" and meta["error"] == error
    assert (run_dir / "config.yaml").exists()


@pytest.mark.slow
def test_a_pooled_worker_that_died_while_idle_is_replaced_before_the_next_launch(tmp_path):
    """The pool outlives a launch (until-decided rounds, findings' studies): a worker killed
    between two launches (out of memory, kill -9) held no run, and the next launch starts a
    new one instead of handing it a job it can never run."""
    runs = tmp_path / "runs"
    tiny = ["model=cnn", "model.width=8", "model.depth=1", "data.num_samples=300"]
    sweep = expand(None, [*tiny, "train.max_steps=5", "train.eval_every=5", "seed=0,1"])
    first, second = sweep.jobs
    view = LiveView(Console(file=io.StringIO(), width=200), sweep, sweep.jobs)
    with LocalLauncher(1, runs, Rerun()) as pool:
        pool.launch([first], view)
        (worker,) = pool.workers.values()
        worker.process.kill()
        worker.process.join()
        pool.launch([second], view)
    statuses = {job.run_id: RunDir(runs, job.run_id).read_meta()["status"] for job in sweep.jobs}
    assert statuses == {first.run_id: "complete", second.run_id: "complete"}
    assert not pool.workers


@pytest.mark.slow
def test_a_rank_task_that_raises_fails_its_run_in_one_line_naming_the_rank(tmp_path):
    """A run of 2 ranks as 2 submitit tasks (the path SLURM takes, here on this machine):
    rank 1 raises; rank 0 sees only its peer's connection close, and the run's error is
    rank 1's, as a run launched by torch's launcher says it."""
    runs = tmp_path / "runs"
    tests = str(Path(__file__).parents[1])
    faulty = {"PYTHONPATH": tests, "FAULT": "raise", "FAULT_RANK": "1", "FAULT_AT": "3"}
    result = subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", "model=cnn", "model.width=8"]
        + ["model.depth=1", "data.num_samples=500", "norm=faulty_norms:FaultyRank"]
        + ["train.devices=2", "train.max_steps=6", "train.log_every=2", "device=cpu"]
        + ["--launcher", "submitit_local", "launcher.cpus_per_task=1", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        env={**os.environ, **faulty},
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.name.startswith("cnn-")]
    meta = RunDir(runs, run_dir.name).read_meta()
    assert meta["status"] == "failed"
    assert meta["error"].startswith("rank 1 of 2: RuntimeError: an injected fault (log: ")
    assert "\n" not in meta["error"]
