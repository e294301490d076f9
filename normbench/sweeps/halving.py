"""Successive halving: the pruning rule of a tuned comparison, as pure functions.

Synchronous successive halving (Jamieson and Talwalkar 2016; Hyperband's inner loop) over a
small discrete space: every candidate trains a short budget, the best 1/eta go on to a budget
eta times longer, and so on, until the last rung trains at the full budget. Each rung's
runs are ordinary normbench runs at ``train.max_steps`` = that rung's budget (the schedule
compressed to it, as Hyperband's "resource = epochs" does), so every run is resumable and
content-addressed, and every promotion is a pure function of the run store: rerunning the
command recomputes the same promotions and trains only what is missing.

Why not Optuna's pruners: its SuccessiveHalvingPruner is asynchronous (ASHA) and decides
from intermediate values reported inside a trial's own training loop, in the order trials
happen to report them; normbench's launchers run whole runs in worker processes or SLURM
jobs, and a decision that depends on arrival order would not be reproduced by a resumed
sweep. The synchronous rule below decides each rung only once all its runs are in, which is
what makes a resume (after Ctrl-C or kill -9) choose exactly what an uninterrupted sweep
chooses; with a handful of candidates it is also what ASHA reduces to.

The last rung keeps at least two candidates (when there are two), so that the choice has a
runner-up at the full budget: the validation gap between them, and how often the same
candidate wins when the tuning seeds are resampled, say how firm the choice is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ETA = 3  # Hyperband's default reduction factor
RESAMPLES = 2000  # bootstrap resamples of the tuning seeds (firmness)


@dataclass(frozen=True)
class Rung:
    """One rung: how many candidates train, and for how many steps."""

    keep: int
    steps: int


def rungs(trials: int, max_steps: int, eta: int = ETA) -> list[Rung]:
    """The rungs for ``trials`` candidates: rung i trains ceil(trials / eta^i) of them for
    max_steps / eta^(K - i) steps, where K, the number of halvings, is the largest for which
    the last rung still has two candidates. One candidate, or two or three with eta 3: one
    rung at the full budget (the full grid)."""
    if trials < 1 or max_steps < 1 or eta < 2:
        raise ValueError(f"rungs({trials}, {max_steps}, {eta}): need trials, steps >= 1, eta >= 2")
    halvings = 0
    while math.ceil(trials / eta ** (halvings + 1)) >= 2:
        halvings += 1
    return [
        Rung(math.ceil(trials / eta**i), max(1, round(max_steps / eta ** (halvings - i))))
        for i in range(halvings + 1)
    ]


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
    metric's units, positive: the chosen is better), and the share of bootstrap resamples of
    the tuning seeds in which the chosen candidate still wins (None with one seed)."""

    runner_up: str | None
    gap: float | None
    win_rate: float | None


def firmness(
    per_seed: Mapping[str, Sequence[float | None]],
    chosen: str,
    higher_is_better: bool,
    resamples: int = RESAMPLES,
) -> Firmness:
    """The runner-up, the gap and the resampled win rate of ``chosen`` among the last rung's
    candidates. Resampling draws the tuning seeds with replacement, the same draw for every
    candidate (the seeds are paired: one seed, one data order and initialisation)."""
    others = [c for c in promote(per_seed, len(per_seed), higher_is_better) if c != chosen]
    if not others:
        return Firmness(None, None, None)
    runner_up = others[0]
    best = score(per_seed[chosen], higher_is_better)
    second = score(per_seed[runner_up], higher_is_better)
    gap = best - second if math.isfinite(best) and math.isfinite(second) else None
    matrix = np.stack([oriented(per_seed[c], higher_is_better) for c in per_seed])
    seeds = matrix.shape[1]
    if seeds < 2:
        return Firmness(runner_up, gap, None)
    draws = np.random.default_rng(0).integers(0, seeds, size=(resamples, seeds))
    with np.errstate(invalid="ignore"):
        means = matrix[:, draws].mean(axis=2)  # candidates x resamples
    index = list(per_seed).index(chosen)
    wins = np.argmax(np.nan_to_num(means, nan=-math.inf), axis=0) == index
    return Firmness(runner_up, gap, float(wins.mean()))
