"""Seeds until decided, measured: the family-wise error under the null and the decisions per run
against a fixed design at --max-seeds, by simulation of the whole procedure (docs/statistics.md's
table).

    python scripts/sequential_design.py [TABLES]              # the table (default 4000)
    python scripts/sequential_design.py calibrate [TABLES]    # the levels' scale
    python scripts/sequential_design.py oracle [TABLES]       # the bound: futility known

The procedure simulated is `normbench sweep --until-decided`'s: a grid of 3 seeds per group,
then round after round a report at that look's level (normbench.report.stats.look_alpha), and
one more seed for every group whose verdict is open and can still be decided by --max-seeds 8
(conditional power at least normbench.sweeps.adaptive.FUTILITY), and for the reference of such
a group; it stops when no group is left to seed or at the last look, and its result is the
report at that look. The report is normbench's, vectorised over tables: the best on a paired
basis (stats.best_group), every pair's paired t test with Holm over all pairs (against the
best) or the k - 1 comparisons (against a reference), TOST within the margin with Holm over
the k - 1 (tests/sweeps/test_adaptive.py checks it against stats on a few tables). Every
group's seeds are a prefix 0, 1, ... (seeds are added in order), so every pair is paired on
its first min(n_i, n_j) seeds.

Groups at one seed share noise with correlation rho; every group's seed noise has sd 1.
Null: every group equal (any *worse* or *better*, at any look, is an error). Efficiency: one
group 1 sd below the others (in reference mode, below the reference, group 0); the count is
the comparisons decided (worse, better, equivalent) in the final report, per run, against the
fixed design with every group at 8 seeds and one report at alpha.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from scipy import special

from normbench.report import stats
from normbench.sweeps.adaptive import FUTILITY

FIRST, MAX_SEEDS, ALPHA = 3, 8, 0.05
OPEN, WORSE, BETTER, EQUIVALENT, REFERENCE = 0, 1, 2, 3, 4
WORDS = {"inconclusive": OPEN, "worse": WORSE, "better": BETTER, "equivalent": EQUIVALENT}


def holm_rows(p: np.ndarray) -> np.ndarray:
    """stats.holm along the last axis."""
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, -1)
    m = p.shape[-1]
    adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked), axis=-1)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, -1)
    return out


def paired(x: np.ndarray, n: np.ndarray, i: np.ndarray, j: np.ndarray):
    """Mean, sd and count of x_i - x_j over the first min(n_i, n_j) seeds: (T, P) each."""
    m = np.minimum(n[:, i], n[:, j])
    mask = np.arange(x.shape[-1]) < m[..., None]
    d = (x[:, i, :] - x[:, j, :]) * mask
    mean = d.sum(-1) / m
    sd = np.sqrt((((d - mean[..., None]) * mask) ** 2).sum(-1) / (m - 1))
    return mean, sd, m


def report(x: np.ndarray, n: np.ndarray, level: float, margin: float, best: bool):
    """Verdicts (T, k) of one look, the reference of each table, and for each group its
    comparison's (mean, sd, common seeds): stats.compare_with_best / compare_with_reference."""
    tables, k, _ = x.shape
    rows = np.arange(tables)[:, None]
    if best:
        i, j = np.triu_indices(k, 1)
        mean, sd, m = paired(x, n, i, j)
        p = 2 * special.stdtr(m - 1, -np.abs(mean / (sd / np.sqrt(m))))
        p_pair = np.zeros((tables, k, k))
        p_pair[:, i, j] = p_pair[:, j, i] = holm_rows(p)
        wins = np.zeros((tables, k))
        np.add.at(wins.T, i, ((mean > 0) + 0.5 * (mean == 0)).T)
        np.add.at(wins.T, j, ((mean < 0) + 0.5 * (mean == 0)).T)
        raw = (x * (np.arange(x.shape[-1]) < n[..., None])).sum(-1) / n
        rank = raw.argsort(1).argsort(1)
        ref = np.argmax(wins + 0.25 * rank / k, axis=1)
    else:
        ref = np.zeros(tables, dtype=int)
    others = (np.arange(k - 1)[None, :] + 1 + ref[:, None]) % k  # (T, k-1): every group but ref
    refs = np.broadcast_to(ref[:, None], others.shape)
    xi = x[rows, others]  # (T, k-1, N)
    xr = x[rows, refs]
    m = np.minimum(n[rows, others], n[rows, refs])
    mask = np.arange(x.shape[-1]) < m[..., None]
    d = (xi - xr) * mask
    mean = d.sum(-1) / m
    sd = np.sqrt((((d - mean[..., None]) * mask) ** 2).sum(-1) / (m - 1))
    se = sd / np.sqrt(m)
    if best:
        p_differs = p_pair[rows, others, refs]
    else:
        p_differs = holm_rows(2 * special.stdtr(m - 1, -np.abs(mean / se)))
    tost = np.maximum(
        special.stdtr(m - 1, -(mean + margin) / se), special.stdtr(m - 1, (mean - margin) / se)
    )
    p_same = holm_rows(tost)
    verdict = np.where(
        p_same < level,
        EQUIVALENT,
        np.where(p_differs < level, np.where(mean < 0, WORSE, BETTER), OPEN),
    )
    out = np.full((tables, k), REFERENCE)
    out[rows, others] = verdict
    stat = np.zeros((3, tables, k))
    stat[:, rows, others] = mean, sd, m
    return out, ref, stat


