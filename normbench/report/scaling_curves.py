"""Parametric curves of loss against compute for a scaling ladder, used only beyond the runs
(normbench.report.scaling reads the multipliers within the ladder off the runs themselves).

Four forms, each fitted to every group's rung means at once (t = ln(C / C0), C0 the
ladder's smallest compute):

- ``per group``: L = E_g + A_g exp(-alpha_g t), a floor of each group's own;
- ``shared``: the same with one floor E for the ladder's groups;
- ``fixed at 0``: L = A_g exp(-alpha_g t), a pure power law (a line on log axes);
- ``curved``: ln L = a_g + b_g t + c_g t^2 with c_g <= 0, a power law whose log-log slope
  steepens along the ladder (a line on log axes bent down by c_g), which no form with a
  floor >= 0 can do.

The power-law forms are fitted by variable projection (Golub and Pereyra 1973): for a fixed
exponent the floor and scale are a linear least-squares fit, so only the exponent is
searched, by scipy.optimize.least_squares from the best point of a grid; every curve of a
bootstrap is fitted in one least_squares call (a block-diagonal Jacobian). The others are
linear least squares.

Each form is tested for lack of fit against the seed variance of the rung means, the
pure-error F test of a regression with replicates (Draper and Smith 1998, section 2.1):
F = (SS_lof / df_lof) / (SS_pe / df_pe), SS_lof = sum over rungs of n_r (mean_r - fit_r)^2,
SS_pe the seeds' squared deviations from their rung means, df_lof = rungs x groups - the
form's parameters, df_pe = sum of (n_r - 1); p = P(F(df_lof, df_pe) >= F). A form whose p is
at least alpha, whose parameters lie inside their bounds and that leaves a degree of freedom
is eligible; the eligible form of least AICc (Hurvich and Tsai 1989; on the rung means'
residual sum of squares) is chosen; with none eligible, nothing beyond the runs is estimable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from scipy import optimize, sparse, stats

EXPONENT_RANGE = (0.01, 3.0)  # alpha's bounds (C is divided by the ladder's smallest compute)
GRID = np.geomspace(*EXPONENT_RANGE, 64)  # least_squares starts from the best of these
# least_squares' budget: a ladder that follows a power law converges in 4 to 6 evaluations;
# one that does not stops here, and the fit's bounds check (``_valid``) then judges it
MAX_EVALUATIONS = 50
PER_GROUP, SHARED, ZERO, CURVED = "per group", "shared", "fixed at 0", "curved"
NONE = "none fits"
FORMS = (PER_GROUP, SHARED, ZERO, CURVED)


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

    def slope_at(self, compute: float) -> np.ndarray:
        """-d ln L / d ln C at ``compute``: the local log-log exponent."""
        excess = self.scale * (compute / self.c0) ** -self.exponent
        return self.exponent * excess / (self.floor + excess)


@dataclass
class Curved:
    """Fitted curves ln L(C) = intercept + slope t + curvature t^2, t = ln(C / c0); shapes as
    ``Curves``'. Its floor is 0."""

    intercept: np.ndarray
    slope: np.ndarray
    curvature: np.ndarray
    c0: float

    @property
    def floor(self) -> np.ndarray:
        return np.zeros_like(self.slope)

    def loss(self, compute: np.ndarray) -> np.ndarray:
        t = np.log(np.asarray(compute, dtype=float) / self.c0)
        a, b, c = (p[..., None] for p in (self.intercept, self.slope, self.curvature))
        with np.errstate(over="ignore"):
            return np.exp(a + b * t + c * t * t)

    def log_compute_for(self, loss: np.ndarray) -> np.ndarray:
        """ln of the compute at which each curve reaches ``loss`` on its falling branch (where
        slope + 2 curvature t < 0): the root t = (-b - sqrt(b^2 - 4 c (a - ln L))) / 2c, or
        (ln L - a) / b when c = 0; +inf where the curve turns up before reaching it."""
        a, b, c = (p[..., None] for p in (self.intercept, self.slope, self.curvature))
        target = np.log(np.maximum(loss, 1e-300)) - a
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            disc = b * b + 4 * c * target
            root = np.where(c != 0, (-b - np.sqrt(disc)) / (2 * c), target / b)
            root = np.where((c > 0) & (disc < 0), np.inf, root)
        return math.log(self.c0) + root

    def slope_at(self, compute: float) -> np.ndarray:
        """-d ln L / d ln C at ``compute``."""
        return -(self.slope + 2 * self.curvature * math.log(compute / self.c0))


