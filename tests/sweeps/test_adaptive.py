"""Seeds until decided: the simulation behind docs/statistics.md's tables
(scripts/sequential_design.py) checked against normbench's own verdicts and batch contrast, the
error of the whole procedure under the null with futility obeyed and ignored (non-binding), the
batch contrast's false *sensitive*, and the futility rule read off a report's row."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from normbench.report import sequential, stats
from normbench.report.base import Method
from normbench.sweeps import adaptive

SCRIPT = Path(__file__).parents[2] / "scripts" / "sequential_design.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("sequential_design", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results(x: np.ndarray, n: np.ndarray) -> list[dict]:
    return [
        {s: float(v) for s, v in enumerate(row[:count])} for row, count in zip(x, n, strict=True)
    ]


@pytest.mark.parametrize("best", [True, False])
def test_the_vectorised_report_is_normbench_s(sim, best):
    """Tables with unequal seed prefixes (as until-decided leaves them): the simulation's
    verdicts, differences and conditional powers are stats.compare_with_best's /
    compare_with_reference's and sequential.conditional_power's."""
    rng = np.random.default_rng(5)
    tables, k, level, margin = 40, 4, 0.03, 0.8
    x, _ = sim.draw(rng, tables, k, 0.5, 0.6)
    n = rng.integers(2, sim.MAX_SEEDS + 1, size=(tables, k))
    verdict, ref, stat = sim.report(x, n, level, margin, best)
    tests = k * (k - 1) // 2 if best else k - 1
    power = sim.conditional_power(stat, 0.05, margin, tests, k - 1)
    words = {v: w for w, v in sim.WORDS.items()} | {sim.REFERENCE: "reference"}
    for t in range(tables):
        groups = results(x[t], n[t])
        if best:
            chosen, expected = stats.compare_with_best(groups, level, margin)
            assert chosen == ref[t]
        else:
            expected = stats.compare_with_reference(groups, 0, level, margin)
        assert [words[v] for v in verdict[t]] == [v.verdict for v in expected]
        for g, v in enumerate(expected):
            if v.verdict == "reference":
                continue
            assert stat[0, t, g] == pytest.approx(v.diff)
            d = stats.difference(groups[g], groups[ref[t]])
            cp = sequential.conditional_power(d, sim.MAX_SEEDS, 0.05, margin, tests, k - 1)
            assert power[t, g] == pytest.approx(cp, abs=1e-9)


def test_the_vectorised_contrast_is_normbench_s(sim):
    """The simulation's batch contrast (rows of paired differences, unequal seeds per row) gives
    stats.contrast's verdicts: sensitive, insensitive and inconclusive."""
    rng = np.random.default_rng(4)
    tables, rows = 80, 4
    x = rng.standard_normal((tables, rows, 2, sim.MAX_SEEDS))
    x[:, :, 1] -= 1.5 * rng.random((tables, rows, 1))
    n = rng.integers(2, sim.MAX_SEEDS + 1, size=(tables, rows))
    words = {sim.WORSE: "worse", sim.EQUIVALENT: "equivalent", sim.OPEN: "inconclusive"}
    seen = set()
    for level, margin in ((0.03, 0.8), (0.2, 1.5), (0.01, 0.0)):
        verdict = sim.contrast(x[:, :, 1] - x[:, :, 0], n, level, margin)
        for t in range(tables):
            pairs = [
                tuple(
                    {s: float(v) for s, v in enumerate(x[t, r, side, : n[t, r]])} for side in (0, 1)
                )
                for r in range(rows)
            ]
            expected = [v.verdict for v in stats.contrast(pairs, level, margin)]
            assert [words[v] for v in verdict[t]] == expected
            seen |= set(expected)
    assert seen == {"worse", "equivalent", "inconclusive"}


SE = math.sqrt(0.05 * 0.95 / 4000)  # 4,000 tables a setting
BINDING = 1.84  # the first calibration, measured with futility obeyed only


def null_error(sim, scale, k, best, gamma):
    """The family-wise error under the null, margin 0 (nothing shown equivalent: every open
    group goes on), correlation 0, 4,000 tables on fixed draws."""
    x, mu = sim.draw(np.random.default_rng([7, k, best]), 4000, k, 0.0, 0.0)
    levels = sim.design_levels(scale)
    return sim.until_decided(x, mu, 0.0, best, levels, gamma)[0].mean()


