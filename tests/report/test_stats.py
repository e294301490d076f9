"""normbench.stats against scipy, hand computations and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from normbench.report import stats

A = np.array([0.90, 0.92, 0.94, 0.91])
B = np.array([0.80, 0.82, 0.87])


def test_welch_matches_the_formula():
    va, vb = A.var(ddof=1) / 4, B.var(ddof=1) / 3
    w = stats.welch(A, B)
    assert w.diff == pytest.approx(A.mean() - B.mean())
    assert w.se == pytest.approx(math.sqrt(va + vb))
    assert w.df == pytest.approx((va + vb) ** 2 / (va**2 / 3 + vb**2 / 2))


def test_one_sided_p_matches_scipy_ttest_ind():
    for a, b in ((A, B), (B, A), (A, A + 0.001)):
        expected = scipy_stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue
        assert stats.p_lower(a, b) == pytest.approx(expected, rel=1e-9)


def test_tost_is_the_larger_of_two_shifted_welch_tests():
    margin = 0.05
    above = scipy_stats.ttest_ind(A + margin, B, equal_var=False, alternative="greater").pvalue
    below = scipy_stats.ttest_ind(A - margin, B, equal_var=False, alternative="less").pvalue
    assert stats.p_equivalent(A, B, margin) == pytest.approx(max(above, below), rel=1e-9)
    close = np.array([0.900, 0.901, 0.899, 0.900])
    assert stats.p_equivalent(close, close + 0.0005, 0.01) < 1e-4  # clearly within 0.01


def test_constant_samples_have_a_known_difference():
    same = np.array([0.5, 0.5, 0.5])
    assert stats.welch(same, same).se == 0
    assert stats.p_lower(same - 0.1, same) == 0.0 and stats.p_lower(same, same) == 1.0
    assert stats.p_equivalent(same, same + 0.001, 0.01) == 0.0
    assert stats.p_equivalent(same, same + 0.1, 0.01) == 1.0


def test_mean_ci_is_student_t():
    mean, half = stats.mean_ci(A)
    assert mean == pytest.approx(A.mean())
    sem = A.std(ddof=1) / 2
    assert half == pytest.approx(scipy_stats.t.ppf(0.975, 3) * sem)
    assert math.isnan(stats.mean_ci(np.array([0.5]))[1])


def test_diff_ci_is_welchs_interval():
    w = stats.welch(A, B)
    low, high = stats.diff_ci(w)
    half = scipy_stats.t.ppf(0.975, w.df) * w.se
    assert (low, high) == pytest.approx((w.diff - half, w.diff + half))


def test_holm_by_hand():
    # p = (0.01, 0.04, 0.03, 0.20), m = 4: sorted 0.01*4, 0.03*3, 0.04*2, 0.20*1, running max
    assert stats.holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    adjusted = stats.holm([0.5, math.nan, 0.01])
    assert adjusted[0] == pytest.approx(0.5) and math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.02)


def test_games_howell_p_is_the_studentized_range_tail():
    w = stats.welch(A, B)
    q = math.sqrt(2) * w.t
    expected = scipy_stats.studentized_range.sf(q, 5, w.df)
    assert stats.p_worse_than_best(B, A, 5) == pytest.approx(expected, rel=1e-6)
    assert stats.p_worse_than_best(A, B, 5) == 1.0  # above the "best": no evidence of worse


def test_the_fast_decision_agrees_with_the_exact_p_value():
    rng = np.random.default_rng(3)
    for _ in range(60):
        best, group = rng.normal(0.5, 1, 4), rng.normal(-1.5, 1, rng.integers(2, 7))
        k = int(rng.integers(2, 12))
        exact = stats.p_worse_than_best(group, best, k) < 0.05
        assert stats.is_worse_than_best(group, best, k, 0.05) == exact


def test_comparison_with_the_best_covers_every_verdict():
    rng = np.random.default_rng(0)
    best = 0.95 + rng.normal(0, 0.002, 6)
    samples = [
        best,
        best - 0.002,  # equivalent: well within 0.01
        0.80 + rng.normal(0, 0.002, 6),  # worse
        0.93 + np.array([-0.05, 0.05, 0.0]),  # inconclusive: too noisy
        np.array([0.99]),  # one result: inconclusive, never the reference
    ]
    reference, verdicts = stats.compare_with_best(samples, alpha=0.05, margin=0.01)
    assert reference == 0
    assert [v.verdict for v in verdicts] == [
        "reference",
        "equivalent",
        "worse",
        "inconclusive",
        "inconclusive",
    ]
    assert "needs 2" in verdicts[4].reason
    worse = verdicts[2]
    assert worse.diff == pytest.approx(samples[2].mean() - best.mean())
    assert worse.ci_low < worse.diff < worse.ci_high < 0
    assert worse.p_worse < 0.05 and verdicts[3].p_worse > 0.05


def test_contrast_verdicts_and_holm_over_rows():
    rng = np.random.default_rng(1)
    large = 0.95 + rng.normal(0, 0.002, 4)
    pairs = [
        (large, large - 0.1),  # sensitive
        (large, large - 0.001),  # insensitive
        (large, large + np.array([-0.1, 0.1, 0.05, -0.05])),  # inconclusive
        (large, np.array([0.9])),  # too few
    ]
    verdicts = stats.contrast(pairs, alpha=0.05, margin=0.01)
    assert [v.verdict for v in verdicts] == [
        "sensitive",
        "insensitive",
        "inconclusive",
        "inconclusive",
    ]
    assert verdicts[0].diff == pytest.approx(0.1)
    raw = [stats.p_lower(other, reference) for reference, other in pairs[:3]]
    assert [v.p_worse for v in verdicts[:3]] == pytest.approx(stats.holm(raw))
    assert "needs 2" in verdicts[3].reason


@pytest.mark.slow
def test_simulation_false_positives_and_power():
    """2,000 tables of ten identical groups of four seeds: the share of tables with any
    'worse' verdict stays within alpha + 0.01. Power: one group 3 standard deviations below
    the rest is found 'worse' in at least 90% of tables with 8 seeds per group; with 4 seeds
    the range distribution of ten groups at ~6 degrees of freedom allows about 60% (printed
    in docs/statistics.md), which is why --until-decided exists."""
    rng = np.random.default_rng(2026)
    alpha = 0.05

    def worse_share(shift: float, seeds: int, tables: int) -> tuple[float, float]:
        any_worse, shifted_found = 0, 0
        for _ in range(tables):
            samples = [rng.normal(0.0, 1.0, seeds) for _ in range(9)]
            samples.append(rng.normal(-shift, 1.0, seeds))
            _, verdicts = stats.compare_with_best(samples, alpha, margin=0.01, with_p=False)
            any_worse += any(v.verdict == "worse" for v in verdicts)
            shifted_found += verdicts[-1].verdict == "worse"
        return any_worse / tables, shifted_found / tables

    false_positive, _ = worse_share(0.0, 4, 2000)
    assert false_positive <= alpha + 0.01
    _, power_8 = worse_share(3.0, 8, 400)
    assert power_8 >= 0.9
    _, power_4 = worse_share(3.0, 4, 400)
    assert 0.45 <= power_4 <= 0.8  # what docs/statistics.md states for 4 seeds


def test_holm_would_not_control_the_error_of_a_best_chosen_after_looking():
    """Why Games-Howell: Holm over one-sided Welch tests against the observed best finds a
    'worse' in about 13% of tables of ten identical groups (alpha 0.05)."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(600):
        samples = [rng.normal(0, 1, 4) for _ in range(10)]
        best = max(range(10), key=lambda i: samples[i].mean())
        p = [stats.p_lower(samples[i], samples[best]) for i in range(10) if i != best]
        hits += min(stats.holm(p)) < 0.05
    assert hits / 600 > 0.09


def test_the_tabulated_range_tail_agrees_with_scipy(monkeypatch):
    """range_sf's fixed quadrature (a report's Games-Howell p-values, hundreds at once)
    against scipy's adaptive integration, over numbers of groups, df and q."""
    monkeypatch.setattr(stats, "TABLE_FROM", 0)
    for groups in (2, 7, 60, 300):
        df = np.array([1.3, 4.0, 30.0, 900.0, 20000.0]).repeat(4)
        q = np.tile([0.5, 2.0, 4.0, 7.0], 5)
        tabulated = stats.range_sf(q, groups, df)
        exact = scipy_stats.studentized_range.sf(q, groups, df)
        assert np.all((np.abs(tabulated - exact) < 1e-10) | np.isclose(tabulated, exact, rtol=1e-7))
    assert stats.range_sf(np.array([-1.0, 0.0, 3.0]), 5, np.array([4.0, 4.0, np.inf])).tolist() == [
        1.0,
        1.0,
        0.0,
    ]
