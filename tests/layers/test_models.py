"""Both models, every placement and norm: equations, DeepNorm scaling, a few training steps."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny

from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.experiment.options import group_options
from normbench.layers.models import (
    CNN,
    MLP,
    NEEDS_FINAL_NORM,
    PLACEMENTS,
    Attention,
    ResidualUnit,
    Transformer,
    build_model,
    count_parameters,
    post_ln_blocks,
)
from normbench.layers.norms import Norm, make_norm
from normbench.layers.weight_std import standardize
from normbench.training.run import run_experiment


class Double(torch.nn.Module):
    """A sublayer F(x) = 2x + 1 whose effect on each equation is easy to write down."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, x, mask=None):
        return 2 * x * self.weight + 1

    def deepnorm_init(self, beta):
        with torch.no_grad():
            self.weight.fill_(beta)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_placement_computes_its_equation(placement):
    """Here the unit is in block 3 of 4: LNS scales by 1/sqrt(3); Mix-LN's first
    floor(0.25 * 4) = 1 block is Post-LN, so block 3 is Pre-LN; GPAS's gate starts at 0,
    SiLU(0) = 0, so it starts as Pre-LN (tests/layers/test_gpas_and_gated_attention.py
    checks it at another gate)."""
    torch.manual_seed(0)
    norm = partial(make_norm, "layernorm")
    unit = ResidualUnit(Double(), 4, "tokens", placement, 6, norm, layer=3, layers=4)
    x = torch.randn(2, 3, 4)

    def N(h):  # noqa: N802
        return F.layer_norm(h, (4,), eps=1e-5)

    beta, alpha = (8 * 3) ** -0.25, (2 * 3) ** 0.25
    expected = {
        "pre": x + (2 * N(x) + 1),
        "post": N(x + 2 * x + 1),
        "res_post": x + N(2 * x + 1),
        "sandwich": x + N(2 * N(x) + 1),
        "deepnorm": N(alpha * x + (2 * beta * x + 1)),
        "lns": x + (2 * N(x) / 3**0.5 + 1),
        "mix": x + (2 * N(x) + 1),
        "gpas": x + (2 * N(x) + 1),
    }[placement]
    torch.testing.assert_close(unit(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "depth", "fraction", "post_blocks"),
    [("transformer", 4, 0.25, 1), ("transformer", 5, 0.5, 2), ("cnn", 8, 0.25, 2)],
)
def test_mix_is_post_ln_in_the_first_floor_fraction_of_blocks_then_pre_ln(
    model, depth, fraction, post_blocks
):
    """Mix-LN (Li et al. 2024): Post-LN in the first floor(alpha * L) blocks (the authors' code:
    num_hidden_layers // 4 at alpha 0.25), Pre-LN after; a Transformer block's two units
    share one placement; the final norm stays (the last blocks are Pre-LN)."""
    overrides = (f"model={model}", f"model.depth={depth}", "placement=mix")
    cfg = compose(tiny(*overrides, f"placement.post_fraction={fraction}"))
    net = build_model(cfg, input_shape(cfg["data"]), 10)
    per_block = 2 if model == "transformer" else 1
    expected = ["post"] * post_blocks * per_block + ["pre"] * (depth - post_blocks) * per_block
    assert [unit.placement for unit in net.units] == expected
    assert type(net.final_norm).__name__ == "LayerNorm"
    assert post_ln_blocks(0.29, 100) == 29 and post_ln_blocks(0.25, 3) == 0


def test_lns_scales_each_blocks_norm_output_by_one_over_the_root_of_its_depth():
    """LayerNorm Scaling (Sun et al. 2025): x + F(N(x) / sqrt(l)) with l the block (from 1),
    shared by a block's attention and MLP units, as in the authors' code (layer_index + 1)."""
    cfg = compose(tiny("placement=lns", "model.depth=3"))
    net = build_model(cfg, input_shape(cfg["data"]), 10)
    assert [unit.root_layer**2 for unit in net.units] == pytest.approx([1, 1, 2, 2, 3, 3])
    with pytest.raises(ValueError, match="placement=lns needs layer"):
        ResidualUnit(Double(), 4, "tokens", "lns", 2, partial(make_norm, "layernorm"))