def test_the_levels_hold_with_futility_ignored(sim):
    """Non-binding futility: with every open group drawing seeds to the cap (a user adds seeds,
    a resumed sweep), the error of the whole procedure stays at alpha at the presets' sizes
    with normbench's levels, and does not with the first calibration's (lambda 1.84, measured
    only with futility obeyed)."""
    scale = sequential.design_scale(0.05, [(3 + i) / 8 for i in range(6)])
    settings = [(2, False), (2, True), (5, False), (5, True)]
    now = [null_error(sim, scale, k, best, None) for k, best in settings]
    before = [null_error(sim, BINDING, k, best, None) for k, best in settings]
    assert max(now) <= 0.05 + 3 * SE
    assert max(before) > 0.05 + 3 * SE and np.mean(before) > 0.05
    # obeyed, futility stops hopeless comparisons early: fewer runs, no more error
    x, mu = sim.draw(np.random.default_rng(8), 300, 5, 0.0, 0.0)
    levels = sim.design_levels()
    erred, _, runs = sim.until_decided(x, mu, 0.5, False, levels, adaptive.FUTILITY)
    assert erred.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
    assert runs.mean() < 5 * sim.MAX_SEEDS
    # ignored, a table that decides nothing ends with every group at the cap
    _, decided, runs = sim.until_decided(x, mu, 0.0, False, levels, None)
    assert (runs[decided == 0] == 5 * sim.MAX_SEEDS).all()


def test_the_batch_contrast_holds_its_level(sim):
    """Batch contrasts are never stopped for futility: with every row drawing seeds at every
    look, the false *sensitive* stays at alpha with normbench's levels over 1, 3 and 5 rows,
    and does not with the first calibration's."""
    scale = sequential.design_scale(0.05, [(3 + i) / 8 for i in range(6)])

    def error(scale, rows):
        rng = np.random.default_rng([9, rows])
        levels = sim.design_levels(scale)
        return sim.batch_null(rng, 4000, rows, 0.0, 0.0, levels, "cap").mean()

    now = [error(scale, rows) for rows in (1, 3, 5)]
    before = [error(BINDING, rows) for rows in (1, 3, 5)]
    assert max(now) <= 0.05 + 3 * SE
    assert max(before) > 0.05 + 3 * SE and np.mean(before) > 0.05


def test_a_fixed_design_reads_its_own_seeds(sim):
    """The efficiency table's fixed designs: 4 seeds test the first 4 of the same draws."""
    x, mu = sim.draw(np.random.default_rng(11), 50, 3, 0.5, 1.0, 16)
    for seeds in (4, 16):
        erred, decided = sim.fixed(x, mu, 0.5, False, seeds)
        verdict, ref, _ = sim.report(x[..., :seeds], np.full((50, 3), seeds), 0.05, 0.5, False)
        assert (decided == np.isin(verdict, (sim.WORSE, sim.BETTER, sim.EQUIVALENT)).sum(1)).all()


def test_levels_are_calibrated_for_the_default_design_and_the_union_bound_elsewhere():
    default = [(3 + i) / 8 for i in range(6)]
    levels = [sequential.look_alpha(0.05, default, look) for look in range(1, 7)]
    assert levels == sorted(levels) and levels[0] < 0.001  # two degrees of freedom: nothing
    scale = sequential.design_scale(0.05, default)
    assert 1 < scale < 1.84
    assert levels[-1] == pytest.approx(scale * 0.05 * (1 - (7 / 8) ** 6))
    other = [(2 + i) / 6 for i in range(5)]
    assert sum(sequential.look_alpha(0.05, other, look) for look in range(1, 6)) == pytest.approx(
        0.05
    )
    legacy = [
        sequential.look_alpha(0.05, default, look, sequential.OBRIEN_FLEMING)
        for look in range(1, 7)
    ]
    assert [round(v, 4) for v in legacy] == [0.0014, 0.0042, 0.0076, 0.0105, 0.0125, 0.0139]


