"""The norms with one scalar gain for all features: ScaleNorm and the single-scale RMSNorm
of Outlier-Safe Pre-training. Both divide by the features' root mean square (or norm), so
they compute the same family of functions; they differ in how the gain is parametrized,
which decides how far an optimizer step moves it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.layers.norm_base import Norm


class ScaleNorm(Norm):
    """g * x / ||x|| with one learnable scalar g initialised to sqrt(num_features).

    Tokens: the norm is over D. Channels: over (C, S), divided by sqrt(|S|) so that g keeps the
    same meaning (output RMS = g / sqrt(C)) whatever the spatial size.
    """

    def __init__(self, num_features: int, layout: str, **common):
        super().__init__(num_features, layout, **common)
        self.g = nn.Parameter(torch.tensor(math.sqrt(num_features)))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "tokens":
            norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        else:
            dims = tuple(range(1, x.dim()))
            spatial = x[0, 0].numel()
            norm = torch.linalg.vector_norm(x, dim=dims, keepdim=True) / math.sqrt(spatial)
        return x * (self.g / norm.clamp_min(self.eps))


class SingleScaleRMSNorm(Norm):
    """Single-scale RMSNorm (Park et al. 2025, "Outlier-Safe Pre-Training for Robust 4-Bit
    Quantization of Large Language Models", arXiv 2506.19697): RMSNorm whose per-feature
    gain is replaced by one scalar g, initialised to 1: g * x / sqrt(mean(x^2) + eps), per
    token over D, per sample over (C, S) in channels (as RMSNorm). Why: a per-feature gain
    can grow a few channels far above the rest, the outlier features that 4-bit
    quantization cannot hold; one scalar has no channel to favour.

    Compared with the official code (dmis-lab/Outlier-Safe-Pre-Training,
    example_modeling_flax.py at commit 4c2c367370f76c245e25ec1e0c4ade9ba808db82): there, every
    norm (both per block and the final one) is flax's ``nn.RMSNorm(feature_axes=())``, a
    scale of shape () initialised to 1 over the last axis; flax's eps is 1e-6, here it is
    norm.eps (1e-5 unless set).

    ScaleNorm (g' * x / ||x||, g' initialised to sqrt(D)) computes the same functions
    (g' = sqrt(D) * g, up to where eps enters): at initialisation the two agree. They differ
    as parameters: an AdamW step moves either gain by about the learning rate, a relative
    change sqrt(D) times larger for this g than for ScaleNorm's."""

    def __init__(self, num_features: int, layout: str, **common):
        super().__init__(num_features, layout, **common)
        self.weight = nn.Parameter(torch.tensor(1.0))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        features = (self.num_features,) if self.layout == "tokens" else x.shape[1:]
        return F.rms_norm(x, features, None, self.eps) * self.weight
