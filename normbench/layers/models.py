"""The models: two built from one residual unit that places its norm as the config says, and
the builder of every model a config names (the ResNet is normbench.layers.resnet).

``ResidualUnit`` is the whole placement study: each placement is one line that reads like its
equation (DESIGN.md). The Transformer's units wrap attention and an MLP, the CNN's wrap
conv-act-conv. Any norm fits every model: models build their norms with the run's
``make_norm`` (normbench.layers.norms.norm_factory), a user's own model too
(``model=mypkg.models:build``).
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.data.base import NEXT_BYTE_DATA

# Re-exported (F401): the attention sublayer was defined here before 0.6.
from normbench.layers.attention import (  # noqa: F401
    Attention,
    HeadNorm,
    QKNorm,
    max_attention_logit,
)
from normbench.layers.generators import own_generator
from normbench.layers.keys import NORM_AFTER_SUBLAYER
from normbench.layers.mup import attention_scale, is_mup, parametrize, readout, width_ratio
from normbench.layers.norms import Identity, NormFactory, at_position, norm_factory
from normbench.layers.resnet import ResNet
from normbench.layers.sdd import SDDLinear
from normbench.layers.weight_std import StdConv1d, StdConv2d, StdLinear

PLACEMENTS = ("pre", "post", "res_post", "sandwich", "deepnorm", "lns", "mix", "gpas")
# Placements whose residual stream leaves the last unit unnormalized: they need a final norm.
NEEDS_FINAL_NORM = ("pre", "res_post", "sandwich", "lns", "mix", "gpas")
# Placements whose units need their block's number (layer) and the number of blocks (layers).
LAYERED_PLACEMENTS = ("lns", "mix")
MIX_POST_FRACTION = 0.25  # Mix-LN's alpha: the share of blocks that are Post-LN (Li et al.)


def masked_mean(h: Tensor, mask: Tensor | None) -> Tensor:
    """Mean over tokens (N, T, D) -> (N, D), real tokens only."""
    if mask is None:
        return h.mean(1)
    weight = mask[..., None].to(h.dtype)
    return (h * weight).sum(1) / weight.sum(1).clamp_min(1)


# ------------------------------------------------------------------------------ sublayers
class MLP(nn.Module):
    """fc1-GELU-fc2; ``out`` (default: ``linear``) builds fc2."""

    def __init__(
        self, width: int, hidden: int, linear: type[nn.Linear], out: type[nn.Linear] | None = None
    ):
        super().__init__()
        self.fc1 = linear(width, hidden)
        self.fc2 = (out or linear)(hidden, width)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))

    @torch.no_grad()
    def deepnorm_init(self, beta: float) -> None:
        """DeepNet's FFN initialisation: both weights Xavier-normal with gain beta."""
        for layer in (self.fc1, self.fc2):
            nn.init.xavier_normal_(layer.weight, gain=beta)


