"""model.sdd (Scale-Distribution Decoupling): each linear of the Transformer's units is the
official README's SDDLinear, RMSNorm(W x + b) with a gain; the fused q, k, v are normalised
apart; nothing else of the model changes; the causal model stays causal and trains."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.layers.sdd import SDDLinear


def test_sdd_linear_is_the_readmes_linear_then_rmsnorm():
    """The README's SDDLinear: torch.nn.Linear, then torch.nn.RMSNorm(eps=1e-6) with its
    elementwise affine; here with the gain moved off 1."""
    torch.manual_seed(0)
    layer = SDDLinear(6, 4)
    with torch.no_grad():
        layer.scale.uniform_(0.5, 2.0)
    reference = torch.nn.RMSNorm(4, eps=1e-6)
    with torch.no_grad():
        reference.weight.copy_(layer.scale)
    x = torch.randn(3, 5, 6) * 10
    plain = torch.nn.functional.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(layer(x), reference(plain))


def test_the_fused_qkv_is_normalised_as_three_layers():
    torch.manual_seed(0)
    layer = SDDLinear(4, 12, parts=3)
    x = torch.randn(2, 4)
    plain = torch.nn.functional.linear(x, layer.weight, layer.bias)
    parts = [torch.nn.functional.rms_norm(p, (4,), eps=1e-6) for p in plain.split(4, dim=-1)]
    torch.testing.assert_close(layer(x), torch.cat(parts, -1))
    with pytest.raises(ValueError, match="parts=5 must divide out_features=12"):
        SDDLinear(4, 12, parts=5)


def test_the_key_makes_every_unit_linear_sdd_and_changes_no_other_weight():
    models = {}
    for sdd in ("false", "true"):
        cfg = compose(tiny(f"model.sdd={sdd}", "model.attention_gate=headwise"))
        torch.manual_seed(0)
        models[sdd] = build_model(cfg, input_shape(cfg["data"]), 10)
    attention, mlp = models["true"].units[0].sublayer, models["true"].units[1].sublayer
    assert all(isinstance(m, SDDLinear) for m in (attention.qkv, attention.proj, mlp.fc1, mlp.fc2))
    assert attention.qkv.parts == 3 and type(attention.gate) is torch.nn.Linear
    plain, decoupled = (dict(m.named_parameters()) for m in (models["false"], models["true"]))
    assert sorted(set(decoupled) - set(plain)) == sorted(
        f"units.{u}.sublayer.{layer}.scale"
        for u in range(4)
        for layer in (("qkv", "proj") if u % 2 == 0 else ("fc1", "fc2"))
    )
    assert all(torch.equal(plain[name], decoupled[name]) for name in plain)


def test_post_ln_with_sdd_stays_causal_and_its_gradients_are_finite():
    cfg = compose(
        tiny("model.sdd=true", "placement=post", "model.embed_norm=true", data="pysource")
    )
    model = build_model(cfg, input_shape(cfg["data"]), 256, vocab_size=256)
    x = torch.randint(0, 256, (2, 16))
    changed = x.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 256
    logits = model(x)
    torch.testing.assert_close(model(changed)[:, :9], logits[:, :9], rtol=0, atol=1e-6)
    logits.logsumexp(-1).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_sdd_with_weight_standardization_is_refused():
    with pytest.raises(UsageError, match="model.sdd=true normalises each linear's output"):
        compose(["model.sdd=true", "model.weight_std=true", "placement=res_post"])