def by_hand_attention(attention: Attention, x: torch.Tensor, qk_norm: str, causal: bool):
    """Multi-head attention written out head by head, QK-norm as its papers define it: each
    query and key vector (head_dim entries) centred (layernorm) or not, divided by its RMS,
    times its gain; logits q.k / sqrt(head_dim). Returns the output and every head's logits."""
    heads, width = attention.heads, x.shape[-1]
    d = width // heads
    q, k, v = (x @ attention.qkv.weight.T + attention.qkv.bias).split(width, dim=-1)

    def normalised(h, gain):
        if qk_norm == "none":
            return h
        if qk_norm == "layernorm":
            h = h - h.mean(-1, keepdim=True)
        return h / (h.square().mean(-1, keepdim=True) + 1e-5).sqrt() * gain

    outputs, all_logits = [], []
    for head in range(heads):
        part = slice(head * d, (head + 1) * d)
        qh = normalised(q[..., part], None if qk_norm == "none" else attention.qk_norm.q.gain)
        kh = normalised(k[..., part], None if qk_norm == "none" else attention.qk_norm.k.gain)
        logits = qh @ kh.transpose(-2, -1) / d**0.5
        if causal:
            later = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
            logits = logits.masked_fill(later, -math.inf)
        all_logits.append(logits)
        outputs.append(logits.softmax(-1) @ v[..., part])
    y = torch.cat(outputs, -1) @ attention.proj.weight.T + attention.proj.bias
    return y, torch.stack(all_logits)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("qk_norm", ["none", "layernorm", "rmsnorm"])
def test_qk_norm_normalises_queries_and_keys_per_head_before_the_dot_product(qk_norm, causal):
    """QK-norm (Dehghani et al. 2023; Wortsman et al. 2023) against a hand computation, with
    gains moved off their initial 1; and the diagnostics' largest logit is the hand logits'."""
    torch.manual_seed(0)
    attention = Attention(8, 2, torch.nn.Linear, causal, qk_norm).double()
    if qk_norm != "none":
        assert attention.qk_norm.q.gain.shape == (4,) and attention.qk_norm.k.gain.eq(1).all()
        with torch.no_grad():
            attention.qk_norm.q.gain.normal_()
            attention.qk_norm.k.gain.normal_()
    else:
        assert attention.qk_norm is None
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    expected, logits = by_hand_attention(attention, x, qk_norm, causal)
    torch.testing.assert_close(attention(x), expected)
    assert attention.largest_logit(x) == pytest.approx(logits.amax().item(), rel=1e-6)


def test_olmo2s_qk_norm_normalises_each_whole_projection_before_the_heads_are_split():
    """model.qk_norm=rmsnorm_whole (OLMo 2, OLMo-core's default): RMSNorm over a position's
    D = heads x head_dim query (and key) features with a gain of D entries, then the heads."""
    torch.manual_seed(0)
    attention = Attention(8, 2, torch.nn.Linear, qk_norm="rmsnorm_whole").double()
    assert attention.qk_norm.q.gain.shape == (8,)
    with torch.no_grad():
        attention.qk_norm.q.gain.normal_()
        attention.qk_norm.k.gain.normal_()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    q, k, v = (attention.qkv(x)[..., i * 8 : (i + 1) * 8] for i in range(3))
    q, k = (
        F.rms_norm(h, (8,), norm.gain, 1e-5)
        for h, norm in ((q, attention.qk_norm.q), (k, attention.qk_norm.k))
    )
    heads = [
        (q[..., part] @ k[..., part].transpose(-2, -1) / 2).softmax(-1) @ v[..., part]
        for part in (slice(0, 4), slice(4, 8))
    ]
    expected = attention.proj(torch.cat(heads, -1))
    torch.testing.assert_close(attention(x), expected)
    cfg = compose(tiny("model.qk_norm=rmsnorm_whole", "placement=res_post", "norm=rmsnorm"))
    olmo2 = build_model(cfg, input_shape(cfg["data"]), 10)
    assert olmo2.units[0].sublayer.qk_norm.k.gain.shape == (16,)


