"""The statistics behind every verdict: pure functions of arrays of per-seed results.

numpy and scipy only: no pandas, no rendering, no knowledge of runs. Each function states its
formula and where it comes from; scipy computes whatever scipy has. Conventions: ``a`` and
``b`` are 1-D arrays of independent results (one per seed), NaN-free (callers drop NaN);
"higher is better" (a caller whose metric is better when lower negates it first).

The verdicts (docs/statistics.md explains them to a user):

- comparison with the best: ``compare_with_best`` (Games-Howell for "worse", TOST with Holm
  for "equivalent");
- a pre-specified contrast per row (batch sensitivity): ``contrast`` (one-sided Welch with
  Holm for "sensitive", TOST with Holm for "insensitive").
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95  # every interval in a report is a 95% interval


@dataclass(frozen=True)
class Welch:
    """The difference of two means, mean(a) - mean(b), with Welch's standard error and
    Welch-Satterthwaite degrees of freedom (Welch 1947):

        se^2 = s_a^2 / n_a + s_b^2 / n_b
        df   = se^4 / ((s_a^2/n_a)^2 / (n_a - 1) + (s_b^2/n_b)^2 / (n_b - 1))

    ``se`` is 0 when both samples are constant (df is then infinite: the difference is known).
    """

    diff: float
    se: float
    df: float

    @property
    def t(self) -> float:
        return self.diff / self.se if self.se > 0 else math.copysign(math.inf, self.diff)


def welch(a: np.ndarray, b: np.ndarray) -> Welch:
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se2 = va + vb
    if se2 <= 1e-24:  # both constant (up to rounding): no sampling noise left
        return Welch(float(a.mean() - b.mean()), 0.0, math.inf)
    df = se2**2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Welch(float(a.mean() - b.mean()), math.sqrt(se2), float(df))


def paired(a: np.ndarray, b: np.ndarray) -> Welch:
    """mean(a - b) for results that pair up (a[i] and b[i] share a seed: the same
    initialisation and data order, one setting changed), with the standard error of the
    per-pair differences, sd(d) / sqrt(n), and n - 1 degrees of freedom (Student's paired t,
    as scipy.stats.ttest_rel). Pairing removes the seed's own effect, which in normbench's
    runs is most of the spread: two precisions or two ghost batches of one seed land close
    together even when seeds land far apart."""
    d = a - b
    sd = d.std(ddof=1)
    if sd <= 1e-12:
        return Welch(float(d.mean()), 0.0, math.inf)
    return Welch(float(d.mean()), float(sd / math.sqrt(len(d))), float(len(d) - 1))


def mean_ci(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval,
    t_{(1+c)/2, n-1} * s / sqrt(n); the half-width is NaN for fewer than two values."""
    if len(values) == 0:
        return math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), math.nan
    sem = values.std(ddof=1) / math.sqrt(len(values))
    return float(values.mean()), t_quantile((1 + confidence) / 2, len(values) - 1) * sem