def one(curves: Curves | Curved, group: int) -> Curves | Curved:
    """One group's curve (or its refits) of ``curves``."""
    parts = [getattr(curves, f.name)[..., group] for f in fields(curves) if f.name != "c0"]
    return type(curves)(*parts, curves.c0)


def split(curves: Curves | Curved) -> tuple[Curves | Curved, Curves | Curved]:
    """The first curves of a stacked fit (the point fit) and the rest (the refits)."""
    parts = [getattr(curves, f.name) for f in fields(curves) if f.name != "c0"]
    kind = type(curves)
    return kind(*(p[0] for p in parts), curves.c0), kind(*(p[1:] for p in parts), curves.c0)


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


def fit_shared(compute: np.ndarray, y: np.ndarray, c0: float) -> Curves:
    """Curves whose groups share one floor: ``y`` (K, G, R), K replicates of G groups,
    searched from each curve's own best grid exponent."""
    k, g, r = y.shape
    log_c = np.broadcast_to(np.log(compute / c0), y.shape)
    start = _start(log_c.reshape(-1, r), y.reshape(-1, r)).reshape(k, g)

    def residuals(a: np.ndarray) -> np.ndarray:
        floor, scale, x = _shared_fit(a.reshape(k, g), log_c, y)
        fitted = floor[:, None, None] + scale[..., None] * x
        return np.nan_to_num(y - fitted, nan=1e6).ravel()

    exponent = _solve(residuals, start.ravel(), _block_sparsity(k, g * r, g)).reshape(k, g)
    floor, scale, _ = _shared_fit(exponent, log_c, y)
    return Curves(np.broadcast_to(floor[:, None], (k, g)).copy(), scale, exponent, c0)


def fit_zero(compute: np.ndarray, y: np.ndarray, c0: float) -> Curves:
    """Pure power laws L = A (C / C0)^(-alpha): the least-squares line of ln L on ln C."""
    log_c = np.broadcast_to(np.log(compute / c0), y.shape)
    intercept, slope = _linear(log_c, np.log(np.maximum(y, 1e-12)))
    return Curves(np.zeros_like(slope), np.exp(intercept), -slope, c0)


def fit_curved(compute: np.ndarray, y: np.ndarray, c0: float) -> Curved:
    """ln L = a + b t + c t^2 per curve by least squares (``compute`` (G, R), ``y`` (K, G, R)):
    one pseudo-inverse per group serves every replicate."""
    t = np.log(compute / c0)
    design = np.stack([np.ones_like(t), t, t * t], axis=-1)  # (G, R, 3)
    coefficients = np.einsum("gpr,kgr->kgp", np.linalg.pinv(design), np.log(np.maximum(y, 1e-12)))
    return Curved(*(coefficients[..., p] for p in range(3)), c0)


PARAMETERS = {PER_GROUP: 3, ZERO: 2, CURVED: 3}  # per group; SHARED: 2 per group and 1


def parameters(form: str, groups: int) -> int:
    """The form's parameter count over a ladder of ``groups`` groups."""
    return 2 * groups + 1 if form == SHARED else PARAMETERS[form] * groups


def fit(form: str, compute: np.ndarray, y: np.ndarray) -> Curves | Curved:
    """``form`` fitted to ``y`` (K, G, R): K replicates of the ladder's rung means."""
    c0 = float(compute.min())
    if form == PER_GROUP:
        return fit_free(compute, y, c0)
    if form == SHARED:
        return fit_shared(compute, y, c0)
    if form == ZERO:
        return fit_zero(compute, y, c0)
    return fit_curved(compute, y, c0)


def valid(curves: Curves | Curved) -> np.ndarray:
    """Per curve, whether it is a falling curve inside the model's bounds: for the power-law
    forms a floor >= 0, a scale > 0 and an exponent off the bounds of EXPONENT_RANGE; for the
    curved form a loss that falls at the ladder's smallest compute and a log-log slope that
    steepens (curvature <= 0): a slope that flattens is what a floor models, and a flattening
    parabola in log-log turns back up beyond the runs."""
    if isinstance(curves, Curved):
        return (curves.slope < 0) & (curves.curvature <= 0)
    low, high = EXPONENT_RANGE
    inside = (curves.exponent > low * 1.001) & (curves.exponent < high * 0.999)
    return (curves.floor >= 0) & (curves.scale > 0) & inside


# ------------------------------------------------------------------------ lack of fit
@dataclass
class LackOfFit:
    """A form's pure-error F test over the ladder and per group (the module docstring)."""

    f: float
    df_lof: float
    df_pe: float
    p: float  # NaN: untestable (no degree of freedom left, or one seed a rung)
    group_p: np.ndarray  # (G,) each group's own test, df_lof the ladder's / G
    excess_variance: np.ndarray  # (G,) rung-level variance beyond the seeds', >= 0


