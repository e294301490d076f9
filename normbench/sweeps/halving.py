"""Successive halving: the pruning rule of a tuned comparison, as pure functions.

Synchronous successive halving (Jamieson and Talwalkar 2016; Hyperband's inner loop) over a
small discrete space: every candidate trains a short budget, the best 1/eta go on to a budget
eta times longer, and so on, until the last rung trains at the full budget. Each rung's
runs are ordinary normbench runs at ``train.max_steps`` = that rung's budget, with the whole
schedule compressed to it (the cosine decay follows ``max_steps``; the warm-up is scaled by
the caller, normbench.sweeps.tuned), as Hyperband's "resource = epochs" does, so every run is
resumable and content-addressed, and every promotion is a pure function of the run store:
rerunning the command recomputes the same promotions and trains only what is missing.

**When to halve.** Halving saves steps at the price of ranking candidates on short runs, whose
ranking can differ from the full budget's (a third of the steps can sit on the task's
plateau). It is used only where it saves at least half of the full grid's steps
(``MAX_SHARE``): with eta 3, ten candidates or more; below that every candidate trains the
full budget (the full grid), which is what halving would be compared against anyway.

Why not Optuna's pruners: its SuccessiveHalvingPruner is asynchronous (ASHA) and decides
from intermediate values reported inside a trial's own training loop, in the order trials
happen to report them; normbench's launchers run whole runs in worker processes or SLURM
jobs, and a decision that depends on arrival order would not be reproduced by a resumed
sweep. The synchronous rule below decides each rung only once all its runs are in, which is
what makes a resume (after Ctrl-C or kill -9) choose exactly what an uninterrupted sweep
chooses; with a handful of candidates it is also what ASHA reduces to.

The last rung keeps at least two candidates (when there are two), so that the choice has a
runner-up at the full budget; how firm the choice is, is a bound on its regret among the
candidates trained at the full budget (``regret_bound``, on the typical run: three tuning
seeds or more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ETA = 3  # Hyperband's default reduction factor
MAX_SHARE = 0.5  # halve only where the rungs train at most this share of the full grid's steps
CONFIDENCE = 0.90  # of the regret bound (one-sided, simultaneous over the runner-ups)


@dataclass(frozen=True)
class Rung:
    """One rung: how many candidates train, and for how many steps."""

    keep: int
    steps: int


def rungs(trials: int, max_steps: int, eta: int = ETA) -> list[Rung]:
    """The rungs for ``trials`` candidates: rung i trains ceil(trials / eta^i) of them for
    max_steps / eta^(K - i) steps, where K, the number of halvings, is the largest for which
    the last rung still has two candidates. One rung at the full budget (the full grid) when
    halving would train more than ``MAX_SHARE`` of the full grid's steps: one to three
    candidates with eta 3 (nothing to halve), four to nine (it would save a third at most)."""
    if trials < 1 or max_steps < 1 or eta < 2:
        raise ValueError(f"rungs({trials}, {max_steps}, {eta}): need trials, steps >= 1, eta >= 2")
    halvings = 0
    while math.ceil(trials / eta ** (halvings + 1)) >= 2:
        halvings += 1
    keep = [math.ceil(trials / eta**i) for i in range(halvings + 1)]
    share = sum(k / eta ** (halvings - i) for i, k in enumerate(keep)) / trials
    if share > MAX_SHARE:
        return [Rung(trials, max_steps)]
    return [Rung(k, max(1, round(max_steps / eta ** (halvings - i)))) for i, k in enumerate(keep)]


def scaled_warmup(warmup: int, steps: int, max_steps: int) -> int:
    """The warm-up of a rung of ``steps`` whose full budget ``max_steps`` warms up over
    ``warmup`` steps: the same share of the run (at least one step when there is any), so
    that a short rung is the full run compressed, not mostly warm-up."""
    if warmup <= 0 or steps >= max_steps:
        return warmup
    return max(1, round(warmup * steps / max_steps))


def steps_spent(schedule: Sequence[Rung], seeds: int) -> int:
    """Training steps of a group's tuning: every rung's candidates, at every tuning seed."""
    return sum(rung.keep * rung.steps for rung in schedule) * seeds


def oriented(values: Sequence[float | None], higher_is_better: bool) -> np.ndarray:
    """Per-seed values turned so that higher is better; a run without a finite value (it
    diverged, failed or is missing) counts as the worst possible."""
    out = np.array([math.nan if v is None else float(v) for v in values], dtype=float)
    out = out if higher_is_better else -out
    return np.where(np.isfinite(out), out, -math.inf)


def score(values: Sequence[float | None], higher_is_better: bool) -> float:
    """A candidate's score at a rung: the mean oriented value over the tuning seeds."""
    turned = oriented(values, higher_is_better)
    return float(turned.mean()) if len(turned) else -math.inf


