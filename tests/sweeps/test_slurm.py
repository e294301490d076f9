"""normbench sweeps on a real one-node SLURM cluster, started by scripts/slurm_cluster.sh.

The cluster needs slurm, munge and MariaDB: the script installs them (root with apt-get) and
starts the daemons; without root or apt-get these tests are skipped, saying why. Runs are tiny
(a width-8 CNN, a few hundred samples): the time goes to SLURM and to each job's start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from normbench.experiment.compose import compose
from normbench.store.rundir import RunDir, run_id
from normbench.training import checkpoint
from normbench.training.run import run_experiment

# one cluster of one node: its tests run one after another, in one xdist worker
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

SCRIPT = Path(__file__).parents[2] / "scripts" / "slurm_cluster.sh"
STATE = Path(os.environ.get("NORMBENCH_SLURM_DIR", "/tmp/normbench-slurm"))
QUICK = [
    "model=cnn",
    "model.width=8",
    "model.depth=1",
    "data.num_samples=500",
    "train.max_steps=20",
    "train.eval_every=10",
    "train.log_every=5",
    "device=cpu",
]


def quick(*overrides: str) -> list[str]:
    """QUICK with ``overrides`` in place of the keys they name."""
    keys = {override.split("=", 1)[0] for override in overrides}
    return [o for o in QUICK if o.split("=", 1)[0] not in keys] + list(overrides)


SLURM = ["--launcher", "slurm", "launcher.cpus_per_task=1", "launcher.mem_gb=1"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def why_no_cluster() -> str | None:
    """Why these tests cannot run here, or None when they can."""
    if sys.platform != "linux":
        return "a SLURM cluster needs Linux"
    root = os.geteuid() == 0
    if shutil.which("sbatch") is None and not (root and shutil.which("apt-get")):
        return (
            "SLURM is not installed and installing it needs root and apt-get "
            "(run scripts/slurm_cluster.sh start as root)"
        )
    running = subprocess.run([SCRIPT, "status"], capture_output=True).returncode == 0
    if not root and not running:
        return "starting the SLURM daemons needs root (run scripts/slurm_cluster.sh start as root)"
    return None


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """The cluster for this module: started here (and stopped at the end) unless it runs."""
    reason = why_no_cluster()
    if reason:
        pytest.skip(reason)
    was_running = subprocess.run([SCRIPT, "status"], capture_output=True).returncode == 0
    started = subprocess.run([SCRIPT, "start"], capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stderr
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", str(STATE / "etc" / "slurm.conf"))
    yield
    patch.undo()
    if not was_running:
        subprocess.run([SCRIPT, "stop"], capture_output=True, timeout=120)


def sweep(runs: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", *args, "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def start_sweep(runs: Path, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "normbench", "sweep", *args, "--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # signals in these tests reach the sweep alone
        **kwargs,
    )


def wait_until(condition, what: str, timeout: float = 120.0, sweep=None) -> None:
    """Poll ``condition``; fail after ``timeout`` s, or as soon as ``sweep`` (a process whose
    progress is awaited) has ended, showing its output."""
    deadline = time.time() + timeout
    while not condition():
        if sweep is not None and sweep.poll() is not None:
            pytest.fail(
                f"the sweep ended (exit {sweep.returncode}) before {what}:\n" + sweep.stdout.read()
            )
        assert time.time() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def metas(runs: Path) -> dict[str, dict]:
    names = [p.name for p in runs.iterdir() if not p.name.startswith(".") and p.name != "sweeps"]
    return {name: RunDir(runs, name).read_meta() for name in names}


def statuses(runs: Path) -> list[str]:
    return [m and m["status"] for m in metas(runs).values()] if runs.exists() else []


def training(runs: Path) -> int:
    """How many runs have trained and logged at least one step."""
    if not runs.exists():
        return 0
    return sum((runs / name / "metrics.parquet").exists() for name in metas(runs))


def job_ids(runs: Path) -> list[str]:
    """The SLURM job ids (arrays: the array's id) this runs directory's sweeps submitted."""
    return [p.name.split("_")[0] for p in runs.glob("sweeps/*.submitit/*_submission.sh")]


def queued(ids: list[str]) -> list[str]:
    """Those of the jobs still in the queue (pending or running)."""
    out = subprocess.run(["squeue", "-h", "-o", "%F"], capture_output=True, text=True)
    return [i for i in out.stdout.split() if i in ids]


def frames(output: str) -> list[tuple[int, int, int, int]]:
    """(done, pending, running, elapsed s) of every redraw of the live view."""
    pattern = r"done (\d+)\s+(?:pending (\d+)\s+)?running (\d+).*?elapsed (\d+) s"
    return [
        tuple(int(v or 0) for v in match)
        for match in re.findall(pattern, ANSI.sub("", output).replace("\r", "\n"))
    ]


def test_a_sweep_runs_on_slurm_and_a_rerun_trains_nothing(tmp_path):
    """Also: a relative --runs-dir reaches jobs that start elsewhere (sbatch --chdir)."""
    args = [*QUICK, "norm=batchnorm,layernorm", *SLURM, "--name", "quick"]
    terminal = {**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "200", "TERM": "xterm"}
    first = subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", *args, "launcher.additional={chdir:/}"]
        + ["--runs-dir", "runs"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=terminal,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    runs = tmp_path / "runs"
    assert statuses(runs) == ["complete"] * 2
    # The live view: both runs are shown pending once submitted (before the scheduler is
    # asked anything), and done at the end. When each ran, and whether both ran at once, is
    # the scheduler's business on a loaded machine: tests/sweeps/test_launchers.py checks the
    # view's counts and its moving clock with a clock of its own.
    shown = frames(first.stdout)
    assert any(pending == 2 and running == 0 for _, pending, running, _ in shown), shown
    assert shown[-1][:3] == (2, 0, 0), shown
    report = subprocess.run(
        [sys.executable, "-m", "normbench", "report", "--sweep", "quick", "--format", "csv"]
        + ["--table", "convergence", "--runs-dir", str(runs), "--by", "norm.name"],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    assert "batchnorm" in report.stdout and "layernorm" in report.stdout
    before = metas(runs)
    again = sweep(runs, *args)
    assert again.returncode == 0 and "2 runs: 2 complete; 0 to run" in again.stdout
    assert metas(runs) == before and len(job_ids(runs)) == 1  # nothing submitted


def test_a_tuned_sweep_runs_both_phases_on_slurm(tmp_path):
    """--tune with --launcher slurm: each rung and the confirmation are job arrays; the record
    lists the confirmation runs alone and says the tuning is done."""
    runs = tmp_path / "runs"
    args = [*QUICK, "norm=batchnorm,layernorm", "--tune", "train.lr=0.001,0.01"]
    args += ["--no-tune-extend"]  # two job arrays: the rung and the confirmation
    done = sweep(runs, *args, "--tune-seeds", "1", *SLURM, "--name", "tuned")
    assert done.returncode == 0, done.stdout + done.stderr
    record = next((runs / "sweeps").glob("tuned-*.json"))
    state = json.loads(record.read_text())
    assert state["tuning"]["phase"] == "done"
    assert {group["chosen"]["train.lr"] for group in state["tuning"]["groups"]} <= {
        "0.001",
        "0.01",
    }
    by_seed = {name: int(re.search(r"-s(\d+)-", name)[1]) for name in metas(runs)}
    assert sorted(by_seed.values()) == [0, 0, 1_000_000, 1_000_000, 1_000_000, 1_000_000]
    assert sorted(run["run_id"] for run in state["runs"]) == sorted(
        n for n, seed in by_seed.items() if seed == 0
    )
    assert statuses(runs) == ["complete"] * 6 and len(job_ids(runs)) == 2  # rung, confirmation


def test_a_ladder_runs_rung_after_rung_on_slurm(tmp_path):
    """--ladder with --launcher slurm: the same session and rounds as any sweep; each rung's
    tuning and confirmation are job arrays, the record lists every rung's confirmations."""
    runs = tmp_path / "runs"
    fixed = [o for o in QUICK if not o.startswith("model.width=")]  # the ladder's axis
    args = [*fixed, "norm=batchnorm,layernorm", "--tune", "train.lr=0.001,0.01"]
    args += ["--no-tune-extend", "--tune-seeds", "1", "--ladder", "model.width=4,8,12"]
    done = sweep(runs, *args, *SLURM, "--name", "ladder")
    assert done.returncode == 0, done.stdout + done.stderr
    state = json.loads(next((runs / "sweeps").glob("ladder-*.json")).read_text())
    assert [rung["done"] for rung in state["ladder"]["rungs"]] == [True, True, True]
    assert len(state["runs"]) == 6 and statuses(runs) == ["complete"] * 18
    assert len(job_ids(runs)) == 6  # per rung: its tuning and its confirmation


def test_a_refused_submission_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    runs = tmp_path / "runs"
    result = sweep(runs, *QUICK, *SLURM, "launcher.partition=nope")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Invalid partition" in result.stderr
    assert result.stderr.startswith("normbench: error: --launcher slurm: the cluster refused")
    assert "Traceback" not in result.stdout + result.stderr
    assert not list(runs.rglob("*.json")) and not list(runs.rglob("*.submitit"))


def test_failed_runs_are_recorded_with_their_real_error(tmp_path):
    runs = tmp_path / "runs"
    # BatchNorm over one sample with one token fails in training; LayerNorm trains. At the
    # same time, device=cuda on a node without a GPU fails before training begins.
    failing = ["model.patch_size=40", "batch_size=1", "model.heads=2", "norm=batchnorm,layernorm"]
    in_training = start_sweep(runs, *quick("model=transformer", *failing), *SLURM)
    before_training = sweep(runs, *quick("device=cuda"), *SLURM)
    out, _ = in_training.communicate(timeout=300)
    assert in_training.returncode == 1, out
    assert "Expected more than 1 value per channel" in out
    assert before_training.returncode == 1, before_training.stdout + before_training.stderr
    refused = "UsageError: device=cuda is not available on this machine"
    assert "failed cnn-layernorm-pre-fp32-b32-s0-" in before_training.stdout
    assert refused in before_training.stdout
    runs_by_model = {"-".join(name.split("-")[:2]): meta for name, meta in metas(runs).items()}
    assert runs_by_model["transformer-layernorm"]["status"] == "complete"
    failed = runs_by_model["transformer-batchnorm"]
    assert failed["status"] == "failed" and "Expected more than 1 value" in failed["error"]
    never_trained = runs_by_model["cnn-layernorm"]
    assert never_trained["status"] == "failed" and never_trained["error"].startswith(refused)
    assert "resolve_device" in never_trained["traceback"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "SIGTERM"])