def lack_of_fit(
    residuals: np.ndarray, counts: np.ndarray, pure_error: np.ndarray, form_parameters: int
) -> LackOfFit:
    """The test of a fit whose rung-mean residuals are ``residuals`` (G, R), with ``counts``
    (G, R) seeds per rung and ``pure_error`` (G, R) each rung's sum of squared seed
    deviations. The excess variance per group is the method-of-moments estimate of a
    rung-level random effect's variance: max(0, SS_lof_g / df_g - mean(s_r^2 / n_r))."""
    groups, rungs = residuals.shape
    ss_lof = (counts * residuals**2).sum(-1)
    df_pe_g = (counts - 1).sum(-1).astype(float)
    df_lof = groups * rungs - form_parameters
    df_pe = float(df_pe_g.sum())
    testable = df_lof >= 1 and df_pe >= 1
    with np.errstate(divide="ignore", invalid="ignore"):
        ms_pe = pure_error.sum() / df_pe
        f = (ss_lof.sum() / df_lof) / ms_pe if testable else math.nan
        p = float(stats.f.sf(f, df_lof, df_pe)) if testable else math.nan
        per = df_lof / groups
        ms_pe_g = pure_error.sum(-1) / df_pe_g
        group_p = np.where(
            (df_pe_g >= 1) & testable, stats.f.sf((ss_lof / per) / ms_pe_g, per, df_pe_g), np.nan
        )
        seed_var = (pure_error / np.maximum(counts - 1, 1) / counts).mean(-1)
        mean_sq = (residuals**2).sum(-1) / max(per, 1e-9)
        excess = np.maximum(0.0, np.nan_to_num(mean_sq - seed_var))
    return LackOfFit(float(f), float(df_lof), df_pe, p, group_p, excess)


def aicc(residuals: np.ndarray, k: int) -> float:
    """AICc of a least-squares fit with ``k`` parameters (Hurvich and Tsai 1989):
    n ln(RSS / n) + 2k + 2k (k + 1) / (n - k - 1); inf when n - k - 1 <= 0."""
    n = residuals.size
    if n - k - 1 <= 0:
        return math.inf
    rss = max(float((residuals**2).sum()), 1e-300)
    return n * math.log(rss / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


@dataclass
class Choice:
    """The forms tried on a ladder and the one chosen (None: none fits)."""

    form: str | None
    curves: Curves | Curved | None  # the chosen form's point fit, (G,)
    tests: dict[str, LackOfFit]
    scores: dict[str, float]  # AICc per form tried
    why: str  # the choice, in words


def choose(
    compute: np.ndarray,
    means: np.ndarray,
    counts: np.ndarray,
    pure_error: np.ndarray,
    alpha: float,
) -> Choice:
    """Every form fitted to the rung means ``means`` (G, R); the eligible form of least AICc
    (the module docstring). A ladder of one group skips the shared form (it is the per-group
    one)."""
    groups = means.shape[0]
    tests, scores, curves, refused = {}, {}, {}, []
    for form in FORMS:
        if form == SHARED and groups == 1:
            continue
        k = parameters(form, groups)
        fitted = fit(form, compute, means[None])
        point = split(fitted)[0]
        residuals = means - point.loss(compute)
        tests[form] = lack_of_fit(residuals, counts, pure_error, k)
        scores[form] = aicc(residuals, k)
        curves[form] = point
        test = tests[form]
        if not valid(point).all():
            refused.append(f"{form}: out of its bounds")
        elif math.isnan(test.p):
            refused.append(f"{form}: untestable (no degree of freedom or one seed a rung)")
        elif test.p < alpha:
            refused.append(f"{form}: lack of fit p = {test.p:.2g}")
        elif not math.isfinite(scores[form]):
            refused.append(f"{form}: too few rungs for AICc")
    eligible = [f for f in tests if not any(r.startswith(f + ":") for r in refused)]
    if not eligible:
        why = "no form fits (" + "; ".join(refused) + f"; alpha {alpha:g})"
        return Choice(None, None, tests, scores, why)
    best = min(eligible, key=scores.__getitem__)
    why = f"{best} chosen by least AICc among forms passing lack of fit at alpha {alpha:g}"
    why += f" (lack of fit p = {tests[best].p:.2g})"
    if refused:
        why += "; refused: " + "; ".join(refused)
    return Choice(best, curves[best], tests, scores, why)
