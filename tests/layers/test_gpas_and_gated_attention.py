"""placement=gpas (GPAS) and model.attention_gate (gated attention): each computes its paper's
equation, GPAS keeps the gradient it promises to keep, the gate leaves every other weight as
it was, the causal model stays causal, and the models that cannot take them refuse them."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.attention import Attention
from normbench.layers.models import MLP, ResidualUnit, build_model, count_parameters
from normbench.layers.norms import make_norm


def units(gate: float) -> tuple[ResidualUnit, ResidualUnit]:
    """A GPAS unit with its gate at ``gate`` and a Pre-LN unit with the same weights."""
    norm = partial(make_norm, "rmsnorm")
    torch.manual_seed(0)
    gpas = ResidualUnit(MLP(4, 8, torch.nn.Linear), 4, "tokens", "gpas", 2, norm)
    torch.manual_seed(0)
    pre = ResidualUnit(MLP(4, 8, torch.nn.Linear), 4, "tokens", "pre", 2, norm)
    with torch.no_grad():
        gpas.gpas_gate.fill_(gate)
    return gpas, pre


def test_gpas_scales_the_output_down_by_one_minus_silu_of_its_gate():
    gpas, pre = units(0.7)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(gpas(x), (1 - F.silu(torch.tensor(0.7))) * pre(x))
    assert gpas.gpas_gate.shape == () and pre.gpas_gate is None


def test_gpas_keeps_the_gradient_pre_ln_would_have_and_its_gate_learns():
    """Backward, the scaled-down copy is detached: the input's and the weights' gradients are
    Pre-LN's, not (1 - SiLU(g)) times them; the gate's is -SiLU'(g) * sum(w * h)."""
    gpas, pre = units(0.7)
    x = torch.randn(2, 3, 4)
    weights = torch.randn(2, 3, 4)
    grads = []
    for unit in (gpas, pre):
        inp = x.clone().requires_grad_()
        (unit(inp) * weights).sum().backward()
        grads.append((inp.grad, unit.sublayer.fc1.weight.grad))
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want)
    gate = torch.tensor(0.7, requires_grad=True)
    (slope,) = torch.autograd.grad(F.silu(gate), gate)
    h = pre(x).detach()
    torch.testing.assert_close(gpas.gpas_gate.grad, -slope * (weights * h).sum())


def test_gpas_gates_are_the_only_parameters_it_adds_and_draw_nothing():
    """One zero scalar per residual unit, drawn from no generator: every other weight is the
    Pre-LN model's at the same seed."""
    models = {}
    for placement in ("pre", "gpas"):
        cfg = compose(tiny(f"placement={placement}"))
        torch.manual_seed(0)
        models[placement] = build_model(cfg, input_shape(cfg["data"]), 10)
    pre, gpas = dict(models["pre"].named_parameters()), dict(models["gpas"].named_parameters())
    added = sorted(set(gpas) - set(pre))
    assert added == [f"units.{i}.gpas_gate" for i in range(4)]
    assert all(torch.equal(pre[name], gpas[name]) for name in pre)


def attention(gate: str) -> Attention:
    torch.manual_seed(0)
    return Attention(8, 2, torch.nn.Linear, gate=gate)


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_the_gate_multiplies_each_heads_output_before_the_projection(gate):
    """Qiu et al.'s G1: sigmoid(x W + b) from the sublayer's input x, times the scaled
    dot-product attention's output per head (one score per head, or per element), then the
    output projection; written out here apart from the module."""
    layer, plain = attention(gate), attention("none")
    x = torch.randn(3, 5, 8)
    q, k, v = plain.queries_keys_values(x)
    heads = F.scaled_dot_product_attention(q, k, v)  # (3, 2, 5, 4)
    scores = torch.sigmoid(layer.gate(x))  # (3, 5, 2) or (3, 5, 8)
    scores = scores[..., None] if gate == "headwise" else scores.view(3, 5, 2, 4)
    gated = heads.transpose(1, 2) * scores  # (3, 5, 2, 4)
    torch.testing.assert_close(layer(x), plain.proj(gated.reshape(3, 5, 8)))
    assert layer.gate.weight.shape == ((2, 8) if gate == "headwise" else (8, 8))


def test_the_gate_leaves_every_other_weight_and_a_fully_open_gate_is_plain_attention():
    layer, plain = attention("headwise"), attention("none")
    for name, parameter in plain.named_parameters():
        assert torch.equal(parameter, dict(layer.named_parameters())[name]), name
    with torch.no_grad():
        layer.gate.weight.zero_()
        layer.gate.bias.fill_(40.0)  # sigmoid(40) = 1 in float32
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(layer(x), plain(x))
    with torch.no_grad():
        layer.gate.bias[1] = -40.0  # head 1 closed: its values never reach the output
    before = layer(x)
    with torch.no_grad():
        layer.qkv.weight[20:] = torch.randn(4, 8)  # head 1's values: rows 20-23 of q, k, v
    torch.testing.assert_close(layer(x), before)


@pytest.mark.parametrize(
    ("gate", "per_layer"), [("headwise", 2 * 16 + 2), ("elementwise", 16 * 17)]
)
def test_the_model_key_builds_the_gate_in_every_attention_unit(gate, per_layer):
    cfg = compose(tiny(f"model.attention_gate={gate}"))
    plain = compose(tiny())
    size = {
        c["model"]["attention_gate"]: count_parameters(build_model(c, input_shape(c["data"]), 10))
        for c in (cfg, plain)
    }
    assert size[gate] - size["none"] == 2 * per_layer  # two blocks (tiny: depth 2, width 16)


def test_the_gated_language_model_stays_causal():
    cfg = compose(tiny("model.attention_gate=elementwise", "placement=gpas", data="pysource"))
    model = build_model(cfg, input_shape(cfg["data"]), 256, vocab_size=256).eval()
    x = torch.randint(0, 256, (2, 16))
    changed = x.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 256
    logits, other = model(x), model(changed)
    torch.testing.assert_close(other[:, :9], logits[:, :9], rtol=0, atol=1e-6)
    assert (other[:, 9] - logits[:, 9]).abs().amax() > 1e-4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model=cnn", "model.attention_gate=headwise"],
            "model.attention_gate is a key of model=transformer",
        ),
        (["model.attention_gate=rowwise"], "valid: none, headwise, elementwise"),
        (
            ["model.parametrization=mup", "model.attention_gate=headwise"],
            "valid with mup: model.attention_gate=none, elementwise",
        ),
        (["model=resnet", "placement=gpas"], "valid for model=resnet: post, pre"),
        (["model.weight_std=true", "placement=gpas"], "valid: placement=res_post, sandwich"),
    ],
)
def test_models_that_cannot_take_them_refuse_them_in_one_line(overrides, message):
    with pytest.raises(UsageError, match=message):
        compose(overrides)


@pytest.mark.slow
def test_the_language_model_trains_with_dyisru_gpas_and_the_gate_from_the_command_line(tmp_path):
    """One run through `normbench run` with all three on the causal LM (ssrmsnorm, dyisru and
    gpas also train on both models in tests/layers/test_models.py's parametrized runs)."""
    overrides = tiny(
        "norm=dyisru",
        "placement=gpas",
        "model.attention_gate=headwise",
        "train.max_steps=5",
        data="pysource",
    )
    result = CliRunner().invoke(app, ["run", *overrides, "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (meta,) = tmp_path.glob("*/meta.json")
    record = json.loads(meta.read_text())
    assert record["status"] == "complete", record
