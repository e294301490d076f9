"""Checkpoints: an interrupted run resumes and ends with an uninterrupted run's metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import tiny

from normbench.experiment.compose import compose
from normbench.store.rundir import Rerun, RunDir, run_id
from normbench.training import checkpoint
from normbench.training.run import run_experiment

# 13 steps an epoch on TINY's 600 MNIST-1D samples: a long enough run crosses several epochs.
LONG = ["train.log_every=3", "train.eval_every=20"]


def metrics(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path / "metrics.parquet").drop(columns="elapsed_s")


def meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


@pytest.fixture
def ctrl_c_after_first_checkpoint(monkeypatch: pytest.MonkeyPatch):
    """Arms a Ctrl-C for once the run's next checkpoint is on disk: SIGINT sent to this process
    from inside checkpoint.save, so that it lands at that point and nowhere else (a watcher
    thread can be scheduled too late on a loaded machine and hit a later test). SIGINT gets
    Python's handler meanwhile: a shell's `cmd &` starts pytest with it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    save = checkpoint.save

    def save_then_ctrl_c(path: Path, state: dict) -> None:
        save(path, state)
        monkeypatch.setattr(checkpoint, "save", save)  # only the first one
        os.kill(os.getpid(), signal.SIGINT)

    yield lambda: monkeypatch.setattr(checkpoint, "save", save_then_ctrl_c)
    signal.signal(signal.SIGINT, previous)


