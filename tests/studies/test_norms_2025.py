"""The norms_2025 study's measures, each against a hand computation: the registered claims are
decided on these values, so a wrong one would decide them wrongly."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from normbench.studies import registry
from normbench.studies.norms_2025 import (
    MEASURES,
    REFERENCE,
    activation_measures,
    gap_to_reference,
    uniform_sink,
)


def diagnostics(step: int, rms: list[float], scale: float = 1.0) -> pd.DataFrame:
    """A run's diagnostics at one step: four units, attention and MLP in turn."""
    units = len(rms)
    return pd.DataFrame(
        {
            "step": [step] * units,
            "unit": range(units),
            "resid_rms": rms,
            "resid_kurtosis": [0.5, 2.0, -0.5, 1.0],
            "sublayer_kurtosis": [1.0, 7.5 * scale, 0.0, np.nan],
            "resid_max_abs": [3.0, 40.0 * scale, 10.0, 20.0],
            "attn_sink": [0.1, np.nan, 0.3, np.nan],
        }
    )


def test_activation_measures_read_the_last_step_only():
    frame = pd.concat([diagnostics(0, [1, 1, 1, 1], scale=100.0), diagnostics(300, [1, 2, 3, 4])])
    found = activation_measures(frame.sample(frac=1.0, random_state=0))  # any row order
    assert found["kurtosis"] == 7.5  # the largest of stream and sublayer, NaN ignored
    assert found["max_abs"] == pytest.approx(math.log10(40.0))
    assert found["sink"] == pytest.approx(math.log10(0.2))  # the attention units' mean
    assert found["growth"] == pytest.approx(2 * math.log10(4.0))  # mean square: twice the RMS


def test_a_diverged_run_has_no_measure():
    frame = diagnostics(300, [1.0, 2.0, 3.0, math.inf])
    frame["resid_max_abs"] = math.nan
    found = activation_measures(frame)
    assert math.isnan(found["growth"]) and math.isnan(found["max_abs"])


def test_uniform_sink_is_the_mean_of_one_over_the_position():
    assert uniform_sink(2) == pytest.approx(0.5)  # one query after the first, 2 keys
    assert uniform_sink(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    harmonic = sum(1 / k for k in range(1, 65))
    assert uniform_sink(64) == pytest.approx((harmonic - 1) / 63)


def test_gap_to_reference_is_the_mean_absolute_gap_on_the_same_seed():
    reference = pd.Series([3.0, 2.5, 2.0], index=[100, 200, 300])
    other_seed = pd.Series([9.0, 9.0, 9.0], index=[100, 200, 300])
    curves = {(REFERENCE, 0): reference, (REFERENCE, 1): other_seed}
    run = pd.Series([3.1, 2.3, 2.0, 1.0], index=[100, 200, 300, 400])  # 400: not in both
    assert gap_to_reference(run, curves, seed=0) == pytest.approx((0.1 + 0.2 + 0.0) / 3)
    assert math.isnan(gap_to_reference(reference, curves, seed=0))  # the reference itself
    assert math.isnan(gap_to_reference(run, curves, seed=2))  # no reference run on seed 2


def test_every_measure_has_its_registered_claim_on_this_study():
    for claim_id in MEASURES.values():
        assert registry.claim(claim_id).study == "norms_2025"