def diff_ci(w: Welch, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Welch's confidence interval of the difference: diff -+ t_{(1+c)/2, df} * se."""
    if w.se == 0:
        return w.diff, w.diff
    half = t_quantile((1 + confidence) / 2, w.df) * w.se
    return w.diff - half, w.diff + half


def t_quantile(level: float, df: float) -> float:
    """Student's t quantile: scipy.stats.t.ppf's own function (special.stdtrit), without the
    distribution machinery around it that takes a millisecond a call (a table of hundreds of
    groups makes thousands)."""
    from scipy import special

    return float(special.stdtrit(df, level))


def p_lower(a: np.ndarray, b: np.ndarray) -> float:
    """One-sided Welch test that mean(a) < mean(b): the p-value scipy.stats.ttest_ind(a, b,
    equal_var=False, alternative="less") gives (computed from ``welch``: see p_below)."""
    return p_below(welch(a, b))


def p_equivalent(a: np.ndarray, b: np.ndarray, margin: float) -> float:
    """Two one-sided Welch tests (TOST; Schuirmann 1987) that -margin < mean(a) - mean(b) <
    margin (see p_within)."""
    return p_within(welch(a, b), margin)


def p_below(w: Welch) -> float:
    """p-value of the one-sided t test that the difference is below 0: P(T_df <= diff / se),
    with scipy.special.stdtr, the Student-t CDF (a hundred times faster than scipy.stats'
    test wrappers). A known difference (se 0): 0 when it is negative, else 1."""
    from scipy import special

    if w.se == 0:
        return 0.0 if w.diff < 0 else 1.0
    return float(special.stdtr(w.df, w.t))


def p_within(w: Welch, margin: float) -> float:
    """TOST: the larger p of the tests of diff > -margin, P(T_df >= (diff + margin) / se), and
    of diff < margin, P(T_df <= (diff - margin) / se). A known difference: 0 inside the margin,
    else 1."""
    from scipy import special

    if w.se == 0:
        return 0.0 if abs(w.diff) < margin else 1.0
    above = special.stdtr(w.df, -(w.diff + margin) / w.se)
    below = special.stdtr(w.df, (w.diff - margin) / w.se)
    return float(max(above, below))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): sorted ascending, the i-th smallest
    (i = 0, 1, ...) becomes max over j <= i of min(1, (m - j) * p_(j)). Rejecting where the
    adjusted value is below alpha controls the family-wise error rate at alpha. NaN entries
    (comparisons not made) stay NaN and do not count in m."""
    p = np.asarray(pvalues, dtype=float)
    made = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(len(p), math.nan)
    running = 0.0
    for rank, index in enumerate(made[np.argsort(p[made], kind="stable")]):
        running = max(running, min(1.0, (len(made) - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def p_worse_than_best(group: np.ndarray, best: np.ndarray, groups: int) -> float:
    """Games-Howell p-value (Games & Howell 1976) that ``group`` is below ``best``, the group
    with the highest mean among ``groups`` groups:

        q = sqrt(2) * (mean(best) - mean(group)) / se_Welch,   p = P(Q_{groups, df} >= q)

    with Q the studentized range (scipy.stats.studentized_range) and df Welch's. Why not Holm
    over Welch tests: the best is chosen after looking, so under no difference its gap to
    the others is the range of all the means. Holm at alpha = 0.05 then finds some "worse" in
    13% of tables of ten identical groups with four seeds each (tests/test_stats.py
    simulates it); the range distribution keeps that share at alpha."""
    from scipy import stats

    q, df = _range_statistic(group, best)
    if math.isinf(df):
        return 0.0 if q > 0 else 1.0
    if q <= 0:
        return 1.0
    with warnings.catch_warnings():  # the integration warns about accuracy far in the tail
        warnings.simplefilter("ignore")
        return min(1.0, max(0.0, float(stats.studentized_range.sf(q, groups, df))))


def range_sf(q: np.ndarray, groups: int, df: np.ndarray) -> np.ndarray:
    """P(Q_{groups, df} >= q), the studentized range's tail, for many (q, df) at once: the
    Games-Howell p-values of a whole table. scipy takes ~10 ms a value (adaptive integration
    to 1e-11): a table of 500 groups waited 5 s. From TABLE_FROM values on, the same double
    integral by fixed quadrature instead:

        P(Q >= q) = E_X[ R(q * sqrt(X / a)) ],   X ~ Gamma(a = df / 2),

    with R(w) = P(range of ``groups`` standard normals > w) tabulated once per number of
    groups (``_range_tail``) and the expectation a trapezoid over log X; so also for a few
    values at a large df (scipy takes 0.2 s each at df 20,000). It agrees with scipy to
    1e-7 relatively or 1e-10 absolutely for 2 to 500 groups and df from 1 to 90,000
    (tests/report/test_stats.py; past 100,000 scipy switches to its infinite-df form).
    q <= 0 gives 1; an infinite df (both samples constant) 0 for q > 0."""
    q, df = np.asarray(q, dtype=float), np.asarray(df, dtype=float)
    out = np.where(q > 0, 0.0, 1.0)
    todo = np.flatnonzero((q > 0) & np.isfinite(df))
    if len(todo) < TABLE_FROM and not (df[todo] > 1000).any():  # scipy: slow at large df
        from scipy import stats

        with warnings.catch_warnings():  # the integration warns about accuracy far in the tail
            warnings.simplefilter("ignore")
            for i in todo:
                out[i] = float(stats.studentized_range.sf(q[i], groups, df[i]))
        return np.clip(out, 0.0, 1.0)
    from scipy import special

    shape = df[todo, None] / 2
    log_gamma = special.gammaln(shape)
    # log X has its mode at log(shape) and sd 1 / sqrt(shape), its left tail heavier: outside
    # these bounds its density is below e^-40 for every shape
    low = np.log(shape) - (13 + 40 / shape) / np.sqrt(shape)
    high = np.log(shape) + 10 / np.sqrt(shape)
    log_x = low + (high - low) * np.linspace(0, 1, 1000)
    density = np.exp(shape * log_x - np.exp(log_x) - log_gamma)  # of log X
    w = np.minimum(q[todo, None] * np.sqrt(np.exp(log_x) / shape), RANGE_MAX)
    tail = np.trapezoid(_range_tail(groups)(w) * density, log_x, axis=1)
    out[todo] = tail
    return np.clip(out, 0.0, 1.0)


TABLE_FROM = 25  # p-values for which tabulating R (~0.3 s) beats scipy (~10 ms each)
RANGE_MAX = 16.0  # the range of 500 normals exceeds 16 with probability below 1e-20


@functools.lru_cache(maxsize=32)
def _range_tail(groups: int):
    """R(w) = 1 - groups * integral phi(z) (Phi(z + w) - Phi(z))^(groups - 1) dz on a grid
    of w in [0, RANGE_MAX], as a cubic spline; the integral a trapezoid over z in [-9, 9]
    (the integrand is smooth and negligible beyond: the trapezoid is exact to double
    precision there)."""
    from scipy import interpolate, special

    z = np.arange(-9, 9, 0.0125)
    phi, below = np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi), special.ndtr(z)
    w = np.arange(0, RANGE_MAX + 0.005, 0.005)
    tail = np.empty(len(w))
    for start in range(0, len(w), 256):
        chunk = w[start : start + 256, None]
        inside = (special.ndtr(z + chunk) - below).clip(0, 1) ** (groups - 1)
        tail[start : start + 256] = 1 - groups * np.trapezoid(phi * inside, z, axis=1)
    return interpolate.CubicSpline(w, tail)


def is_worse_than_best(group: np.ndarray, best: np.ndarray, groups: int, alpha: float) -> bool:
    """``p_worse_than_best(...) < alpha``, decided mostly without computing p: scipy's
    studentized range takes ~25 ms a value (adaptive integration to 1e-11), too slow for the
    thousands of comparisons of a simulation or of rounds of ``--until-decided``. The
    critical value q_crit(df) falls as df grows, so the critical values at the grid points
    around df (cached) bracket it; only a q inside the bracket needs the exact p."""
    q, df = _range_statistic(group, best)
    if math.isinf(df) or q <= 0:
        return q > 0
    step = math.log2(df) * DF_GRID
    below, above = 2 ** (math.floor(step) / DF_GRID), 2 ** (math.ceil(step) / DF_GRID)
    if q > _critical_q(groups, below, alpha):
        return True
    if q <= _critical_q(groups, above, alpha):
        return False
    return p_worse_than_best(group, best, groups) < alpha


DF_GRID = 16  # grid points per doubling of df for the cached critical values (4.4% apart)


@functools.lru_cache(maxsize=4096)
def _critical_q(groups: int, df: float, alpha: float) -> float:
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.studentized_range.isf(alpha, groups, df))


def _range_statistic(group: np.ndarray, best: np.ndarray) -> tuple[float, float]:
    """Games-Howell's q = sqrt(2) * t_Welch of best over group, and Welch's df (inf when both
    samples are constant: then q is +-inf or 0)."""
    w = welch(best, group)
    if w.se == 0:
        return (math.copysign(math.inf, w.diff) if w.diff else 0.0), math.inf
    return math.sqrt(2) * w.t, w.df


@dataclass(frozen=True)
class Verdict:
    """One comparison's outcome: the verdict word, the difference with its CI, the adjusted
    p-values, and (for inconclusive verdicts that could not be tested) the reason."""

    verdict: str
    diff: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_worse: float = math.nan
    p_equivalent: float = math.nan
    reason: str = ""


def compare_with_best(
    samples: list[np.ndarray], alpha: float, margin: float, with_p: bool = True
) -> tuple[int | None, list[Verdict]]:
    """Every group against the best: the group with the highest mean among groups with at
    least two results (None when there is no such group).

    Returns the best's index and one Verdict per group: ``reference`` for the best;
    ``worse`` when the Games-Howell p-value is below alpha; ``equivalent`` when the TOST
    p-value, Holm-adjusted over the table's comparisons, is below alpha (a difference can be
    both statistically clear and smaller than the margin: the margin says which differences
    matter, so such a group is ``equivalent`` and its CI shows the size); ``inconclusive``
    otherwise, and always for fewer than two results. ``with_p=False`` skips the exact
    Games-Howell p-values (slow; the verdicts do not need them)."""
    testable = [i for i, s in enumerate(samples) if len(s) >= 2]
    if not testable:
        reason = "fewer than 2 results in every group"
        return None, [Verdict("inconclusive", reason=reason) for _ in samples]
    best = max(testable, key=lambda i: samples[i].mean())
    others = [i for i in testable if i != best]
    p_same = dict(
        zip(
            others,
            holm([p_equivalent(samples[i], samples[best], margin) for i in others]),
            strict=True,
        )
    )
    p_worse = {}
    if with_p:  # every group's Games-Howell p-value at once
        statistics = [_range_statistic(samples[i], samples[best]) for i in others]
        tails = range_sf(
            np.array([q for q, _ in statistics]),
            len(testable),
            np.array([df for _, df in statistics]),
        )
        p_worse = dict(zip(others, tails.tolist(), strict=True))
    verdicts = []
    for i, sample in enumerate(samples):
        if i == best:
            verdicts.append(Verdict("reference", diff=0.0))
            continue
        if i not in p_same:
            verdicts.append(Verdict("inconclusive", reason=f"{len(sample)} result(s); needs 2"))
            continue
        if p_same[i] < alpha:
            word = "equivalent"
        elif (
            p_worse[i] < alpha
            if with_p
            else is_worse_than_best(sample, samples[best], len(testable), alpha)
        ):
            word = "worse"
        else:
            word = "inconclusive"
        w = welch(sample, samples[best])
        verdicts.append(Verdict(word, w.diff, *diff_ci(w), p_worse.get(i, math.nan), p_same[i]))
    return best, verdicts


def contrast(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    alpha: float,
    margin: float,
    matched: list[bool] | None = None,
) -> list[Verdict]:
    """Pre-specified contrasts, one per row: ``(reference, other)`` where the question is
    whether ``other`` is lower (batch sensitivity: largest batch against smallest; precision:
    fp32 against bf16/fp16). The difference reported is mean(reference) - mean(other) (the
    drop) with its 95% CI: paired by seed (``paired``) where ``matched[i]`` says the two
    arrays are the same seeds in the same order, else Welch's. ``sensitive``: the one-sided
    test that other is lower, Holm-adjusted over the rows, below alpha; ``insensitive``: TOST
    within the margin, Holm-adjusted, below alpha (it wins when both hold, as in
    ``compare_with_best``); ``inconclusive`` otherwise and for rows with fewer than two
    results on either side. Holm is valid here because nothing was chosen after looking."""
    matched = matched or [False] * len(pairs)
    testable = [i for i, (r, o) in enumerate(pairs) if len(r) >= 2 and len(o) >= 2]
    differences = {i: paired(*pairs[i]) if matched[i] else welch(*pairs[i]) for i in testable}
    p_drop = holm([p_below(flip(differences[i])) for i in testable])
    p_same = holm([p_within(differences[i], margin) for i in testable])
    adjusted = {i: (p_drop[j], p_same[j]) for j, i in enumerate(testable)}
    verdicts = []
    for i, (reference, other) in enumerate(pairs):
        if i not in adjusted:
            counts = f"{len(reference)} and {len(other)} results"
            verdicts.append(Verdict("inconclusive", reason=f"{counts}; needs 2 each"))
            continue
        low, high = diff_ci(differences[i])
        drop, same = adjusted[i]
        word = "insensitive" if same < alpha else "sensitive" if drop < alpha else "inconclusive"
        reason = "paired by seed" if matched[i] else ""
        verdicts.append(Verdict(word, differences[i].diff, low, high, drop, same, reason))
    return verdicts


def flip(w: Welch) -> Welch:
    """The same difference the other way round (b - a)."""
    return Welch(-w.diff, w.se, w.df)
