"""Scaling ladders as pure functions: each group's compute multiplier against a reference read
off the runs at every rung, its trend along the ladder, and, only where a parametric curve
fits, the multiplier beyond the ladder and where the curves cross (docs/statistics.md,
"Scaling ladders", has the method, its error rates and their conditions;
normbench.report.scaling_curves the curves; normbench.report.scaling_section builds a
report's section from runs).

Within the ladder no curve is assumed. The logarithms of the reference's rung means, made
non-increasing in compute by isotonic regression (scipy.optimize.isotonic_regression: a
reference whose loss rose between rungs would give two computes for one loss), are joined by
monotone cubic Hermite interpolation in ln C (Fritsch and Carlson 1980; slopes by
``hermite_slopes``): log-log axes, on which a power law is straight and one with a floor E
bends by E / L of its exponent, so that the interpolation's bias between rungs is small; the
cubic keeps the curve between rungs monotone and, unlike straight lines between rungs,
follows the bend that remains. A group's multiplier at a rung is the reference's compute at which
this curve reaches the group's rung-mean loss, over the group's compute. A loss outside the
reference's measured range has no measured multiplier, only a bound: above the reference's
highest rung mean, the multiplier is below the one the reference's smallest rung gives; below
its lowest, above the one its top rung gives.

Intervals come from a bootstrap over seeds within each rung, paired across groups where they
share the rung's seeds; a resample outside the reference's range counts at the end it lies
beyond (so an interval may be one-sided).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import interpolate
from scipy import optimize as scipy_optimize

from normbench.report import scaling_curves as curves_of
from normbench.report.scaling_curves import CURVED, NONE, PER_GROUP, SHARED, ZERO

__all__ = ["CURVED", "NONE", "PER_GROUP", "SHARED", "ZERO"]

BOOTSTRAP = 1000  # refits per interval
TREND_MARGIN = 0.05  # |slope| in log10(multiplier) per decade of compute that counts as constant
MIN_TREND_RUNGS = 3  # a slope from fewer rungs in range is inconclusive
WINDOW = 100.0  # curves extrapolated to 100x the top rung's compute, no further
EXTRAPOLATED = (10.0, 100.0)  # the multiplier beyond the ladder, at these multiples of its top
MEASURED, ABOVE, BELOW = "measured", "lower bound", "upper bound"  # a rung's multiplier
FITTED, NOT_ESTIMABLE = "extrapolated", "not estimable"  # a point beyond the ladder's


# ----------------------------------------------------------------------------- bootstrap
@dataclass
class Cell:
    """One group at one rung: its compute and its results by seed."""

    compute: float
    seeds: np.ndarray
    values: np.ndarray


def resampled_means(cells: list[list[Cell]], boot: int, rng: np.random.Generator) -> np.ndarray:
    """(boot, G, R) rung means of seeds resampled with replacement within each rung: the same
    draw of seeds for every group where the groups share the rung's seeds (the pairing the
    verdicts use), else each group its own. Each resampled seed's deviation from the rung mean
    is inflated by sqrt(n / (n - 1)), so that the bootstrap variance of a mean of n seeds is
    s^2 / n, not (n - 1) s^2 / n^2 (Davison and Hinkley 1997, section 3.3: modified
    residuals); a rung of one seed adds no variance."""
    groups, rungs = len(cells), len(cells[0])
    out = np.empty((boot, groups, rungs))
    for r in range(rungs):
        column = [cells[g][r] for g in range(groups)]
        shared = all(np.array_equal(c.seeds, column[0].seeds) for c in column)
        draw = rng.integers(0, len(column[0].values), (boot, len(column[0].values)))
        for g, cell in enumerate(column):
            n = len(cell.values)
            picks = draw if shared else rng.integers(0, n, (boot, n))
            mean = cell.values.mean()
            inflate = math.sqrt(n / (n - 1)) if n > 1 else 0.0
            out[:, g, r] = mean + inflate * (cell.values[picks].mean(1) - mean)
    return out


def interval(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of ``level`` along axis 0, NaN refits counted at both ends (a
    refit that could not be made widens the interval rather than vanishing)."""
    tail = (1 - level) / 2
    low = np.quantile(np.where(np.isnan(samples), -np.inf, samples), tail, 0, method="nearest")
    high = np.quantile(np.where(np.isnan(samples), np.inf, samples), 1 - tail, 0, method="nearest")
    return low, high


