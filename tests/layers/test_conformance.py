"""normbench check-norm: the shipped norms keep the contract; broken norms fail the right row."""

from __future__ import annotations

import pytest
from torch import nn
from user_norms import ChangesShape, IgnoresEvalMode, LeaksPadding, NaNGradient

from normbench.layers.conformance import check_norm
from normbench.layers.norms import NORMS


def failed(rows) -> dict[tuple[str, str], str]:
    return {(row.name, row.layout): row.detail for row in rows if not row.passed}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_every_shipped_norm_passes(name):
    assert failed(check_norm(NORMS[name])) == {}


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
def test_user_norms_fail_the_right_row(norm, row, layouts, words):
    failures = failed(check_norm(norm))
    for layout in layouts:
        assert (row, layout) in failures, failures
        assert words in failures[(row, layout)]


def test_after_a_wrong_shape_the_checks_reading_the_output_are_skipped_not_passed():
    rows = check_norm(ChangesShape)
    by = {(row.name, row.layout): row for row in rows}
    for layout in ("channels", "tokens"):
        assert not by[("output shape and dtype", layout)].passed
        assert by[("input left unchanged", layout)].passed  # reads the input, not the output
        skipped = [row.name for row in rows if row.layout == layout and row.skipped]
        assert skipped == [
            "padding changes no real output or buffer",
            "eval mode: no buffer moves, no batch dependence",
            "bf16/fp16 autocast",
            "finite gradients",
            "state_dict round trip",
            "same seed, same output",
        ]
        assert all(not by[(name, layout)].passed for name in skipped)
    assert [row.name for row in rows if row.passed] == [
        "builds as Norm(num_features, layout)",
        "input left unchanged",
    ] * 2


def test_a_wrong_dtype_fails_its_row_and_skips_nothing():
    class Doubles(nn.Module):
        def __init__(self, num_features, layout):
            super().__init__()

        def forward(self, x, mask=None, cond=None):
            return x.double()

    rows = check_norm(Doubles)
    assert not any(row.skipped for row in rows)
    assert {row.name for row in rows if not row.passed} == {"output shape and dtype"}


def test_a_class_that_does_not_take_the_contract_fails_to_build():
    class NoLayout(nn.Module):
        def __init__(self, num_features):
            super().__init__()

    rows = check_norm(NoLayout)
    assert [(r.name, r.passed) for r in rows] == [
        ("builds as Norm(num_features, layout)", False),
        ("builds as Norm(num_features, layout)", False),
    ]
