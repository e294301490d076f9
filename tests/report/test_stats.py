"""normbench.report.stats against scipy, hand computations and simulation: paired and unpaired
differences, the floors that keep identical results from reading as a known difference, the
family-wise error of the verdicts, and alpha spent over the looks of a sweep run until
decided."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from normbench.report import sequential, stats

A = {0: 0.90, 1: 0.92, 2: 0.95, 3: 0.91}
B = {0: 0.85, 1: 0.88, 2: 0.90, 3: 0.86, 4: 0.84}


def test_a_paired_difference_is_scipys_paired_t_test_and_welch_is_scipys():
    a, b = {0: 0.90, 1: 0.92, 2: 0.95}, {0: 0.88, 1: 0.91, 2: 0.92}
    d = stats.difference(a, b)
    expected = scipy_stats.ttest_rel(list(a.values()), list(b.values()))
    assert d.paired and d.n == 3 and d.df == 2
    assert d.t == pytest.approx(expected.statistic) and d.how == "paired, 3 seeds"
    assert stats.p_two_sided(d) == pytest.approx(expected.pvalue)
    # seeds 0..3 against 10..14: nothing to pair: Welch on every result
    shifted = {s + 10: v for s, v in B.items()}
    w = stats.difference(A, shifted)
    welch = scipy_stats.ttest_ind(list(A.values()), list(B.values()), equal_var=False)
    assert not w.paired and w.t == pytest.approx(welch.statistic)
    assert stats.p_two_sided(w) == pytest.approx(welch.pvalue)
    assert w.how == "unpaired (Welch)"


def test_one_sided_and_equivalence_p_values_and_the_interval_they_match():
    a = {s: v for s, v in enumerate([0.950, 0.951, 0.949, 0.952])}
    b = {s: v for s, v in enumerate([0.948, 0.950, 0.949, 0.949])}
    d = stats.difference(b, a)  # b - a, paired
    t = scipy_stats.t(d.df)
    assert stats.p_below(d) == pytest.approx(t.cdf(d.diff / d.se))
    margin = 0.01
    above = t.sf((d.diff + margin) / d.se)
    below = t.cdf((d.diff - margin) / d.se)
    assert stats.p_within(d, margin) == pytest.approx(max(above, below))
    low, high = stats.interval(d, 0.05)
    assert (high - low) / 2 == pytest.approx(t.ppf(0.95) * d.se)  # the 90% interval
    # TOST at alpha holds exactly when the (1 - 2 alpha) interval lies inside the margin
    for width in (0.0005, 0.002, 0.004, 0.006):
        inside = -width < low and high < width
        assert (stats.p_within(d, width) < 0.05) == inside


def test_holm_adjusts_step_down_and_keeps_tests_not_made():
    assert stats.holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx(
        [0.03, 0.06, 0.06, math.nan], nan_ok=True
    )


@pytest.mark.parametrize("block", [stats.PAIR_BLOCK, 200])
def test_all_pairs_at_once_are_the_same_floats_as_one_difference_each(block, monkeypatch):
    """compare_with_best computes every pair's difference at once (stats._pairwise): the
    same numbers bit for bit as ``difference``, over equal, overlapping, disjoint and
    quantised seed sets, and identical results (no noise) alike, in one block of pairs or in
    blocks of a few."""
    monkeypatch.setattr(stats, "PAIR_BLOCK", block)
    rng = np.random.default_rng(3)
    groups = [{s: float(rng.normal(0.8, 0.05)) for s in range(30)} for _ in range(4)]
    groups += [
        {int(s): round(float(rng.normal(0.8, 0.05)), 2) for s in rng.choice(40, 25, replace=False)}
        for _ in range(4)
    ]
    groups += [
        {s + 100: 0.5 for s in range(3)},
        {s + 100: 0.5 for s in range(3)},
        {7: 0.5, 200: 0.6},
    ]
    for resolution in (0.0, 0.01):
        testable = list(range(len(groups)))
        pairs, diff, se, df = stats._pairwise(groups, testable, resolution)
        assert len(pairs) == len(groups) * (len(groups) - 1) // 2
        for (i, j), *got in zip(pairs.tolist(), diff, se, df, strict=True):
            one = stats.difference(groups[i], groups[j], resolution)
            assert got == [one.diff, one.se, one.df]
        p = stats._p_two_sided_all(diff, se, df)
        assert p.tolist() == [
            stats.p_two_sided(stats.difference(groups[i], groups[j], resolution))
            for i, j in pairs.tolist()
        ]


def test_identical_results_are_not_a_noise_free_measurement():
    """The issue's three inputs: none may give a verdict with p = 0."""
    # 1. compare_with_best([.95, .95], [.93, .93]) used to be "worse" with p = 0
    best, verdicts = stats.compare_with_best([{0: 0.95, 1: 0.95}, {0: 0.93, 1: 0.93}], 0.05, 0.01)
    assert best == 0 and verdicts[1].verdict == "inconclusive"
    assert verdicts[1].reason == stats.NO_NOISE
    # with the metric's resolution known (1/100 samples) the floor gives a real, finite test
    _, verdicts = stats.compare_with_best(
        [{0: 0.95, 1: 0.95}, {0: 0.93, 1: 0.93}], 0.05, 0.01, resolution=0.01
    )
    assert verdicts[1].verdict == "inconclusive" and 0.05 < verdicts[1].p_differs < 1
    # 2. a contrast whose two cells are identical at every seed used to be "insensitive", p = 0
    same = {0: 0.90, 1: 0.92, 2: 0.91}
    (verdict,) = stats.contrast([(same, dict(same))], 0.05, 0.01)
    assert verdict.verdict == "inconclusive" and verdict.reason == stats.NO_NOISE
    (floored,) = stats.contrast([(same, dict(same))], 0.05, 0.01, resolution=1 / 144)
    assert floored.p_equivalent > 0
    # with four seeds and a resolution well inside the margin, the floor allows a decision
    four = {0: 0.90, 1: 0.92, 2: 0.91, 3: 0.93}
    (decided,) = stats.contrast([(four, dict(four))], 0.05, 0.01, resolution=1 / 1000)
    assert decided.verdict == "equivalent" and 0 < decided.p_equivalent < 0.05


