"""Seeds until decided, as pure functions: the level of each look of a sequential design
(``look_alpha``, and the calibration that keeps its family-wise error at alpha whether or
not futility stops are obeyed), and whether an open comparison can still be decided by the
seed cap (``conditional_power``). numpy and scipy only, as normbench.report.stats; the sweep's
rounds (normbench.sweeps.adaptive) and a report's method (normbench.report.base.Method) read
them. docs/statistics.md has the simulations behind the numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from normbench.report.stats import Difference
from normbench.store.upgrade import EVEN_SPLIT, OBRIEN_FLEMING

SHAPE = 6  # spending alpha t^6: almost nothing early, most at the last looks
# Scale of the per-look levels measured to keep the whole procedure's family-wise error at
# alpha whatever the futility rule does (non-binding futility: obeyed, or ignored with every
# open group drawing seeds to the cap), and the batch contrasts' false "sensitive" at alpha
# (scripts/sequential_design.py calibrate; docs/statistics.md), by design: (alpha, seeds per
# group at each look / max seeds). Any other design gets 1: the union bound.
CALIBRATED = {(0.05, (3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0)): 1.15}
SPENDING = "alpha t^6, calibrated by simulation, non-binding futility"
# The first calibration (normbench 0.4's first sweeps until decided, whose records name this
# spending): measured with futility obeyed only (binding). Ignoring futility took its error to
# 0.068, and the batch contrasts, never stopped for futility, to 0.074 (4,000 tables a setting;
# docs/statistics.md). Kept so that the report of such a record uses the levels its sweep ran
# with (valid at alpha only if no comparison stopped for futility was given more seeds).
BINDING_SPENDING = "alpha t^6, calibrated by simulation"
BINDING_CALIBRATED = {(0.05, (3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0)): 1.84}


def spent_alpha(alpha: float, fraction: float) -> float:
    """Alpha spent by information fraction ``fraction`` (0 < t <= 1) in normbench 0.3's
    design: Lan and DeMets' (1983) O'Brien-Fleming-type spending function,

        alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),

    kept for the reports of sweeps it ran (``look_alpha(..., spending=OBRIEN_FLEMING)``)."""
    from scipy import special

    if fraction <= 0:
        return 0.0
    z = special.ndtri(1 - alpha / 2)
    return float(2 - 2 * special.ndtr(z / math.sqrt(min(1.0, fraction))))


def design_scale(alpha: float, fractions: Sequence[float], spending: str = SPENDING) -> float:
    """The calibrated scale of a design's levels (``CALIBRATED``; ``BINDING_CALIBRATED`` for a
    record that names ``BINDING_SPENDING``), 1 for a design not measured."""
    table = BINDING_CALIBRATED if spending == BINDING_SPENDING else CALIBRATED
    for (known_alpha, known), scale in table.items():
        same = len(known) == len(fractions) and math.isclose(known_alpha, alpha)
        if same and all(math.isclose(x, y) for x, y in zip(known, fractions, strict=True)):
            return scale
    return 1.0


def look_alpha(
    alpha: float, fractions: Sequence[float], look: int, spending: str = SPENDING
) -> float:
    """The level of look ``look`` (1-based) of a design whose looks fall at information
    fractions ``fractions`` (seeds per group at the look / max seeds): every test of that
    look's report is made at it.

    Levels: lambda * (alpha t_look^6 - alpha t_(look-1)^6), at most alpha, with t_0 = 0: a
    spending function of the power family (Kim and DeMets 1987; Jennison and Turnbull 2000,
    ch. 7), back-loaded so that the last looks, with the most seeds, test near alpha. With
    lambda = 1 the levels sum to alpha and the union bound gives an error over all looks of at
    most alpha whatever the stopping rule. The looks are far from independent, so the sum
    overstates the error: lambda is calibrated by simulation of the exact procedure (t tests,
    Holm, the best chosen after looking, adaptive seeding; scripts/sequential_design.py) for
    the designs in ``CALIBRATED``, 1 for any other. The calibration holds whatever the futility
    rule does (non-binding): with futility obeyed, and with it ignored (every open group
    drawing seeds to the cap: a user who adds seeds, a resumed sweep), and for the batch
    contrasts (``contrast``), which are never stopped for futility. ``spending``: the label a
    sweep record stores; ``BINDING_SPENDING`` gives the first calibration's levels (lambda
    1.84, valid only with futility obeyed), ``OBRIEN_FLEMING`` normbench 0.3's levels,
    alpha(t_look) - alpha(t_look-1) of ``spent_alpha``, and ``EVEN_SPLIT`` alpha / looks at
    every look (the records before 0.3), for the sweeps they recorded."""
    if spending == EVEN_SPLIT:
        return alpha / len(fractions)
    if spending == OBRIEN_FLEMING:
        previous = spent_alpha(alpha, fractions[look - 2]) if look > 1 else 0.0
        return spent_alpha(alpha, fractions[look - 1]) - previous
    previous = alpha * fractions[look - 2] ** SHAPE if look > 1 else 0.0
    increment = alpha * min(1.0, fractions[look - 1]) ** SHAPE - previous
    return min(alpha, design_scale(alpha, fractions, spending) * increment)


def conditional_power(
    d: Difference, seeds: int, level: float, margin: float, tests: int, equivalence_tests: int
) -> float:
    """The chance that an open comparison is decided once both groups have ``seeds`` seeds:
    conditional power (Lachin 2005, "A review of methods for futility stopping based on
    conditional power"; Jennison and Turnbull 2000, ch. 10), each verdict under the
    alternative it needs. With n common seeds, mean difference d, sd s and N = seeds, the
    final mean is (n d + (N - n) D) / N, D the mean of the seeds to come; the larger of

        differs, D ~ N(d, s^2 / (N - n)) (the current trend):
            P(|final t| > c) = Phi((mu - c) / tau) + Phi((-mu - c) / tau),
            c = t_{1 - level / (2 tests), N - 1},  mu = d sqrt(N) / s,  tau = sqrt((N - n) / N)
        equivalent, D ~ N(0, s^2 / (N - n)) (no difference from here on):
            P(|final mean| < h),  h = margin - t_{1 - level / equivalence_tests, N - 1} s / sqrt(N)

    ``tests``, ``equivalence_tests``: the Holm multiplier the test will need (the family's
    tests not yet shown). s is the current estimate, plugged in. 1 for a comparison it cannot
    judge (unpaired, or no known noise): it keeps drawing seeds."""
    from scipy import special

    if not (d.paired and d.known_noise):
        return 1.0
    n, big = d.n, max(seeds, d.n)
    s = d.se * math.sqrt(n)
    c = float(special.stdtrit(big - 1, 1 - level / (2 * tests)))
    mu = d.diff * math.sqrt(big) / s
    t_same = float(special.stdtrit(big - 1, 1 - level / equivalence_tests))
    half = margin - t_same * s / math.sqrt(big)
    if big == n:
        return float(abs(mu) > c or abs(d.diff) < half)
    tau = math.sqrt((big - n) / big)
    differs = special.ndtr((mu - c) / tau) + special.ndtr((-mu - c) / tau)
    spread, centre = s * math.sqrt(big - n) / big, d.diff * n / big
    same = special.ndtr((half - centre) / spread) - special.ndtr((-half - centre) / spread)
    return float(max(differs, same if half > 0 else 0.0))