class ConvBlock(nn.Module):
    """conv-act-conv, the CNN's sublayer; length/size preserving. ``out`` (default: ``conv``)
    builds conv2."""

    def __init__(
        self,
        width: int,
        kernel_size: int,
        conv: type[nn.Module],
        out: type[nn.Module] | None = None,
    ):
        super().__init__()
        self.conv1 = conv(width, width, kernel_size, padding=kernel_size // 2)
        self.conv2 = (out or conv)(width, width, kernel_size, padding=kernel_size // 2)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.conv2(F.gelu(self.conv1(x)))

    @torch.no_grad()
    def deepnorm_init(self, beta: float) -> None:
        """As DeepNet's FFN (two weight layers around an activation): Xavier-normal, gain beta
        (fans count the kernel: channels x kernel size)."""
        for layer in (self.conv1, self.conv2):
            nn.init.xavier_normal_(layer.weight, gain=beta)


# -------------------------------------------------------------------------- residual unit
def deepnorm_constants(sublayers: int) -> tuple[float, float]:
    """DeepNet's (Wang et al. 2022) encoder constants (alpha, beta) for a model of
    ``sublayers`` residual units.

    The paper counts N layers of two sublayers each (attention, FFN), 2N residual units in
    all: alpha = (2N)^(1/4), beta = (8N)^(-1/4). Per residual unit, M = 2N, that is
    alpha = M^(1/4) and beta = (4M)^(-1/4), which is what this returns. A Transformer of
    ``depth`` blocks has M = 2 * depth (N = depth, as in the paper). A CNN unit (conv-act-conv)
    is ONE residual branch, so a CNN of ``depth`` units has M = depth, i.e. N = depth / 2
    two-sublayer layers: alpha^4 stays the number of residual branches, the quantity the
    paper's bound on the model update sums over.
    """
    return sublayers**0.25, (4 * sublayers) ** -0.25


@torch.no_grad()
def deepnorm_init(sublayer: nn.Module, beta: float) -> None:
    """DeepNet's initialisation of a sublayer that has no ``deepnorm_init`` of its own (a
    user's): every weight of a linear or convolution layer Xavier-normal with gain beta, as
    DeepNet treats FFN weights."""
    for module in sublayer.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            nn.init.xavier_normal_(module.weight, gain=beta)


def gpas(h: Tensor, gate: Tensor) -> Tensor:
    """GPAS (Chen et al. 2025, "GPAS: Accelerating Convergence of LLM Pretraining via
    Gradient-Preserving Activation Scaling"): h - SiLU(gate) * sg(h), sg the stop-gradient.
    Forward, h is scaled by 1 - SiLU(gate), so a Pre-LN residual stream need not grow with
    depth; backward, the gradient reaching h is the one that left (the scaled-down copy is
    detached), so the scaling does not shrink the gradients of the layers below, as scaling
    h itself would. The gate learns through SiLU(gate) * h alone; SiLU(0) = 0, so a gate
    initialised to 0 starts as Pre-LN. (The official code's GPASBlock.forward is this line.)"""
    return h - F.silu(gate) * h.detach()


def post_ln_blocks(post_fraction: float, layers: int) -> int:
    """Mix-LN's Post-LN blocks: the first floor(alpha * L) of L blocks, as the authors' code
    counts them (num_hidden_layers // 4 at their alpha = 0.25); 1e-9 absorbs the rounding of
    a product such as 0.29 * 100 = 28.999999999999996."""
    return math.floor(post_fraction * layers + 1e-9)


class ResidualUnit(nn.Module):
    """x -> x' around sublayer F with norm N, placed as `placement` says (docs/design.md).

    ``sublayer`` takes ``(x, mask=None)``; ``make_norm(width, layout)`` builds N (the run's
    norm: normbench.layers.norms.norm_factory). ``sublayers`` is the number of residual units in the
    whole model (DeepNorm's constants depend on it). ``init="xavier"`` re-initialises the
    sublayer's weights Xavier-normal, the initialisation Xiong et al. (2020) analyse; DeepNorm
    always uses its own (Xavier-normal scaled by beta).

    ``layer`` (l, from 1) and ``layers`` (L): the unit's block and the number of blocks, which
    ``lns`` and ``mix`` need. A block is what both papers call a layer: a Transformer block
    (its attention and MLP units share l), a CNN unit. ``lns`` (LayerNorm Scaling, Sun et al.
    2025): x + F(N(x) / sqrt(l)). ``mix`` (Mix-LN, Li et al. 2024): Post-LN in the first
    floor(post_fraction * L) blocks, Pre-LN after; such a unit is a ``post`` or ``pre`` unit,
    so ``placement`` reads post or pre.

    ``gpas`` (GPAS, Chen et al. 2025): the Pre-LN unit's output through ``gpas``, with a
    learnable scalar gate of its own initialised to 0 (``gpas_gate``). Compared with the
    official code (dandingsky/GPAS, peft_pretraining/modeling_llama.py at commit
    31980688f4cbb1b0cff59bca9077e6fc52dab3f0, norm_type pre_gpas): there one GPASBlock per
    decoder layer scales the stream after the attention's residual add and again after the
    MLP's, sharing its gate; here each residual unit has its own gate (two per Transformer
    block), so a unit stays self-contained; its SiLU, stop-gradient and zero init are the
    code's.

    ``res_post`` is OLMo 2's block (Team OLMo 2025, "2 OLMo 2 Furious"): OLMo-core's
    ReorderedNormTransformerBlock (src/olmo_core/nn/transformer/block.py at commit
    fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d) computes h = x + N(attention(x)), then
    h + N(feed_forward(h)), with a final norm before the head, as res_post does; OLMo 2's
    QK-norm, one RMSNorm over each whole projection, is model.qk_norm=rmsnorm_whole. So
    OLMo 2's block is placement=res_post norm=rmsnorm model.qk_norm=rmsnorm_whole."""

    def __init__(
        self,
        sublayer: nn.Module,
        width: int,
        layout: str,
        placement: str,
        sublayers: int,
        make_norm: NormFactory,
        init: str = "default",
        layer: int | None = None,
        layers: int | None = None,
        post_fraction: float = MIX_POST_FRACTION,
    ):
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if placement in LAYERED_PLACEMENTS and not (layers and layer and 1 <= layer <= layers):
            raise ValueError(
                f"placement={placement} needs layer (this unit's block, 1..layers) and layers "
                f"(the blocks of the model), got layer={layer}, layers={layers}"
            )
        if placement == "mix":
            placement = "post" if layer <= post_ln_blocks(post_fraction, layers) else "pre"
        self.sublayer = sublayer
        self.placement = placement
        self.root_layer = math.sqrt(layer) if placement == "lns" else 1.0  # sqrt(l)
        self.norm = make_norm(width, layout)
        self.norm2 = make_norm(width, layout) if placement == "sandwich" else None
        # GPAS's gate: a zero drawn from no generator, so every other weight stays put
        self.gpas_gate = nn.Parameter(torch.zeros(())) if placement == "gpas" else None
        self.alpha, gain = 1.0, None
        if placement == "deepnorm":  # DeepNet (Wang et al. 2022), encoder-only constants
            self.alpha, gain = deepnorm_constants(sublayers)
        elif init == "xavier":  # DeepNet's initialisation at beta = 1 is plain Xavier-normal
            gain = 1.0
        if gain is not None:  # drawn on a generator of its own: later weights stay the same
            with own_generator("initialisation"):
                getattr(sublayer, "deepnorm_init", partial(deepnorm_init, sublayer))(gain)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        n = partial(self.norm, mask=mask)  # N
        f = partial(self.sublayer, mask=mask)  # F
        match self.placement:
            case "pre":
                return x + f(n(x))
            case "post":
                return n(x + f(x))
            case "res_post":
                return x + n(f(x))
            case "sandwich":
                return x + self.norm2(f(n(x)), mask=mask)
            case "deepnorm":
                return n(self.alpha * x + f(x))
            case "lns":
                return x + f(n(x) / self.root_layer)
            case "gpas":
                return gpas(x + f(n(x)), self.gpas_gate)
        raise ValueError(f"unknown placement {self.placement!r}")


def final_norm(make_norm: NormFactory, width: int, layout: str, placement: str) -> nn.Module:
    """The norm after the last unit: the run's norm where the placement leaves the residual
    stream unnormalized (pre, res_post, sandwich, lns, gpas, and mix, whose last blocks are
    Pre-LN),
    else the identity. It is the norm at position ``final`` (its own alpha_init where set)."""
    if placement in NEEDS_FINAL_NORM:
        return at_position(make_norm, "final")(width, layout)
    return Identity(width, layout)


# --------------------------------------------------------------------------------- models
class Transformer(nn.Module):
    """Encoder classifier: embed patches (signals, images) or tokens, add learned positions,
    `depth` blocks of attention and MLP units, masked mean pooling, linear head.

    ``causal``: a decoder-only language model instead. Bytes in, causal attention, the same
    units, and the head at every position: logits (N, T, vocab_size) for the next byte.
    ``placement``: the run's placement section (its name; mix's post_fraction).

    Options of the published recipes, off by default: ``model.embed_scale``, a learnable
    scalar initialised to sqrt(width) multiplying the embedding (DyT's and Derf's language
    models; here the embedding is PyTorch's, N(0, 1) for tokens), before the positions are
    added; ``model.embed_norm``, the run's norm applied to the embedding with its positions,
    the input of the first block (Peri-LN's embedding normalization, Kim et al. 2025);
    ``model.attention_gate``, gated attention's sigmoid gate on each head's output
    (normbench.layers.attention.Attention.output_gate); ``model.sdd``, every linear layer of
    the units as alpha * RMSNorm(W x + b) (Scale-Distribution Decoupling: normbench.layers.sdd).
    """

    def __init__(
        self,
        model: dict,
        make_norm: NormFactory,
        placement: dict,
        input_shape: tuple[int, ...],
        num_classes: int,
        vocab_size: int = 0,
        causal: bool = False,
    ):
        super().__init__()
        width, depth, patch = model["width"], model["depth"], model["patch_size"]
        linear = SDDLinear if model["sdd"] else nn.Linear
        out = StdLinear if standardizes(model, placement) else linear
        self.patch = patch
        self.causal = causal
        if causal:  # bytes: every id is a real symbol, nothing is padded
            self.embed = nn.Embedding(vocab_size, width)
            positions = input_shape[0]
        elif vocab_size:  # tokens: (N, T) ids, 0 is padding
            self.embed = nn.Embedding(vocab_size + 1, width, padding_idx=0)
            positions = input_shape[0]
        else:  # signals (C, L) or images (C, H, W), cut into non-overlapping patches
            channels, *sides = input_shape
            self.embed = nn.Linear(channels * patch ** len(sides), width)
            positions = math.prod(side // patch for side in sides)
        self.pos = nn.Parameter(torch.randn(1, positions, width) * 0.02)

        def unit(sublayer: nn.Module, block: int, position: str) -> ResidualUnit:  # 2 per block
            return ResidualUnit(
                sublayer,
                width,
                "tokens",
                placement["name"],
                2 * depth,
                at_position(make_norm, position),
                model["init"],
                layer=block,
                layers=depth,
                **placement_options(placement),
            )

        self.units = nn.ModuleList()
        for block in range(1, depth + 1):
            heads, qk_norm = model["heads"], model["qk_norm"]
            scale = attention_scale(model)
            gate = model["attention_gate"]
            attention = Attention(width, heads, linear, causal, qk_norm, out, scale, gate)
            self.units.append(unit(attention, block, "attention"))
            mlp = MLP(width, model["mlp_ratio"] * width, linear, out)
            self.units.append(unit(mlp, block, "mlp"))
        self.final_norm = final_norm(make_norm, width, "tokens", placement["name"])
        self.head = readout(width, num_classes, model)
        # Built last, and drawing nothing from the seed: with them off, every other weight
        # and norm is what it was before they existed.
        self.embed_scale = (
            nn.Parameter(torch.tensor(math.sqrt(width))) if model["embed_scale"] else None
        )
        self.embed_norm = make_norm(width, "tokens") if model["embed_norm"] else None

    def patchify(self, x: Tensor) -> Tensor:
        """(N, C, L) -> (N, L/p, C*p); (N, C, H, W) -> (N, HW/p^2, C*p^2)."""
        p = self.patch
        if x.dim() == 3:
            return x.unfold(2, p, p).permute(0, 2, 1, 3).flatten(2)
        patches = x.unfold(2, p, p).unfold(3, p, p)  # (N, C, H/p, W/p, p, p)
        return patches.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        h = self.embed(x) if x.dtype == torch.long else self.embed(self.patchify(x))
        if self.embed_scale is not None:
            h = h * self.embed_scale
        h = h + self.pos[:, : h.shape[1]]
        if self.embed_norm is not None:
            h = self.embed_norm(h, mask=mask)
        for unit in self.units:
            h = unit(h, mask)
        h = self.final_norm(h, mask=mask)
        return self.head(h) if self.causal else self.head(masked_mean(h, mask))


class CNN(nn.Module):
    """Residual CNN, 1D for signals and 2D for images: stem conv, `depth` conv-act-conv
    units at constant width and resolution, activation, global average pooling, linear head.
    ``placement``: the run's placement section; each unit is one block (LNS's and Mix-LN's l)."""

    def __init__(
        self,
        model: dict,
        make_norm: NormFactory,
        placement: dict,
        input_shape: tuple[int, ...],
        num_classes: int,
    ):
        super().__init__()
        width, depth, kernel = model["width"], model["depth"], model["kernel_size"]
        channels, *sides = input_shape
        std_conv, conv = {1: (StdConv1d, nn.Conv1d), 2: (StdConv2d, nn.Conv2d)}[len(sides)]
        out = std_conv if standardizes(model, placement) else conv
        self.stem = conv(channels, width, kernel, padding=kernel // 2)
        self.units = nn.ModuleList(  # each unit is one residual branch: depth of them
            ResidualUnit(
                ConvBlock(width, kernel, conv, out),
                width,
                "channels",
                placement["name"],
                depth,
                make_norm,
                model["init"],
                layer=block,
                layers=depth,
                **placement_options(placement),
            )
            for block in range(1, depth + 1)
        )
        self.final_norm = final_norm(make_norm, width, "channels", placement["name"])
        self.head = readout(width, num_classes, model)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        h = self.stem(x)
        for unit in self.units:
            h = unit(h)
        # An activation before pooling, as in pre-activation ResNets: without it,
        # InstanceNorm followed by global average pooling would leave only its bias.
        h = F.gelu(self.final_norm(h))
        return self.head(h.flatten(2).mean(2))


def standardizes(model: dict, placement: dict) -> bool:
    """Whether the CNN's or the Transformer's ``model.weight_std`` standardizes its units' last
    weight layers (conv2; the attention's output projection and fc2): it does in the placements
    where a norm reads that layer's output directly (res_post, sandwich), the only layers
    there that a norm follows. Elsewhere no layer is followed by a norm and WS is refused
    (normbench.experiment.rules); ValueError here for a config that skipped the rules."""
    if not model["weight_std"]:
        return False
    if placement["name"] not in NORM_AFTER_SUBLAYER:
        raise ValueError(
            f"model.weight_std=true needs a placement whose layers a norm follows "
            f"({', '.join(NORM_AFTER_SUBLAYER)}), got placement={placement['name']}"
        )
    return True


def placement_options(placement: dict) -> dict:
    """A placement section's own keys (mix: post_fraction), as ResidualUnit takes them."""
    return {key: value for key, value in placement.items() if key != "name"}


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters: what a comparison of norms must hold equal or report (AdaLN adds
    2d^2 + 2d per norm)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_non_embedding(model: nn.Module) -> int:
    """Trainable parameters less the embeddings: the Transformer's token or patch embedding
    and its learned positions, and any nn.Embedding elsewhere. The output layer stays in (it
    is a matmul at every position, as any other layer), so this is not Kaplan et al.'s N,
    which leaves it out too (normbench.experiment.budget counts both)."""
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    embedded = {id(p) for table in tables for p in table.parameters()}
    if isinstance(model, Transformer):
        embedded |= {id(p) for p in model.embed.parameters()} | {id(model.pos)}
    return sum(p.numel() for p in model.parameters() if p.requires_grad and id(p) not in embedded)


def build_model(
    cfg: dict, input_shape: tuple[int, ...], num_classes: int, vocab_size: int = 0
) -> nn.Module:
    """The model a resolved config names, for data of the given shape; a next-byte data set
    makes the Transformer causal (config.py refuses the CNN there). A user's model is built by
    its builder: ``build(cfg, make_norm, input_shape, num_classes, **model keys)``, plus
    ``vocab_size`` when the builder names it."""
    make_norm = norm_factory(cfg["norm"])
    placement = cfg["placement"]
    model = cfg["model"]
    if "_target_" in model:
        from normbench.core.registry import accepted, resolve

        build = resolve(model["_target_"], f"model={model['name']}")
        keys = {k: v for k, v in model.items() if k not in ("name", "_target_")}
        if accepted(build, ("vocab_size",)):
            keys["vocab_size"] = vocab_size
        built = build(cfg, make_norm, tuple(input_shape), num_classes, **keys)
        if not isinstance(built, nn.Module):
            raise TypeError(f"model={model['name']} built a {type(built).__name__}, not a Module")
        return built
    if model["name"] == "resnet":
        return ResNet(model, make_norm, placement, input_shape, num_classes)
    if model["name"] == "transformer":
        causal = cfg["data"]["name"] in NEXT_BYTE_DATA
        build = partial(Transformer, vocab_size=vocab_size, causal=causal)
    else:
        build = CNN
    built = build(model, make_norm, placement, input_shape, num_classes)
    if is_mup(model):  # the shapes at twice the width, on no memory and drawing nothing
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            wider = build(
                {**model, "width": 2 * model["width"]},
                make_norm,
                placement,
                input_shape,
                num_classes,
            )
        parametrize(built, wider, width_ratio(model))
    return built


def seeded_model(
    cfg: dict, input_shape: tuple[int, ...], num_classes: int, vocab_size: int = 0
) -> nn.Module:
    """The model a run starts from: built right after seeding torch's generator with the
    run's seed, so every initial weight outside the norms is a function of the seed alone
    (normbench.layers.generators)."""
    torch.manual_seed(cfg["seed"])
    return build_model(cfg, input_shape, num_classes, vocab_size)
