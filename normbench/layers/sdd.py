"""Scale-Distribution Decoupling (Wang et al. 2025, "Scale-Distribution Decoupling: Enabling
Stable and Effective Training of Large Language Models", arXiv 2502.15499): each linear layer
of the Transformer's units computes y = alpha * RMSNorm(V x), so that the matrix V decides
only the direction of the output (its distribution) and a learnable vector alpha its scale;
the paper reports that this keeps Post-Norm Transformers' gradients from exploding or
vanishing (``model.sdd=true placement=post``). A weight-side change, not a norm: it is a
model key, and the run's norm stays where its placement puts it.

Compared with the official code (kaihemo/SDD): README.md at commit
aaa650a235acae3115dbf771f387525756f50ccb gives the drop-in form, ``SDDLinear``: a linear layer
followed by ``torch.nn.RMSNorm(out_features, eps=1e-6, elementwise_affine=True)``, for every
linear of the model; that is what this module computes (here with a bias before the norm, as
normbench's other linear layers have one; the README's default has none). The training code
(dense/olmo/model.py at commit 79cf8001c06a584815a67f992165e48c836ee057, OLMoSequentialBlock)
differs from the README in three places it does not explain: the values are not normalised,
the attention's output is normalised before the output projection as well as after it, and
the gains of the norms after the two output projections (attention, feed-forward) start at
1/sqrt(2 x layers) rather than 1. Its block is Post-LN with a norm on the embedding
(x <- N(x); x <- x + F(x) per sublayer; a final norm): ``placement=post
model.embed_norm=true`` here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SDD_EPS = 1e-6  # the README's SDDLinear's


class SDDLinear(nn.Linear):
    """alpha * RMSNorm(W x + b): nn.Linear's weight and bias, then an RMSNorm over the output
    features with a per-feature gain ``scale`` (alpha, initialised to 1). ``parts``: the
    output is that many layers side by side (the attention's fused q, k and v), each
    normalised over its own features, as the official code's separate projections are."""

    # Takes ``parts``: normbench.layers.attention.Attention builds its fused q, k, v with it.
    splits_output = True

    def __init__(self, in_features: int, out_features: int, bias: bool = True, parts: int = 1):
        super().__init__(in_features, out_features, bias)
        if out_features % parts:
            raise ValueError(f"parts={parts} must divide out_features={out_features}")
        self.parts = parts
        self.scale = nn.Parameter(torch.ones(out_features))

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x).unflatten(-1, (self.parts, self.out_features // self.parts))
        # the statistic in float32 under autocast, as normbench's norms keep theirs
        normalised = F.rms_norm(y.float(), y.shape[-1:], eps=SDD_EPS).to(y.dtype)
        return normalised.flatten(-2) * self.scale