def test_a_record_of_the_first_calibration_reports_at_its_levels():
    """A sweep recorded with the binding calibration's label is reported at the levels it ran
    with (lambda 1.84: 0.05 at the last look), not at the recalibrated ones."""
    default = (3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0)
    old = [
        sequential.look_alpha(0.05, default, look, sequential.BINDING_SPENDING)
        for look in range(1, 7)
    ]
    assert [round(v, 4) for v in old] == [0.0003, 0.0012, 0.004, 0.0109, 0.0249, 0.05]
    method = Method(0.05, 0.01, fractions=default, look=6, spending=sequential.BINDING_SPENDING)
    assert method.level == pytest.approx(0.05)
    assert Method(0.05, 0.01, fractions=default, look=6).level < 0.04
    assert sequential.SPENDING != sequential.BINDING_SPENDING


def test_futility_is_read_off_a_convergence_row():
    """The row's stats.Difference, kept beside the table (numbers, not its text), gives the
    sweep's conditional power: sequential.conditional_power's; a row without a paired difference
    gets 1 (it keeps drawing seeds)."""
    rng = np.random.default_rng(2)
    groups = [{s: float(v) for s, v in enumerate(rng.normal(mu, 1, 5))} for mu in (0, 0, -0.5)]
    level, margin = 0.004, 1.0
    best, verdicts = stats.compare_with_best(groups, level, margin)
    table = pd.DataFrame(
        {
            "verdict": [v.verdict for v in verdicts],
            "results": [5, 5, 5],
            "diff_vs_best": [v.diff for v in verdicts],
            "diff_ci_low": [v.ci_low for v in verdicts],
            "diff_ci_high": [v.ci_high for v in verdicts],
            "reason": [v.reason for v in verdicts],
        }
    )
    table.attrs["differences"] = stats.difference_rows([v.difference for v in verdicts])
    method = Method(0.05, margin, fractions=(3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0))
    plan = adaptive.SequentialDesign(8, method.fractions, method, 3)
    other = next(i for i in range(3) if i != best)
    d = stats.difference(groups[other], groups[best])
    shown = sum(v.verdict in ("worse", "better") for v in verdicts)
    same = sum(v.verdict == "equivalent" for v in verdicts)
    last = plan.at(plan.looks).level  # the last look's level: what a verdict will need
    assert last == pytest.approx(sequential.look_alpha(0.05, method.fractions, 6))
    expected = sequential.conditional_power(d, 8, last, margin, max(1, 3 - shown), max(1, 2 - same))
    assert adaptive.power(other, table, plan) == pytest.approx(expected)
    unpaired = table.copy()
    unpaired.attrs["differences"] = stats.difference_rows(
        [
            None if v.difference is None else dataclasses.replace(v.difference, paired=False)
            for v in verdicts
        ]
    )
    assert adaptive.power(other, unpaired, plan) == 1
    assert adaptive.power(best, table, plan) == 1  # the best: no difference of its own


def test_a_round_names_the_comparisons_stopped_for_futility():
    method = Method(0.05, 0.01, fractions=(3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0))
    plan = adaptive.SequentialDesign(8, method.fractions, method, 5)
    assert adaptive.Open(0).stop_text(2, plan) == "after round 2: every verdict decided"
    capped = adaptive.Open(3, open=2).stop_text(6, plan)
    assert " ".join(capped.split()) == (
        "after round 6: 2 comparisons undecided among 3 groups, all at --max-seeds 8; no more "
        "rounds"
    )
    stopped = adaptive.Open(2, ("norm=rmsnorm (conditional power 0.04)",))
    text = " ".join(stopped.stop_text(3, plan).split())
    assert text.startswith("after round 3: 1 comparison undecided among 2 groups; no more ")
    assert "1 stopped for futility (not decidable by --max-seeds 8: conditional power" in text
    assert text.endswith("norm=rmsnorm (conditional power 0.04)")
    # newcomer friction: "2 group(s) undecided (1 stopped for futility); 4 more seed(s)"; then
    # seeds added to the groups of a stopped comparison with no word of why (issue 62)
    both = adaptive.Open(4, ("norm=rmsnorm (conditional power 0.04)",), open=2)
    assert " ".join(both.next_text(3, 4, plan).split()) == (
        "after round 3 of at most 6: 3 comparisons undecided among 4 groups, 1 of them stopped "
        "for futility; round 4 adds one seed to each of 4 groups, those of the 2 still drawing "
        "seeds"
    )
    assert adaptive.Open(2, open=1).next_text(1, 2, plan) == (
        "after round 1 of at most 6: 1 comparison undecided among 2 groups; round 2 adds\n"
        "  one seed to each of 2 groups"
    )
