"""The element-wise norms: each output element is a function of its own input element alone,
no statistics over features, tokens or the batch (so nothing to mask, nothing causal to
leak, nothing that differs between train and eval). DyT and Derf squash with a learnable
scale; DyISRU is RMSNorm with the other features' contribution replaced by a learnable
scalar.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from normbench.layers.norm_base import AffineNorm


class DyT(AffineNorm):
    """Dynamic Tanh (Zhu et al. 2025): gamma * tanh(alpha * x) + beta, elementwise, with a
    learnable scalar alpha initialised to 0.5 and per-feature gamma, beta."""

    def __init__(self, num_features: int, layout: str, alpha_init: float = 0.5, **common):
        super().__init__(num_features, layout, **common)
        self.alpha = nn.Parameter(torch.tensor(alpha_init))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        return self.affine(torch.tanh(self.alpha * x))


class Derf(AffineNorm):
    """Dynamic erf (Chen et al. 2025, "Stronger Normalization-Free Transformers", Eq. 10):
    gamma * erf(alpha * x + s) + beta, elementwise. As in the paper and its code
    (zlab-princeton/Derf): alpha and s are learnable scalars, initialised to 0.5 and 0 (the
    code's defaults for ViT, DiT and DNA models; its GPT-2 patch starts alpha at 1.0), gamma
    and beta per-feature vectors initialised to 1 and 0."""

    def __init__(
        self,
        num_features: int,
        layout: str,
        alpha_init: float = 0.5,
        shift_init: float = 0.0,
        **common,
    ):
        super().__init__(num_features, layout, **common)
        self.alpha = nn.Parameter(torch.tensor(alpha_init))
        self.shift = nn.Parameter(torch.tensor(shift_init))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        return self.affine(torch.erf(self.alpha * x + self.shift))


class DyISRU(AffineNorm):
    """Dynamic Inverse Square Root Unit (Stollenwerk 2025, "On the Mathematical Relationship
    Between Layer Normalization and Dynamic Activation Functions", arXiv 2503.21708, EACL
    2026): gamma * sqrt(C) * x / sqrt(beta + x^2) + bias, element-wise, with one learnable
    scalar beta and per-feature gamma (init 1) and bias (init 0).

    Why this form: RMSNorm's output for feature i is x_i / sqrt(mean_j x_j^2) =
    sqrt(C) * x_i / sqrt(x_i^2 + sum_{j != i} x_j^2). The paper replaces the sum over the
    other features, the only term that couples a feature to the rest, by one learnable scalar
    beta shared by every feature ("decoupling in function space"): the exact element-wise
    counterpart of RMSNorm (DyT, derived the same way, needs an approximation besides). Its
    outputs are bounded by +-sqrt(C) (times gamma), as RMSNorm's are.

    Here C is ``num_features`` in both layouts (in channels, as DyT, the spatial positions do
    not enter), and eps enters as in RMSNorm: x / sqrt((beta + x^2) / C + eps). beta starts
    at ``beta_init``; null (the default) is C - 1, the other features' sum of squares for an
    input of unit root mean square, at which DyISRU starts as RMSNorm on such an input (the
    paper trains nothing and gives no initial value; its fit to simulated outliers found
    beta = 301.1). beta is used clamped at 0, as a sum of squares is.

    Official code: none could be found offline (the paper links reproduction code; no
    repository of its author holding DyISRU is in the offline index, searched 2026-12-07), so
    this follows the paper's equation for DyISRU alone."""

    def __init__(self, num_features: int, layout: str, beta_init: float | None = None, **common):
        super().__init__(num_features, layout, **common)
        initial = num_features - 1.0 if beta_init is None else beta_init
        self.beta = nn.Parameter(torch.tensor(float(initial)))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        others = self.beta.clamp_min(0)  # stands in for the other features' sum of squares
        return self.affine(x * torch.rsqrt((others + x.square()) / self.num_features + self.eps))
