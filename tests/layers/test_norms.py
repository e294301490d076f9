"""Every norm in both layouts: shapes, gradients, float32 statistics, equivalence with PyTorch."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normbench.experiment.options import group_options
from normbench.layers.norms import NORMS, make_norm
from normbench.layers.numerics import relative_error

C = 8
LAYOUT_INPUTS = {"channels": (4, C, 6), "tokens": (4, 5, C)}


def padded_mask(n: int = 4, t: int = 5) -> torch.Tensor:
    mask = torch.ones(n, t, dtype=torch.bool)
    mask[0, 3:] = False
    mask[2, 1:] = False
    return mask


def test_registry_matches_the_config_options():
    assert sorted(NORMS) == group_options("norm")


@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_forward_backward_shapes_and_finite(name, layout):
    torch.manual_seed(0)
    x = torch.randn(*LAYOUT_INPUTS[layout], requires_grad=True)
    mask = padded_mask() if layout == "tokens" else None
    layer = make_norm(name, C, layout, groups=4)
    y = layer(x, mask=mask)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.isfinite(y).all()
    y.square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for p in layer.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


@pytest.mark.parametrize("spatial", [(6,), (3, 4)])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_channels_layout_takes_1d_and_2d(name, spatial):
    x = torch.randn(3, C, *spatial)
    assert make_norm(name, C, "channels", groups=2)(x).shape == x.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("name", sorted(set(NORMS) - {"none"}))
def test_statistics_in_float32_under_autocast(name, layout, dtype):
    """Under autocast the output equals the float32 computation, cast to the input's dtype."""
    torch.manual_seed(0)
    x = (torch.randn(*LAYOUT_INPUTS[layout]) * 30 + 100).to(dtype)
    layer = make_norm(name, C, layout, groups=4)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.rand_like(p) * 0.1)
        reference = layer(x.float()).to(dtype)
        with torch.autocast("cpu", dtype=dtype):
            y = layer(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, reference, rtol=0, atol=0)