def promote(
    per_seed: Mapping[str, Sequence[float | None]], keep: int, higher_is_better: bool
) -> list[str]:
    """The ``keep`` best candidates by score, best first; ties go to the candidate listed
    first (the order of the space), so that the choice is reproducible."""
    order = list(per_seed)
    ranked = sorted(order, key=lambda c: (-score(per_seed[c], higher_is_better), order.index(c)))
    return ranked[:keep]


@dataclass(frozen=True)
class Firmness:
    """How firm a choice is: the runner-up at the last rung, the validation gap to it (in the
    metric's units, positive: the chosen is better), and ``regret``, an upper confidence
    bound on how much worse the chosen candidate's typical run is than the best of the
    others trained at the full budget (``regret_bound``; None below ``MIN_REGRET_SEEDS``)."""

    runner_up: str | None
    gap: float | None
    regret: float | None


MIN_REGRET_SEEDS = 3  # below: one degree of freedom, bounds as large as the effects decided


def regret_bound(
    per_seed: Mapping[str, Sequence[float | None]],
    chosen: str,
    higher_is_better: bool,
    confidence: float = CONFIDENCE,
    min_seeds: int = MIN_REGRET_SEEDS,
) -> float | None:
    """A one-sided upper bound on the chosen candidate's regret among the candidates of the
    last rung, in the metric's units, at ``confidence`` simultaneously over them (Hsu's
    multiple comparisons with the best, 1996, ch. 4, with a Bonferroni quantile in place of
    Dunnett's): for each other candidate c, the paired differences d_s = m_s(c) - m_s(chosen)
    over the tuning seeds s where both runs have a value (oriented, higher is better), and
    the paired t upper limit

        U_c = mean(d) + t_{1 - (1 - confidence) / (k - 1), m - 1} sd(d) / sqrt(m)

    over those m seeds; the bound is max(0, max_c U_c). A bound of 0.002 says that no other
    candidate trained at the full budget is better than the chosen by more than 0.002, at
    that confidence; 0 says none was found better, not that none is.

    What it bounds is the *typical run*: a rate near divergence spikes or diverges in some
    of its runs, and one unseen spike on few seeds makes its mean unknowable, so no bound on
    means can hold there. A candidate that diverged on a minority of the seeds is compared on
    the others (a spike, not its typical run; before, it was skipped as "cannot be better",
    and the bound missed a best rate that diverged once); one that diverged on half of them
    or more is not better in its typical run. A finite spike widens sd(d), and so the bound.
    Coverage is simulated in tests/sweeps/test_tuned.py (normal noise, spikes, divergences;
    2, 3 and 5 seeds). Pruned candidates are not covered: they never reached the full budget.
    None below ``min_seeds`` (two seeds give one degree of freedom and a Bonferroni t of
    about 9.5: bounds as large as the effects decided) or when the chosen has a run without
    a value (every candidate diverged)."""
    from scipy import stats

    others = [c for c in per_seed if c != chosen]
    if not others:
        return 0.0
    base = oriented(per_seed[chosen], higher_is_better)
    n = len(base)
    if n < max(2, min_seeds) or not np.isfinite(base).all():
        return None
    tail = (1 - confidence) / len(others)
    worst = 0.0
    for other in others:
        values = oriented(per_seed[other], higher_is_better)
        finite = np.isfinite(values)
        if 2 * finite.sum() <= n:
            continue  # diverged on half its seeds or more: its typical run is no better
        d = values[finite] - base[finite]
        m = len(d)
        quantile = float(stats.t.ppf(1 - tail, m - 1))
        worst = max(worst, float(d.mean() + quantile * d.std(ddof=1) / math.sqrt(m)))
    return worst


def firmness(
    per_seed: Mapping[str, Sequence[float | None]], chosen: str, higher_is_better: bool
) -> Firmness:
    """The runner-up, the gap and the regret bound of ``chosen`` among the last rung's
    candidates (the seeds are paired: one seed, one data order and initialisation)."""
    others = [c for c in promote(per_seed, len(per_seed), higher_is_better) if c != chosen]
    if not others:
        return Firmness(None, None, None)
    runner_up = others[0]
    best = score(per_seed[chosen], higher_is_better)
    second = score(per_seed[runner_up], higher_is_better)
    gap = best - second if math.isfinite(best) and math.isfinite(second) else None
    return Firmness(runner_up, gap, regret_bound(per_seed, chosen, higher_is_better))