def test_quantised_accuracy_is_not_falsely_equivalent_at_the_margin():
    """The issue's third input: digits' validation split (144 samples) moves accuracy in steps
    of 1/144, so paired differences are often identical. With the true drop exactly at the
    margin, the share of contrasts found insensitive must stay at alpha (it was 0.13-0.15)."""
    rng = np.random.default_rng(0)
    samples, margin, tables = 144, 0.01, 1500
    for noise, seeds in ((0.001, 8), (0.003, 4), (0.006, 4)):
        found = 0
        for _ in range(tables):
            base = 0.9 + 0.02 * rng.standard_normal(seeds)
            a = np.round((base + noise * rng.standard_normal(seeds)) * samples) / samples
            b = np.round((base - margin + noise * rng.standard_normal(seeds)) * samples) / samples
            (v,) = stats.contrast(
                [(dict(enumerate(a)), dict(enumerate(b)))], 0.05, margin, 1 / samples
            )
            found += v.verdict == "equivalent"
        assert found / tables <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / tables), (noise, seeds)


def seeds_table(rng, k, seeds, rho, unequal, gaps=None):
    """k groups x seeds: a seed effect every group shares (correlation rho), and with
    ``unequal`` a first group with noise of its own and twice the spread (like BatchNorm)."""
    shared = rng.standard_normal(seeds)
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((k, seeds))
    if unequal:
        x[0] = 2 * rng.standard_normal(seeds)
    if gaps is not None:
        x += np.asarray(gaps)[:, None]
    return [dict(enumerate(row)) for row in x]


