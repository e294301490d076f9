"""Data-parallel runs (train.devices, normbench.training.distributed) on this CPU: gloo, two
ranks started by PyTorch's launcher. The invariance tests: at a fixed global batch a norm
without batch statistics trains the same on 2 ranks as in one process, step by step (the
global batch's loss and every gradient); BatchNorm with synchronized statistics is the
one-process full-batch run, and with per-device statistics the one-process run with ghost
batches of the per-device batch, not the full-batch one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from data_parallel_steps import traced, traced_ranks
from helpers import tiny
from torch.distributed.launcher.api import elastic_launch

from normbench.core.errors import UsageError
from normbench.experiment.compose import compose
from normbench.store.rundir import Rerun, RunDir, is_run_id, run_id
from normbench.training.launch import launch_config
from normbench.training.run import check_devices, run_experiment

STEPS = 5
# float32 sums in another order (per rank, then across): a few ulps of the values
TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}


def config(*overrides: str) -> dict:
    return compose(tiny("model=cnn", "batch_size=32", "train.grad_clip=null", *overrides))


# Run ids computed by the commit before train.devices, norm.sync and norm.eval_stats existed
# (0a1346a): one device must keep them, or every finished run is trained again.
IDS_BEFORE_DEVICES = {
    ("norm=batchnorm",): "transformer-batchnorm-pre-fp32-b32-s0-47b8d782",
    ("norm=batchnorm", "norm.ghost_batch=8", "model=cnn"): (
        "cnn-batchnorm.ghost8-pre-fp32-b32-s0-6fe030db"
    ),
    ("norm=switchnorm", "model=cnn"): "cnn-switchnorm-pre-fp32-b32-s0-ccaece18",
    ("norm=groupnorm", "model=cnn"): "cnn-groupnorm-pre-fp32-b32-s0-7b35517d",
    ("norm=layernorm",): "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c",
    ("norm=dyt", "model=cnn", "batch_size=64"): "cnn-dyt-pre-fp32-b64-s0-d5f00ba6",
}


@pytest.mark.parametrize("overrides", list(IDS_BEFORE_DEVICES))
def test_one_device_keeps_every_earlier_run_id(overrides):
    cfg = compose(overrides)
    assert run_id(cfg) == IDS_BEFORE_DEVICES[overrides]
    # on one device the statistics keys cannot matter: the same run
    same = compose([*overrides, "train.devices=1", "norm.eval_stats=mean"])
    assert run_id(same) == run_id(cfg)


def test_n_devices_are_in_the_run_id_and_the_statistics_keys_in_its_hash():
    ids = {
        extra: run_id(compose(["norm=batchnorm", "train.devices=2", *extra]))
        for extra in [(), ("norm.sync=global",), ("norm.eval_stats=mean",)]
    }
    assert all("-b32.d2-s0-" in rid and is_run_id(rid) for rid in ids.values())
    assert len(set(ids.values())) == 3
    layernorm = compose(["norm=layernorm", "train.devices=2", "norm.eval_stats=mean"])
    assert layernorm["norm"]["sync"] is None and layernorm["norm"]["eval_stats"] is None
    assert run_id(layernorm) == run_id(compose(["norm=layernorm", "train.devices=2"]))
    assert run_id(layernorm) != run_id(compose(["norm=layernorm"]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["train.devices=3"],
            "train.devices=3 does not divide batch_size=32 (each device takes an equal share "
            "of the global batch); valid: 1, 2, 4, 8, 16, 32",
        ),
        (
            ["norm=batchnorm", "train.devices=4", "norm.ghost_batch=3"],
            "norm.ghost_batch=3 does not divide the per-device batch 8 (batch_size=32 / "
            "train.devices=4); valid: 1, 2, 4, 8 or null",
        ),
        (
            ["norm=layernorm", "norm.sync=global"],
            "norm.sync=global needs batch statistics to synchronize, and norm=layernorm has "
            "none; valid: norm.sync=device, or norm=batchnorm",
        ),
        (
            ["norm=batchnorm", "train.devices=2", "norm.sync=global", "norm.ghost_batch=4"],
            "norm.sync=global takes statistics over the global batch, norm.ghost_batch=4 over "
            "chunks of each device's; valid: one of them",
        ),
        (["train.devices=2", "diagnostics=true"], "valid with train.devices > 1: diagnostics"),
        (["train.devices=0"], "train.devices=0 is not valid"),
    ],
)
def test_what_cannot_run_on_n_devices_is_refused_in_one_line(overrides, message):
    with pytest.raises(UsageError) as caught:
        compose(overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_more_ranks_than_cuda_devices_are_refused_before_anything_is_written(tmp_path):
    present = torch.cuda.device_count()
    with pytest.raises(
        UsageError,
        match=f"train.devices=8 needs 8 cuda devices and this "
        f"machine has {present}; valid: at most {present}, or device=cpu",
    ):
        check_devices(8, torch.device("cuda"))
    check_devices(8, torch.device("cpu"))  # gloo: any number of CPU ranks


# (the two-rank config, the one-process config it must match)
MATCHES = {
    "layernorm": (["norm=layernorm"], ["norm=layernorm"]),
    "rmsnorm": (["norm=rmsnorm"], ["norm=rmsnorm"]),
    "groupnorm": (["norm=groupnorm"], ["norm=groupnorm"]),
    "dyt": (["norm=dyt"], ["norm=dyt"]),
    # SGD: AdamW's normalised first step turns the rounding in the zero gradient of a bias
    # before BatchNorm into steps of the learning rate's size, which move the running means
    # (docs/distributed.md); SGD's steps are the gradients' size, so those are compared too
    "batchnorm synchronized = full batch": (
        ["norm=batchnorm", "norm.sync=global", "train.optimizer=sgd"],
        ["norm=batchnorm", "train.optimizer=sgd"],
    ),
    "batchnorm per device = ghost batch 16": (
        ["norm=batchnorm"],
        ["norm=batchnorm", "norm.ghost_batch=16"],
    ),
}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, dict]:
    """Every two-rank config of MATCHES traced in one launch (starting ranks is the cost)."""
    runs = tmp_path_factory.mktemp("ranks")
    cases = {case: two for case, (two, _) in MATCHES.items()}
    cases["batchnorm per device, evaluated with the mean"] = [
        "norm=batchnorm",
        "norm.eval_stats=mean",
    ]
    cfgs = [config(*two, "train.devices=2") for two in cases.values()]
    answers = elastic_launch(launch_config(2, "invariance", 120), traced_ranks)(
        cfgs, STEPS, str(runs)
    )
    return dict(zip(cases, answers[0], strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MATCHES))
def test_two_ranks_match_one_process_step_by_step(case, two_ranks, tmp_path):
    one = traced(config(*MATCHES[case][1]), STEPS, str(tmp_path))
    two = two_ranks[case]
    torch.testing.assert_close(
        torch.tensor(two["losses"]), torch.tensor(one["losses"]), **TOLERANCE
    )
    torch.testing.assert_close(two["gradients"], one["gradients"], **TOLERANCE)
    assert two["gradients"].abs().sum() > 0  # a step that trains
    if case.startswith("batchnorm synchronized"):  # running statistics as one process's
        torch.testing.assert_close(two["buffers"], one["buffers"], **TOLERANCE)


@pytest.mark.slow
def test_per_device_batchnorm_is_not_the_full_batch(two_ranks, tmp_path):
    full = traced(config("norm=batchnorm"), STEPS, str(tmp_path))
    per_device = two_ranks["batchnorm per device = ghost batch 16"]
    assert not torch.allclose(per_device["gradients"], full["gradients"], **TOLERANCE)
    # the first step's gradients already differ (the statistics of 16 samples, not 32)
    assert not torch.allclose(per_device["gradients"][0], full["gradients"][0], **TOLERANCE)


@pytest.mark.slow
def test_the_mean_of_the_running_statistics_changes_evaluation_only(two_ranks):
    """norm.eval_stats=mean: rank 0 evaluates with the ranks' mean running statistics, then
    has its own back; training is rank0's step for step."""
    rank0 = two_ranks["batchnorm per device = ghost batch 16"]
    mean = two_ranks["batchnorm per device, evaluated with the mean"]
    torch.testing.assert_close(mean["gradients"], rank0["gradients"], rtol=0, atol=0)
    torch.testing.assert_close(mean["buffers"], rank0["buffers"], rtol=0, atol=0)
    assert mean["val_loss"] != rank0["val_loss"]


