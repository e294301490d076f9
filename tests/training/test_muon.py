"""train.optimizer=muon: torch.optim.Muon on the residual sublayers' 2-D weights, AdamW on the
rest; refused where it cannot work; a Muon run resumes from its checkpoint to the same metrics."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment import rules
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.store.rundir import RunDir, run_id
from normbench.training import checkpoint
from normbench.training.optimizers import build_optimizers
from normbench.training.run import run_experiment


def names(model, optimizer) -> set[str]:
    by_id = {id(p): name for name, p in model.named_parameters()}
    return {by_id[id(p)] for group in optimizer.param_groups for p in group["params"]}


@pytest.mark.parametrize("placement", ["pre", "sandwich", "deepnorm"])
def test_muon_gets_exactly_the_2d_hidden_weights_and_adamw_the_rest(placement):
    cfg = compose(
        tiny(
            "train.optimizer=muon",
            "model.qk_norm=layernorm",
            "norm=adaln",
            f"placement={placement}",
        )
    )
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    adamw, muon = build_optimizers(model, cfg["train"], 1.0, fused=False)
    hidden = {
        f"units.{u}.sublayer.{w}.weight"
        for u in range(4)  # two blocks of an attention and an MLP unit
        for w in (("qkv", "proj") if u % 2 == 0 else ("fc1", "fc2"))
    }
    assert names(model, muon) == hidden
    rest = names(model, adamw)
    assert rest == {name for name, _ in model.named_parameters()} - hidden
    assert {"embed.weight", "embed.bias", "pos", "head.weight"} <= rest
    assert any(".qk_norm." in n for n in rest) and any(".norm.modulation." in n for n in rest)
    assert muon.param_groups[0]["lr"] == cfg["train"]["muon_lr"] == 0.02
    assert muon.param_groups[0]["momentum"] == 0.95
    assert {g["lr"] for g in adamw.param_groups} == {cfg["train"]["lr"]}


def test_adamw_alone_without_muon():
    cfg = compose(tiny())
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    adamw, muon = build_optimizers(model, cfg["train"], 1.0, fused=False)
    assert muon is None and names(model, adamw) == {n for n, _ in model.named_parameters()}


def test_the_muon_keys_stay_out_of_the_run_id_at_their_defaults():
    base = run_id(compose(tiny()))
    assert run_id(compose(tiny("train.muon_lr=0.02", "train.muon_momentum=0.95"))) == base
    assert run_id(compose(tiny("train.muon_lr=0.05"))) == base  # AdamW reads neither
    muon = run_id(compose(tiny("train.optimizer=muon")))
    assert run_id(compose(tiny("train.optimizer=muon", "train.muon_lr=0.05"))) != muon


@pytest.mark.parametrize("model", ["cnn", "resnet"])
def test_muon_is_refused_for_the_conv_models(model):
    overrides = [o for o in tiny(f"model={model}", "train.optimizer=muon") if "heads" not in o]
    with pytest.raises(UsageError, match=f"model={model}'s sublayers are convolutions"):
        compose(overrides)


def test_muon_is_refused_in_one_line_where_torch_has_none(monkeypatch):
    monkeypatch.setattr(rules, "torch_version", lambda: (2, 8))
    with pytest.raises(UsageError, match=r"needs torch.optim.Muon, new in PyTorch 2.9.*2\.8"):
        compose(tiny("train.optimizer=muon"))


def test_a_muon_run_resumes_from_its_checkpoint_to_the_uninterrupted_metrics(tmp_path, monkeypatch):
    cfg = compose(tiny("train.optimizer=muon", "train.max_steps=20", "train.checkpoint_every=7"))
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    save = checkpoint.save

    def save_then_stop(path, state):
        save(path, state)
        monkeypatch.setattr(checkpoint, "save", save)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "resumed", progress=False)
    run = RunDir(tmp_path / "resumed", run_id(cfg))
    assert "muon" in checkpoint.load(run.path / checkpoint.FILE_NAME)
    resumed = run_experiment(cfg, tmp_path / "resumed", progress=False)
    assert resumed.status == whole.status == "complete"
    columns = ["step", "lr", "train_loss", "val_loss", "grad_norm"]
    pd.testing.assert_frame_equal(
        pd.read_parquet(whole.path / "metrics.parquet")[columns],
        pd.read_parquet(run.path / "metrics.parquet")[columns],
    )


def test_muon_lr_null_is_one_rate_for_both_with_moonlights_rms_matching():
    cfg = compose(tiny("train.optimizer=muon", "train.muon_lr=null", "train.lr=0.03"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    adamw, muon = build_optimizers(model, cfg["train"], 2.0, fused=False)
    assert muon.param_groups[0]["lr"] == adamw.param_groups[0]["lr"] == 0.06
    assert muon.param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    cfg = compose(tiny("train.optimizer=muon"))
    _, muon = build_optimizers(model, cfg["train"], 1.0, fused=False)
    assert muon.param_groups[0]["adjust_lr_fn"] == "original"


def test_muon_at_a_rate_past_floats_range_diverges_as_adamw_does(tmp_path):
    """Issue 51, item 18: AdamW at lr 1e308 diverged, Muon at muon_lr 1e308 failed with a
    RuntimeError (torch cannot make the rate a float) and was trained again by every sweep."""
    statuses = {}
    for optimizer in ("adamw", "muon"):
        rate = "train.lr=1e308" if optimizer == "adamw" else "train.muon_lr=1e308"
        cfg = compose(tiny(f"train.optimizer={optimizer}", rate))
        result = run_experiment(cfg, tmp_path)
        meta = RunDir(tmp_path, run_id(cfg)).read_meta()
        statuses[optimizer] = (result.status, meta["status"], meta.get("error"))
    assert statuses == {"adamw": ("diverged",) * 2 + (None,), "muon": ("diverged",) * 2 + (None,)}