def test_familywise_error_of_worse_against_the_best_stays_at_alpha():
    """Identical groups, the best chosen after looking: correlations 0, 0.5, 0.9; 2, 5 and 10
    groups; 3 to 8 seeds; with and without a group of its own, wider noise. No table may
    show a "worse" more often than alpha (Monte-Carlo error allowed for)."""
    rng = np.random.default_rng(1)
    per_cell, total, errors = 0, 0, 0
    for rho in (0.0, 0.5, 0.9):
        for k in (2, 5, 10):
            for unequal in (False, True):
                cell = 0
                for seeds in range(3, 9):
                    for _ in range(60):
                        _, verdicts = stats.compare_with_best(
                            seeds_table(rng, k, seeds, rho, unequal), 0.05, 0.25
                        )
                        cell += any(v.verdict == "worse" for v in verdicts)
                per_cell = 360
                assert cell / per_cell <= 0.05 + 4 * math.sqrt(0.05 * 0.95 / per_cell), (
                    rho,
                    k,
                    unequal,
                    cell / per_cell,
                )
                total, errors = total + per_cell, errors + cell
    assert errors / total <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / total)


def test_equivalence_against_the_best_is_not_fooled_by_choosing_it_after_looking():
    """One group a whole margin above nine identical ones: any "equivalent" claim between it
    and the others is false; choosing the luckiest of the nine as the best must not make it
    more frequent than alpha."""
    rng = np.random.default_rng(2)
    margin, tables, wrong = 1.0, 600, 0
    gaps = [margin] + [0.0] * 9
    for _ in range(tables):
        groups = seeds_table(rng, 10, 5, 0.9, False, gaps)
        best, verdicts = stats.compare_with_best(groups, 0.05, margin)
        wrong += any(
            v.verdict == "equivalent" and abs(gaps[i] - gaps[best]) >= margin
            for i, v in enumerate(verdicts)
        )
    assert wrong / tables <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / tables)


def test_a_named_reference_gives_better_worse_equivalent_and_controls_the_error():
    ref = {0: 0.90, 1: 0.93, 2: 0.88, 3: 0.95}
    groups = [
        ref,
        {s: v + 0.05 + 0.002 * (-1) ** s for s, v in ref.items()},  # better, every seed
        {s: v - 0.05 + 0.002 * (-1) ** s for s, v in ref.items()},  # worse
        {s: v + 0.001 * (-1) ** s for s, v in ref.items()},  # equivalent
        {s: v + 0.04 * (-1) ** s for s, v in ref.items()},  # noisy: inconclusive
        {0: 0.9},  # one result: no verdict, "-" (one run)
    ]
    verdicts = stats.compare_with_reference(groups, 0, 0.05, 0.01)
    assert [v.verdict for v in verdicts] == [
        "reference",
        "better",
        "worse",
        "equivalent",
        "inconclusive",
        "-",
    ]
    assert verdicts[-1].reason == stats.ONE_RUN
    assert verdicts[1].diff == pytest.approx(0.05) and verdicts[1].reason == "paired, 4 seeds"
    # identical groups: any better or worse is an error; at most alpha of tables show one
    rng = np.random.default_rng(3)
    tables, wrong = 1000, 0
    for _ in range(tables):
        verdicts = stats.compare_with_reference(seeds_table(rng, 6, 4, 0.5, True), 1, 0.05, 0.5)
        wrong += any(v.verdict in ("better", "worse") for v in verdicts)
    assert wrong / tables <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / tables)


def test_pairing_finds_a_gap_that_welch_misses_when_seeds_share_their_noise():
    """Correlation 0.8 between groups at one seed, a gap of one standard deviation: with 8
    seeds the paired verdict finds it far more often than the same results unpaired."""
    rng = np.random.default_rng(4)
    paired = unpaired = 0
    for _ in range(200):
        groups = seeds_table(rng, 5, 8, 0.8, False, [0, 0, 0, 0, -1.0])
        _, verdicts = stats.compare_with_best(groups, 0.05, 0.25)
        paired += verdicts[4].verdict == "worse"
        shuffled = [{s + 100 * i: v for s, v in g.items()} for i, g in enumerate(groups)]
        _, verdicts = stats.compare_with_best(shuffled, 0.05, 0.25)
        unpaired += verdicts[4].verdict == "worse"
    assert paired / 200 > 0.5 > unpaired / 200 + 0.3


