"""Seeds until decided: the simulation behind docs/statistics.md's table
(scripts/sequential_design.py) checked against normbench's own verdicts, the error of the whole
procedure under the null at small scale, and the futility rule read off a report's row."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from normbench.report import stats
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
    compare_with_reference's and stats.conditional_power's."""
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
            cp = stats.conditional_power(d, sim.MAX_SEEDS, 0.05, margin, tests, k - 1)
            assert power[t, g] == pytest.approx(cp, abs=1e-9)


def test_the_whole_procedure_keeps_its_error_under_the_null(sim):
    """Identical groups, normbench's levels and futility: any *worse* or *better* at any look is
    an error. 300 tables a setting (standard error 0.013 at 0.05), a loose bound."""
    levels = sim.design_levels()
    for k, best in ((2, False), (5, True), (5, False)):
        x, mu = sim.draw(np.random.default_rng([7, k, best]), 300, k, 0.0, 0.0)
        erred, decided, runs = sim.until_decided(x, mu, 0.5, best, levels, adaptive.FUTILITY)
        assert erred.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
        assert runs.mean() < k * sim.MAX_SEEDS  # futility stops hopeless comparisons early


def test_the_oracle_bound_seeds_only_what_the_fixed_design_decides(sim):
    """docs/statistics.md's bound on any futility rule: a table whose comparisons the fixed
    design decides none of stops at the grid; one it decides some of may seed on."""
    x, mu = sim.draw(np.random.default_rng(11), 200, 5, 0.5, 1.0)
    _, _, which = sim.fixed(x, mu, 0.5, False)
    _, decided, runs = sim.until_decided(x, mu, 0.5, False, sim.design_levels(), 0.0, which)
    none = ~which.any(1)
    assert none.any() and (~none).any()
    assert (runs[none] == 5 * sim.FIRST).all() and (decided[none] == 0).all()
    assert runs[~none].mean() > 5 * sim.FIRST


def test_levels_are_calibrated_for_the_default_design_and_the_union_bound_elsewhere():
    default = [(3 + i) / 8 for i in range(6)]
    levels = [stats.look_alpha(0.05, default, look) for look in range(1, 7)]
    assert levels == sorted(levels) and levels[-1] == pytest.approx(0.05)
    assert levels[0] < 0.001  # three seeds, two degrees of freedom: almost nothing
    other = [(2 + i) / 6 for i in range(5)]
    assert sum(stats.look_alpha(0.05, other, look) for look in range(1, 6)) == pytest.approx(0.05)
    legacy = [stats.look_alpha(0.05, default, look, stats.OBRIEN_FLEMING) for look in range(1, 7)]
    assert [round(v, 4) for v in legacy] == [0.0014, 0.0042, 0.0076, 0.0105, 0.0125, 0.0139]


def test_futility_is_read_off_a_convergence_row():
    """The row's difference and (1 - 2 level) interval give back the paired difference, so the
    sweep's conditional power is stats.conditional_power's."""
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
    method = Method(0.05, margin, fractions=(3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0))
    plan = adaptive.Design(8, method.fractions, method, 3)
    other = next(i for i in range(3) if i != best)
    d = stats.difference(groups[other], groups[best])
    shown = sum(v.verdict in ("worse", "better") for v in verdicts)
    same = sum(v.verdict == "equivalent" for v in verdicts)
    expected = stats.conditional_power(d, 8, 0.05, margin, max(1, 3 - shown), max(1, 2 - same))
    assert adaptive.power(table.iloc[other], table, plan, level) == pytest.approx(expected)
    assert (
        adaptive.power(table.assign(reason="unpaired (Welch)").iloc[other], table, plan, level) == 1
    )


def test_a_round_names_the_comparisons_stopped_for_futility():
    method = Method(0.05, 0.01, fractions=(3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0))
    plan = adaptive.Design(8, method.fractions, method, 5)
    assert adaptive.Open(0).stop_text(2, plan) == "round 2: every verdict decided"
    capped = adaptive.Open(3).stop_text(6, plan)
    assert capped == "round 6: 3 group(s) undecided, all at --max-seeds 8"
    stopped = adaptive.Open(2, ("norm=rmsnorm (conditional power 0.04)",))
    text = stopped.stop_text(3, plan)
    assert "stopped for futility, 1 comparison(s) that cannot be decided by --max-seeds 8" in text
    assert text.endswith("norm=rmsnorm (conditional power 0.04)")
    assert stopped.next_text(3, 4) == (
        "round 4: 2 group(s) undecided (1 stopped for futility); 4 more seed(s)"
    )
