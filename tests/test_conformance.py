"""normbench check-norm: the shipped norms keep the contract; broken norms fail the right row."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normbench.conformance import check_norm
from normbench.norms import NORMS


def failed(rows) -> dict[tuple[str, str], str]:
    return {(row.name, row.layout): row.detail for row in rows if not row.passed}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_every_shipped_norm_passes(name):
    cls, _ = NORMS[name]
    assert failed(check_norm(cls)) == {}


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


@pytest.mark.parametrize(
    ("norm", "row", "layouts", "words"),
    [
        (LeaksPadding, "padding changes no real output or buffer", ("tokens",), "padding"),
        (ChangesShape, "output shape and dtype", ("channels", "tokens"), "output shape"),
        (NaNGradient, "finite gradients", ("channels", "tokens"), "not finite"),
        (
            IgnoresEvalMode,
            "eval mode: no buffer moves, no batch dependence",
            ("channels", "tokens"),
            "eval mode",
        ),
    ],
)
def test_broken_norms_fail_the_right_row(norm, row, layouts, words):
    failures = failed(check_norm(norm))
    for layout in layouts:
        assert (row, layout) in failures, failures
        assert words in failures[(row, layout)]


def test_a_class_that_does_not_take_the_contract_fails_to_build():
    class NoLayout(nn.Module):
        def __init__(self, num_features):
            super().__init__()

    rows = check_norm(NoLayout)
    assert [(r.name, r.passed) for r in rows] == [
        ("builds as Norm(num_features, layout)", False),
        ("builds as Norm(num_features, layout)", False),
    ]
