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


def test_split_muon_orthogonalises_q_k_and_v_apart_and_fused_as_one():
    """train.muon_qkv=split: each of Q, K, V gets torch.optim.Muon's own update of a width x
    width matrix (the same numbers as Muon on that matrix alone); fused: the stacked weight's."""
    import torch

    from normbench.training.optimizers import SplitMuon

    torch.manual_seed(0)
    width = 8
    weight = torch.nn.Parameter(torch.randn(3 * width, width))
    alone = [torch.nn.Parameter(block.detach().clone()) for block in weight.detach().chunk(3)]
    grad = torch.randn(3 * width, width)
    weight.grad = grad.clone()
    for block, g in zip(alone, grad.chunk(3), strict=True):
        block.grad = g.clone()
    settings = dict(lr=0.1, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    SplitMuon([{"params": [weight], "splits": 3}], **settings).step()
    torch.optim.Muon(alone, **settings).step()
    assert torch.equal(weight.detach(), torch.cat([b.detach() for b in alone]))
    fused = torch.nn.Parameter(torch.cat([b.detach() for b in alone]).clone())
    fused.data = weight.detach().clone()  # the same start, then one fused step from it
    fused.grad = grad.clone()
    split = weight.detach().clone()
    weight.grad = grad.clone()
    SplitMuon([{"params": [weight], "splits": 3}], **settings).step()
    SplitMuon([fused], **settings).step()
    assert not torch.allclose(weight.detach() - split, fused.detach() - split)


@pytest.mark.parametrize("qkv, groups", [("split", [None, 3]), ("fused", [None])])
def test_the_qkv_weights_go_to_their_own_group_when_split(qkv, groups):
    cfg = compose(tiny("train.optimizer=muon", f"train.muon_qkv={qkv}", "train.adam_beta2=0.95"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    adamw, muon = build_optimizers(model, cfg["train"], 1.0, fused=False)
    assert [g.get("splits") for g in muon.param_groups] == groups
    if qkv == "split":
        by_id = {id(p): n for n, p in model.named_parameters()}
        assert {by_id[id(p)] for p in muon.param_groups[1]["params"]} == {
            f"units.{u}.sublayer.qkv.weight" for u in (0, 2)
        }
    assert {g["betas"] for g in adamw.param_groups} == {(0.9, 0.95)}


def test_the_new_optimizer_keys_keep_earlier_run_ids():
    """A Muon run made before train.muon_qkv was fused, AdamW's beta2 0.999: at those values
    the run id is the one it had; an AdamW run ignores muon_qkv."""
    fused = run_id(compose(tiny("train.optimizer=muon", "train.muon_qkv=fused")))
    split = run_id(compose(tiny("train.optimizer=muon")))
    assert fused != split
    assert run_id(compose(tiny("train.adam_beta2=0.999"))) == run_id(compose(tiny()))
    assert run_id(compose(tiny("train.muon_qkv=split"))) == run_id(compose(tiny()))