# ------------------------------------------------------------------------------ faults
FAULTY = tiny(
    "model=cnn",
    "norm=faulty_norms:FaultyRank",
    "train.devices=2",
    "train.max_steps=12",
    "train.eval_every=4",
    "train.log_every=2",
    "train.checkpoint_every=4",
    "train.timeout_s=30",
)


def faulted(monkeypatch, tmp_path, fault: str, rank: int = 1, at: int = 6) -> Path:
    """The environment that makes FaultyRank break ``rank`` at its ``at``-th forward; the
    directory where every rank leaves its process id."""
    pids = tmp_path / "pids"
    pids.mkdir()
    for name, value in {"FAULT": fault, "FAULT_RANK": rank, "FAULT_AT": at}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("FAULT_PIDS", str(pids))
    return pids


def assert_all_ended(pids: Path) -> None:
    """Every process that ran the norm (the two ranks, and the command's own check of the norm
    when it ran apart) is gone: not running, not a zombie (its launcher reaped it)."""
    ran = [int(p.name) for p in pids.iterdir()]
    assert len(ran) >= 2
    for pid in ran:
        assert not Path(f"/proc/{pid}").exists(), f"rank process {pid} is left"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "rank", "error"),
    [
        ("raise", 1, "rank 1 of 2: RuntimeError: an injected fault"),
        ("raise", 0, "RuntimeError: an injected fault"),
        ("kill", 1, "rank 1 of 2: killed by SIGKILL"),
        ("hang", 1, "Timed out"),
    ],
)
def test_a_failing_rank_ends_every_rank_and_fails_the_run_in_one_line(
    fault, rank, error, monkeypatch, tmp_path, capfd
):
    pids = faulted(monkeypatch, tmp_path, fault, rank)
    cfg = compose(FAULTY)
    outcome = run_experiment(cfg, tmp_path / "runs", progress=False)
    assert outcome.status == "failed"
    assert error in outcome.error and "\n" not in outcome.error
    assert "Traceback" not in capfd.readouterr().err  # neither the launcher's nor a rank's
    assert RunDir(tmp_path / "runs", outcome.run_id).read_meta()["status"] == "failed"
    assert_all_ended(pids)
    if fault != "raise" or rank != 1:
        return
    # resumed with the same number of ranks, from the checkpoint of step 4, to the end
    monkeypatch.delenv("FAULT")
    again = run_experiment(cfg, tmp_path / "runs", progress=False)
    assert again.status == "complete" and again.summary["steps"] == 12
    assert RunDir(tmp_path / "runs", outcome.run_id).read_meta()["resumed_from"] == [4]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_interrupts_every_rank_in_one_line(fault, monkeypatch, tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group: the command and every rank) and
    SIGTERM to the command (a scheduler's kill) end the run as interrupted, exit 130."""
    pids = faulted(monkeypatch, tmp_path, fault)
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "normbench", "run", "-q", *FAULTY]
    result = subprocess.run(
        [*command, "--runs-dir", str(tmp_path / "runs")],
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        timeout=600,
    )
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "interrupted" in line]
    (run_dir,) = (tmp_path / "runs").glob("cnn-*")
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "interrupted"
    assert_all_ended(pids)