def terminate_after_first_checkpoint(path: Path, proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc`` once its run has saved a checkpoint; never to anything else."""

    def watch() -> None:
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline:
            if (path / checkpoint.FILE_NAME).exists():
                proc.send_signal(signal.SIGTERM)
                return
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()


def test_checkpoint_every_is_an_execution_setting_not_part_of_the_run_id():
    base = compose(tiny())
    assert base["train"]["checkpoint_every"] is None  # off unless asked for
    assert run_id(compose(tiny("train.checkpoint_every=100"))) == run_id(base)


@pytest.mark.parametrize(
    ("overrides", "data"),
    [
        (("norm=batchnorm", "diagnostics=true"), "mnist1d"),  # running statistics, diagnostics
        (("model=transformer", "norm=rmsnorm"), "tokens"),  # padding masks
        (("norm=groupnorm", "precision=bf16", "train.optimizer=sgd"), "mnist1d"),
        (("model=transformer",), "pysource"),  # random windows of a byte stream, no epochs
        (("model.parametrization=mup", "model.base_width=8"), "mnist1d"),  # 3 rate groups
    ],
    ids=["batchnorm-diagnostics", "tokens", "bf16-sgd", "pysource", "mup"],
)
def test_a_run_interrupted_by_ctrl_c_resumes_to_the_uninterrupted_metrics(
    tmp_path, ctrl_c_after_first_checkpoint, overrides, data
):
    steps = ["train.max_steps=60", "train.checkpoint_every=7"]
    cfg = compose(tiny(*LONG, *steps, *overrides, data=data))
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    run = RunDir(tmp_path / "resumed", run_id(cfg))
    ctrl_c_after_first_checkpoint()
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "resumed", progress=False)
    interrupted = meta(run.path)
    assert interrupted["status"] == "interrupted"
    saved = torch.load(run.path / checkpoint.FILE_NAME, weights_only=True)  # tensors and plain data
    assert saved["step"] % 7 == 0 and 0 < saved["step"] < 60
    resumed = run_experiment(cfg, tmp_path / "resumed", progress=False)
    assert resumed.status == whole.status == "complete"
    pd.testing.assert_frame_equal(metrics(whole.path), metrics(run.path))
    assert meta(run.path)["resumed_from"] == [saved["step"]]
    assert meta(run.path)["started"] == interrupted["started"]
    assert resumed.summary["test_acc"] == whole.summary["test_acc"]
    assert not (run.path / checkpoint.FILE_NAME).exists()  # a complete run keeps none
    if cfg["diagnostics"]:
        pd.testing.assert_frame_equal(
            pd.read_parquet(whole.path / "diagnostics.parquet"),
            pd.read_parquet(run.path / "diagnostics.parquet"),
        )


def test_a_stop_request_saves_the_state_at_a_step_boundary_and_stops(tmp_path):
    """What a time-limit warning does to a run, whatever checkpoint_every says."""
    cfg = compose(tiny(*LONG, "train.max_steps=50"))
    checkpoint.request_stop()
    try:
        with pytest.raises(checkpoint.StopRequested):
            run_experiment(cfg, tmp_path, progress=False)
    finally:
        checkpoint.clear_stop_request()
    run = RunDir(tmp_path, run_id(cfg))
    assert run.status() == "interrupted"
    assert checkpoint.load(run.path / checkpoint.FILE_NAME)["step"] == 0
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    assert run_experiment(cfg, tmp_path, progress=False).status == "complete"
    pd.testing.assert_frame_equal(metrics(whole.path), metrics(run.path))


def normbench_run(runs: Path, overrides: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "normbench", "run", "-q", *overrides, "--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_normbench_run_killed_by_sigterm_mid_way_resumes_when_run_again(tmp_path):
    overrides = tiny(*LONG, "train.max_steps=120", "train.checkpoint_every=20", "norm=batchnorm")
    cfg = compose(overrides)
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    runs = tmp_path / "runs"
    run = RunDir(runs, run_id(cfg))
    proc = normbench_run(runs, overrides)
    terminate_after_first_checkpoint(run.path, proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert meta(run.path)["status"] == "interrupted"
    step = checkpoint.load(run.path / checkpoint.FILE_NAME)["step"]
    again = normbench_run(runs, overrides)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and out.startswith("complete"), out + err
    assert meta(run.path)["resumed_from"] == [step] and step >= 20
    pd.testing.assert_frame_equal(metrics(whole.path), metrics(run.path))
    assert not (run.path / checkpoint.FILE_NAME).exists()


def test_force_starts_afresh_instead_of_resuming(tmp_path, ctrl_c_after_first_checkpoint):
    cfg = compose(tiny(*LONG, "train.max_steps=60", "train.checkpoint_every=7"))
    run = RunDir(tmp_path, run_id(cfg))
    ctrl_c_after_first_checkpoint()
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path, progress=False)
    assert (run.path / checkpoint.FILE_NAME).exists()
    assert run_experiment(cfg, tmp_path, Rerun(force=True), progress=False).status == "complete"
    assert meta(run.path)["resumed_from"] == []
    assert metrics(run.path)["step"].iloc[0] == 3  # a fresh log from the first step


def test_an_unreadable_checkpoint_is_ignored_and_the_run_starts_afresh(tmp_path):
    cfg = compose(tiny(*LONG, "train.max_steps=20"))
    run = RunDir(tmp_path, run_id(cfg))
    run.path.mkdir(parents=True)
    (run.path / checkpoint.FILE_NAME).write_bytes(b"not a checkpoint")
    assert run_experiment(cfg, tmp_path, progress=False).status == "complete"
    assert meta(run.path)["resumed_from"] == []


@pytest.mark.parametrize(
    "state",
    [
        {"format": checkpoint.FORMAT, "step": 5},  # loadable, without a model state
        {"format": checkpoint.FORMAT + 1, "step": 5},  # another version's
        "another model",  # every key, but another model's weights
    ],
)
def test_a_checkpoint_without_a_usable_state_starts_the_run_afresh_with_a_warning(
    tmp_path, capsys, state
):
    cfg = compose(tiny(*LONG, "train.max_steps=20"))
    run = RunDir(tmp_path, run_id(cfg))
    run.path.mkdir(parents=True)
    if state == "another model":
        state = {
            key: kind() if isinstance(kind, type) else 0.0 for key, kind in checkpoint.STATE.items()
        }
        state.update(format=checkpoint.FORMAT, step=5, model={"weight": torch.zeros(3)})
    torch.save(state, run.path / checkpoint.FILE_NAME)
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
    assert meta(run.path)["resumed_from"] == []
    assert "; starting the run afresh" in capsys.readouterr().err
    again = run_experiment(cfg, tmp_path, progress=False)  # and it stays finished
    assert again.skipped
