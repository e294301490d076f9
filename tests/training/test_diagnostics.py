"""diagnostics=true: per-unit gradient norms and norm statistics, written with the right shape."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers import tiny

from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.report.diagnostics import by_sublayer, last_over_first
from normbench.store.rundir import DIAGNOSTICS_COLUMNS, RunDir
from normbench.training.diagnostics import Diagnostics, frozen_buffers
from normbench.training.run import run_experiment
from normbench.training.trainer import Trainer


def test_gradient_norm_per_unit_is_the_l2_norm_of_its_sublayer_gradients(tmp_path):
    torch.manual_seed(0)
    cfg = compose(tiny("model=cnn", "model.depth=2"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    for p in model.parameters():  # hand-checkable gradients: every entry is 0.5
        p.grad = torch.full_like(p, 0.5)
    norms = Diagnostics(model, RunDir(tmp_path, "r")).grad_norms()
    for unit, norm in zip(model.units, norms, strict=True):
        count = sum(p.numel() for p in unit.sublayer.parameters())
        assert norm == pytest.approx(0.5 * math.sqrt(count))


def test_watch_records_what_enters_and_leaves_each_norm(tmp_path):
    cfg = compose(tiny("model=cnn", "model.depth=2", "norm=layernorm"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    diagnostics = Diagnostics(model, RunDir(tmp_path, "r"))
    with diagnostics.watch():
        model(torch.randn(4, 1, 40) * 3 + 1)
    assert set(diagnostics.activations) == {0, 1}
    in_mean, in_std, out_mean, out_std = diagnostics.activations[0]
    assert abs(out_mean) < 1e-4 and out_std == pytest.approx(1.0, abs=0.05)  # layernorm output
    assert diagnostics.max_logits == {}  # no attention in the CNN
    assert not model.units[0].norm._forward_hooks  # removed afterwards
    assert not model.units[0]._forward_hooks and not model._forward_hooks


def test_watch_leaves_padding_out_of_the_stream_and_the_logits(tmp_path):
    """Padded tokens carry embeddings too: the residual RMS and the largest logit are over
    real tokens only, so more padding changes neither."""
    torch.manual_seed(0)
    cfg = compose(tiny(data="tokens"))
    model = build_model(cfg, (12,), 4, vocab_size=16).eval()
    diagnostics = Diagnostics(model, RunDir(tmp_path, "r"))
    tokens = torch.randint(1, 17, (2, 6))
    seen = []
    for padding in (2, 6):
        padded = F.pad(tokens, (0, padding))
        with diagnostics.watch():
            model(padded, mask=padded != 0)
        seen.append((dict(diagnostics.stream_rms), dict(diagnostics.max_logits)))
    assert seen[0][0] == pytest.approx(seen[1][0], rel=1e-5)
    assert seen[0][1] == pytest.approx(seen[1][1], rel=1e-5) and set(seen[0][1]) == {0, 2}


def test_frozen_buffers_keep_running_statistics():
    cfg = compose(tiny("model=cnn", "norm=batchnorm"))
    model = build_model(cfg, input_shape(cfg["data"]), 10).train()
    before = model.units[0].norm.running_mean.clone()
    with frozen_buffers(model):
        model(torch.randn(8, 1, 40) + 5)
    assert torch.equal(model.units[0].norm.running_mean, before)


@pytest.mark.parametrize("norm", ["switchnorm", "layernorm"])
def test_a_diagnosed_run_writes_one_row_per_unit_and_evaluation(norm, tmp_path):
    cfg = compose(tiny(f"norm={norm}", "diagnostics=true"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    frame = pd.read_parquet(outcome.path / "diagnostics.parquet")
    assert list(frame.columns) == list(DIAGNOSTICS_COLUMNS)
    units = 2 * 2  # depth 2, attention + MLP per block
    assert len(frame) == units * 3 and sorted(frame["step"].unique()) == [0, 3, 6]
    assert frame["grad_norm"].gt(0).all() and frame["in_std"].gt(0).all()
    assert list(frame["sublayer"][:4]) == ["attention", "mlp", "attention", "mlp"]
    evaluated = frame[frame["step"] > 0]  # step 0 has no validation pass
    if norm == "switchnorm":  # mixing weights are a distribution; the BN gap is measured
        sums = frame[["sn_mean_in", "sn_mean_ln", "sn_mean_bn"]].sum(axis=1)
        assert sums.to_numpy() == pytest.approx(1.0)
        assert evaluated["train_mode_val_acc"].notna().all()
        assert evaluated["eval_mode_val_acc"].notna().all()
    else:
        assert frame["sn_mean_in"].isna().all() and frame["train_mode_val_acc"].isna().all()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_diagnostics_do_not_change_the_training(precision, tmp_path):
    """Same losses, accuracies and gradient norms, to the bit, with diagnostics on and off
    (BatchNorm: its running statistics would show an extra training-mode pass). Without
    clipping, the undiagnosed fp16 run leaves unscaling to the optimizer at step 1, where
    the diagnosed one unscales first to read the gradients."""
    settings = ("norm=batchnorm", f"precision={precision}", "train.grad_clip=null")
    plain = run_experiment(compose(tiny(*settings)), tmp_path / "a", progress=False)
    diagnosed = run_experiment(
        compose(tiny(*settings, "diagnostics=true")), tmp_path / "b", progress=False
    )
    a = pd.read_parquet(plain.path / "metrics.parquet").drop(columns="elapsed_s")
    b = pd.read_parquet(diagnosed.path / "metrics.parquet").drop(columns="elapsed_s")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert plain.summary["test_loss"] == diagnosed.summary["test_loss"]


@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_step_zero_is_the_first_batch_at_initialisation(model, tmp_path):
    """The step-0 rows hold the gradient norms and activations of the first batch's forward
    and backward at initialisation, as computed here by hand from the model and batch a
    Trainer sets up (seeded, so the run's are the same)."""
    cfg = compose(tiny(f"model={model}", "norm=batchnorm", "diagnostics=true"))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path / "hand", "r"), progress=False)
    trainer.setup()
    x, y, mask = next(trainer.batches())
    inputs = {}

    def keep_input(index: int):
        def hook(module, args, output):
            inputs[index] = args[0].detach()

        return hook

    outputs, logits = {}, {}

    def keep_output(index: int):
        def hook(module, args, output):
            outputs[index] = output.detach()

        return hook

    def keep_logits(index: int):  # q.k / sqrt(d) of every head, by hand
        def hook(module, args, output):
            n, t, width = args[0].shape
            q, k, _ = module.qkv(args[0]).detach().split(width, dim=-1)
            q, k = (h.view(n, t, module.heads, -1).transpose(1, 2) for h in (q, k))
            logits[index] = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).amax().item()

        return hook

    for index, unit in enumerate(trainer.model.units):
        unit.norm.register_forward_hook(keep_input(index))
        unit.register_forward_hook(keep_output(index))
        if unit.sublayer.__class__.__name__ == "Attention":
            unit.sublayer.register_forward_hook(keep_logits(index))
    output = trainer.model(x, mask=mask)
    F.cross_entropy(output, y).backward()
    grad_norms = [
        math.sqrt(sum(p.grad.square().sum().item() for p in unit.sublayer.parameters()))
        for unit in trainer.model.units
    ]
    outcome = run_experiment(cfg, tmp_path / "runs", progress=False)
    frame = pd.read_parquet(outcome.path / "diagnostics.parquet")
    first = frame[frame["step"] == 0].sort_values("unit")
    assert first["grad_norm"].tolist() == pytest.approx(grad_norms, rel=1e-5)
    stds = [inputs[i].std().item() for i in range(len(grad_norms))]
    assert first["in_std"].tolist() == pytest.approx(stds, rel=1e-5)
    assert first["eval_mode_val_acc"].isna().all()  # no validation pass at step 0
    rms = [outputs[i].square().mean().sqrt().item() for i in range(len(grad_norms))]
    assert first["resid_rms"].tolist() == pytest.approx(rms, rel=1e-5)
    log_z = torch.logsumexp(output.detach(), -1).mean().item()
    assert first["log_z"].tolist() == pytest.approx([log_z] * len(grad_norms), rel=1e-5)
    largest = [logits.get(i, math.nan) for i in range(len(grad_norms))]
    assert first["max_logit"].tolist() == pytest.approx(largest, rel=1e-5, nan_ok=True)
    assert first["max_logit"].notna().sum() == (2 if model == "transformer" else 0)


