"""muP for width (Yang et al. 2022, "Tensor Programs V", Table 3; the ``mup`` package's
conventions): ``model.parametrization=mup`` makes the Transformer and the CNN a model whose
best learning rate stays put as ``model.width`` grows, so a rate tuned at a small width can
be used at a large one (docs/mup.md).

The model side is here: which parameters are hidden (both dimensions grow with the width),
the readout's multiplier, the attention's 1/d_head and the rescaled initialisation. The
optimizer side (the per-group rates) is normbench.training.optimizers', from the
``WidthScaling`` this module records on the model.

Every factor is (width / base_width) to some power, so at ``model.base_width == model.width``
each is 1 and the muP model is the standard one, bit for bit: same weights, same outputs,
same updates. Depth is not transferred (docs/mup.md says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

MUP_SCALING = "mup_scaling"  # the attribute of a muP model holding its WidthScaling


@dataclass(frozen=True)
class WidthScaling:
    """What the optimizer needs of a muP model: m = width / base_width, and for each
    parameter (by name) how many of its dimensions grow with the width (0: a scalar or a
    fixed-size vector; 1: vector-like; 2: matrix-like, a hidden weight)."""

    ratio: float
    dims: dict[str, int]


def is_mup(model: dict) -> bool:
    """Whether a model section asks for muP (configs made before the key are standard)."""
    return model.get("parametrization", "standard") == "mup"


def width_ratio(model: dict) -> float:
    """m = width / base_width under muP; 1 for the standard parametrization."""
    return model["width"] / model["base_width"] if is_mup(model) else 1.0


def base_head_dim(model: dict) -> float:
    """d_base, the head size of the base model (this model at ``base_width``): the Transformer's
    ``model.base_head_dim`` where set (a ladder that adds heads at a fixed head size sets it to
    that size: its base model has base_width / base_head_dim heads), else base_width / heads
    (the base model keeps this model's heads, each narrower: width grows by widening heads)."""
    given = model.get("base_head_dim")
    return float(given) if given is not None else model["base_width"] / model["heads"]


def attention_scale(model: dict) -> float | None:
    """The attention logits' scale: None (scaled dot-product attention's own 1/sqrt(d_head))
    in the standard model and wherever the head is the base model's size; under muP
    sqrt(d_base) / d_head, d_head the head size this model has and d_base the base model's
    (base_head_dim). That is muP's 1/d_head attention (Yang et al. 2022, section 4 and
    Table 3: q and k become correlated in training, so q.k grows like d_head) with the
    ``mup`` package's constant multiplier set to sqrt(d_base), so that the base model's scale
    is the standard 1/sqrt(d_base). Heads added at a fixed head size leave every logit's sum
    as long as the base model's: the scale stays the standard one."""
    if not is_mup(model):
        return None
    head, base = model["width"] / model["heads"], base_head_dim(model)
    return None if head == base else math.sqrt(base) / head


class Readout(nn.Linear):
    """The output layer under muP (the ``mup`` package's MuReadout): its input is multiplied
    by 1/m, and its weights and bias, drawn as PyTorch's, are multiplied by sqrt(m) once at
    construction, so that the logits' initial variance and their change per step stay of one
    order as the width grows (Table 3's output weights: variance 1/fan_in^2, Adam rate
    1/fan_in, reached through the multiplier). At m = 1 it is nn.Linear, value for value."""

    def __init__(self, in_features: int, out_features: int, ratio: float):
        super().__init__(in_features, out_features)
        self.multiplier = 1.0 / ratio
        with torch.no_grad():
            self.weight.mul_(math.sqrt(ratio))
            self.bias.mul_(math.sqrt(ratio))

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x * self.multiplier)


def readout(in_features: int, out_features: int, model: dict) -> nn.Linear:
    """The model's head: nn.Linear, or muP's Readout."""
    if is_mup(model):
        return Readout(in_features, out_features, width_ratio(model))
    return nn.Linear(in_features, out_features)


def width_dims(model: nn.Module, wider: nn.Module) -> dict[str, int]:
    """How many dimensions of each parameter grow with the width: those whose size differs
    in ``wider``, the same model built at another width (the ``mup`` package's base shapes).
    ValueError for a parameter with more than two (no optimizer rule covers it)."""
    other = dict(wider.named_parameters())
    found = {}
    for name, p in model.named_parameters():
        grown = sum(a != b for a, b in zip(p.shape, other[name].shape, strict=True))
        if grown > 2:
            raise ValueError(f"model.parametrization=mup: {name} has {grown} width dimensions")
        found[name] = grown
    return found


@torch.no_grad()
def parametrize(model: nn.Module, wider: nn.Module, ratio: float) -> None:
    """Make a built model muP's: record its ``WidthScaling``, and multiply the biases of its
    hidden layers (those whose weight has two width dimensions) by sqrt(m), which keeps their
    initial variance that of the base width (PyTorch draws them with variance 1/(3 fan_in);
    the ``mup`` package's rescale_linear_bias). Hidden weights keep PyTorch's initialisation,
    variance 1/(3 fan_in): already muP's 1/fan_in. The readout rescales itself (Readout)."""
    dims = width_dims(model, wider)
    setattr(model, MUP_SCALING, WidthScaling(ratio, dims))
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        bias = getattr(module, "bias", None)
        hidden = dims.get(f"{prefix}weight") == 2
        if hidden and isinstance(bias, nn.Parameter):
            bias.mul_(math.sqrt(ratio))