def test_qk_norm_bounds_the_logits_whatever_the_weights():
    """The point of QK-norm: with unit gains each normalised query and key has norm
    sqrt(head_dim), so no logit exceeds sqrt(head_dim) however large the weights grow;
    without it the logits grow with the square of the weights' scale. Padded keys and
    queries are left out of the largest logit."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    for qk_norm in ("layernorm", "rmsnorm"):
        attention = Attention(16, 4, torch.nn.Linear, qk_norm=qk_norm)
        with torch.no_grad():
            attention.qkv.weight.mul_(1000)
        assert attention.largest_logit(x, mask) <= 2.0 + 1e-4  # sqrt(head_dim = 4)
    plain = Attention(16, 4, torch.nn.Linear)
    before = plain.largest_logit(x, mask)
    with torch.no_grad():
        plain.qkv.weight.mul_(10)
        plain.qkv.bias.mul_(10)
    assert plain.largest_logit(x, mask) == pytest.approx(100 * before, rel=1e-4)
    x[1, 4:] = 1e3  # padded positions: huge, yet never weighed
    assert plain.largest_logit(x, mask) == pytest.approx(100 * before, rel=1e-4)


def xavier_std(weight: torch.Tensor, gain: float) -> float:
    """Xavier-normal's std, gain * sqrt(2 / (fan_in + fan_out)); fans count a conv's kernel."""
    receptive = weight[0][0].numel()
    return gain * (2 / ((weight.shape[0] + weight.shape[1]) * receptive)) ** 0.5


@pytest.mark.parametrize(("model", "paper_layers"), [("transformer", 3), ("cnn", 1.5)])
def test_deepnorm_constants_and_initialisation_follow_deepnet(model, paper_layers):
    """DeepNet: alpha = (2N)^(1/4), beta = (8N)^(-1/4) for N layers of two sublayers (a CNN
    unit is one sublayer, so 3 units are N = 1.5); values, output projection, FFN and conv
    weights Xavier-normal with gain beta, queries and keys with gain 1."""
    torch.manual_seed(0)
    cfg = compose(tiny(f"model={model}", "placement=deepnorm", "model.depth=3", "model.width=64"))
    net = build_model(cfg, input_shape(cfg["data"]), 10)
    alpha, beta = (2 * paper_layers) ** 0.25, (8 * paper_layers) ** -0.25
    checked = 0
    for unit in net.units:
        assert unit.alpha == pytest.approx(alpha)
        sublayer = unit.sublayer
        if isinstance(sublayer, Attention):
            q, k, v = sublayer.qkv.weight.chunk(3)
            weights = [(q, 1.0), (k, 1.0), (v, beta), (sublayer.proj.weight, beta)]
        elif isinstance(sublayer, MLP):
            weights = [(sublayer.fc1.weight, beta), (sublayer.fc2.weight, beta)]
        else:
            weights = [(sublayer.conv1.weight, beta), (sublayer.conv2.weight, beta)]
        for weight, gain in weights:  # >= 4,096 entries: the sample std is within 1.1% (1 sigma)
            assert weight.std().item() == pytest.approx(xavier_std(weight, gain), rel=0.05)
            assert abs(weight.mean().item()) < 0.1 * xavier_std(weight, gain)
            checked += 1
    assert checked == (6 * 3 if model == "transformer" else 2 * 3)
    post_cfg = compose(tiny(f"model={model}", "placement=post", "model.depth=3", "model.width=64"))
    post = build_model(post_cfg, input_shape(post_cfg["data"]), 10)
    assert all(unit.alpha == 1.0 for unit in post.units)


@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_xavier_init_is_xavier_normal_in_every_unit_and_default_is_pytorchs(model):
    """model.init=xavier: every unit weight Xavier-normal with gain 1 (Xiong et al.'s setting;
    q, k and v each as its own matrix); the default keeps PyTorch's Kaiming-uniform, whose std
    is sqrt(1/(3 fan_in))."""
    torch.manual_seed(0)
    for init in ("xavier", "default"):
        overrides = (f"model={model}", "placement=post", "model.depth=2", "model.width=64")
        cfg = compose(tiny(*overrides, f"model.init={init}"))
        net = build_model(cfg, input_shape(cfg["data"]), 10)
        for unit in net.units:
            weights = [p for p in unit.sublayer.parameters() if p.dim() >= 2]
            if isinstance(unit.sublayer, Attention):  # q, k and v are three matrices
                weights = [*unit.sublayer.qkv.weight.chunk(3), unit.sublayer.proj.weight]
            for weight in weights:
                fan_in = weight[0].numel()
                expected = xavier_std(weight, 1.0) if init == "xavier" else (3 * fan_in) ** -0.5
                assert weight.std().item() == pytest.approx(expected, rel=0.05), init


def test_adaln_adds_two_d_squared_parameters_per_norm_over_layernorm():
    """AdaLN's projection (d -> 2d, with bias) replaces LayerNorm's affine (2d): 2d^2 more per
    norm; pre placement has 2 * depth unit norms and a final one."""

    def size(norm):
        cfg = compose(tiny(f"norm={norm}", "model.width=16", "model.depth=2"))
        return count_parameters(build_model(cfg, input_shape(cfg["data"]), 10))

    assert size("adaln") - size("layernorm") == (2 * 2 + 1) * 2 * 16**2


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_final_norm_only_where_the_stream_is_unnormalized(placement):
    cfg = compose(tiny(f"placement={placement}"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    has_final = type(model.final_norm).__name__ != "Identity"
    assert has_final == (placement in NEEDS_FINAL_NORM)
    assert all(type(unit.norm).__name__ == "LayerNorm" for unit in model.units)


def test_weight_standardization_applies_to_units_and_is_per_output_unit():
    w = torch.randn(6, 4, 3) * 5 + 2
    s = standardize(w)
    torch.testing.assert_close(s.mean((1, 2)), torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(s.std((1, 2), unbiased=False), torch.ones(6), atol=1e-4, rtol=0)
    cfg = compose(tiny("model=cnn", "model.weight_std=true", "norm=groupnorm", "placement=peri"))
    cnn = build_model(cfg, input_shape(cfg["data"]), 10)
    assert type(cnn.units[0].sublayer.conv2).__name__ == "StdConv1d"
    cfg = compose(tiny("model.weight_std=true", "placement=res_post"))
    transformer = build_model(cfg, input_shape(cfg["data"]), 10)
    assert type(transformer.units[0].sublayer.proj).__name__ == "StdLinear"


@pytest.mark.parametrize("data", ["mnist1d", "digits", "tokens"])
def test_transformer_takes_every_data_set(data):
    cfg = compose(tiny(data=data))
    from normbench.data.datasets import load

    dataset = load(cfg["data"])
    model = build_model(cfg, input_shape(cfg["data"]), dataset.num_classes, dataset.vocab_size)
    assert isinstance(model, Transformer)
    x = torch.from_numpy(dataset.train.x[:3])
    mask = None if dataset.train.mask is None else torch.from_numpy(dataset.train.mask[:3])
    assert model(x, mask=mask).shape == (3, dataset.num_classes)


def test_cnn_is_2d_for_images():
    cfg = compose(tiny("model=cnn", data="digits"))
    model = build_model(cfg, input_shape(cfg["data"]), 10)
    assert isinstance(model, CNN) and isinstance(model.stem, torch.nn.Conv2d)
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def test_padding_does_not_change_the_transformer_output():
    """Masked attention, masked statistics and masked pooling: extra padding is invisible."""
    torch.manual_seed(0)
    cfg = compose(tiny("norm=batchnorm", data="tokens"))
    model = build_model(cfg, (12,), 4, vocab_size=16).eval()
    tokens = torch.randint(1, 17, (2, 6))
    short = torch.nn.functional.pad(tokens, (0, 2))
    long = torch.nn.functional.pad(tokens, (0, 6))
    out_short = model(short, mask=short != 0)
    out_long = model(long, mask=long != 0)
    torch.testing.assert_close(out_short, out_long, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_every_placement_trains_in_both_models(model, placement, tmp_path):
    cfg = compose(tiny(f"model={model}", f"placement={placement}", "norm=groupnorm"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
    assert outcome.summary["steps"] == 6 and outcome.summary["final_val_acc"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("norm", group_options("norm"))
@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_every_norm_trains_in_both_models(model, norm, tmp_path):
    cfg = compose(tiny(f"model={model}", f"norm={norm}", "model.depth=1", "train.max_steps=3"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error


@pytest.mark.parametrize(
    ("model", "placement", "dtype"),
    [
        ("transformer", "pre", torch.float32),
        ("transformer", "post", torch.float32),
        ("cnn", "pre", torch.bfloat16),
    ],
)
def test_what_dtype_a_norm_reads_under_autocast(model, placement, dtype):
    """The precision preset rests on this: a Transformer's norms read the float32 residual
    stream (so norm.fp32_stats cannot matter there), a CNN's norms read bf16/fp16 activations."""
    cfg = compose(tiny(f"model={model}", f"placement={placement}", "norm=rmsnorm"))
    net = build_model(cfg, input_shape(cfg["data"]), 10)
    seen = set()
    for module in net.modules():
        if isinstance(module, Norm):
            module.register_forward_hook(lambda mod, args, out: seen.add(args[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        net(torch.randn(4, *input_shape(cfg["data"])))
    assert seen == {dtype}


# ---------------------------------------------------------------------- causal (pysource)
CAUSAL_NORMS = [
    "layernorm",
    "rmsnorm",
    "ssrmsnorm",
    "batchnorm",
    "groupnorm",
    "dyt",
    "derf",
    "dyisru",
    "scalenorm",
    "none",
]


def causal_model(norm: str, placement: str, qk_norm: str = "none") -> torch.nn.Module:
    torch.manual_seed(0)
    overrides = (f"norm={norm}", f"placement={placement}", f"model.qk_norm={qk_norm}")
    cfg = compose(tiny(*overrides, data="pysource"))
    model = build_model(cfg, input_shape(cfg["data"]), 256, vocab_size=256)
    model.train()
    model(torch.randint(0, 256, (8, 16)))  # moves BatchNorm's running statistics off init
    return model.eval()


@pytest.mark.parametrize(
    ("norm", "placement", "qk_norm"),
    [
        *((norm, placement, "none") for norm in CAUSAL_NORMS for placement in PLACEMENTS),
        ("layernorm", "pre", "layernorm"),
        ("rmsnorm", "lns", "rmsnorm"),
    ],
)
def test_a_change_at_position_t_never_changes_the_logits_before_t(norm, placement, qk_norm):
    model = causal_model(norm, placement, qk_norm)
    x = torch.randint(0, 256, (3, 16))
    logits = model(x)
    assert logits.shape == (3, 16, 256)
    for t in (0, 7, 15):
        changed = x.clone()
        changed[:, t] = (changed[:, t] + 1) % 256
        other = model(changed)
        torch.testing.assert_close(other[:, :t], logits[:, :t], rtol=0, atol=1e-6)
        assert (other[:, t] - logits[:, t]).abs().amax() > 1e-4  # position t does see it


def test_batchnorm_in_train_mode_pools_later_tokens_into_earlier_positions():
    """Why only eval mode is causal with BatchNorm: batch statistics span every token."""
    model = causal_model("batchnorm", "pre").train()
    x = torch.randint(0, 256, (3, 16))
    changed = x.clone()
    changed[:, 15] = (changed[:, 15] + 1) % 256
    assert (model(changed)[:, :15] - model(x)[:, :15]).abs().amax() > 1e-6