def test_profiles_compare_units_of_one_sublayer_type():
    frame = pd.DataFrame(
        {
            "step": [0] * 6,
            "unit": range(6),
            "sublayer": ["attention", "mlp"] * 3,
            "grad_norm": [1.0, 10.0, 2.0, 20.0, 4.0, 5.0],
        }
    )
    placed = by_sublayer(frame)
    assert placed["layer"].tolist() == [0, 0, 1, 1, 2, 2]
    assert placed["layer_depth"].tolist() == [0, 0, 0.5, 0.5, 1, 1]
    ratios = last_over_first(frame).set_index("sublayer")["grad_norm_last_over_first"]
    assert ratios.to_dict() == {"attention": 4.0, "mlp": 0.5}  # not 5.0 / 1.0


def test_report_diagnostics_table_and_gradient_depth_plot(tmp_path):
    from typer.testing import CliRunner

    from normbench.cli import app

    runs = tmp_path / "runs"
    for placement in ("pre", "post"):
        run_experiment(
            compose(tiny(f"placement={placement}", "diagnostics=true")), runs, progress=False
        )
    result = CliRunner().invoke(
        app, ["report", str(runs), "--diagnostics", "--plots", str(tmp_path / "img")]
    )
    assert result.exit_code == 0, result.output
    assert "Diagnostics at the last evaluation" in result.output and "attention" in result.output
    assert "Diagnostics at initialisation (step 0" in result.output
    assert (tmp_path / "img" / "gradient_depth.png").stat().st_size > 10_000
    result = CliRunner().invoke(app, ["report", str(runs), "--format", "json", "--diagnostics"])
    import json

    payload = json.loads(result.stdout)
    rows = payload["diagnostics"]
    assert len(rows) == 2 * 4 and {r["placement.name"] for r in rows} == {"pre", "post"}
    assert {r["step"] for r in payload["diagnostics_init"]} == {0}
    assert {(r["sublayer"], r["layer"]) for r in rows} == {
        ("attention", 0),
        ("mlp", 0),
        ("attention", 1),
        ("mlp", 1),
    }
    assert all((r["max_logit"] is not None) == (r["sublayer"] == "attention") for r in rows)
    assert all(r["resid_rms"] > 0 and r["log_z"] > 0 for r in rows)


def test_report_diagnostics_without_diagnosed_runs_is_a_clear_error(tmp_path):
    from typer.testing import CliRunner

    from normbench.cli import app

    run_experiment(compose(tiny()), tmp_path, progress=False)
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--diagnostics"])
    assert result.exit_code == 2 and "diagnostics=true" in result.output


def test_without_diagnostics_no_logit_is_formed_explicitly(tmp_path, monkeypatch):
    """Scaled dot-product attention never shows its logits; forming them costs a second
    q.k^T. Only diagnosed steps pay it: a run without diagnostics never asks."""
    from normbench.layers.models import Attention

    def refuse(self, x, mask=None):
        raise AssertionError("largest_logit called without diagnostics")

    monkeypatch.setattr(Attention, "largest_logit", refuse)
    outcome = run_experiment(compose(tiny()), tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
