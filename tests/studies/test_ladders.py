"""The scaling presets as findings (normbench.studies.ladders): a trend claim's schema
(registry: ``scaling: KEY``), its label by the rule on designed scaling rows (family), the
trend of a study's own measure, and each study's sweep built as `normbench sweep` builds it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from normbench.core.errors import UsageError
from normbench.studies import family, findings, ladders, registry
from tests.studies.test_order import CLAIM

TREND = CLAIM.replace(
    "    predicted: better\n", "    scaling: model.width\n    predicted: shrinking\n"
)


def claim_of(tmp_path, text: str = TREND) -> registry.Claim:
    path = tmp_path / "trend.yaml"
    path.write_text(text)
    return registry.read_claim(path)


def test_a_trend_comparison_reads_with_its_ladder_key(tmp_path):
    (comparison,) = claim_of(tmp_path).comparisons
    assert (comparison.scaling, comparison.predicted) == ("model.width", "shrinking")
    assert registry.claims()["zhu-dyt-ladder"].comparisons[0].scaling == "model.width"


@pytest.mark.parametrize(
    "text, words",
    [
        (
            TREND.replace("predicted: shrinking", "predicted: better"),
            ["predicted 'better'", "valid for a trend (scaling model.width)", "shrinking, growing"],
        ),
        (  # a trend's word without a ladder: a paired comparison's choices
            CLAIM.replace("predicted: better", "predicted: shrinking"),
            ["predicted 'shrinking'", "valid: better, worse, not worse, equivalent"],
        ),
        (
            TREND.replace("scaling: model.width", "scaling: model.width=16"),
            ["scaling 'model.width=16'", "a ladder's size key"],
        ),
        (  # a trend beside a paired comparison: no family rule covers the mix
            TREND.replace(
                "power:", CLAIM[CLAIM.index("  - name:") : CLAIM.index("power:")] + "power:"
            ),
            ["comparisons: 1 trend(s) among 2", "one trend comparison (scaling: KEY) alone"],
        ),
    ],
)
def test_a_bad_trend_comparison_is_refused_in_one_line(tmp_path, text, words):
    with pytest.raises(UsageError) as err:
        claim_of(tmp_path, text)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert "\n" not in str(err.value)


def rows(verdict: str) -> pd.DataFrame:
    """A scaling report's group rows (scaling_section's ``table``): RMSNorm against LayerNorm
    with this trend verdict, and the reference's own row."""
    return pd.DataFrame(
        [
            {
                "group": "norm=rmsnorm",
                "reference": "norm=layernorm",
                "trend": verdict,
                "trend_slope": -0.2,
                "trend_ci_low": -0.3,
                "trend_ci_high": -0.1,
            },
            {
                "group": "norm=layernorm",
                "reference": "norm=layernorm",
                "trend": "reference",
                "trend_slope": np.nan,
                "trend_ci_low": np.nan,
                "trend_ci_high": np.nan,
            },
        ]
    )


@pytest.mark.parametrize(
    "verdict, label",
    [("shrinking", True), ("growing", False), ("constant", False), ("inconclusive", None)],
)
def test_a_trend_claim_is_labelled_by_the_rule_from_the_trend_verdict(tmp_path, verdict, label):
    tested = family.scaling_tested(claim_of(tmp_path), rows(verdict))
    assert family.label_of(tested) is label
    assert f"trend {verdict}, slope -0.2 [-0.3, -0.1]" in tested[0].text(0.05)


def test_a_trend_without_a_slope_says_why_rather_than_nan(tmp_path):
    """Too few rungs measured: the row's trend_why, never 'slope +nan [+nan, +nan]'."""
    why = "1 rung(s) measured, fewer than 3"
    table = rows("inconclusive").assign(
        trend_slope=np.nan, trend_ci_low=np.nan, trend_ci_high=np.nan, trend_why=[why, ""]
    )
    (tested,) = family.scaling_tested(claim_of(tmp_path), table)
    assert family.label_of([tested]) is None
    assert f"trend inconclusive, no slope: {why} along model.width" in tested.text(0.05)
    assert "nan" not in tested.text(0.05)


def test_a_trend_claim_whose_group_has_no_row_is_inconclusive(tmp_path):
    other = rows("shrinking").assign(group=["norm=dyt", "norm=layernorm"])
    (tested,) = family.scaling_tested(claim_of(tmp_path), other)
    assert family.label_of([tested]) is None and "no trend computed" in tested.text(0.05)


def gaps(values: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"model.width": width, "seed": seed, "gap": gap}
            for width, per_seed in values.items()
            for seed, gap in enumerate(per_seed)
        ]
    )


@pytest.mark.parametrize(
    "values, verdict",
    [
        ({16: [0.10, 0.12], 32: [0.30, 0.31], 64: [0.50, 0.52]}, "growing"),
        ({16: [0.30, 0.31], 32: [0.20, 0.21], 64: [0.10, 0.09]}, "shrinking"),
        ({16: [0.200, 0.201], 32: [0.201, 0.200], 64: [0.200, 0.201]}, "constant"),
        ({16: [0.1, 0.5], 32: [0.5, 0.1], 64: [0.2, 0.4]}, "inconclusive"),
        # the gap growing the other way (QK-norm the more sensitive) is no growth of the claim's
        ({16: [-0.10, -0.12], 32: [-0.30, -0.31], 64: [-0.50, -0.52]}, "shrinking"),
    ],
)
def test_the_sensitivity_gaps_trend_is_the_signed_gaps_slope(values, verdict):
    trend = ladders.gap_trend(gaps(values), "model.width", 0.05, 0.01)
    assert trend.verdict == verdict, trend
    assert ladders.gap_trend(gaps({16: [0.1], 32: [0.2]}), "model.width", 0.05, 0.01) is None


def test_each_scaling_study_is_the_presets_sweep_with_its_ladder_and_tuning():
    full = findings.request_of(ladders.LADDER_LM, "full")
    assert (full.name, full.ladder.key, full.ladder.tokens_per_param) == (
        "findings-ladder_lm",
        "model.width",
        20.0,
    )
    assert full.ladder.values == ["16", "24", "32", "48", "64"]
    assert list(full.space) == ["train.lr"] and full.tuning.seeds == 2
    assert (
        findings.command_of(ladders.LADDER_LM, "full") == "normbench sweep ladder_lm seed=range(8)"
    )
    smoke = findings.request_of(ladders.LADDER_LM, "smoke")
    assert smoke.ladder.values == ["8", "16", "24"] and smoke.tuning.seeds == 1
    assert len(smoke.space["train.lr"]) == 2  # the preset's first two rates
    # the ladder sets each rung's width and steps: the smoke settings leave them to it
    assert not any(o.startswith(("model.width=", "train.max_steps=")) for o in smoke.overrides)
    assert findings.request_of(ladders.LR_SCALING, "full").space == {}  # not tuned


def test_a_trend_prediction_is_never_tested_as_a_paired_one():
    with pytest.raises(ValueError, match="not a paired comparison's prediction"):
        family.one_sided(_difference(), "shrinking", 0.01)


def _difference():
    """A paired difference with known noise (the fields one_sided reads)."""
    from types import SimpleNamespace

    return SimpleNamespace(known_noise=True, diff=0.1, se=0.05, df=4)