def widening(samples: np.ndarray, cells: np.ndarray, dof: np.ndarray, level: float) -> np.ndarray:
    """How much wider than the percentile interval an interval of ``level`` must be because
    each rung's seed variance is itself estimated from a few seeds: t over z quantiles at the
    Welch-Satterthwaite degrees of freedom of the statistic (Satterthwaite 1946). The
    statistic is linearised in the cell means by least squares over the refits (its weights
    w_c), each cell's share of its variance is v_c = w_c^2 var*(cell mean), and
    nu = (sum v_c)^2 / sum(v_c^2 / (n_c - 1)). ``samples``: (B, S) refits of S statistics;
    ``cells``: (B, M) the refits' cell means; ``dof``: (M,) each cell's n_c - 1."""
    from scipy import stats

    samples = samples.reshape(len(samples), -1)
    factors = np.ones(samples.shape[1])
    design = np.column_stack([np.ones(len(cells)), cells - cells.mean(0)])
    cell_var = cells.var(0)
    tail = (1 - level) / 2
    for s in range(samples.shape[1]):
        rows = np.isfinite(samples[:, s])
        if rows.sum() < design.shape[1] + 2:
            continue
        weights = np.linalg.lstsq(design[rows], samples[rows, s], rcond=None)[0][1:]
        share = weights**2 * cell_var
        used = dof > 0
        if share[used].sum() <= 0:
            continue
        nu = share[used].sum() ** 2 / (share[used] ** 2 / dof[used]).sum()
        factors[s] = stats.t.ppf(1 - tail, max(nu, 1.0)) / stats.norm.ppf(1 - tail)
    return factors


