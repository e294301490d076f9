"""report.scaling's pieces on synthetic ladders with known curves: the multipliers read off
the runs (exact where the runs are, bounds where the reference's range ends, no trend from too
few rungs), the interpolation's slopes, the parametric forms and their lack-of-fit test, and
the crossing of two fitted curves. Coverage and error rates by simulation:
tests/report/test_scaling_simulation.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import interpolate

from normbench.report import scaling, scaling_curves
from tests.report.scaling_designs import SHIPPED, Design, power, shifted, wiggled


def ladder(rng, k=(1.0, 2.0), rungs=6, seeds=3, sd=0.015, exponent=0.4, floor=1.0, scale=1.5):
    """Groups whose loss is floor + scale (k C / 1e9)^-exponent plus seed noise: group g
    needs 1 / k_g of the compute of a group with k = 1 (its multiplier against it is k_g)."""
    compute = np.geomspace(1e9, 1e11, rungs)
    return [
        [
            scaling.Cell(
                c,
                np.arange(seeds),
                floor + scale * (kk * c / 1e9) ** -exponent + sd * rng.standard_normal(seeds),
            )
            for c in compute
        ]
        for kk in k
    ]


def test_hermite_slopes_are_pchips_inside():
    """Inside, the slopes are scipy's PchipInterpolator's (Fritsch and Butland); at the ends
    the end segments' secants."""
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.uniform(0.5, 2.0, 6))
    y = -np.cumsum(rng.uniform(0.01, 1.0, (4, 6)), axis=1)
    slopes = scaling.hermite_slopes(x, y)
    for row, found in zip(y, slopes, strict=True):
        pchip = interpolate.PchipInterpolator(x, row).derivative()(x)
        np.testing.assert_allclose(found[1:-1], pchip[1:-1], rtol=1e-10)
        assert found[0] == pytest.approx((row[1] - row[0]) / (x[1] - x[0]))


def test_a_multiplier_within_the_ladder_is_read_off_the_runs():
    """Noise-free groups at 0.3 and 2x the reference's compute on the shipped ladder: each
    in-range rung's multiplier within 2% of the truth; where the group's loss is beyond the
    reference's measured range, a bound on the right side of the truth."""
    curve = power(1.0, 2.46, 0.144)
    design = Design("", SHIPPED, [curve, shifted(curve, 0.3), shifted(curve, 2.0)], 2, 0.0, True)
    point, _, _, bounds, *_ = scaling.measured_multipliers(design.draw(_rng()), 0, 0.05)
    truth = design.truth()
    measured = np.isfinite(point)
    np.testing.assert_allclose(10 ** point[measured], 10 ** truth[measured], rtol=0.02)
    assert point[1, 0] == -np.inf and truth[1, 0] < bounds[1, 0]  # "< bound": above the range
    assert point[2, -1] == np.inf and truth[2, -1] > bounds[2, -1]  # "> bound": below it
    assert measured[1, 1:].all() and measured[2, :-1].all()


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_a_reference_that_is_level_measures_nothing_there():
    """Two rungs of the reference at one loss (every run at chance, say): any compute
    between them reaches that loss, so a group's multiplier there is not estimable."""
    flat = [scaling.Cell(c, np.arange(2), np.array([2.3, 2.3])) for c in (1e9, 1e10, 1e11)]
    group = [scaling.Cell(c, np.arange(2), np.array([2.3, 2.3])) for c in (1e9, 1e10, 1e11)]
    point, *_ = scaling.measured_multipliers([flat, group], 0, 0.05, boot=20)
    assert np.isnan(point[1]).all()


def test_the_trend_is_inconclusive_with_fewer_than_3_rungs_in_range():
    """A group 10x behind the reference on a 5-rung ladder: its loss lies above the
    reference's range at the first rungs, leaving fewer than 3 measured."""
    curve = power(1.0, 2.46, 0.144)
    design = Design("", SHIPPED, [curve, shifted(curve, 0.02)], 4, 0.01, True)
    _, answers = scaling.analyse(design.draw(_rng()), 0, 0.05, boot=100, rng=_rng())
    assert answers[1].trend.verdict == "inconclusive"
    assert answers[1].trend.rungs < scaling.MIN_TREND_RUNGS
    assert "rung(s) in the reference's range" in answers[1].trend.why


def test_the_per_group_form_recovers_a_known_curve():
    rng = np.random.default_rng(0)
    cells = ladder(rng, k=(1.0,), sd=0.0005)
    compute = np.array([[c.compute for c in cells[0]]])
    means = np.array([[c.values.mean() for c in cells[0]]])
    fitted = scaling_curves.split(
        scaling_curves.fit(scaling_curves.PER_GROUP, compute, means[None])
    )
    point = fitted[0]
    assert point.exponent[0] == pytest.approx(0.4, abs=0.01)
    assert point.floor[0] == pytest.approx(1.0, abs=0.01)


