"""What every shipped norm is built on: the Norm base class (float32 statistics under
autocast, then the subclass's ``normalize``), AffineNorm (a per-feature scale and shift), and
the helpers a norm's statistics use (per-feature views, masked moments).

Its own module so that the modules of norms by concern (normbench.layers.norms: the
statistics norms and the registry; elementwise; single_gain) import it and not each other.
``normbench.api`` and ``normbench.layers.norms`` re-export it for a user's norm.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

LAYOUTS = ("channels", "tokens")
LOW_PRECISION = (torch.float16, torch.bfloat16)


def feature_view(param: Tensor, x: Tensor, layout: str) -> Tensor:
    """Reshape a per-feature vector so it broadcasts against x in the given layout."""
    if layout == "tokens":
        return param
    return param.view(1, -1, *([1] * (x.dim() - 2)))


def masked_moments(x: Tensor, dims: tuple[int, ...], mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Mean and biased variance over ``dims`` counting only positions where mask is True.

    ``mask`` broadcasts against x (for tokens: (N, T, 1)); None means every position counts.
    """
    if mask is None:  # two passes: torch.var_mean (Welford) is ~20x slower on CPU
        mean = x.mean(dim=dims, keepdim=True)
        return mean, (x - mean).square().mean(dim=dims, keepdim=True)
    weight = mask.to(x.dtype)
    count = weight.expand_as(x).sum(dim=dims, keepdim=True).clamp_min(1)
    mean = (x * weight).sum(dim=dims, keepdim=True) / count
    var = (((x - mean) * weight) ** 2).sum(dim=dims, keepdim=True) / count
    return mean, var


def mean_of_squares(x: Tensor, dim: int) -> Tensor:
    """Mean of x^2 over ``dim`` (kept) without materialising x^2: a fused norm, whose
    backward over a contiguous ``dim`` costs less than that of x * x and a mean."""
    return torch.linalg.vector_norm(x, dim=dim, keepdim=True).square() / x.shape[dim]


class Norm(nn.Module):
    """Base class: float32 statistics under autocast, then the subclass's ``normalize``."""

    def __init__(
        self,
        num_features: int,
        layout: str,
        eps: float = 1e-5,
        fp32_stats: bool = True,
        mask_padding: bool = True,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.num_features = num_features
        self.layout = layout
        self.eps = eps
        self.fp32_stats = fp32_stats
        self.mask_padding = mask_padding

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        if not self.mask_padding:
            mask = None
        # float64 stays float64 (a reference computation), float32 outside autocast skips
        # the guard's overhead.
        low_precision = x.dtype in LOW_PRECISION or torch.is_autocast_enabled(x.device.type)
        if not (self.fp32_stats and low_precision):
            return self.normalize(x, mask, cond).to(x.dtype)
        with torch.autocast(x.device.type, enabled=False):
            y = self.normalize(x.float(), mask, None if cond is None else cond.float())
        return y.to(x.dtype)

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        raise NotImplementedError


class AffineNorm(Norm):
    """A norm with a per-feature scale (init 1) and shift (init 0)."""

    def __init__(self, num_features: int, layout: str, **common):
        super().__init__(num_features, layout, **common)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def affine(self, y: Tensor) -> Tensor:
        weight, bias = (feature_view(p, y, self.layout) for p in (self.weight, self.bias))
        return torch.addcmul(bias, y, weight)  # one pass over y, not two
