"""Statistics across tasks (workloads): pure functions of per-task, per-seed scores.

One answer across workloads, as the best references aggregate (rliable: Agarwal et al. 2021,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice"; AlgoPerf: Dahl et al.
2023, "Benchmarking Neural Network Training Algorithms"):

- ``probability_of_improvement``: per task the Mann-Whitney U / (n m), ties counting 1/2, the
  chance that a run of one group beats a run of the other, averaged over tasks;
- ``interquartile_mean`` of normalized scores (the mean of the middle 50% of all runs' scores
  pooled over tasks: robust to one task's outliers, less noisy than the median);
- ``stratified_bootstrap``: a percentile interval that resamples each group's runs within each
  task (the tasks themselves are fixed: the interval says nothing about other tasks);
- ``performance_profile``: Dolan and More's (2002) fraction of tasks a group solves within tau
  times the best group's cost, and the area under it up to tau = 4, as AlgoPerf scores it.

Scores are "higher is better" (callers negate bits per byte). numpy and scipy only.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np

Task = tuple[np.ndarray, np.ndarray]  # (a group's scores, the reference's scores) in one task
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0  # a fixed resampling: the same runs give the same interval
TAU_MAX = 4.0


def improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + P(X = Y) / 2 for one run of each, estimated by the Mann-Whitney U statistic of
    x against y divided by len(x) * len(y) (as scipy.stats.mannwhitneyu(x, y).statistic /
    (n * m), computed directly: every pair compared)."""
    greater = (x[:, None] > y[None, :]).sum()
    ties = (x[:, None] == y[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(x) * len(y)))


def probability_of_improvement(tasks: Sequence[Task]) -> float:
    """rliable's P(X > Y): the mean over tasks of each task's ``improvement``."""
    return float(np.mean([improvement(x, y) for x, y in tasks]))


def interquartile_mean(scores: np.ndarray) -> float:
    """The mean of the middle 50% of the scores, as scipy.stats.trim_mean(scores, 0.25) and
    rliable compute it: sorted, int(0.25 n) trimmed from each end (computed here directly:
    scipy's wrapper costs a millisecond a call, and a bootstrap makes thousands)."""
    ordered = np.sort(np.asarray(scores, dtype=float))
    cut = int(0.25 * len(ordered))
    return float(ordered[cut : len(ordered) - cut].mean())


def normalized(scores: np.ndarray, chance: float, best: float) -> np.ndarray:
    """Scores on a task's own scale: 0 at chance, 1 at the best group's mean score."""
    if not math.isfinite(best - chance) or best == chance:
        return np.full(len(scores), math.nan)
    return (scores - chance) / (best - chance)


def stratified_bootstrap(
    strata: Sequence[Sequence[np.ndarray]],
    statistic: Callable[[list[list[np.ndarray]]], float],
    confidence: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """A percentile interval of ``statistic`` by the stratified bootstrap (rliable's): each
    resample draws every array of every task (a group's runs there) with replacement from
    itself, the tasks and the groups held fixed, and computes ``statistic`` of the resampled
    tasks. (low, high) are the (1 -+ confidence) / 2 quantiles of the resamples."""
    rng = np.random.default_rng(seed)
    values = np.empty(samples)
    for b in range(samples):
        resampled = [[a[rng.integers(0, len(a), len(a))] for a in task] for task in strata]
        values[b] = statistic(resampled)
    if np.isnan(values).all():  # no resample has the statistic (say, no score at all)
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    low, high = np.nanquantile(values, [tail, 1 - tail])
    return float(low), float(high)


def improvement_bca(
    tasks: Sequence[Task], confidence: float, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """A BCa interval (Efron 1987, bias-corrected and accelerated; scipy.stats.bootstrap with
    method='BCa') of ``probability_of_improvement``, stratified as ``stratified_bootstrap``:
    each task's group and reference scores are separate samples, each resampled from itself.
    BCa corrects the percentile interval's bias and skew, which at 5 seeds a task left the
    percentile interval's coverage below its level (tests/report/test_aggregate_bca.py
    measures both). Every resample equal (complete separation in every task): the observed
    value at both ends, as any bootstrap interval would be."""
    from scipy import stats

    data = [np.asarray(a, dtype=float) for task in tasks for a in task]

    def statistic(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        values = []
        for x, y in zip(samples[::2], samples[1::2], strict=True):
            x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
            wins = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
            ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
            values.append(wins + 0.5 * ties)
        return np.mean(values, axis=0)

    observed = float(statistic(*data))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate resampling warns; its NaN is handled
        found = stats.bootstrap(
            data,
            statistic,
            n_resamples=samples,
            confidence_level=confidence,
            method="BCa",
            paired=False,
            vectorized=True,
            rng=np.random.default_rng(seed),
        ).confidence_interval
    low, high = float(found.low), float(found.high)
    if math.isnan(low) or math.isnan(high):
        return observed, observed
    return low, high


def profile_ratios(costs: Sequence[Sequence[float]]) -> np.ndarray:
    """Per task (rows) and group (columns) the cost over the task's best cost: r = t / min t.
    A group that never reached the target costs infinity; a task no group solved gives every
    group an infinite ratio (it counts against all of them)."""
    table = np.asarray(costs, dtype=float)
    best = np.min(table, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isfinite(best), table / best, math.inf)
    return np.where(np.isnan(ratios), math.inf, ratios)


def performance_profile(ratios: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rho(tau) per group (columns): the fraction of tasks whose ratio is at most tau."""
    return (ratios[None, :, :] <= taus[:, None, None]).mean(axis=1)


def profile_score(ratios: np.ndarray, tau_max: float = TAU_MAX) -> np.ndarray:
    """The area under each group's profile from tau = 1 to tau_max, over tau_max - 1: 1 for a
    group that is the fastest on every task, 0 for one that never gets within tau_max of the
    fastest (AlgoPerf's benchmark score, with its integration bound). Exact: the profile is a
    step function, so the area is the sum over tasks of (tau_max - max(r, 1)) for r <= tau_max,
    over the number of tasks."""
    clipped = np.clip(ratios, 1.0, None)
    inside = np.where(clipped <= tau_max, tau_max - clipped, 0.0)
    return inside.sum(axis=0) / (len(ratios) * (tau_max - 1))
