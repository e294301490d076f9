"""Weight Standardization (Qiao et al. 2019): the linear and convolution layers whose weights
are standardized before every use, for the layers whose output goes straight into a norm.

Apart from the models because every model uses it (the CNN's and the Transformer's units in
normbench.layers.models, the ResNet's convolutions in normbench.layers.resnet); which layers
of a model it applies to stays each model's business.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def standardize(weight: Tensor, eps: float = 1e-5) -> Tensor:
    """Weight Standardization (Qiao et al. 2019): per output unit, zero mean and unit std.

    As its authors prescribe, only for the layers whose output goes straight into a norm: a
    standardized layer's output is sqrt(fan-in) times larger than PyTorch's default, which
    only a norm after it undoes (in a Pre-LN unit the residual branch would swamp the
    identity). Which layers those are is each model's business (``models.standardizes``, the
    ResNet's own in normbench.layers.resnet)."""
    dims = tuple(range(1, weight.dim()))
    var, mean = torch.var_mean(weight, dim=dims, keepdim=True, correction=0)
    return (weight - mean) / (var.sqrt() + eps)


class StdLinear(nn.Linear):
    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, standardize(self.weight), self.bias)


class StdConv1d(nn.Conv1d):
    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, standardize(self.weight), self.bias)


class StdConv2d(nn.Conv2d):
    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, standardize(self.weight), self.bias)