def test_ctrl_c_or_sigterm_of_the_sweep_cancels_the_array(tmp_path, signum):
    runs = tmp_path / "runs"
    proc = start_sweep(runs, *quick("train.max_steps=100000", "seed=0,1,2"), *SLURM)
    wait_until(lambda: training(runs) == 2, "two runs training", sweep=proc)
    ids = job_ids(runs)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "run the same command again" in out
    wait_until(lambda: not queued(ids), "the array to leave the queue", timeout=120)
    wait_until(lambda: "running" not in statuses(runs), "the runs to record their end", timeout=120)
    assert sorted(statuses(runs)) == ["interrupted", "interrupted"]
    assert all((runs / name / checkpoint.FILE_NAME).exists() for name in metas(runs))


def test_scancel_is_noticed_at_once_and_a_rerun_finishes_only_what_is_missing(tmp_path):
    runs = tmp_path / "runs"
    # 20 steps against 1,000: the short run is complete long before the long one could be,
    # so cancelling as soon as the short one is done always finds the long one training.
    args = [*quick("train.max_steps=20,1000", "train.eval_every=50"), *SLURM]
    proc = start_sweep(runs, *args)
    progress = "the short run to complete"
    wait_until(lambda: statuses(runs).count("complete") == 1, progress, sweep=proc)
    # and the long one past its first logged step, so its checkpoint holds progress to keep
    wait_until(lambda: training(runs) == 2, "the long run to log a step", sweep=proc)
    short = {name: meta for name, meta in metas(runs).items() if meta["status"] == "complete"}
    subprocess.run(["scancel", *job_ids(runs)], check=True)
    out, _ = proc.communicate(timeout=120)  # a hang guard: the sweep notices the cancellation
    # the run's own word (it saved a checkpoint), or the queue's when the job ended first
    assert re.search(r"interrupted cnn-\S+: (stopped by SIGTERM|job \d+_\d cancelled)", out), out
    assert "failed" not in out.replace("failed 0", "") and "No output" not in out
    wait_until(lambda: "running" not in statuses(runs), "the run to record its end", timeout=120)
    assert sorted(statuses(runs)) == ["complete", "interrupted"]
    rerun = sweep(runs, *args)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "2 runs: 1 complete, 1 interrupted; 1 to run" in rerun.stdout
    after = metas(runs)
    assert sorted(m["status"] for m in after.values()) == ["complete", "complete"]
    for name, meta in short.items():
        assert after[name] == meta  # not trained again
    (resumed,) = [m for name, m in after.items() if name not in short]
    assert resumed["resumed_from"] and resumed["resumed_from"][0] > 0