def test_without_fp32_stats_statistics_stay_in_low_precision():
    """norm.fp32_stats=false really computes in bf16: its output leaves the float32 answer.

    With float32 statistics the only error is the bf16 rounding of the output (half a bf16
    step for outputs up to 2: 0.0078); bf16 statistics add their own."""
    torch.manual_seed(0)
    x = (torch.randn(4, C, 16) * 0.1 + 10).to(torch.bfloat16)
    low_layer = make_norm("switchnorm", C, "channels", fp32_stats=False)
    high_layer = make_norm("switchnorm", C, "channels")
    reference = make_norm("switchnorm", C, "channels")(x.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, high = low_layer(x), high_layer(x)
    high_error = (high.float() - reference).abs().max()
    low_error = (low.float() - reference).abs().max()
    assert high_error < 0.008 and low_error > 0.012


def random_affine(layer):
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    return layer


def test_builtin_norms_match_pytorch_ops():
    torch.manual_seed(0)
    xc, xt = torch.randn(4, C, 6), torch.randn(4, 5, C)
    bn = random_affine(make_norm("batchnorm", C, "channels"))
    ref_rm, ref_rv = torch.zeros(C), torch.ones(C)
    expected = F.batch_norm(xc, ref_rm, ref_rv, bn.weight, bn.bias, True, 0.1, 1e-5)
    torch.testing.assert_close(bn(xc), expected, rtol=0, atol=0)
    torch.testing.assert_close(bn.running_mean, ref_rm)
    torch.testing.assert_close(bn.running_var, ref_rv)

    ln = random_affine(make_norm("layernorm", C, "tokens"))
    expected = F.layer_norm(xt, (C,), ln.weight, ln.bias, 1e-5)
    torch.testing.assert_close(ln(xt), expected, rtol=0, atol=0)
    # channels LayerNorm: F.layer_norm's statistics over (C, S), per-C affine
    ln_c = random_affine(make_norm("layernorm", C, "channels"))
    stats = F.layer_norm(xc, xc.shape[1:], eps=1e-5)
    expected = stats * ln_c.weight[:, None] + ln_c.bias[:, None]
    torch.testing.assert_close(ln_c(xc), expected, rtol=1e-5, atol=1e-5)

    gn = random_affine(make_norm("groupnorm", C, "channels", groups=4))
    torch.testing.assert_close(gn(xc), F.group_norm(xc, 4, gn.weight, gn.bias, 1e-5))
    inn = random_affine(make_norm("instancenorm", C, "channels"))
    torch.testing.assert_close(inn(xc), F.instance_norm(xc, weight=inn.weight, bias=inn.bias))
    rms = make_norm("rmsnorm", C, "tokens")
    with torch.no_grad():
        rms.weight.normal_()
    torch.testing.assert_close(rms(xt), F.rms_norm(xt, (C,), rms.weight, 1e-5), rtol=0, atol=0)


def test_groupnorm_with_one_group_is_layernorm_in_both_layouts():
    torch.manual_seed(0)
    for layout in ("channels", "tokens"):
        x = torch.randn(*LAYOUT_INPUTS[layout])
        gn = make_norm("groupnorm", C, layout, groups=1)
        ln = make_norm("layernorm", C, layout)
        torch.testing.assert_close(gn(x), ln(x), rtol=1e-5, atol=1e-5)


def test_tokens_groupnorm_is_per_token_over_feature_groups():
    x = torch.randn(2, 3, C)
    y = make_norm("groupnorm", C, "tokens", groups=2)(x)
    for half in (slice(0, 4), slice(4, 8)):
        part = x[..., half]
        expected = (part - part.mean(-1, keepdim=True)) / torch.sqrt(
            part.var(-1, unbiased=False, keepdim=True) + 1e-5
        )
        torch.testing.assert_close(y[..., half], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("which", ["instancenorm", "layernorm", "batchnorm"])
def test_switchnorm_with_one_hot_weights_is_that_norm(layout, which):
    torch.manual_seed(0)
    x = torch.randn(*LAYOUT_INPUTS[layout]) * 2 + 1
    sn = make_norm("switchnorm", C, layout)
    one_hot = torch.full((3,), -100.0)
    one_hot[["instancenorm", "layernorm", "batchnorm"].index(which)] = 100.0
    with torch.no_grad():
        sn.mean_weight.copy_(one_hot)
        sn.var_weight.copy_(one_hot)
    reference = make_norm(which, C, layout)
    torch.testing.assert_close(sn(x), reference(x), rtol=1e-4, atol=1e-4)
    if which == "batchnorm":  # same running statistics, so eval mode agrees too
        torch.testing.assert_close(sn.running_mean, reference.running_mean)
        torch.testing.assert_close(sn.running_var, reference.running_var)
        sn.eval()
        reference.eval()
        torch.testing.assert_close(sn(x), reference(x), rtol=1e-4, atol=1e-4)


def test_switchnorm_starts_with_equal_weights_and_mixes_means_and_variances_separately():
    sn = make_norm("switchnorm", C, "channels")
    assert torch.equal(sn.mean_weight.softmax(0), torch.full((3,), 1 / 3))
    assert sn.mean_weight is not sn.var_weight


@pytest.mark.parametrize("ghost_batch", [None, 4])
@pytest.mark.parametrize("ratio", [10, 100, 1000])
@pytest.mark.parametrize("case", ["channels", "tokens", "masked"])
def test_switchnorm_is_accurate_when_the_mean_dwarfs_the_spread(case, ratio, ghost_batch):
    """Float32 output within 1e-4 (largest error over largest output) of a float64 run of the
    same module on the same input, at mean/std = ratio; running statistics too, and eval mode.
    E[x^2] - mean^2 gives 0.15 at 1,000."""
    torch.manual_seed(0)
    layout = "channels" if case == "channels" else "tokens"
    shape = (16, 32, 64) if layout == "channels" else (16, 64, 32)
    x = torch.randn(*shape) + ratio
    mask = None
    if case == "masked":
        mask = torch.rand(shape[:2]) < 0.7
        x[~mask] = 3 * ratio  # padding far from the real tokens
    layer = make_norm("switchnorm", 32, layout, ghost_batch=ghost_batch)
    reference = make_norm("switchnorm", 32, layout, ghost_batch=ghost_batch).double()

    assert relative_error(layer(x, mask=mask), reference(x.double(), mask=mask), mask) <= 1e-4
    for name in ("running_mean", "running_var"):
        assert relative_error(getattr(layer, name), getattr(reference, name)) <= 1e-4
    layer.eval()
    reference.eval()
    assert relative_error(layer(x, mask=mask), reference(x.double(), mask=mask), mask) <= 1e-4


@pytest.mark.parametrize("case", ["channels", "tokens", "masked"])
def test_switchnorm_gradients_are_exact(case):
    """The shift that keeps the moments accurate carries no gradient; the output does not
    depend on it, so the analytic gradient still matches finite differences (float64)."""
    torch.manual_seed(0)
    layout = "channels" if case == "channels" else "tokens"
    layer = make_norm("switchnorm", 4, layout, ghost_batch=2).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_()
    shape = (3, 4, 5) if layout == "channels" else (3, 5, 4)
    x = (torch.randn(*shape, dtype=torch.float64) + 3).requires_grad_()
    mask = None
    if case == "masked":
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda t: layer(t, mask=mask), (x,))


@pytest.mark.parametrize("name", ["batchnorm", "instancenorm", "switchnorm", "adaln"])
def test_masked_statistics_equal_statistics_of_the_unpadded_tokens(name):
    """A padded batch gives, at real positions, what the real tokens alone give."""
    torch.manual_seed(0)
    lengths = [5, 3, 2, 4]
    real = [torch.randn(n, C) * 3 + 2 for n in lengths]
    padded = torch.full((4, 5, C), 1e3)  # padding values that would wreck the statistics
    mask = torch.zeros(4, 5, dtype=torch.bool)
    for i, tokens in enumerate(real):
        padded[i, : len(tokens)] = tokens
        mask[i, : len(tokens)] = True
    layer = make_norm(name, C, "tokens")
    if name == "adaln":
        with torch.no_grad():
            layer.modulation.weight.normal_()
    y = layer(padded, mask=mask)
    if name in ("batchnorm", "switchnorm"):  # batch statistics: all real tokens together
        flat = torch.cat(real)[None]  # one sequence of every real token
        expected = make_norm(name, C, "tokens")
        if name == "switchnorm":  # IN/LN/BN of one sequence == BN over the tokens when
            with torch.no_grad():  # the BN weight is one-hot
                for w in (
                    layer.mean_weight,
                    layer.var_weight,
                    expected.mean_weight,
                    expected.var_weight,
                ):
                    w.copy_(torch.tensor([-100.0, -100.0, 100.0]))
            y = layer(padded, mask=mask)
        torch.testing.assert_close(y[mask], expected(flat)[0], rtol=1e-4, atol=1e-4)
    else:
        for i, tokens in enumerate(real):
            alone = layer(tokens[None])[0]
            torch.testing.assert_close(y[i, : len(tokens)], alone, rtol=1e-4, atol=1e-4)
    unmasked = make_norm(name, C, "tokens", mask_padding=False)
    unmasked.load_state_dict(layer.state_dict())
    assert not torch.allclose(unmasked(padded, mask=mask)[mask], y[mask], atol=1e-2)


@pytest.mark.parametrize("name", ["batchnorm", "switchnorm"])
@pytest.mark.parametrize("layout", ["channels", "tokens"])
def test_eval_mode_uses_running_statistics(name, layout):
    torch.manual_seed(0)
    layer = make_norm(name, C, layout, momentum=0.5)
    for _ in range(3):
        layer(torch.randn(*LAYOUT_INPUTS[layout]) * 2 + 3)
    assert not torch.allclose(layer.running_mean, torch.zeros(C))
    layer.eval()
    x = torch.randn(*LAYOUT_INPUTS[layout])
    one = layer(x[:1])  # eval output of a sample does not depend on the rest of the batch
    torch.testing.assert_close(one, layer(x)[:1])
    if name == "switchnorm":  # isolate the BN component
        with torch.no_grad():
            layer.mean_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
            layer.var_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
    shape = (1, C, 1) if layout == "channels" else (1, 1, C)
    mean, var = layer.running_mean.view(shape), layer.running_var.view(shape)
    expected = (x - mean) / torch.sqrt(var + 1e-5)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["batchnorm", "switchnorm"])