def conditional_power(stat, level, margin, tests, equivalence_tests):
    """stats.conditional_power, vectorised over (T, k)."""
    mean, sd, n = stat
    big = MAX_SEEDS
    tau = np.sqrt(np.maximum(big - n, 0) / big)
    c = special.stdtrit(big - 1, 1 - level / (2 * tests))
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = mean * math.sqrt(big) / sd
        half = margin - special.stdtrit(big - 1, 1 - level / equivalence_tests) * sd / math.sqrt(
            big
        )
        differs = special.ndtr((mu - c) / tau) + special.ndtr((-mu - c) / tau)
        spread = sd * np.sqrt(np.maximum(big - n, 0)) / big
        centre = mean * n / big
        same = special.ndtr((half - centre) / spread) - special.ndtr((-half - centre) / spread)
        same = np.where(half > 0, same, 0.0)
        final = ((np.abs(mu) > c) | (np.abs(mean) < half)).astype(float)
    return np.where(tau == 0, final, np.maximum(differs, same))


def wrong(verdict, ref, mu, margin):
    """Wrong verdicts per table: worse/better against the truth's sign, equivalent outside the
    margin."""
    delta = mu[None, :] - mu[ref][:, None]
    bad = (verdict == WORSE) & (delta >= 0) | (verdict == BETTER) & (delta <= 0)
    return (bad | (verdict == EQUIVALENT) & (np.abs(delta) >= margin)).any(1)


def until_decided(x, mu, margin, best, levels, gamma, oracle=None):
    """The procedure: per table, whether any look erred, comparisons decided at the end, runs.
    ``oracle`` (T, k): instead of conditional power, seed exactly the groups whose comparison
    the fixed design decides (a futility rule that knows the answer: the bound any rule of
    this design can reach)."""
    tables, k, _ = x.shape
    n = np.full((tables, k), FIRST)
    running = np.ones(tables, dtype=bool)
    erred = np.zeros(tables, dtype=bool)
    decided = np.zeros(tables)
    runs = np.zeros(tables)
    tests = k * (k - 1) // 2 if best else k - 1
    for look, level in enumerate(levels):
        idx = np.flatnonzero(running)
        verdict, ref, stat = report(x[idx], n[idx], level, margin, best)
        erred[idx] |= wrong(verdict, ref, mu, margin)
        shown = np.isin(verdict, (WORSE, BETTER)).sum(1, keepdims=True)
        same = (verdict == EQUIVALENT).sum(1, keepdims=True)
        power = conditional_power(
            stat, levels[-1], margin, np.maximum(1, tests - shown), np.maximum(1, k - 1 - same)
        )
        hopeful = power >= gamma if oracle is None else oracle[idx]
        grow = (verdict == OPEN) & hopeful & (n[idx] < MAX_SEEDS)
        grow[np.arange(len(idx)), ref] = grow.any(1) & (n[idx, ref] < MAX_SEEDS)
        stop = ~grow.any(1) | (look == len(levels) - 1)
        done = idx[stop]
        decided[done] = np.isin(verdict[stop], (WORSE, BETTER, EQUIVALENT)).sum(1)
        runs[done] = n[done].sum(1)
        running[done] = False
        n[idx[~stop]] += grow[~stop]
    return erred, decided, runs


def fixed(x, mu, margin, best):
    """The fixed design: every group at MAX_SEEDS, one report at ALPHA; per table whether it
    erred, the comparisons decided, and which groups' comparisons those are (T, k)."""
    n = np.full(x.shape[:2], MAX_SEEDS)
    verdict, ref, _ = report(x, n, ALPHA, margin, best)
    which = np.isin(verdict, (WORSE, BETTER, EQUIVALENT))
    return wrong(verdict, ref, mu, margin), which.sum(1), which


def draw(rng, tables, k, rho, gap):
    shared = rng.standard_normal((tables, 1, MAX_SEEDS))
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((tables, k, MAX_SEEDS))
    mu = np.zeros(k)
    mu[-1] = -gap
    return x + mu[None, :, None], mu


def design_levels(scale: float | None = None) -> list[float]:
    """The levels of the looks: normbench's (stats.look_alpha), or those of a trial scale of
    the same shape."""
    fractions = [(FIRST + i) / MAX_SEEDS for i in range(1 + MAX_SEEDS - FIRST)]
    if scale is None:
        return [stats.look_alpha(ALPHA, fractions, look) for look in range(1, len(fractions) + 1)]
    spent = [0.0] + [ALPHA * t**stats.SHAPE for t in fractions]
    return [min(ALPHA, scale * (b - a)) for a, b in zip(spent, spent[1:], strict=False)]


