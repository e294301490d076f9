"""The published recipes' options, each present only when asked, out of the run id when off:
Peri-LN's embedding norm (model.embed_norm), DyT's and Derf's learnable embedding scale
(model.embed_scale) and per-position alpha_init (attention, MLP, final)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import seeded_model
from normbench.layers.norms import Norm
from normbench.store.rundir import run_id
from normbench.training.optimizers import build_optimizers


def model_of(*overrides: str, data: str = "mnist1d") -> torch.nn.Module:
    cfg = compose(tiny(*overrides, data=data))
    return seeded_model(cfg, input_shape(cfg["data"]), 10, 16 if data == "tokens" else 0)


def test_neither_embedding_option_is_there_unless_asked():
    plain = model_of()
    assert plain.embed_norm is None and plain.embed_scale is None
    both = model_of("model.embed_norm=true", "model.embed_scale=true")
    assert isinstance(both.embed_norm, Norm) and both.embed_scale.item() == math.sqrt(16)
    extra = set(both.state_dict()) - set(plain.state_dict())
    assert extra == {"embed_scale", "embed_norm.weight", "embed_norm.bias"}
    for name, value in plain.state_dict().items():  # every other weight as it was
        torch.testing.assert_close(both.state_dict()[name], value, rtol=0, atol=0)


def test_the_embedding_norm_normalises_the_first_blocks_input():
    model = model_of("model.embed_norm=true", "placement=peri", data="tokens").eval()
    seen = []
    model.units[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    tokens = torch.randint(1, 17, (2, 6))
    model(tokens, mask=tokens != 0)
    expected = model.embed_norm(model.embed(tokens) + model.pos[:, :6])
    torch.testing.assert_close(seen[0], expected)
    torch.testing.assert_close(seen[0].std(-1, unbiased=False), torch.ones(2, 6), atol=1e-3, rtol=0)


def test_the_embedding_scale_multiplies_the_embedding_and_is_learnt():
    model = model_of("model.embed_scale=true", data="tokens")
    tokens = torch.randint(1, 17, (2, 6))
    seen = []
    model.units[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    model(tokens, mask=tokens != 0).sum().backward()
    torch.testing.assert_close(seen[0], 4.0 * model.embed(tokens) + model.pos[:, :6])
    assert model.embed_scale.grad is not None


def test_each_position_gets_its_own_alpha_only_when_asked():
    default = model_of("norm=dyt", "placement=sandwich", "model.depth=1")
    assert {
        n.alpha.item() for n in default.modules() if hasattr(n, "alpha") and isinstance(n, Norm)
    } == {0.5}
    model = model_of(
        "norm=derf",
        "placement=sandwich",
        "model.depth=1",
        "norm.alpha_init=0.3",
        "norm.alpha_init_attention=0.8",
        "norm.alpha_init_mlp=0.2",
        "norm.alpha_init_final=0.1",
        "model.embed_norm=true",
    )
    attention, mlp = model.units
    assert [attention.norm.alpha.item(), attention.norm2.alpha.item()] == pytest.approx([0.8] * 2)
    assert [mlp.norm.alpha.item(), mlp.norm2.alpha.item()] == pytest.approx([0.2] * 2)
    assert model.final_norm.alpha.item() == pytest.approx(0.1)
    assert model.embed_norm.alpha.item() == pytest.approx(0.3)  # no position of its own
    cnn = model_of("model=cnn", "norm=dyt", "norm.alpha_init_final=0.1")
    assert cnn.final_norm.alpha.item() == pytest.approx(0.1)
    assert cnn.units[0].norm.alpha.item() == 0.5


def test_the_options_leave_the_run_id_at_their_defaults_only():
    base = run_id(compose(tiny("norm=dyt")))
    off = ["model.embed_norm=false", "model.embed_scale=false", "norm.alpha_init_mlp=null"]
    assert run_id(compose(tiny("norm=dyt", *off))) == base
    for on in ("model.embed_norm=true", "model.embed_scale=true", "norm.alpha_init_mlp=0.2"):
        assert run_id(compose(tiny("norm=dyt", on))) != base, on


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=cnn", "norm=dyt", "norm.alpha_init_attention=0.8"], "model=cnn has none"),
        (["model=cnn", "model.embed_norm=true"], "model.embed_norm is a key of model=transformer"),
        (["norm=layernorm", "norm.alpha_init_final=0.1"], "is a key of norm=dyt/derf"),
    ],
)
def test_options_where_they_mean_nothing_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        compose(overrides)


def test_the_embedding_options_stay_with_adamw_under_muon():
    cfg = compose(tiny("train.optimizer=muon", "model.embed_norm=true", "model.embed_scale=true"))
    model = seeded_model(cfg, input_shape(cfg["data"]), 10)
    _, muon = build_optimizers(model, cfg["train"], 1.0, fused=False)
    in_muon = {id(p) for p in muon.param_groups[0]["params"]}
    assert id(model.embed_scale) not in in_muon
    assert not any(id(p) in in_muon for p in model.embed_norm.parameters())