def test_lack_of_fit_refuses_a_wrong_form_and_a_ladder_no_form_fits():
    """A power law with a floor of 1: the pure power law (E = 0) fails its lack-of-fit test.
    A ladder that wiggles around any power law by 10% (far beyond its seeds' noise): no form
    fits, so the multipliers beyond the runs and the crossing are not estimable, and say so."""
    rng = np.random.default_rng(1)
    fit, _ = scaling.analyse(ladder(rng), 0, 0.05, boot=100, rng=rng)
    assert fit.mode in (scaling.SHARED, scaling.PER_GROUP)
    assert fit.tests[scaling.ZERO].p < 0.05
    assert "lack of fit p" in fit.why
    curve = wiggled(power(1.0, 2.46, 0.144), 0.1)
    design = Design("", SHIPPED, [curve, shifted(curve, 0.5)], 8, 0.01, True)
    fit, answers = scaling.analyse(design.draw(rng), 0, 0.05, boot=100, rng=rng)
    assert fit.mode == scaling.NONE and fit.point is None
    assert fit.why.startswith("no form fits")
    assert answers[1].kind[-2:] == [scaling.NOT_ESTIMABLE] * 2
    assert np.isnan(answers[1].multiplier[-2:]).all() and math.isnan(answers[1].crossing)


def test_a_curve_whose_log_log_slope_steepens_gets_the_curved_form():
    """ln L = a + b t + c t^2 with c < 0 (the shipped LayerNorm's bend): no form with a floor
    >= 0 can steepen; the curved one fits."""
    rng = np.random.default_rng(2)
    from tests.report.scaling_designs import bent

    curve = bent()
    design = Design("", SHIPPED, [curve, shifted(curve, 0.5)], 8, 0.005, True)
    fit, _ = scaling.analyse(design.draw(rng), 0, 0.05, boot=100, rng=rng)
    assert fit.mode == scaling.CURVED, fit.why


def test_the_lack_of_fit_test_and_its_excess_variance():
    """Rung means off their curve by a rung-level deviation of sd 0.03 besides seed noise
    (sd 0.02, 8 seeds): the F test rejects, and the excess variance the refits add estimates
    0.03^2; with no rung-level deviation the test keeps its level and the excess is small."""
    rng = np.random.default_rng(5)
    groups, rungs, seeds, sd = 50, 40, 8, 0.02
    counts = np.full((groups, rungs), seeds, dtype=float)
    pure = sd**2 * rng.chisquare(seeds - 1, (groups, rungs))
    seed_part = sd / math.sqrt(seeds) * rng.standard_normal((groups, rungs))
    misfit = scaling_curves.lack_of_fit(
        seed_part + 0.03 * rng.standard_normal((groups, rungs)), counts, pure, 0
    )
    assert misfit.p < 1e-6
    assert np.median(misfit.excess_variance) == pytest.approx(0.03**2, rel=0.2)
    fits = scaling_curves.lack_of_fit(seed_part, counts, pure, 0)
    assert fits.p > 0.01 and np.median(fits.excess_variance) < 0.1 * 0.03**2


def test_a_gap_that_closes_is_shrinking_and_the_curves_crossing_is_found():
    """Group 1 starts 4x behind in compute but falls faster (exponent 0.6 against 0.4): it
    catches the reference where 1.5 (C/1e9)^-0.4 = 3 (C/1e9)^-0.6, at C = 1e9 * 2^5."""
    rng = np.random.default_rng(4)
    compute = np.geomspace(1e9, 1e11, 6)
    cells = ladder(rng, k=(1.0,), sd=0.005)
    cells.append(
        [
            scaling.Cell(
                c, np.arange(3), 1.0 + 3.0 * (c / 1e9) ** -0.6 + 0.005 * rng.standard_normal(3)
            )
            for c in compute
        ]
    )
    _, answers = scaling.analyse(cells, 0, 0.05, boot=200, rng=rng)
    truth = math.log10(1e9 * 2**5)
    assert answers[1].crossing == pytest.approx(truth, abs=0.25)
    low, high = answers[1].crossing_ci
    assert low <= truth <= high
    assert answers[1].trend.verdict in ("shrinking", "inconclusive")


def test_parallel_curves_do_not_cross():
    rng = np.random.default_rng(5)
    _, answers = scaling.analyse(ladder(rng, sd=0.005), 0, 0.05, boot=100, rng=rng)
    assert math.isnan(answers[1].crossing)
    assert answers[1].crossing_share < 0.5
