"""The statistics behind every verdict: pure functions of per-seed results.

numpy and scipy only: no pandas, no rendering, no knowledge of runs. Each function states its
formula and its source; scipy computes what scipy has. Conventions:

- A group's results are ``Results``, a dict {seed: value}: runs at one seed share their data
  order and every initial weight outside the norm (normbench.layers.generators), so two
  groups' results pair up by seed.
- "Higher is better": a caller whose metric is better when lower negates it first.
- ``resolution``: the smallest step the metric can move by (1 / validation samples for an
  accuracy; 0 when continuous). Identical values across seeds are not a noise-free
  measurement: standard deviations are floored at the resolution (``difference``), and with
  no resolution known a comparison without spread is inconclusive, never "known".

The verdicts (docs/statistics.md explains them to a user):

- every group against the best, chosen after looking: ``compare_with_best``;
- every group against a reference named before looking: ``compare_with_reference``;
- a pre-specified contrast per row (batch sensitivity, precision): ``contrast``;
- seeds until decided: its levels and conditional power are normbench.report.sequential's.

And the per-seed summaries they are computed on: ``lr_sensitivity`` (one seed's sweep over
learning rates).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95  # a group's own mean is shown with a 95% interval
Results = dict[int, float]  # seed -> result


@dataclass(frozen=True)
class Difference:
    """mean(a) - mean(b), with its standard error and degrees of freedom.

    ``paired``: computed from the per-seed differences of the seeds both groups have
    (Student's paired t, as scipy.stats.ttest_rel: se = sd(d) / sqrt(n), df = n - 1).
    Otherwise Welch's (Welch 1947, as scipy.stats.ttest_ind(equal_var=False)):

        se^2 = s_a^2 / n_a + s_b^2 / n_b
        df   = se^4 / ((s_a^2/n_a)^2 / (n_a - 1) + (s_b^2/n_b)^2 / (n_b - 1))

    ``se`` is 0 only when every value is identical (up to floating-point round-off) and no
    resolution is known: then nothing measures the noise and every test is inconclusive
    (``known_noise``). ``left_out``: results of either group outside the common seeds of a
    paired difference (the difference is then not that of the groups' means over all seeds).
    """

    diff: float
    se: float
    df: float
    paired: bool
    n: int  # pairs (paired) or results on both sides (Welch)
    left_out: int = 0

    @property
    def t(self) -> float:
        return self.diff / self.se

    @property
    def known_noise(self) -> bool:
        return self.se > 0 and math.isfinite(self.df)

    @property
    def how(self) -> str:
        """How it was computed, for a report's reason column."""
        return f"paired, {self.n} seeds" if self.paired else "unpaired (Welch)"


DIFFERENCE_FIELDS = ("diff", "se", "df", "paired", "n", "left_out")


def difference_rows(found: Sequence[Difference | None]) -> tuple[tuple[float, ...], ...]:
    """Differences as plain numbers, a tuple of ``DIFFERENCE_FIELDS`` each (NaN for None): a
    table's attrs hold them, which pandas copies and compares when it joins tables (an array
    there would make that comparison ambiguous)."""
    empty = (math.nan,) * len(DIFFERENCE_FIELDS)
    return tuple(
        empty if d is None else (d.diff, d.se, d.df, float(d.paired), d.n, d.left_out)
        for d in found
    )


def difference_at(rows: Sequence[Sequence[float]], at: int) -> Difference | None:
    """Row ``at`` of ``difference_rows``' numbers, as the Difference it was (None: no test)."""
    diff, se, df, paired, n, left_out = rows[at]
    if math.isnan(se):
        return None
    return Difference(diff, se, df, bool(paired), int(n), int(left_out))


# A spread this small relative to the values is the round-off of float64 arithmetic on them
# (0.95 - 0.93 and 0.85 - 0.83 differ by 1e-16), far below any seed noise a run shows.
ROUND_OFF = 1e-12


def _spread(values: np.ndarray, scale: float) -> float:
    """The sample sd of ``values``, 0 when it is below the round-off of numbers of size
    ``scale`` (``ROUND_OFF``): identical values computed by different routes are identical."""
    sd = float(values.std(ddof=1))
    return 0.0 if sd <= ROUND_OFF * scale else sd


def difference(a: Results, b: Results, resolution: float = 0.0) -> Difference:
    """mean(a) - mean(b), paired by seed when the two share at least two seeds (on those
    seeds), else unpaired. Both need two results at least (the caller checks).

    Floors, for a metric that moves in steps of ``resolution`` (accuracy on V samples: 1/V).
    A value rounded to steps of r carries a rounding error spread evenly over (-r/2, r/2): sd
    r / sqrt(12); a difference of two such values has sd r / sqrt(6). The floors are sqrt(2)
    times those, on the safe side: the sd of the per-seed differences at least
    resolution / sqrt(3), a group's own sd at least resolution / sqrt(6) (so that an unpaired
    difference has the same floor). tests/report/test_stats.py simulates the false
    "equivalent" rate of quantised results at the margin with these floors. Without a
    resolution, a spread below the values' round-off (``ROUND_OFF``) is no spread: the
    difference has no known noise, in both branches."""
    common = sorted(set(a) & set(b))
    if len(common) >= 2:
        d = np.array([a[s] - b[s] for s in common])
        scale = max(abs(a[s]) + abs(b[s]) for s in common)
        sd = max(_spread(d, scale), resolution / math.sqrt(3))
        n = len(d)
        left = len(a) + len(b) - 2 * n
        if sd == 0:  # identical differences, no resolution: no noise to test against
            return Difference(float(d.mean()), 0.0, math.inf, True, n, left)
        return Difference(float(d.mean()), sd / math.sqrt(n), float(n - 1), True, n, left)
    x, y = np.array(list(a.values())), np.array(list(b.values()))
    floor = resolution / math.sqrt(6)
    scale = float(max(np.abs(x).max(), np.abs(y).max()))
    va = max(_spread(x, scale), floor) ** 2 / len(x)
    vb = max(_spread(y, scale), floor) ** 2 / len(y)
    se2 = va + vb
    n = len(x) + len(y)
    if se2 == 0:  # identical values, no resolution: no noise to test against
        return Difference(float(x.mean() - y.mean()), 0.0, math.inf, False, n)
    df = se2**2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    return Difference(float(x.mean() - y.mean()), math.sqrt(se2), float(df), False, n)


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval,
    t_{(1+c)/2, n-1} * s / sqrt(n); the half-width is NaN for fewer than two values."""
    from scipy import special  # stdtrit: scipy.stats.t.ppf without its machinery (1 ms a call)

    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return math.nan, math.nan
    if len(values) == 1:
        return float(values[0]), math.nan
    sem = values.std(ddof=1) / math.sqrt(len(values))
    return float(values.mean()), float(special.stdtrit(len(values) - 1, (1 + confidence) / 2) * sem)


def interval(d: Difference, alpha: float) -> tuple[float, float]:
    """The (1 - 2 alpha) confidence interval of a difference, diff -+ t_{1-alpha, df} * se:
    the interval of the equivalence test at level alpha (Schuirmann 1987: TOST rejects
    exactly when this interval lies inside +-margin). NaN without known noise."""
    from scipy import special

    if not d.known_noise:
        return math.nan, math.nan
    half = float(special.stdtrit(d.df, 1 - alpha)) * d.se
    return d.diff - half, d.diff + half


def p_two_sided(d: Difference) -> float:
    """Two-sided t test that the difference is 0: 2 P(T_df >= |diff| / se), with
    scipy.special.stdtr (the Student-t CDF scipy.stats' tests use). 1 without known noise."""
    from scipy import special

    if not d.known_noise:
        return 1.0
    return float(min(1.0, 2 * special.stdtr(d.df, -abs(d.t))))


def p_below(d: Difference) -> float:
    """One-sided t test that the difference is below 0: P(T_df <= diff / se)."""
    from scipy import special

    if not d.known_noise:
        return 1.0
    return float(special.stdtr(d.df, d.t))


def p_within(d: Difference, margin: float) -> float:
    """TOST (two one-sided tests; Schuirmann 1987) that -margin < diff < margin: the larger p
    of diff > -margin, P(T_df >= (diff + margin) / se), and of diff < margin,
    P(T_df <= (diff - margin) / se)."""
    from scipy import special

    if not d.known_noise:
        return 1.0
    above = special.stdtr(d.df, -(d.diff + margin) / d.se)
    below = special.stdtr(d.df, (d.diff - margin) / d.se)
    return float(max(above, below))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): sorted ascending, the i-th smallest
    (i = 0, 1, ...) becomes max over j <= i of min(1, (m - j) * p_(j)). Rejecting where the
    adjusted value is below alpha controls the family-wise error rate at alpha whatever the
    dependence between the tests. NaN entries (tests not made) stay NaN, not counted in m."""
    p = np.asarray(pvalues, dtype=float)
    made = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(len(p), math.nan)
    order = made[np.argsort(p[made], kind="stable")]
    steps = np.minimum(1.0, (len(made) - np.arange(len(order))) * p[order])
    adjusted[order] = np.maximum.accumulate(steps) if len(order) else steps
    return adjusted.tolist()


@dataclass(frozen=True)
class Verdict:
    """One comparison's outcome: the verdict word, the difference (group - reference) with its
    (1 - 2 alpha) interval, the adjusted p-values, and how it was computed (or why no test
    was made). ``common_only``: the difference is over the seeds the group shares with its
    reference, not the difference of the two groups' means over all their seeds (a table
    showing those means beside it says so: ``COMMON_SEEDS_NOTE``)."""

    verdict: str
    diff: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_differs: float = math.nan  # worse (or better): adjusted
    p_equivalent: float = math.nan  # within the margin: adjusted
    reason: str = ""
    common_only: bool = False
    difference: Difference | None = None  # the numbers behind it (a sweep's looks read them)


NO_NOISE = "identical results at every seed and no known resolution: no noise to test against"
COMMON_SEEDS_NOTE = (
    "Δ is paired by seed: over the seeds a group shares with its reference, where the means "
    "shown are over all its seeds"
)
ABOVE_BEST = "above the best: higher at the seeds both have"


def _decided(
    d: Difference, p_differs: float, p_same: float, alpha: float, directions: tuple[str, ...]
) -> Verdict:
    """The verdict of one comparison from its adjusted p-values: ``equivalent`` when the
    difference is shown within the margin (a difference both clear and smaller than the
    margin is equivalent: the margin says which differences matter); else ``worse`` (or
    ``better``, when in ``directions``) when shown to differ; else ``inconclusive``."""
    common = d.left_out > 0
    if not d.known_noise:
        return Verdict("inconclusive", d.diff, reason=NO_NOISE, common_only=common, difference=d)
    low, high = interval(d, alpha)
    if p_same < alpha:
        word = "equivalent"
    elif p_differs < alpha and d.diff < 0:
        word = "worse"
    elif p_differs < alpha and "better" in directions:
        word = "better"
    else:
        word = "inconclusive"
    return Verdict(word, d.diff, low, high, p_differs, p_same, d.how, common, d)


def best_group(groups: Sequence[Results], resolution: float = 0.0) -> int | None:
    """The best group on a paired basis: the one ahead of the most others, each pair compared
    by ``difference`` (over its common seeds where it has two, else all results), ties broken
    by the mean; None when no group has two results. Raw means over unequal seed sets would
    not do: groups that stopped drawing seeds early (``--until-decided``) would be compared
    with others over different seeds, and a group higher at every common seed could sit
    below a worse "best" whose extra seeds happened to be good (a Copeland count over the
    pairwise paired means; Copeland 1951)."""
    testable = [i for i, g in enumerate(groups) if len(g) >= 2]
    if not testable:
        return None
    pairs, diff, _, _ = _pairwise(groups, testable, resolution)
    return _copeland(groups, testable, pairs, diff)


def _copeland(
    groups: Sequence[Results], testable: list[int], pairs: np.ndarray, diff: np.ndarray
) -> int:
    """``best_group``'s count from the pairs' differences (``_pairwise``): a win 1, a tie 0.5
    (sums of halves are exact, so the order of summing does not matter)."""
    score = np.where(diff > 0, 1.0, np.where(diff == 0, 0.5, 0.0))
    lost = np.where(diff < 0, 1.0, np.where(diff == 0, 0.5, 0.0))
    wins = np.zeros(len(groups))
    np.add.at(wins, pairs[:, 0], score)
    np.add.at(wins, pairs[:, 1], lost)
    return max(testable, key=lambda i: (wins[i], float(np.mean(list(groups[i].values())))))


PAIR_BLOCK = 1 << 20  # pairs x seeds per block of _pairwise: about 50 MB of temporaries at most


def _pairwise(
    groups: Sequence[Results], testable: list[int], resolution: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (i, j), i before j in ``testable``: the pairs (an array of two columns),
    ``difference(groups[i], groups[j], resolution)``'s diff, se and df. 500 groups are 124,750
    pairs, and one ``difference`` each took 0.1 ms: here the paired ones are computed at once,
    a block of pairs at a time, those sharing as many seeds stacked into one array (a row each:
    its common seeds' values in seed order), with the same numpy operations on the same numbers
    as ``difference``, so the same floats (tests/report/test_stats.py compares them). Pairs
    sharing fewer than two seeds (unpaired) go through ``difference``."""
    seeds = sorted({s for i in testable for s in groups[i]})
    column = {s: c for c, s in enumerate(seeds)}
    values = np.zeros((len(groups), len(seeds)))
    has = np.zeros((len(groups), len(seeds)), dtype=bool)
    for i in testable:
        at = [column[s] for s in groups[i]]
        values[i, at] = list(groups[i].values())
        has[i, at] = True
    pairs = np.array(testable, dtype=int)[np.column_stack(np.triu_indices(len(testable), 1))]
    diff, se, df = (np.zeros(len(pairs)) for _ in range(3))
    floor = resolution / math.sqrt(3)
    # Every pair's scale (its largest |a| + |b|) is at most twice the largest |value|, so a sd
    # above ROUND_OFF times that is no round-off whatever the pair's scale: only the rest need
    # theirs (a pass over every pair-seed saved).
    largest = 2 * float(np.abs(values).max()) if values.size else 0.0
    bound = ROUND_OFF * largest if math.isfinite(largest) else math.inf
    block = max(1, PAIR_BLOCK // max(1, len(seeds)))
    for start in range(0, len(pairs), block):
        i, j = pairs[start : start + block].T
        common = has[i] & has[j]
        shared = common.sum(axis=1)
        left, right = values[i], values[j]
        spread = left - right
        for count in np.unique(shared[shared >= 2]).tolist():
            rows = np.flatnonzero(shared == count)
            d = spread[rows][common[rows]].reshape(-1, count)
            sd = d.std(ddof=1, axis=1)
            low = np.flatnonzero(sd <= bound)
            if len(low):
                near = rows[low]
                size = np.abs(left[near]) + np.abs(right[near])
                scale = size[common[near]].reshape(-1, count).max(axis=1)
                sd[low] = np.where(sd[low] <= ROUND_OFF * scale, 0.0, sd[low])
            sd = np.maximum(sd, floor)
            at = start + rows
            diff[at] = d.mean(axis=1)
            se[at] = np.where(sd == 0, 0.0, sd / math.sqrt(count))
            df[at] = np.where(sd == 0, math.inf, float(count - 1))
        for row in np.flatnonzero(shared < 2).tolist():
            one = difference(groups[int(i[row])], groups[int(j[row])], resolution)
            diff[start + row], se[start + row], df[start + row] = one.diff, one.se, one.df
    return pairs, diff, se, df


def _p_two_sided_all(diff: np.ndarray, se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """``p_two_sided`` of many differences at once (stdtr is a ufunc: the same values)."""
    from scipy import special

    known = (se > 0) & np.isfinite(df)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(diff / se)
    p = np.minimum(1.0, 2 * special.stdtr(np.where(known, df, 1.0), np.where(known, -t, 0.0)))
    return np.where(known, p, 1.0)


ONE_RUN = "one run"  # the reason of a lone run's verdict, "-": it cannot be compared


def untested(group: Results, reason: str) -> Verdict:
    """The verdict of a group no test was made for: ``-`` for a lone run (one result is no
    evidence either way: it is not a verdict, not even *inconclusive*), else ``inconclusive``
    with ``reason``. Until decided adds seeds to both (normbench.sweeps.adaptive)."""
    if len(group) == 1:
        return Verdict("-", reason=ONE_RUN)
    return Verdict("inconclusive", reason=reason)


def compare_with_best(
    groups: Sequence[Results], alpha: float, margin: float, resolution: float = 0.0
) -> tuple[int | None, list[Verdict]]:
    """Every group against the best (``best_group``: chosen on a paired basis, None when no
    group has two results). Returns the best's index and one Verdict per group: ``reference``
    for the best; ``worse``, ``equivalent``, ``better`` or ``inconclusive`` for the others
    (always inconclusive with fewer than two results).

    *worse*: the best is chosen after looking, so the claim "j is worse than the best" is one
    of the claims "i differs from j" over every pair of groups (the luckiest group's gap to
    the others is the range of all the means). Each pair gets its two-sided t test, paired by
    seed where the pair shares its seeds (``difference``), and Holm's correction runs over all
    k(k-1)/2 of them: the family-wise error of *worse* is at most alpha whatever the spreads and
    correlations of the groups (Holm 1979; exact t tests under normality). A studentized range
    would be exact only with one common spread, which batch-statistics norms break.

    *better* (reason ``ABOVE_BEST``): a group shown higher than the best by the same test, one
    more claim of that family. The paired choice of the best makes it rare (a cycle of pairs:
    a ahead of b, b of c, c of a), never hidden as *inconclusive*.

    *equivalent*: TOST within +-margin against the best, Holm over the k - 1 comparisons.
    Choosing the luckiest group as reference makes the others look less equivalent, not more
    (tests/report/test_stats.py simulates it)."""
    testable = [i for i, g in enumerate(groups) if len(g) >= 2]
    if not testable:
        reason = "fewer than 2 results in every group"
        return None, [untested(g, reason) for g in groups]
    pairs, diff, se, df = _pairwise(groups, testable, resolution)
    best = _copeland(groups, testable, pairs, diff)
    differs = np.array(holm(_p_two_sided_all(diff, se, df)))
    with_best = np.flatnonzero((pairs == best).any(axis=1))  # of 124,750 pairs, 499
    p_pair = {
        (i if j == best else j): p
        for (i, j), p in zip(pairs[with_best].tolist(), differs[with_best].tolist(), strict=True)
    }
    others = [i for i in testable if i != best]
    against = {i: difference(groups[i], groups[best], resolution) for i in others}
    same = dict(zip(others, holm([p_within(against[i], margin) for i in others]), strict=True))
    verdicts = []
    for i, group in enumerate(groups):
        if i == best:
            verdicts.append(Verdict("reference", diff=0.0))
        elif i not in against:
            verdicts.append(untested(group, f"{len(group)} result(s); needs 2"))
        else:
            p = p_pair[i]
            verdict = _decided(against[i], p, same[i], alpha, ("worse", "better"))
            if verdict.verdict == "better":
                verdict = dataclasses.replace(verdict, reason=f"{ABOVE_BEST} ({verdict.reason})")
            verdicts.append(verdict)
    return best, verdicts


def compare_with_reference(
    groups: Sequence[Results],
    reference: int,
    alpha: float,
    margin: float,
    resolution: float = 0.0,
) -> list[Verdict]:
    """Every group against one reference named before looking (``--reference``): Dunnett's
    many-to-one question (``compare_with_references`` with the same reference for all)."""
    references = [reference] * len(groups)
    return compare_with_references(groups, references, alpha, margin, resolution)


def compare_with_references(
    groups: Sequence[Results],
    references: Sequence[int | None],
    alpha: float,
    margin: float,
    resolution: float = 0.0,
) -> list[Verdict]:
    """Every group against its reference, named before looking: group i against group
    ``references[i]`` (itself: it is a reference; None: it has none, and is inconclusive).
    Several references serve strata: ``--reference norm=layernorm`` over learning rates
    compares each norm with LayerNorm at the same rate. Holm's correction runs over every
    comparison made (valid whatever their dependence; Holm 1979), each a paired t test where
    the two share their seeds, else Welch's. ``better`` or ``worse``: the two-sided test,
    Holm-adjusted, below alpha, by the sign of the difference; ``equivalent``: TOST within
    +-margin, Holm-adjusted; else ``inconclusive`` (always with fewer than two results on
    either side)."""
    made = [
        i
        for i, ref in enumerate(references)
        if ref is not None and ref != i and len(groups[i]) >= 2 and len(groups[ref]) >= 2
    ]
    against = {i: difference(groups[i], groups[references[i]], resolution) for i in made}
    differs = dict(zip(made, holm([p_two_sided(against[i]) for i in made]), strict=True))
    same = dict(zip(made, holm([p_within(against[i], margin) for i in made]), strict=True))
    verdicts = []
    for i, group in enumerate(groups):
        ref = references[i]
        if ref == i:
            verdicts.append(Verdict("reference", diff=0.0))
        elif ref is None:
            verdicts.append(Verdict("inconclusive", reason="no reference group beside it"))
        elif i not in against:
            counts = f"{len(group)} result(s), the reference {len(groups[ref])}"
            verdicts.append(untested(group, f"{counts}; needs 2 each"))
        else:
            verdicts.append(_decided(against[i], differs[i], same[i], alpha, ("worse", "better")))
    return verdicts


def contrast(
    pairs: Sequence[tuple[Results, Results]],
    alpha: float,
    margin: float,
    resolution: float = 0.0,
) -> list[Verdict]:
    """Pre-specified contrasts, one per row: ``(reference, other)``, the question being whether
    ``other`` is lower (batch sensitivity: the largest batch against the smallest; precision:
    fp32 against bf16 or fp16). ``diff`` is other - reference (negative: a drop), paired by
    seed where the two share their seeds. *worse*: the one-sided test that other is lower,
    Holm-adjusted over the rows; *equivalent*: TOST within the margin, Holm-adjusted;
    *inconclusive* otherwise, and for rows with fewer than two results on either side. Holm is
    valid here because nothing was chosen after looking."""
    testable = [i for i, (r, o) in enumerate(pairs) if len(r) >= 2 and len(o) >= 2]
    differences = {i: difference(pairs[i][1], pairs[i][0], resolution) for i in testable}
    lower = dict(zip(testable, holm([p_below(differences[i]) for i in testable]), strict=True))
    same = holm([p_within(differences[i], margin) for i in testable])
    same = dict(zip(testable, same, strict=True))
    verdicts = []
    for i, (reference, other) in enumerate(pairs):
        if i not in differences:
            counts = f"{len(reference)} and {len(other)} results"
            verdicts.append(Verdict("inconclusive", reason=f"{counts}; needs 2 each"))
        else:
            verdicts.append(_decided(differences[i], lower[i], same[i], alpha, ("worse",)))
    return verdicts


def lr_sensitivity(losses: np.ndarray, initial: float) -> float:
    """LR sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
    training instabilities": their summary of a sweep) of one seed's runs over a grid of
    learning rates:

        E_lr[ min(loss(lr), loss_init) - min_lr loss(lr) ]

    the mean, over the grid, of how far each rate's final loss ends from the best rate's, each
    loss capped at ``initial`` (loss_init, the loss at initialisation): a run that ended worse
    than it started, or diverged (NaN or inf in ``losses``), counts at loss_init. The best
    loss is taken capped as well, which changes nothing while some rate beats loss_init and
    keeps a grid where none does at 0 rather than negative. In the loss's units; 0 when every
    rate reaches the same loss, lower is better. Unlike the other functions here, the arrays
    are not per seed but per learning rate, and may hold NaN."""
    return float(lr_sensitivity_rows(np.asarray(losses, dtype=float)[None, :], initial)[0])


def lr_sensitivity_rows(losses: np.ndarray, initial: float | np.ndarray) -> np.ndarray:
    """``lr_sensitivity`` of each row of ``losses`` (a seed's losses over the grid), ``initial``
    a number or a column (a seed's loss_init each): the same floats as one row at a time."""
    losses = np.ascontiguousarray(losses)  # a row's sum in its own order, as one row alone
    capped = np.where(np.isfinite(losses), np.minimum(losses, initial), initial)
    return (capped - capped.min(axis=1, keepdims=True)).mean(axis=1)  # each term >= 0
