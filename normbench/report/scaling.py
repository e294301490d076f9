"""Scaling ladders as pure functions: per group a curve L(C) = E + A (C / C0)^(-alpha) fitted
to the rung means, intervals by a bootstrap over seeds within each rung, the compute
multiplier of each group against a reference, the trend of that multiplier along the ladder
and where the curves cross (docs/statistics.md, "Scaling ladders", has the formulas and
their sources; normbench.report.scaling_section builds a report's section from runs).

The fit is variable projection (Golub and Pereyra 1973): for a fixed exponent the floor E and
the scale A are a linear least-squares fit, so only the exponent is searched, by
scipy.optimize.least_squares from the best point of a grid. Every curve of a bootstrap is
fitted in one least_squares call (each curve's residuals depend on its own exponent only: a
block-diagonal Jacobian), so a thousand refits cost about what one does.

E, the data's irreducible loss, is shared by a ladder's groups (one floor, each group its own
A and alpha: a floor per group let the trend verdict err too often, ``fit_ladder``); a
ladder of one group fits its own from ``MIN_RUNGS_FREE`` rungs on. E is identified only by a
ladder that bends: where its bootstrap interval runs into the model's bounds, E is fixed at 0
(a pure power law, a straight line on log axes). Every output says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

EXPONENT_RANGE = (0.01, 3.0)  # alpha's bounds (C is divided by the ladder's smallest compute)
GRID = np.geomspace(*EXPONENT_RANGE, 64)  # least_squares starts from the best of these
MIN_RUNGS_FREE = 4  # a curve with its own floor: 3 parameters and a degree of freedom
BOOTSTRAP = 1000  # refits per interval
# least_squares' budget: the fits of a ladder that follows a power law converge in 4 to 6
# evaluations; one that does not (a flat ladder of a few steps) stops here, and its refits at
# wherever they stopped are what the identification of E (``_unbounded``) then judges
MAX_EVALUATIONS = 50
TREND_MARGIN = 0.05  # |slope| in log10(multiplier) per decade of compute that counts as constant
WINDOW = 100.0  # curves extrapolated to 100x the top rung's compute, no further
EXTRAPOLATED = (10.0, 100.0)  # the multiplier beyond the ladder, at these multiples of its top
PER_GROUP, SHARED, ZERO = "per group", "shared", "fixed at 0"


@dataclass
class Curves:
    """Fitted curves L(C) = floor + scale * (C / c0)^(-exponent), one per leading index: shape
    (G,) for a point fit, (B, G) for B bootstrap refits of G groups."""

    floor: np.ndarray
    scale: np.ndarray
    exponent: np.ndarray
    c0: float

    def loss(self, compute: np.ndarray) -> np.ndarray:
        """The fitted loss at ``compute`` (broadcast against the curves' trailing axis)."""
        ratio = np.log(np.asarray(compute, dtype=float) / self.c0)
        return self.floor[..., None] + self.scale[..., None] * np.exp(
            -self.exponent[..., None] * ratio
        )

    def log_compute_for(self, loss: np.ndarray) -> np.ndarray:
        """ln of the compute at which each curve reaches ``loss`` (same shape as loss, with the
        curves' axes leading): +inf where the loss is at or below the curve's floor (never
        reached), NaN where the curve does not fall (scale <= 0)."""
        excess = loss - self.floor[..., None]
        scale = self.scale[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = math.log(self.c0) - np.log(excess / scale) / self.exponent[..., None]
        out = np.where(excess <= 0, np.inf, out)
        return np.where(scale > 0, out, np.nan)


# ------------------------------------------------------------------------------ fitting
def _linear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares y = floor + scale * x along the last axis: (floor, scale)."""
    xm, ym = x.mean(-1, keepdims=True), y.mean(-1, keepdims=True)
    sxx = ((x - xm) ** 2).sum(-1)
    scale = ((x - xm) * (y - ym)).sum(-1) / np.where(sxx > 0, sxx, np.nan)
    return ym[..., 0] - scale * xm[..., 0], scale


def _free_residuals(exponent: np.ndarray, log_c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Variable projection's residuals: for each curve's exponent, the linear fit's."""
    x = np.exp(-exponent[:, None] * log_c)
    floor, scale = _linear(x, y)
    return np.nan_to_num(y - floor[:, None] - scale[:, None] * x, nan=1e6).ravel()


def _start(log_c: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each curve's best exponent on GRID (variable projection's residual sum of squares)."""
    x = np.exp(-GRID[:, None, None] * log_c[None])  # (grid, K, R)
    floor, scale = _linear(x, np.broadcast_to(y, x.shape))
    rss = ((y - floor[..., None] - scale[..., None] * x) ** 2).sum(-1)
    return GRID[np.nanargmin(np.nan_to_num(rss, nan=np.inf), axis=0)]


def _block_sparsity(curves: int, rows: int, columns: int = 1) -> sparse.csr_matrix:
    """Which residuals depend on which parameters: curve k's ``rows`` residuals on its own
    ``columns`` parameters."""
    return sparse.kron(sparse.eye(curves, format="csr"), np.ones((rows, columns)), format="csr")


def _solve(residuals, start: np.ndarray, sparsity) -> np.ndarray:
    """The exponents least_squares finds from ``start`` (inside the bounds)."""
    low, high = EXPONENT_RANGE
    start = np.clip(start, low * 1.0001, high * 0.9999)
    found = optimize.least_squares(
        residuals,
        start,
        bounds=EXPONENT_RANGE,
        jac_sparsity=sparsity,
        method="trf",
        max_nfev=MAX_EVALUATIONS,
        tr_options={"maxiter": 100},
    )
    return found.x


def fit_free(compute: np.ndarray, y: np.ndarray, c0: float) -> Curves:
    """A curve with a floor of its own per row of ``y`` (rows: curves, columns: rungs; the
    compute of each point in ``compute``, broadcast to y's shape)."""
    shape = y.shape[:-1]
    log_c = np.broadcast_to(np.log(compute / c0), y.shape).reshape(-1, y.shape[-1])
    flat = y.reshape(-1, y.shape[-1])
    exponent = _solve(
        lambda a: _free_residuals(a, log_c, flat),
        _start(log_c, flat),
        _block_sparsity(len(flat), flat.shape[1]),
    )
    floor, scale = _linear(np.exp(-exponent[:, None] * log_c), flat)
    return Curves(floor.reshape(shape), scale.reshape(shape), exponent.reshape(shape), c0)


def _shared_fit(exponent: np.ndarray, log_c: np.ndarray, y: np.ndarray):
    """For exponents (K, G): the floor shared by each replicate's groups and each group's
    scale, by least squares: with P_g the projection on x_g, the floor minimises
    sum_g |(I - P_g)(y_g - E)|^2."""
    x = np.exp(-exponent[..., None] * log_c)  # (K, G, R)
    xx = (x * x).sum(-1, keepdims=True)
    ones = 1 - x * x.sum(-1, keepdims=True) / xx  # (I - P_g) 1
    rest = y - x * (x * y).sum(-1, keepdims=True) / xx  # (I - P_g) y
    floor = (ones * rest).sum((-1, -2)) / (ones * ones).sum((-1, -2))
    scale = (x * (y - floor[:, None, None])).sum(-1) / xx[..., 0]
    return floor, scale, x


def fit_shared(compute: np.ndarray, y: np.ndarray, c0: float, start: np.ndarray) -> Curves:
    """Curves whose groups share one floor: ``y`` (K, G, R), K replicates of G groups;
    ``start`` the exponents (K, G) to search from (the free fits')."""
    k, g, r = y.shape
    log_c = np.broadcast_to(np.log(compute / c0), y.shape)

    def residuals(a: np.ndarray) -> np.ndarray:
        floor, scale, x = _shared_fit(a.reshape(k, g), log_c, y)
        fitted = floor[:, None, None] + scale[..., None] * x
        return np.nan_to_num(y - fitted, nan=1e6).ravel()

    exponent = _solve(residuals, start.ravel(), _block_sparsity(k, g * r, g)).reshape(k, g)
    floor, scale, _ = _shared_fit(exponent, log_c, y)
    return Curves(np.broadcast_to(floor[:, None], (k, g)).copy(), scale, exponent, c0)


def fit_zero(compute: np.ndarray, y: np.ndarray, c0: float) -> Curves:
    """Pure power laws L = A (C / C0)^(-alpha): a straight line on log axes, by least
    squares of ln L on ln C (no search)."""
    log_c = np.broadcast_to(np.log(compute / c0), y.shape)
    intercept, slope = _linear(log_c, np.log(np.maximum(y, 1e-12)))
    return Curves(np.zeros_like(slope), np.exp(intercept), -slope, c0)


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
        low = np.where(np.isinf(low), low, centre - factor * (centre - low))
        high = np.where(np.isinf(high), high, centre + factor * (high - centre))
    return low.reshape(shape), high.reshape(shape)


# ------------------------------------------------------------------------------ analysis
@dataclass
class Fit:
    """A ladder's curves (point fit and bootstrap refits) and how E was treated."""

    mode: str  # PER_GROUP | SHARED | ZERO
    point: Curves  # (G,)
    refits: Curves  # (B, G)
    why: str  # why E was treated so, in words


def _unbounded(fit: Curves, alpha: float) -> bool:
    """Whether E's bootstrap runs into the model's bounds: more than ``alpha`` of the refits
    put some group's E below 0, its exponent at a bound of EXPONENT_RANGE, or its scale at or
    below 0 (a curve that does not fall); or the point fit does."""
    low, high = EXPONENT_RANGE

    def bad(c: Curves) -> np.ndarray:
        edge = (c.exponent <= low * 1.001) | (c.exponent >= high * 0.999)
        return (c.floor < 0) | edge | ~(c.scale > 0)

    return bool(bad(fit).any()) if fit.floor.ndim == 1 else bool(bad(fit).any(-1).mean() > alpha)


def fit_ladder(compute: np.ndarray, means: np.ndarray, replicates: np.ndarray, alpha: float) -> Fit:
    """The curves of G groups over R rungs (``compute``, ``means``: (G, R); ``replicates``:
    (B, G, R) bootstrap means). Several groups share one floor E, the data's irreducible
    loss, where the ladder identifies it (a floor per group made the trend verdict wrong 11%
    of the time at alpha 0.05 under parallel curves in our simulations, a shared one 4.7%:
    docs/statistics.md); one group has a floor of its own from MIN_RUNGS_FREE rungs on;
    otherwise E = 0. The point fit and the refits are fitted in one call, the point first."""
    groups, rungs = means.shape
    c0 = float(compute.min())
    every = np.concatenate([means[None], replicates])
    if groups == 1 and rungs < MIN_RUNGS_FREE:
        why = f"one group of {rungs} rungs: a floor needs {MIN_RUNGS_FREE} or more"
    else:
        if groups == 1:
            found = fit_free(compute, every, c0)
        else:
            log_c = np.broadcast_to(np.log(compute / c0), every.shape).reshape(-1, rungs)
            start = _start(log_c, every.reshape(-1, rungs)).reshape(every.shape[:2])
            found = fit_shared(compute, every, c0, start)
        point, refits = _split(found)
        if not (_unbounded(point, alpha) or _unbounded(refits, alpha)):
            how = "fitted per group" if groups == 1 else "shared by the groups"
            return Fit(PER_GROUP if groups == 1 else SHARED, point, refits, f"E {how}")
        why = f"{'E' if groups == 1 else 'a shared E'} is not identified (its bootstrap "
        why += "interval reaches the model's bounds)"
    return Fit(ZERO, *_split(fit_zero(compute, every, c0)), f"{why}; E = 0")


def _split(curves: Curves) -> tuple[Curves, Curves]:
    """The first curves of a stacked fit (the point fit) and the rest (the refits)."""
    parts = (curves.floor, curves.scale, curves.exponent)
    return Curves(*(p[0] for p in parts), curves.c0), Curves(*(p[1:] for p in parts), curves.c0)


def log10_multiplier(curves: Curves, group: int, reference: int, compute: np.ndarray):
    """log10 of the compute the reference needs to reach the group's fitted loss at
    ``compute``, over that compute (> 0: the group needs less compute than the reference);
    +inf where the reference's curve never gets that low. Curves (G,) or (B, G)."""
    reached = _one(curves, group).loss(compute)
    needed = _one(curves, reference).log_compute_for(reached)
    return (needed - np.log(compute)) / math.log(10)


def _one(curves: Curves, group: int) -> Curves:
    """One group's curve (or its refits) of ``curves``."""
    parts = (curves.floor, curves.scale, curves.exponent)
    return Curves(*(part[..., group] for part in parts), curves.c0)


@dataclass
class Trend:
    """How the group's multiplier moves along the ladder against the reference."""

    slope: float  # of s * log10(multiplier) per decade of compute (s: the ladder's sign)
    low: float  # its 1 - alpha interval (direction: alpha/2 each way)
    high: float
    verdict: str  # shrinking | growing | constant | inconclusive


def trend(
    point: np.ndarray,
    refits: np.ndarray,
    log10_c: np.ndarray,
    alpha: float,
    cells: np.ndarray,
    dof: np.ndarray,
) -> Trend:
    """The trend verdict from the log10 multipliers at the rungs (``point``: (R,), ``refits``:
    (B, R)) against log10 compute (R,): the least-squares slope of s * log10(multiplier) on
    log10(compute), s the sign of the point fit's mean log multiplier (so the slope is that
    of |log multiplier| while the sign holds), and its 1 - alpha interval: *constant* when the
    interval lies inside +-TREND_MARGIN (two one-sided tests at alpha / 2 each: at most alpha
    when |slope| >= the margin, measured 2.7 to 3.5% at alpha 0.05 on the margin itself:
    docs/statistics.md), else *shrinking* or *growing* when it lies below or above 0 (error
    rate alpha when the multiplier is constant, alpha / 2 each way), else *inconclusive*.
    The interval as ``widened_interval`` (``cells``, ``dof``: the refits' cell means and
    their degrees of freedom); a refit with an infinite multiplier counts at both ends."""
    sign = 1.0 if np.mean(point) >= 0 else -1.0
    x = log10_c - log10_c.mean()

    def slopes(values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            found = (sign * values * x).sum(-1) / (x * x).sum()
        return np.where(np.isfinite(found), found, np.nan)

    slope = slopes(point)
    samples = slopes(refits)
    low, high = (float(v) for v in widened_interval(slope, samples, cells, dof, 1 - alpha))
    return Trend(float(slope), low, high, trend_verdict(low, high, TREND_MARGIN))


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


def crossings(curves: Curves, group: int, reference: int, low_c: float, high_c: float):
    """Where the group's fitted curve first crosses the reference's between ``low_c`` and
    ``high_c``: the compute, by linear interpolation of the loss difference on a grid of
    513 points even in log compute (the decades spanned / 512); NaN where they do not
    cross. Curves (G,) gives a number, (B, G) an array."""
    grid = np.geomspace(low_c, high_c, 513)
    gap = np.atleast_2d(_one(curves, group).loss(grid) - _one(curves, reference).loss(grid))
    changes = np.signbit(gap[:, 1:]) != np.signbit(gap[:, :-1])
    first = np.argmax(changes, axis=1)
    found = changes[np.arange(len(gap)), first]
    g0, g1 = gap[np.arange(len(gap)), first], gap[np.arange(len(gap)), first + 1]
    log_grid = np.log(grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        where = log_grid[first] + (log_grid[first + 1] - log_grid[first]) * g0 / (g0 - g1)
    with np.errstate(over="ignore"):  # rows that do not cross: their number is discarded
        out = np.where(found, np.exp(where), np.nan)
    return float(out[0]) if curves.floor.ndim == 1 else out


@dataclass
class GroupScaling:
    """One group's answer: its curve with intervals and, against the reference, the
    multiplier at each rung and beyond, the trend and the crossing (log10 compute)."""

    exponent: float
    exponent_ci: tuple[float, float]
    floor: float
    floor_ci: tuple[float, float]
    scale: float
    compute: np.ndarray  # (R + len(EXTRAPOLATED),): the rungs, then the extrapolated points
    multiplier: np.ndarray  # log10, at ``compute``
    multiplier_ci: tuple[np.ndarray, np.ndarray]
    trend: Trend | None  # None for the reference
    crossing: float  # log10 compute, NaN: no crossing within WINDOW x the top rung
    crossing_ci: tuple[float, float]
    crossing_share: float  # of the refits that cross in the window


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
    compute = np.array([[c.compute for c in row] for row in cells])
    means = np.array([[c.values.mean() for c in row] for row in cells])
    replicates = resampled_means(cells, boot, rng)
    fit = fit_ladder(compute, means, replicates, alpha)
    flat = replicates.reshape(boot, -1)
    dof = np.array([len(c.values) - 1 for row in cells for c in row], dtype=float)
    level = 1 - 2 * alpha

    def ci(point, samples):
        return widened_interval(np.asarray(point, dtype=float), samples, flat, dof, level)

    out = []
    for g in range(len(cells)):
        at = np.concatenate([compute[g], compute[g, -1] * np.array(EXTRAPOLATED)])
        point = log10_multiplier(fit.point, g, reference, at)
        refits = log10_multiplier(fit.refits, g, reference, at)
        rungs = len(compute[g])
        low_c, high_c = compute.min(), WINDOW * compute[:, -1].max()
        cross = crossings(fit.point, g, reference, low_c, high_c)
        crossed = crossings(fit.refits, g, reference, low_c, high_c)
        trend_of = None
        if g != reference:
            log10_c = np.log10(compute[g])
            trend_of = trend(point[:rungs], refits[:, :rungs], log10_c, alpha, flat, dof)
        out.append(
            GroupScaling(
                float(fit.point.exponent[g]),
                tuple(map(float, ci(fit.point.exponent[g], fit.refits.exponent[:, g]))),
                float(fit.point.floor[g]),
                tuple(map(float, ci(fit.point.floor[g], fit.refits.floor[:, g]))),
                float(fit.point.scale[g]),
                at,
                point,
                ci(point, refits),
                trend_of,
                math.log10(cross) if math.isfinite(cross) else math.nan,
                tuple(map(float, ci(np.log10(cross), np.log10(crossed)))),
                float(np.isfinite(crossed).mean()),
            )
        )
    return fit, out
