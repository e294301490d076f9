"""Training runs end to end: precisions, determinism, resume/skip, divergence, interrupts."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pandas as pd
import pytest
import torch
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.data.pysource import corpus
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.store.rundir import METRIC_COLUMNS, Rerun, RunDir, run_id
from normbench.training.run import resolve_device, run_experiment
from normbench.training.trainer import Trainer


def metrics(outcome) -> pd.DataFrame:
    return pd.read_parquet(outcome.path / "metrics.parquet")


def test_a_run_writes_config_meta_and_metrics(tmp_path):
    cfg = compose(tiny())
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete"
    assert outcome.path == tmp_path / run_id(cfg)
    assert {p.name for p in outcome.path.iterdir()} == {
        "config.yaml",
        "meta.json",
        "metrics.parquet",
    }
    meta = json.loads((outcome.path / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["error"] is None
    assert set(meta["versions"]) >= {"normbench", "torch", "python"}
    assert meta["summary"]["test_acc"] is not None
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    assert meta["summary"]["parameters"] == sum(p.numel() for p in model.parameters())
    started, first_step, finished = (
        datetime.fromisoformat(meta[key]) for key in ("started", "first_step", "finished")
    )  # started and finished to the second, the first step to the millisecond
    assert started <= first_step <= finished + timedelta(seconds=1)
    frame = metrics(outcome)
    assert list(frame.columns) == list(METRIC_COLUMNS)
    assert frame["step"].tolist() == [2, 3, 4, 6]  # log_every=2, eval_every=3, and the end
    assert frame["val_acc"].notna().tolist() == [False, True, False, True]
    assert frame["val_bpb"].isna().all() and meta["summary"]["final_val_bpb"] is None
    assert (frame["samples"] == frame["step"] * 32).all()
    assert frame["grad_norm"].notna().all() and (frame["elapsed_s"].diff().dropna() >= 0).all()


def test_same_config_twice_gives_identical_metrics(tmp_path):
    cfg = compose(tiny("norm=batchnorm"))
    first = metrics(run_experiment(cfg, tmp_path / "a", progress=False))
    second = metrics(run_experiment(cfg, tmp_path / "b", progress=False))
    pd.testing.assert_frame_equal(first.drop(columns="elapsed_s"), second.drop(columns="elapsed_s"))
    other_seed = metrics(
        run_experiment(compose(tiny("norm=batchnorm", "seed=1")), tmp_path / "c", progress=False)
    )
    assert not first["train_loss"].equals(other_seed["train_loss"])


def test_run_id_is_readable_and_content_addressed():
    base = run_id(compose(tiny("model=cnn", "norm=groupnorm", "seed=2")))
    assert base.startswith("cnn-groupnorm-pre-fp32-b32-s2-") and len(base.split("-")[-1]) == 8
    assert base == run_id(compose(tiny("seed=2", "norm=groupnorm", "model=cnn")))
    assert base == run_id(compose(tiny("model=cnn", "norm=groupnorm", "seed=2", "threads=2")))
    assert base == run_id(compose(tiny("model=cnn", "norm=groupnorm", "seed=2", "device=auto")))
    assert base != run_id(compose(tiny("model=cnn", "norm=groupnorm", "seed=2", "train.lr=0.1")))
    # naming the default explicitly is the same experiment
    assert run_id(compose(["norm=layernorm"])) == run_id(compose([]))


def test_a_complete_run_is_skipped_and_force_runs_it_again(tmp_path):
    cfg = compose(tiny())
    first = run_experiment(cfg, tmp_path, progress=False)
    stamp = (first.path / "metrics.parquet").stat().st_mtime_ns
    again = run_experiment(cfg, tmp_path, progress=False)
    assert again.skipped and again.status == "complete"
    assert again.summary == json.loads((first.path / "meta.json").read_text())["summary"]
    assert (first.path / "metrics.parquet").stat().st_mtime_ns == stamp
    forced = run_experiment(cfg, tmp_path, Rerun(force=True), progress=False)
    assert not forced.skipped and (first.path / "metrics.parquet").stat().st_mtime_ns != stamp


def test_failed_and_interrupted_runs_are_run_again(tmp_path):
    cfg = compose(tiny())
    run = RunDir(tmp_path, run_id(cfg))
    run.path.mkdir(parents=True)
    for status in ("failed", "interrupted", "running"):
        run.write_meta({"status": status})
        assert not run_experiment(cfg, tmp_path, progress=False).skipped


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_every_precision_trains_and_only_fp16_scales_gradients(precision, tmp_path):
    cfg = compose(tiny(f"precision={precision}"))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path, run_id(cfg)), progress=False)
    trainer.run.path.mkdir(parents=True)
    assert trainer.fit() == "complete"
    assert trainer.scaler.is_enabled() == (precision == "fp16")
    if precision == "fp16":
        assert trainer.scaler.get_scale() > 1  # the scaler really ran
    assert all(math.isfinite(row["train_loss"]) for row in trainer.rows)


def test_a_step_the_fp16_scaler_skips_leaves_the_schedule_where_it_was(tmp_path):
    """An inf in the input gives inf/NaN gradients: GradScaler skips the optimizer step and
    halves its scale, and the learning-rate schedule must not move; a finite step moves it."""
    cfg = compose(tiny("precision=fp16", "train.warmup_steps=5"))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path, run_id(cfg)), progress=False)
    trainer.setup()
    x, y, mask = next(trainer.batches())
    trainer.step(x, y, mask, want_grad_norm=False)
    epoch, scale = trainer.scheduler.last_epoch, trainer.scaler.get_scale()
    lr = trainer.optimizer.param_groups[0]["lr"]
    weights = [p.detach().clone() for p in trainer.params]
    broken = x.clone()
    broken[0] = float("inf")
    trainer.step(broken, y, mask, want_grad_norm=False)
    assert trainer.scaler.get_scale() == scale / 2  # the scaler did skip
    assert all(torch.equal(a, b) for a, b in zip(weights, trainer.params, strict=True))
    assert trainer.scheduler.last_epoch == epoch
    assert trainer.optimizer.param_groups[0]["lr"] == lr
    trainer.step(x, y, mask, want_grad_norm=False)
    assert trainer.scheduler.last_epoch == epoch + 1
    assert trainer.optimizer.param_groups[0]["lr"] > lr  # warm-up goes on


def test_a_non_finite_loss_stops_the_run_as_diverged(tmp_path):
    cfg = compose(
        tiny(
            "norm=none",
            "train.optimizer=sgd",
            "train.lr=1e6",
            "train.grad_clip=null",
            "train.warmup_steps=0",
            "train.max_steps=40",
            "train.log_every=1",
        )
    )
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "diverged"
    assert outcome.summary["steps"] < 40
    frame = metrics(outcome)
    assert not math.isfinite(frame["train_loss"].iloc[-1])
    assert json.loads((outcome.path / "meta.json").read_text())["status"] == "diverged"
    assert run_experiment(cfg, tmp_path, progress=False).skipped  # a result, not re-run


def test_an_exception_is_recorded_as_failed_with_its_error(tmp_path, monkeypatch):
    def broken_step(self, *args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(Trainer, "step", broken_step)
    outcome = run_experiment(compose(tiny()), tmp_path, progress=False)
    assert outcome.status == "failed"
    meta = json.loads((outcome.path / "meta.json").read_text())
    assert meta["error"] == "RuntimeError: out of memory (simulated)"
    assert "Traceback" in meta["traceback"]


def test_learning_rate_schedule_warmup_cosine_and_batch_scaling(tmp_path):
    cfg = compose(
        tiny(
            "train.max_steps=10",
            "train.warmup_steps=4",
            "train.eval_every=10",
            "train.log_every=1",
            "batch_size=64",
            "train.lr_scaling=sqrt",
            "train.base_batch_size=16",
            "train.lr=0.01",
        )
    )
    lr = metrics(run_experiment(cfg, tmp_path, progress=False))["lr"].tolist()
    peak = 0.01 * 2  # sqrt(64 / 16)
    assert lr[:4] == pytest.approx([peak * k / 4 for k in (1, 2, 3, 4)])
    assert lr[4] == pytest.approx(peak) and lr[-1] < lr[5] < lr[4]
    expected_last = peak * 0.5 * (1 + math.cos(math.pi * 5 / 6))
    assert lr[-1] == pytest.approx(expected_last)


def test_steps_to_target_is_the_first_evaluation_reaching_it(tmp_path):
    cfg = compose(tiny("target.value=0.0"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.summary["steps_to_target"] == 3  # first evaluation
    never = run_experiment(compose(tiny("target.value=1.5")), tmp_path, progress=False)
    assert never.summary["steps_to_target"] is None


@pytest.mark.parametrize("data", ["digits", "tokens"])
def test_other_data_sets_train(data, tmp_path):
    outcome = run_experiment(compose(tiny("norm=batchnorm", data=data)), tmp_path, progress=False)
    assert outcome.status == "complete"


def test_device_auto_resolves_and_cpu_is_always_there():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")


@pytest.mark.slow
def test_a_ctrl_c_while_the_config_is_written_still_leaves_meta_json(tmp_path, monkeypatch):
    """Readers key on meta.json: a run directory must never hold a config alone."""
    write_config = RunDir.write_config

    def interrupted(self, cfg):
        write_config(self, cfg)
        raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "write_config", interrupted)
    cfg = compose(tiny())
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path, progress=False)
    assert RunDir(tmp_path, run_id(cfg)).status() == "running"  # a sweep marks it interrupted


def test_ctrl_c_marks_the_run_interrupted_keeps_its_metrics_and_exits_130(tmp_path):
    runs = tmp_path / "runs"
    overrides = tiny("train.max_steps=100000", "train.eval_every=5", "train.log_every=5")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "normbench", "run", "-q", *overrides, "--runs-dir", str(runs)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not list(runs.glob("*/metrics.parquet")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["summary"]["steps"] > 0
    assert len(pd.read_parquet(run_dir / "metrics.parquet")) >= meta["summary"]["steps"] // 5


@pytest.mark.slow
def test_normbench_run_from_the_command_line(tmp_path):
    command = [
        sys.executable,
        "-m",
        "normbench",
        "run",
        *tiny("model=cnn"),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("complete  val acc ") and "runs/cnn-layernorm-pre-fp32-b32-s0-" in line
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert again.stdout.startswith("skipped, already finished")


def test_train_loss_auc_is_the_step_weighted_mean_of_the_logged_losses(tmp_path):
    outcome = run_experiment(compose(tiny()), tmp_path, progress=False)
    frame = metrics(outcome)  # steps 2, 3, 4, 6: windows of 2, 1, 1, 2 steps
    weights = frame["step"].diff().fillna(frame["step"].iloc[0])
    expected = (frame["train_loss"] * weights).sum() / 6
    assert outcome.summary["train_loss_auc"] == pytest.approx(expected)


def test_meta_records_the_code_fingerprint(tmp_path):
    from normbench.store.provenance import fingerprint

    outcome = run_experiment(compose(tiny()), tmp_path, progress=False)
    meta = json.loads((outcome.path / "meta.json").read_text())
    assert meta["code"] == fingerprint() and len(meta["code"]["source_hash"]) == 16
    assert meta["code"]["version"] == meta["versions"]["normbench"]
    assert meta["summary"]["num_classes"] == 10


def test_a_stale_run_is_kept_and_named_and_rerun_stale_trains_it(tmp_path):
    cfg = compose(tiny())
    first = run_experiment(cfg, tmp_path, progress=False)
    run = RunDir(tmp_path, first.run_id)
    meta = run.read_meta()
    meta["code"]["source_hash"] = "0" * 16  # as if an older normbench had trained it
    run.write_meta(meta)
    kept = run_experiment(cfg, tmp_path, progress=False)
    assert kept.skipped and kept.stale
    again = run_experiment(cfg, tmp_path, Rerun(stale=True), progress=False)
    assert not again.skipped and not run_experiment(cfg, tmp_path, progress=False).stale


def test_diagnostics_leave_the_run_id_alone_and_are_added_by_training_again(tmp_path):
    plain = compose(tiny())
    observed = compose(tiny("diagnostics=true"))
    assert run_id(plain) == run_id(observed)
    first = run_experiment(plain, tmp_path, progress=False)
    assert run_experiment(plain, tmp_path, progress=False).skipped
    second = run_experiment(observed, tmp_path, progress=False)
    assert not second.skipped and (second.path / "diagnostics.parquet").is_file()
    assert run_experiment(observed, tmp_path, progress=False).skipped
    assert run_experiment(plain, tmp_path, progress=False).skipped
    assert first.run_id == second.run_id


# ---------------------------------------------------------------------- next-byte (pysource)
def test_next_byte_runs_report_bits_per_byte(tmp_path):
    outcome = run_experiment(compose(tiny(data="pysource")), tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
    frame = metrics(outcome).dropna(subset=["val_loss"])
    assert len(frame) == 2
    assert frame["val_bpb"].tolist() == pytest.approx((frame["val_loss"] / math.log(2)).tolist())
    assert frame["val_acc"].between(0, 1).all()
    s = outcome.summary
    assert s["final_val_bpb"] == pytest.approx(frame["val_bpb"].iloc[-1])
    assert s["test_bpb"] == pytest.approx(s["test_loss"] / math.log(2))
    assert 4.0 < s["unigram_bpb"] < 5.2  # chance: the bytes' frequencies alone
    assert s["final_val_bpb"] < 8.5  # at most a little above uniform over 256 bytes


def test_training_windows_follow_the_seed_and_evaluation_windows_do_not(tmp_path):
    def first_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = compose(tiny(f"seed={seed}", data="pysource"))
        trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path, run_id(cfg)), False)
        trainer.setup()
        x, y, _ = next(trainer.batches())
        assert x.shape == y.shape == (32, 16) and torch.equal(x[:, 1:], y[:, :-1])
        return x, trainer.tensors["val"]["x"], trainer.tensors["test"]["y"]

    (x0, val0, test0), (x0_again, _, _), (x1, val1, test1) = map(first_batch, (0, 0, 1))
    assert torch.equal(x0, x0_again) and not torch.equal(x0, x1)
    assert torch.equal(val0, val1) and torch.equal(test0, test1)


def test_the_corpus_identity_is_part_of_a_pysource_run_id():
    cfg = compose(tiny(data="pysource"))
    assert cfg["data"]["corpus"] == corpus().identity
    assert compose(tiny(f"data.corpus={corpus().identity}", data="pysource")) == cfg
    other_python = {**cfg, "data": {**cfg["data"], "corpus": "python3.99.0-0123456789ab"}}
    assert run_id(other_python) != run_id(cfg)
    with pytest.raises(UsageError, match="not this interpreter's standard library"):
        compose(tiny("data.corpus=python3.99.0-0123456789ab", data="pysource"))


@pytest.mark.slow
def test_normbench_run_trains_a_language_model_from_the_command_line(tmp_path):
    command = [sys.executable, "-m", "normbench", "run", "-q", *tiny(data="pysource")]
    result = subprocess.run(
        [*command, "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("complete  val bpb ") and "test bpb" in line and "val_bpb <= 2.5" in line


def test_a_signal_between_the_config_and_meta_writes_waits_for_both():
    """A Ctrl-C arriving while a run directory is being made acts after its config.yaml and
    meta.json are both written (a run directory without meta.json looks half-written)."""
    import os
    import signal

    from normbench.training.run import signals_deferred

    # Ctrl-C as a terminal delivers it: a script's background job (`cmd &`) or nohup starts
    # pytest with SIGINT ignored, and then there is nothing for the block to re-raise.
    # (conftest's restore_signal_handlers puts the inherited disposition back afterwards.)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    finished = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        finished.append("config")
        finished.append("meta")
    assert finished == ["config", "meta"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_leftover_staging_directories_are_cleaned_when_the_next_run_starts(tmp_path):
    """A forced rerun killed by kill -9 leaves runs/.staging/<run_id>-<hex>/ behind; the next
    run deletes it, but never one whose run a live process holds (a forced rerun under way)."""
    runs = tmp_path / "runs"
    left, held, old = (f"cnn-batchnorm-pre-fp32-b32-s{seed}-0000000{seed}" for seed in (1, 2, 3))
    for directory in (f"{left}-0a1b2c3d/{left}", f"{held}-4e5f6a7b/{held}", f"0123abcd/{old}"):
        (runs / ".staging" / directory).mkdir(parents=True)
        (runs / ".staging" / directory / "metrics.parquet").write_bytes(b"PAR1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (runs / ".staging" / "link").symlink_to(outside)
    with RunDir(runs, held).lock():
        run_experiment(compose(tiny("model=cnn", "model.width=8")), runs, progress=False)
    assert sorted(p.name for p in (runs / ".staging").iterdir()) == [f"{held}-4e5f6a7b", "link"]
    assert outside.is_dir()
