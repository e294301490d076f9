"""Norms as a user writes them: one that draws random numbers when it is built (DrawingNorm,
tests/layers/test_generators.py), and four that break the contract, each in one way, which
check-norm must fail on its own row (tests/layers/test_conformance.py, and by import path
``user_norms:LeaksPadding`` through the command line in tests/experiment/test_plugins.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LeaksPadding(nn.Module):
    """Per-(sample, feature) statistics over every token, padding included."""

    def __init__(self, num_features, layout):
        super().__init__()
        self.layout = layout

    def forward(self, x, mask=None, cond=None):
        dims = (1,) if self.layout == "tokens" else tuple(range(2, x.dim()))
        return (x - x.mean(dims, keepdim=True)) / (x.std(dims, keepdim=True) + 1e-5)


class ChangesShape(nn.Module):
    def __init__(self, num_features, layout):
        super().__init__()

    def forward(self, x, mask=None, cond=None):
        return x.mean(-1)


class NaNGradient(nn.Module):
    def __init__(self, num_features, layout):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x, mask=None, cond=None):
        return x * self.scale + torch.sqrt(x * 0)  # d sqrt(u)/du at 0 is inf: inf * 0 = NaN


class IgnoresEvalMode(nn.Module):
    """BatchNorm that always normalizes with the batch's statistics."""

    def __init__(self, num_features, layout):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.layout = layout

    def forward(self, x, mask=None, cond=None):
        h = x.transpose(1, 2) if self.layout == "tokens" else x
        y = F.batch_norm(h, self.running_mean, self.running_var, training=True)
        return y.transpose(1, 2) if self.layout == "tokens" else y


class DrawingNorm(nn.Module):
    """A user's norm that draws random numbers when it is built (a random projection)."""

    def __init__(self, num_features, layout):
        super().__init__()
        self.layout = layout
        self.mix = nn.Linear(num_features, num_features)  # kaiming-uniform: draws
        self.noise = nn.Parameter(torch.randn(num_features))

    def forward(self, x, mask=None, cond=None):
        return x