@pytest.mark.slow
def test_a_two_rank_run_logs_what_one_process_logs_and_reruns_to_the_same_metrics(tmp_path):
    """End to end through run_experiment: every logged row of LayerNorm on 2 ranks (the
    training loss and accuracy summed over the ranks, the gradient norm, rank 0's evaluation)
    is the one-process run's; a forced rerun of the 2-rank run gives the same metrics."""
    overrides = tiny("model=cnn", "norm=layernorm")
    one = run_experiment(compose(overrides), tmp_path / "one", progress=False)
    two = run_experiment(compose([*overrides, "train.devices=2"]), tmp_path / "two", progress=False)
    again = run_experiment(
        compose([*overrides, "train.devices=2"]),
        tmp_path / "two",
        Rerun(force=True),
        progress=False,
    )
    assert one.status == two.status == again.status == "complete"
    columns = ["step", "train_loss", "train_acc", "val_loss", "val_acc", "grad_norm"]
    one_rows, two_rows, again_rows = (
        pd.read_parquet(o.path / "metrics.parquet")[columns] for o in (one, two, again)
    )
    pd.testing.assert_frame_equal(two_rows, one_rows, rtol=1e-4)
    pd.testing.assert_frame_equal(again_rows, two_rows, check_exact=True)
    assert two.summary["test_acc"] == again.summary["test_acc"]
    # the gradient all-reduce timed on the CPU ranks (training.distributed.AllReduceClock)
    assert 0 < two.summary["allreduce_share_median"] < 1
    assert one.summary["allreduce_share_median"] is None