def test_ghost_batch_takes_statistics_per_chunk(name):
    torch.manual_seed(0)
    x = torch.randn(8, C, 6)
    x[4:] = x[4:] * 5 + 10  # the two chunks have different statistics
    ghost = make_norm(name, C, "channels", ghost_batch=4)
    if name == "switchnorm":
        with torch.no_grad():
            ghost.mean_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
            ghost.var_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
    y = ghost(x)
    for chunk in (slice(0, 4), slice(4, 8)):
        alone = x[chunk]
        mean = alone.mean((0, 2), keepdim=True)
        var = alone.var((0, 2), unbiased=False, keepdim=True)
        torch.testing.assert_close(
            y[chunk], (alone - mean) / torch.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4
        )
    assert not torch.allclose(ghost.running_mean, torch.zeros(C))  # still updated


@pytest.mark.parametrize("name", ["batchnorm", "switchnorm"])
@pytest.mark.parametrize("layout", ["channels", "tokens"])
def test_ghost_batches_equal_torch_batchnorm_chunk_by_chunk(name, layout):
    """All chunks at once (with an uneven last chunk) give what torch's BatchNorm gives run on
    one chunk after another, running statistics included (SwitchNorm with one-hot BN weight)."""
    torch.manual_seed(0)
    shape = (10, C, 6) if layout == "channels" else (10, 5, C)
    ghost = make_norm(name, C, layout, ghost_batch=4, momentum=0.3)
    if name == "switchnorm":
        with torch.no_grad():
            ghost.mean_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
            ghost.var_weight.copy_(torch.tensor([-100.0, -100.0, 100.0]))
    reference = torch.nn.BatchNorm1d(C, momentum=0.3)
    for _ in range(2):
        x = torch.randn(*shape) * torch.linspace(1, 4, 10).view(-1, 1, 1) + 2
        h = x if layout == "channels" else x.transpose(1, 2)
        expected = torch.cat([reference(chunk) for chunk in h.split(4)])
        if layout == "tokens":
            expected = expected.transpose(1, 2)
        torch.testing.assert_close(ghost(x), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ghost.running_mean, reference.running_mean)
    torch.testing.assert_close(ghost.running_var, reference.running_var)