CELLS = [(k, rho, best) for best in (True, False) for k in (2, 5, 10) for rho in (0.0, 0.5, 0.9)]


def null_errors(tables, levels, gamma, margin, seed=1):
    out = {}
    for c, (k, rho, best) in enumerate(CELLS):
        rng = np.random.default_rng([seed, c])
        x, mu = draw(rng, tables, k, rho, 0.0)
        out[(k, rho, best)] = until_decided(x, mu, margin, best, levels, gamma)[0].mean()
    return out


def efficiency(tables, levels, gamma, margin, seed=2, oracle=False):
    out = {}
    for c, (k, rho, best) in enumerate(CELLS):
        rng = np.random.default_rng([seed, c, int(margin * 10)])
        x, mu = draw(rng, tables, k, rho, 1.0)
        f_erred, f_decided, which = fixed(x, mu, margin, best)
        known = which if oracle else None
        erred, decided, runs = until_decided(x, mu, margin, best, levels, gamma, known)
        out[(k, rho, best)] = (
            decided.mean(),
            runs.mean(),
            f_decided.mean(),
            k * MAX_SEEDS,
            erred.mean(),
            f_erred.mean(),
        )
    return out


def calibrate(tables: int) -> None:
    """The largest scale of the levels whose worst null cell (both margins) stays at alpha,
    by bisection on common random numbers (seed 3: not the table's)."""
    low, high = 1.0, 4.0
    for _ in range(8):
        mid = (low + high) / 2
        levels = design_levels(mid)
        worst = max(
            max(null_errors(tables, levels, FUTILITY, m, seed=3).values()) for m in (0.5, 1.0)
        )
        print(f"scale {mid:.3f}: levels {[round(v, 4) for v in levels]}, worst {worst:.4f}")
        low, high = (mid, high) if worst <= ALPHA else (low, mid)
    print(f"calibrated scale {low:.3f} (stats.CALIBRATED)")


def efficiency_table(tables: int, levels: list[float], margin: float, oracle=False) -> None:
    """The 1 sd gap's table at one margin: decided and runs against the fixed design."""
    result = efficiency(tables, levels, FUTILITY, margin, oracle=oracle)
    rule = "futility known (oracle)" if oracle else "futility by conditional power"
    print(f"\n1 sd gap, margin {margin} sd, {tables} tables a cell, {rule}\n")
    print(
        "| groups | correlation | against | until decided: decided, runs | fixed 8 seeds: "
        "decided, runs | per run, ratio | wrong: until decided, fixed |\n"
        "|---|---|---|---|---|---|---|"
    )
    ratios = []
    for cell, (dec, runs, f_dec, f_runs, err, f_err) in result.items():
        k, rho, best = cell
        ratio = (dec / runs) / (f_dec / f_runs) if f_dec else math.inf
        ratios.append(ratio)
        print(
            f"| {k} | {rho:g} | {'best' if best else 'reference'} | {dec:.3f}, {runs:.1f} | "
            f"{f_dec:.3f}, {f_runs} | {ratio:.2f} | {err:.3f}, {f_err:.3f} |"
        )
    print(f"\nratio: min {min(ratios):.2f}, median {np.median(ratios):.2f}")


def main() -> None:
    if sys.argv[1:2] == ["calibrate"]:
        calibrate(int(sys.argv[2]) if len(sys.argv) > 2 else 4000)
        return
    if sys.argv[1:2] == ["oracle"]:
        for margin in (0.5, 1.0):
            efficiency_table(
                int(sys.argv[2]) if len(sys.argv) > 2 else 2000,
                design_levels(),
                margin,
                oracle=True,
            )
        return
    tables = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    levels = design_levels()
    start = time.process_time()
    print(f"levels {[round(v, 4) for v in levels]}, futility below conditional power {FUTILITY}")
    print(f"\nnull, {tables} tables a cell (standard error at 0.05: ", end="")
    print(f"{math.sqrt(0.05 * 0.95 / tables):.4f})\n")
    print("| groups | correlation | against | FWER, margin 0.5 | margin 1 |\n|---|---|---|---|---|")
    errors = [null_errors(tables, levels, FUTILITY, margin) for margin in (0.5, 1.0)]
    for cell in CELLS:
        k, rho, best = cell
        against = "best" if best else "reference"
        print(f"| {k} | {rho:g} | {against} | {errors[0][cell]:.4f} | {errors[1][cell]:.4f} |")
    print(f"\nworst {max(max(e.values()) for e in errors):.4f}")
    for margin in (0.5, 1.0):
        efficiency_table(tables // 2, levels, margin)
    print(f"\nCPU {time.process_time() - start:.0f} s")


if __name__ == "__main__":
    main()
