"""DyISRU (norm=dyisru) and single-scale RMSNorm (norm=ssrmsnorm): each computes its paper's
formula, has the gradients of that formula, starts where its paper says it starts, and takes
its keys from the config. The contract every norm keeps (check-norm) is
tests/layers/test_conformance.py's, which runs over every shipped norm, these included."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.layers.norms import make_norm


def dyisru_reference(x, beta, gamma, bias, eps, layout):
    """The paper's equation, gamma * sqrt(C) x / sqrt(beta + x^2) + bias, with RMSNorm's eps
    (C * eps inside the root), in float64, written apart from the module."""
    c = gamma.numel()
    shape = (-1,) if layout == "tokens" else (-1, *([1] * (x.dim() - 2)))
    y = math.sqrt(c) * x / torch.sqrt(beta + x.square() + c * eps)
    return gamma.view(shape) * y + bias.view(shape)


@pytest.mark.parametrize(("layout", "shape"), [("tokens", (3, 5, 8)), ("channels", (3, 8, 4))])
def test_dyisru_is_the_papers_formula(layout, shape):
    torch.manual_seed(0)
    norm = make_norm("dyisru", 8, layout, beta_init=2.5).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
        norm.bias.uniform_(-1.0, 1.0)
    x = torch.randn(*shape, dtype=torch.float64) * 3
    expected = dyisru_reference(x, 2.5, norm.weight, norm.bias, norm.eps, layout)
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=1e-12)


def test_dyisru_is_rmsnorm_where_beta_is_the_other_features_sum_of_squares():
    """The derivation: RMSNorm's x_i / rms(x) is sqrt(C) x_i / sqrt(x_i^2 + sum_{j!=i} x_j^2).
    Where every feature has the same magnitude a, the other features' sum is (C - 1) a^2 for
    each of them, the default beta at a = 1: DyISRU is RMSNorm there, and not elsewhere."""
    torch.manual_seed(0)
    signs = torch.randint(0, 2, (4, 6, 16)).double() * 2 - 1
    for magnitude, beta_init in ((1.0, None), (3.0, 15 * 9.0)):
        x = signs * magnitude
        dyisru = make_norm("dyisru", 16, "tokens", beta_init=beta_init).double()
        torch.testing.assert_close(dyisru(x), F.rms_norm(x, (16,), eps=1e-5))
    uneven = torch.randn(4, 6, 16, dtype=torch.float64)
    dyisru = make_norm("dyisru", 16, "tokens").double()
    assert (dyisru(uneven) - F.rms_norm(uneven, (16,), eps=1e-5)).abs().max() > 0.05


def test_dyisru_starts_at_beta_c_minus_1_and_is_bounded_by_root_c():
    norm = make_norm("dyisru", 64, "tokens")
    assert norm.beta.shape == () and norm.beta.item() == 63.0
    assert norm.weight.shape == (64,) and norm.bias.shape == (64,)
    huge = torch.tensor([[[1e6, -1e6] + [0.0] * 62]])
    torch.testing.assert_close(norm(huge)[0, 0, :2], torch.tensor([8.0, -8.0]), rtol=1e-4, atol=0)


def test_dyisru_gradients_match_finite_differences():
    """The module's gradients for the input, beta, gamma and the bias, against central
    differences in float64 (torch.autograd.gradcheck)."""
    torch.manual_seed(0)
    norm = make_norm("dyisru", 6, "tokens", beta_init=3.0).double()
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    names = ("beta", "weight", "bias")
    values = [dict(norm.named_parameters())[n].detach().clone().requires_grad_() for n in names]

    def forward(x, *parameters):
        return torch.func.functional_call(norm, dict(zip(names, parameters, strict=True)), (x,))

    assert torch.autograd.gradcheck(forward, (x, *values))


@pytest.mark.parametrize(("layout", "shape"), [("tokens", (3, 5, 8)), ("channels", (3, 8, 2, 3))])
def test_single_scale_rmsnorm_is_rmsnorm_with_one_scalar_gain(layout, shape):
    torch.manual_seed(0)
    norm = make_norm("ssrmsnorm", 8, layout)
    assert [p.shape for p in norm.parameters()] == [torch.Size([])] and norm.weight.item() == 1
    x = torch.randn(*shape) * 2 + 0.3
    features = (8,) if layout == "tokens" else shape[1:]
    with torch.no_grad():
        norm.weight.fill_(1.7)
    torch.testing.assert_close(norm(x), 1.7 * F.rms_norm(x, features, eps=1e-5))


@pytest.mark.parametrize(("layout", "shape"), [("tokens", (3, 5, 8)), ("channels", (3, 8, 4))])
def test_single_scale_rmsnorm_starts_as_scalenorm_and_their_gains_differ_by_root_d(layout, shape):
    """The same functions, parametrized apart: ScaleNorm's gain is sqrt(D) times this one's."""
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64)
    single, scale = (make_norm(n, 8, layout).double() for n in ("ssrmsnorm", "scalenorm"))
    torch.testing.assert_close(single(x), scale(x), rtol=1e-4, atol=1e-4)  # eps apart
    assert scale.g.item() == pytest.approx(math.sqrt(8) * single.weight.item())


def test_single_scale_rmsnorms_gain_gradient_is_the_sum_over_every_feature():
    torch.manual_seed(0)
    norm = make_norm("ssrmsnorm", 8, "tokens")
    x, weights = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    (norm(x) * weights).sum().backward()
    expected = (F.rms_norm(x, (8,), eps=1e-5) * weights).sum()
    torch.testing.assert_close(norm.weight.grad, expected)


def test_the_keys_reach_the_norms_and_bad_values_are_refused():
    cfg = compose(["model=cnn", "norm=dyisru", "norm.beta_init=5"])
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    assert model.units[0].norm.beta.item() == 5.0 and model.final_norm.beta.item() == 5.0
    cfg = compose(["norm=ssrmsnorm"])
    transformer = build_model(cfg, input_shape(cfg["data"]), 10)
    assert all(unit.norm.weight.shape == () for unit in transformer.units)
    with pytest.raises(UsageError, match=r"norm.beta_init=-1 is not valid; valid: a finite"):
        compose(["norm=dyisru", "norm.beta_init=-1"])
    with pytest.raises(UsageError, match=r"norm.beta_init is a key of norm=dyisru"):
        compose(["norm=ssrmsnorm", "norm.beta_init=1"])