def test_ghost_batch_on_padded_tokens():
    torch.manual_seed(0)
    x, mask = torch.randn(4, 5, C), padded_mask()
    y = make_norm("batchnorm", C, "tokens", ghost_batch=2)(x, mask=mask)
    for rows in (slice(0, 2), slice(2, 4)):
        alone = make_norm("batchnorm", C, "tokens")(x[rows], mask=mask[rows])
        torch.testing.assert_close(y[rows][mask[rows]], alone[mask[rows]])


def test_dyt_scalenorm_and_adaln_initialisation():
    dyt = make_norm("dyt", C, "tokens")
    assert dyt.alpha.item() == 0.5 and dyt.alpha.dim() == 0
    x = torch.randn(4, 5, C)
    torch.testing.assert_close(dyt(x), torch.tanh(0.5 * x))
    sn = make_norm("scalenorm", C, "tokens")
    assert math.isclose(sn.g.item(), math.sqrt(C), rel_tol=1e-6)
    y = sn(x)
    torch.testing.assert_close(y.norm(dim=-1), torch.full((4, 5), math.sqrt(C)))
    ada = make_norm("adaln", C, "tokens")
    torch.testing.assert_close(ada(x), F.layer_norm(x, (C,)))  # zero init: plain LayerNorm


@pytest.mark.parametrize("layout", ["channels", "tokens"])
def test_derf_is_the_papers_formula_with_its_parameter_shapes_and_initial_values(layout):
    """Dynamic erf (Chen et al. 2025, Eq. 10): gamma * erf(alpha * x + s) + beta elementwise;
    alpha and s scalars initialised to 0.5 and 0 (the authors' code), gamma and beta per
    feature, 1 and 0. Checked element by element against math.erf."""
    derf = make_norm("derf", C, layout)
    assert (derf.alpha.dim(), derf.shift.dim()) == (0, 0)
    assert (derf.alpha.item(), derf.shift.item()) == (0.5, 0.0)
    assert derf.weight.shape == derf.bias.shape == (C,)
    assert derf.weight.eq(1).all() and derf.bias.eq(0).all()
    torch.manual_seed(0)
    with torch.no_grad():
        derf.alpha.fill_(0.8)
        derf.shift.fill_(-0.3)
        derf.weight.normal_()
        derf.bias.normal_()
    x = torch.randn(*LAYOUT_INPUTS[layout], dtype=torch.float64)
    y = derf.double()(x)
    alpha, s = derf.alpha.item(), derf.shift.item()  # 0.8 and -0.3 as float32 holds them
    feature = 1 if layout == "channels" else -1
    for index in [(0, 0, 0), (1, 3, 2), (3, 4, C - 1 if layout == "tokens" else 5)]:
        c = index[feature]
        expected = derf.weight[c].item() * math.erf(alpha * x[index].item() + s)
        assert y[index].item() == pytest.approx(expected + derf.bias[c].item(), rel=1e-12)


def test_adaln_modulates_with_an_explicit_condition():
    torch.manual_seed(0)
    ada = make_norm("adaln", C, "channels", cond_dim=3)
    with torch.no_grad():
        ada.modulation.weight.normal_()
    x, cond = torch.randn(2, C, 6), torch.randn(2, 3)
    scale, shift = ada.modulation(cond).chunk(2, dim=-1)
    expected = F.group_norm(x, 1) * (1 + scale[..., None]) + shift[..., None]
    torch.testing.assert_close(ada(x, cond=cond), expected, rtol=1e-5, atol=1e-5)


def test_make_norm_rejects_unknown_names_and_options_and_ignores_unused_ones():
    with pytest.raises(ValueError, match="not one of"):
        make_norm("fancynorm", C)
    with pytest.raises(ValueError, match="unknown norm option"):
        make_norm("layernorm", C, gropus=2)
    make_norm("layernorm", C, groups=2, ghost_batch=4)  # accepted, ignored
    with pytest.raises(ValueError, match="must divide"):
        make_norm("groupnorm", 6, groups=4)