def test_a_time_limit_warning_checkpoints_requeues_and_the_run_completes(tmp_path):
    """USR2 is what SLURM sends signal_delay_s before --time (here sent by scancel --signal,
    so that the test does not wait for a limit): the run saves a checkpoint, submitit requeues
    the job, the job resumes the run, and its metrics equal an uninterrupted run's."""
    runs = tmp_path / "runs"
    overrides = quick("train.max_steps=600", "train.eval_every=20")
    proc = start_sweep(runs, *overrides, *SLURM)
    wait_until(lambda: training(runs) == 1, "the run to train", sweep=proc)
    (job,) = job_ids(runs)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    cfg = compose([*overrides, "threads=1"])  # cpus_per_task=1: one thread on the node
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    (meta,) = metas(runs).values()
    assert meta["status"] == "complete" and len(meta["resumed_from"]) == 1, (meta, out)
    assert 0 < meta["resumed_from"][0] < 600
    pd.testing.assert_frame_equal(
        pd.read_parquet(whole.path / "metrics.parquet").drop(columns="elapsed_s"),
        pd.read_parquet(runs / run_id(cfg) / "metrics.parquet").drop(columns="elapsed_s"),
    )


def test_a_real_time_limit_without_requeues_left_ends_interrupted_not_failed(tmp_path):
    """time_min=2 and a 75 s warning: SLURM signals the job 15 to 45 s in (it checks time
    limits every 30 s and warns early rather than late); with no requeue left the run saves a
    checkpoint and ends interrupted, and the same command would resume it."""
    runs = tmp_path / "runs"
    limits = ["launcher.time_min=2", "launcher.signal_delay_s=75", "launcher.timeout_requeues=0"]
    result = sweep(runs, *quick("train.max_steps=100000"), *SLURM, *limits)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interrupted cnn-" in result.stdout and "timed-out too many times" in result.stdout
    (name,) = metas(runs)
    assert metas(runs)[name]["status"] == "interrupted"
    assert checkpoint.load(runs / name / checkpoint.FILE_NAME)["step"] > 0