def test_normbench_0_3_s_sweeps_keep_their_obrien_fleming_type_levels():
    assert sequential.spent_alpha(0.05, 1.0) == pytest.approx(0.05)
    z = scipy_stats.norm.ppf(0.975)
    assert sequential.spent_alpha(0.05, 0.5) == pytest.approx(
        2 - 2 * scipy_stats.norm.cdf(z / 0.5**0.5)
    )
    fractions = [3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0]
    old = sequential.OBRIEN_FLEMING
    levels = [sequential.look_alpha(0.05, fractions, look, old) for look in range(1, 7)]
    assert sum(levels) == pytest.approx(0.05)
    assert levels == sorted(levels) and levels[0] < 0.002 < 0.012 < levels[-1]  # back-loaded


def test_round_off_is_no_spread_in_the_paired_branch():
    """Both per-seed differences are 0.02; their float spread (1e-16) is round-off, not noise:
    without a known resolution the comparison is inconclusive, not *worse* with p = 1e-15."""
    best, verdicts = stats.compare_with_best([{0: 0.95, 1: 0.85}, {0: 0.93, 1: 0.83}], 0.05, 0.01)
    assert best == 0 and verdicts[1].verdict == "inconclusive"
    assert verdicts[1].reason == stats.NO_NOISE
    assert not stats.difference({0: 0.95, 1: 0.85}, {0: 0.93, 1: 0.83}).known_noise
    # a real spread, however small against the values, is noise
    assert stats.difference({0: 0.95, 1: 0.85}, {0: 0.93, 1: 0.830001}).known_noise


def test_the_best_is_chosen_on_a_paired_basis_over_unequal_seed_sets():
    """until-decided leaves groups with different seeds: rmsnorm, higher at every common seed,
    is the best, not a group whose raw mean is higher only because its seeds differ."""
    layernorm = {0: 0.9400, 1: 0.9450, 2: 0.9425}
    rmsnorm = {0: 0.9600, 1: 0.9656, 2: 0.9619, 3: 0.8812, 4: 0.8856, 5: 0.8825}
    best, verdicts = stats.compare_with_best([layernorm, rmsnorm], 0.05, 0.01)
    assert best == 1 and verdicts[0].verdict == "worse"
    expected = scipy_stats.ttest_rel([0.9400, 0.9450, 0.9425], [0.9600, 0.9656, 0.9619])
    assert verdicts[0].p_differs == pytest.approx(expected.pvalue)  # 0.0003, one pair
    assert verdicts[0].common_only and verdicts[0].reason == "paired, 3 seeds"
    assert not stats.compare_with_best([rmsnorm, rmsnorm], 0.05, 0.01)[1][1].common_only


def test_a_group_above_the_best_is_reported_better_not_inconclusive():
    """A cycle of pairs over unequal seeds (b ahead of a, c of b, a of c) leaves a best that
    another group beats at every common seed: that group is *better*, saying why."""
    a = {0: 0.90, 1: 0.91, 2: 0.92, 3: 0.99, 4: 0.99, 5: 0.99}
    b = {0: 0.92, 1: 0.9305, 2: 0.9398}
    c = {0: 0.94, 1: 0.951, 2: 0.9597, 3: 0.80, 4: 0.81, 5: 0.79}
    best, verdicts = stats.compare_with_best([a, b, c], 0.05, 0.005)
    assert best == 0  # one win each; the mean breaks the tie
    assert verdicts[1].verdict == "better" and verdicts[1].reason.startswith(stats.ABOVE_BEST)
    assert verdicts[1].diff == pytest.approx(0.0201, abs=1e-4)