def widened_interval(
    point: np.ndarray, samples: np.ndarray, cells: np.ndarray, dof: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of ``level`` (``interval``) with each end moved away from the
    point estimate by ``widening``'s factor."""
    shape = np.shape(point)
    flat = samples.reshape(len(samples), -1)
    low, high = interval(flat, level)
    factor = widening(flat, cells, dof, level)
    centre = np.ravel(point)
    with np.errstate(invalid="ignore"):
        unbounded = ~np.isfinite(centre)  # a bound, not a measurement: its interval as found
        low = np.where(np.isinf(low) | unbounded, low, centre - factor * (centre - low))
        high = np.where(np.isinf(high) | unbounded, high, centre + factor * (high - centre))
    return low.reshape(shape), high.reshape(shape)


# ------------------------------------------------------------------ measured multipliers
def monotone_reference(means: np.ndarray) -> np.ndarray:
    """Each row of ``means`` (K, R) made non-increasing along the rungs by isotonic
    regression (least squares, pool-adjacent-violators)."""
    return np.stack([scipy_optimize.isotonic_regression(row, increasing=False).x for row in means])


def hermite_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The slopes at the nodes of a monotone cubic Hermite curve through each row of ``y``
    (K, R) at ``x`` (R,): inside, the weighted harmonic mean of the neighbouring secants
    (Fritsch and Butland 1984, the rule of scipy's PchipInterpolator), 0 where they differ in
    sign or one is 0; at the two ends, the end segment's secant. PchipInterpolator's
    three-point end rule sets the end slope to 0 when the curve bends strongly (rungs 16x
    apart on a power law with a floor), which flattens the top segment and made a
    multiplier of 0.95 read 0.17 there; the secant keeps the slope's sign and size."""
    h = np.diff(x)
    secant = np.diff(y, axis=-1) / h
    slopes = np.empty_like(y)
    slopes[:, 0], slopes[:, -1] = secant[:, 0], secant[:, -1]
    left, right = secant[:, :-1], secant[:, 1:]
    w1, w2 = 2 * h[1:] + h[:-1], h[1:] + 2 * h[:-1]
    same = (left * right) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        harmonic = (w1 + w2) / (w1 / left + w2 / right)
    slopes[:, 1:-1] = np.where(same, harmonic, 0.0)
    return slopes


def measured_log10_multipliers(log_c: np.ndarray, means: np.ndarray, reference: int):
    """log10 of each group's multiplier at each rung, read off the runs (the module
    docstring): ``log_c`` (G, R) ln compute, ``means`` (K, G, R) K replicates of the rung
    means. Returns (K, G, R) with +inf where the group's loss is below the reference's lowest
    rung mean, -inf where above its highest, NaN where the reference is level there (two
    rungs at one loss: any compute between them reaches it); and (G, R) the bounds those
    give (log10 of the multiplier the reference's top rung, resp. smallest rung, would
    mean)."""
    k, groups, rungs = means.shape
    x = log_c[reference]
    log_loss = np.log(np.maximum(means, 1e-300))  # losses are positive
    ref = monotone_reference(log_loss[:, reference])  # (K, R), non-increasing
    spline = interpolate.CubicHermiteSpline(x, ref.T, hermite_slopes(x, ref).T, axis=0)
    coefficients = spline.c  # (4, R - 1, K): a cubic per segment, in (x - x_j)
    target = log_loss.reshape(k, -1)  # (K, G R)
    segment = np.clip((ref[:, None, :] >= target[..., None]).sum(-1) - 1, 0, rungs - 2)
    rows = np.arange(k)[:, None]
    c = coefficients[:, segment, rows]  # (4, K, G R)
    low, high = np.zeros_like(target), np.diff(x)[segment]
    for _ in range(48):  # bisection on the monotone cubic of the segment: 2^-48 of its width
        middle = (low + high) / 2
        value = ((c[0] * middle + c[1]) * middle + c[2]) * middle + c[3]
        above = value > target
        low, high = np.where(above, middle, low), np.where(above, high, middle)
    reached = x[segment] + (low + high) / 2
    out = (reached - log_c.reshape(-1)) / math.log(10)
    flat = np.take_along_axis(ref, segment, 1) == np.take_along_axis(ref, segment + 1, 1)
    out = np.where(flat, np.nan, out)  # on a level stretch any compute there reaches it
    out = np.where(target > ref[:, :1], -np.inf, np.where(target < ref[:, -1:], np.inf, out))
    out = out.reshape(k, groups, rungs)
    out[:, reference] = 0.0
    bounds = np.where(
        log_loss[0] < ref[0, -1],
        x[-1] - log_c,
        np.where(log_loss[0] > ref[0, 0], x[0] - log_c, np.nan),
    )
    return out, bounds / math.log(10)


# ----------------------------------------------------------------------------- the trend
@dataclass
class Trend:
    """How the group's multiplier moves along the ladder against the reference."""

    slope: float  # of s * log10(multiplier) per decade of compute (s: the ladder's sign)
    low: float  # its 1 - alpha interval (direction: alpha/2 each way)
    high: float
    verdict: str  # shrinking | growing | constant | inconclusive
    rungs: int = 0  # the rungs in range it is decided on
    why: str = ""  # why inconclusive without a slope, in words


def trend(
    point: np.ndarray,
    refits: np.ndarray,
    log10_c: np.ndarray,
    alpha: float,
    cells: np.ndarray,
    dof: np.ndarray,
) -> Trend:
    """The trend verdict from the measured log10 multipliers at the rungs in range
    (``point``: (R,), ``refits``: (B, R), non-finite where out of range) against log10
    compute (R,): the least-squares slope of s * log10(multiplier) on log10(compute), s the
    sign of the mean log multiplier (so the slope is that of |log multiplier| while the sign
    holds), and its interval at TREND_LEVEL(alpha) = 1 - alpha / 2: *constant* when the
    interval lies inside +-TREND_MARGIN, else *shrinking* or *growing* when it lies below or
    above 0, else *inconclusive*; *inconclusive* too with fewer than MIN_TREND_RUNGS rungs in
    range. A rung is in range when its point and its whole interval at that level are; a
    refit that leaves the range at one of those rungs counts at both ends. The level is
    1 - alpha / 2, not 1 - alpha, because at 1 - alpha the verdict said shrinking or growing
    up to twice as often as alpha under a constant multiplier in simulation (a rung near the
    edge of the reference's range enters the trend only when its noise puts it inside, which
    biases it; docs/statistics.md has the table). The interval as ``widened_interval``
    (``cells``, ``dof``: the refits' cell means and their degrees of freedom)."""
    level = trend_level(alpha)
    used = np.isfinite(point)
    used &= np.isfinite(refits).mean(0) >= level  # the interval at that level is finite
    if used.sum() < MIN_TREND_RUNGS:
        why = f"{int(used.sum())} rung(s) in the reference's range; a trend needs "
        why += f"{MIN_TREND_RUNGS} or more"
        return Trend(math.nan, math.nan, math.nan, "inconclusive", int(used.sum()), why)
    point, refits, log10_c = point[used], refits[:, used], log10_c[used]
    sign = 1.0 if np.mean(point) >= 0 else -1.0
    x = log10_c - log10_c.mean()

    def slopes(values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            found = (sign * values * x).sum(-1) / (x * x).sum()
        return np.where(np.isfinite(found), found, np.nan)

    slope = slopes(point)
    low, high = (float(v) for v in widened_interval(slope, slopes(refits), cells, dof, level))
    return Trend(float(slope), low, high, trend_verdict(low, high, TREND_MARGIN), int(used.sum()))


def trend_level(alpha: float) -> float:
    """The level of the trend's interval: 1 - alpha / 2 (``trend`` says why)."""
    return 1 - alpha / 2


def trend_verdict(low: float, high: float, margin: float) -> str:
    """The trend verdict of a slope's 1 - alpha interval [low, high] (of a gap's size, per
    decade): *constant* inside +-margin, else *shrinking* or *growing* below or above 0, else
    *inconclusive* (one rule for the scaling report and a study's own measure)."""
    if low > -margin and high < margin:
        return "constant"
    if high < 0:
        return "shrinking"
    if low > 0:
        return "growing"
    return "inconclusive"


# --------------------------------------------------------------- beyond the ladder: fits
@dataclass
class Fit:
    """A ladder's parametric curves (only where a form fits) and how they were chosen."""

    mode: str  # the form chosen, or NONE
    point: object | None  # scaling_curves.Curves | Curved, (G,); None: no form fits
    refits: object | None  # the same, (B, G): refits with seed and misfit noise
    why: str  # the choice, in words
    lack_of_fit_p: float  # the chosen form's (or the best-fitting form's when none fits)
    group_p: np.ndarray  # (G,) each group's lack-of-fit p under that form
    tests: dict  # every form's scaling_curves.LackOfFit


def fit_ladder(
    compute: np.ndarray,
    cells: list[list[Cell]],
    replicates: np.ndarray,
    alpha: float,
    rng: np.random.Generator,
) -> Fit:
    """The parametric form for what lies beyond the runs (scaling_curves.choose) and its
    refits: each refit is fitted to the seed bootstrap's rung means (``replicates`` (B, G, R))
    plus a rung-level normal deviation of each group's excess variance (the lack of fit's
    method-of-moments estimate): a parametric bootstrap of a model with rung-level random
    effects, so misfit widens the intervals, not only seed noise. The form is chosen once,
    on the data; the refits do not choose again."""
    means = np.array([[c.values.mean() for c in row] for row in cells])
    counts = np.array([[len(c.values) for c in row] for row in cells], dtype=float)
    pure = np.array([[((c.values - c.values.mean()) ** 2).sum() for c in row] for row in cells])
    choice = curves_of.choose(compute, means, counts, pure, alpha)
    if choice.form is None:
        best = max(choice.tests, key=lambda f: np.nan_to_num(choice.tests[f].p, nan=-1.0))
        test = choice.tests[best]
        return Fit(NONE, None, None, choice.why, test.p, test.group_p, choice.tests)
    test = choice.tests[choice.form]
    noise = rng.standard_normal(replicates.shape) * np.sqrt(test.excess_variance)[None, :, None]
    refits = curves_of.split(
        curves_of.fit(choice.form, compute, np.concatenate([means[None], replicates + noise]))
    )[1]
    return Fit(choice.form, choice.curves, refits, choice.why, test.p, test.group_p, choice.tests)


def log10_multiplier(curves, group: int, reference: int, compute: np.ndarray):
    """log10 of the compute the reference's fitted curve needs to reach the group's fitted
    loss at ``compute``, over that compute (> 0: the group needs less compute); +inf where
    the reference's curve never gets that low. Curves (G,) or (B, G)."""
    reached = curves_of.one(curves, group).loss(compute)
    needed = curves_of.one(curves, reference).log_compute_for(reached)
    return (needed - np.log(compute)) / math.log(10)


def crossings(curves, group: int, reference: int, low_c: float, high_c: float):
    """Where the group's fitted curve first crosses the reference's between ``low_c`` and
    ``high_c``: the compute, by linear interpolation of the loss difference on a grid of
    513 points even in log compute (the decades spanned / 512); NaN where they do not
    cross. Curves (G,) gives a number, (B, G) an array."""
    grid = np.geomspace(low_c, high_c, 513)
    gap = curves_of.one(curves, group).loss(grid) - curves_of.one(curves, reference).loss(grid)
    gap = np.atleast_2d(gap)
    changes = np.signbit(gap[:, 1:]) != np.signbit(gap[:, :-1])
    first = np.argmax(changes, axis=1)
    found = changes[np.arange(len(gap)), first]
    g0, g1 = gap[np.arange(len(gap)), first], gap[np.arange(len(gap)), first + 1]
    log_grid = np.log(grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        where = log_grid[first] + (log_grid[first + 1] - log_grid[first]) * g0 / (g0 - g1)
    with np.errstate(over="ignore"):  # rows that do not cross: their number is discarded
        out = np.where(found, np.exp(where), np.nan)
    return (
        float(out[0])
        if np.ndim(curves.slope if hasattr(curves, "slope") else curves.floor) == 1
        else out
    )


# ------------------------------------------------------------------------------ analysis
@dataclass
class GroupScaling:
    """One group's answer against the reference: the multiplier at each rung (measured, or a
    bound) and beyond (from the fitted form, or not estimable), the trend on the measured
    multipliers, the fitted form's exponent and floor, and the crossing (log10 compute)."""

    compute: np.ndarray  # (R + len(EXTRAPOLATED),): the rungs, then the extrapolated points
    multiplier: np.ndarray  # log10, at ``compute``; at a bound, the bound
    multiplier_ci: tuple[np.ndarray, np.ndarray]
    kind: list[str]  # per point: MEASURED, ABOVE, BELOW, FITTED or NOT_ESTIMABLE
    trend: Trend | None  # None for the reference
    exponent: float  # the form's local log-log exponent at the top rung; NaN: no form
    exponent_ci: tuple[float, float]
    floor: float
    floor_ci: tuple[float, float]
    lack_of_fit_p: float  # this group's, under the ladder's form
    crossing: float  # log10 compute, NaN: no crossing within WINDOW x the top rung, or none
    crossing_ci: tuple[float, float]
    crossing_share: float  # of the refits that cross in the window; NaN without a form


def measured_multipliers(
    cells: list[list[Cell]],
    reference: int,
    alpha: float,
    boot: int = BOOTSTRAP,
    rng: np.random.Generator | None = None,
):
    """Within the ladder: (point (G, R) log10 multipliers, refits (B, G, R), interval
    (low, high) each (G, R) at 1 - 2 alpha, bounds (G, R), the bootstrap's cell means (B, M)
    and their degrees of freedom (M,), the replicates (B, G, R))."""
    rng = rng or np.random.default_rng(0)
    log_c = np.log([[c.compute for c in row] for row in cells])
    means = np.array([[c.values.mean() for c in row] for row in cells])
    replicates = resampled_means(cells, boot, rng)
    every, bounds = measured_log10_multipliers(
        log_c, np.concatenate([means[None], replicates]), reference
    )
    point, refits = every[0], every[1:]
    flat = replicates.reshape(boot, -1)
    dof = np.array([len(c.values) - 1 for row in cells for c in row], dtype=float)
    low, high = widened_interval(point, refits, flat, dof, 1 - 2 * alpha)
    return point, refits, (low, high), bounds, flat, dof, replicates


def _kind(log10: float) -> str:
    """What a rung's multiplier is: measured, a bound, or not estimable (a level reference)."""
    if math.isnan(log10):
        return NOT_ESTIMABLE
    return MEASURED if math.isfinite(log10) else (ABOVE if log10 > 0 else BELOW)


def analyse(
    cells: list[list[Cell]],
    reference: int,
    alpha: float,
    boot: int = BOOTSTRAP,
    rng: np.random.Generator | None = None,
) -> tuple[Fit, list[GroupScaling]]:
    """A ladder's fit and each group's answer (``cells``: [group][rung]), intervals at
    1 - 2 alpha (the trend's as ``trend`` says)."""
    rng = rng or np.random.default_rng(0)
    point, refits, (low, high), bounds, flat, dof, replicates = measured_multipliers(
        cells, reference, alpha, boot, rng
    )
    compute = np.array([[c.compute for c in row] for row in cells])
    fit = fit_ladder(compute, cells, replicates, alpha, rng)
    level = 1 - 2 * alpha

    def ci(value, samples):
        return widened_interval(np.asarray(value, dtype=float), samples, flat, dof, level)

    out = []
    top = compute[:, -1].max()
    for g in range(len(cells)):
        beyond = compute[g, -1] * np.array(EXTRAPOLATED)
        kinds = [_kind(v) for v in point[g]]
        shown = np.where(np.isfinite(point[g]), point[g], bounds[g])
        # a bound's interval is the bound's side: (bound, inf) or (0, bound)
        above, below = point[g] == np.inf, point[g] == -np.inf
        m_low = list(np.where(above, bounds[g], np.where(below, -np.inf, low[g])))
        m_high = list(np.where(below, bounds[g], np.where(above, np.inf, high[g])))
        multiplier = list(shown)
        trend_of = None
        if g != reference:
            trend_of = trend(point[g], refits[:, g], np.log10(compute[g]), alpha, flat, dof)
        exponent = floor = cross = share = math.nan
        exponent_ci = floor_ci = cross_ci = (math.nan, math.nan)
        if fit.point is None:
            kinds += [NOT_ESTIMABLE] * len(beyond)
            multiplier += [math.nan] * len(beyond)
            m_low += [math.nan] * len(beyond)
            m_high += [math.nan] * len(beyond)
        else:
            far = log10_multiplier(fit.point, g, reference, beyond)
            far_refits = log10_multiplier(fit.refits, g, reference, beyond)
            far_low, far_high = ci(far, far_refits)
            kinds += [FITTED] * len(beyond)
            multiplier += list(far)
            m_low += list(far_low)
            m_high += list(far_high)
            one, many = curves_of.one(fit.point, g), curves_of.one(fit.refits, g)
            exponent = float(one.slope_at(top))
            exponent_ci = tuple(map(float, ci(exponent, many.slope_at(top))))
            floor = float(one.floor)
            floor_ci = tuple(map(float, ci(floor, many.floor)))
            if g != reference:
                low_c, high_c = compute.min(), WINDOW * top
                found = crossings(fit.point, g, reference, low_c, high_c)
                crossed = crossings(fit.refits, g, reference, low_c, high_c)
                cross = math.log10(found) if math.isfinite(found) else math.nan
                cross_ci = tuple(map(float, ci(np.log10(found), np.log10(crossed))))
                share = float(np.isfinite(crossed).mean())
        out.append(
            GroupScaling(
                np.concatenate([compute[g], beyond]),
                np.array(multiplier),
                (np.array(m_low), np.array(m_high)),
                kinds,
                trend_of,
                exponent,
                exponent_ci,
                floor,
                floor_ci,
                float(fit.group_p[g]),
                cross,
                cross_ci,
                share,
            )
        )
    return fit, out