def test_a_run_of_two_ranks_is_one_job_of_two_tasks_with_the_local_runs_metrics(tmp_path):
    """train.devices=2 on SLURM: one job of two tasks, one rank each, that meet on this node;
    rank 0 alone writes the run directory, whose metrics are those of the same run's two
    ranks launched here (torch's launcher), step for step."""
    runs, here = tmp_path / "runs", tmp_path / "here"
    two = quick("norm=batchnorm", "train.max_steps=10", "train.devices=2")
    swept = sweep(runs, *two, *SLURM)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert statuses(runs) == ["complete"]
    (script,) = runs.glob("sweeps/*.submitit/*_submission.sh")
    assert "--nodes=1" in script.read_text() and "--ntasks-per-node=2" in script.read_text()
    assert not list(runs.glob("sweeps/*.submitit/*.rendezvous"))  # cleaned up
    local = subprocess.run(
        [sys.executable, "-m", "normbench", "run", *two, "threads=1", "-q"]
        + ["--runs-dir", str(here)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert local.returncode == 0, local.stdout + local.stderr
    name = run_id(compose(two))
    assert sorted(p.name for p in (runs / name).iterdir()) == [
        "config.yaml",
        "meta.json",
        "metrics.parquet",
    ]
    on_slurm = pd.read_parquet(runs / name / "metrics.parquet").drop(columns="elapsed_s")
    launched_here = pd.read_parquet(here / name / "metrics.parquet").drop(columns="elapsed_s")
    pd.testing.assert_frame_equal(on_slurm, launched_here)
    assert len(on_slurm) == 2  # every logged step compared
