"""Seeds until decided, measured: the family-wise error under the null, with the futility rule
obeyed and ignored, the batch contrast's false "sensitive", and the decisions per run against
fixed designs of 4, 8, 12 and 16 seeds, by simulation of the whole procedure (docs/statistics.md's
tables).

    python scripts/sequential_design.py [TABLES] [--scale L]     # the tables (default 4000)
    python scripts/sequential_design.py calibrate [TABLES]       # the levels' scale
    python scripts/sequential_design.py [TABLES] --max-seeds 16  # a larger cap: its error, yield

``--scale L``: the levels of a trial scale instead of normbench's (``--scale 1.84``: the scale
calibrated for binding futility, normbench 0.4's first design).

The procedure simulated is `normbench sweep --until-decided`'s: a grid of 3 seeds per group,
then round after round a report at that look's level (normbench.report.sequential.look_alpha), and
one more seed for every group whose verdict is open and can still be decided by --max-seeds 8
(conditional power at least normbench.sweeps.adaptive.FUTILITY), and for the reference of such
a group; it stops when no group is left to seed or at the last look, and its result is the
report at that look. The report is normbench's, vectorised over tables: the best on a paired
basis (stats.best_group), every pair's paired t test with Holm over all pairs (against the
best) or the k - 1 comparisons (against a reference), TOST within the margin with Holm over
the k - 1 (tests/sweeps/test_adaptive.py checks it against stats on a few tables). Every
group's seeds are a prefix 0, 1, ... (seeds are added in order), so every pair is paired on
its first min(n_i, n_j) seeds.

Futility *ignored* (``gamma=None``): every open group keeps drawing seeds to the cap (a user
who adds seeds, a resumed sweep); the levels are calibrated so that the error stays at alpha
this way too (non-binding futility), and with futility obeyed, as the sweep runs it.

Groups at one seed share noise with correlation rho; every group's seed noise has sd 1.
Null: every group equal (any *worse* or *better*, at any look, is an error). Efficiency: one
group 1 sd below the others (in reference mode, below the reference, group 0); the count is
the comparisons decided (worse, better, equivalent) in the final report, per run, against the
fixed design with every group at 4, 8, 12 or 16 seeds and one report at alpha.

The batch contrast (normbench.report.batch, stats.contrast): per row, a group at the reference
batch and at the smallest, paired by seed; *sensitive* when the one-sided t test that the
smallest is lower is below the look's level after Holm over the rows, *insensitive* by TOST
within the margin (Holm over the rows). Rows are never stopped for futility: an open row
draws a seed on both sides until the cap (``seeding="open"``); a row's groups can also draw
seeds for the convergence table's comparisons, so ``seeding="cap"`` draws for every row at
every look. Either way every look is taken (the sweep goes on while any comparison is open).
Null: no row differs; any *sensitive* at any look is an error.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
from scipy import special

from normbench.report import sequential
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
    """sequential.conditional_power, vectorised over (T, k)."""
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


def until_decided(x, mu, margin, best, levels, gamma):
    """The procedure: per table, whether any look erred, comparisons decided at the end, runs.
    ``gamma`` None: futility ignored, every open group draws seeds to the cap."""
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
        hopeful = power >= gamma if gamma is not None else np.ones(power.shape, dtype=bool)
        grow = (verdict == OPEN) & hopeful & (n[idx] < MAX_SEEDS)
        grow[np.arange(len(idx)), ref] = grow.any(1) & (n[idx, ref] < MAX_SEEDS)
        stop = ~grow.any(1) | (look == len(levels) - 1)
        done = idx[stop]
        decided[done] = np.isin(verdict[stop], (WORSE, BETTER, EQUIVALENT)).sum(1)
        runs[done] = n[done].sum(1)
        running[done] = False
        n[idx[~stop]] += grow[~stop]
    return erred, decided, runs


def fixed(x, mu, margin, best, seeds=None):
    """The fixed design: every group at ``seeds``, one report at ALPHA; per table whether it
    erred and the comparisons decided (at the cap, MAX_SEEDS, unless SEEDS)."""
    seeds = MAX_SEEDS if seeds is None else seeds
    n = np.full(x.shape[:2], seeds)
    verdict, ref, _ = report(x[..., :seeds], n, ALPHA, margin, best)
    return wrong(verdict, ref, mu, margin), np.isin(verdict, (WORSE, BETTER, EQUIVALENT)).sum(1)


def draw(rng, tables, k, rho, gap, seeds=None):
    """(tables, k, seeds) results and the groups' true means; the procedure reads a prefix
    (SEEDS: the cap, MAX_SEEDS, unless given)."""
    seeds = MAX_SEEDS if seeds is None else seeds
    shared = rng.standard_normal((tables, 1, seeds))
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((tables, k, seeds))
    mu = np.zeros(k)
    mu[-1] = -gap
    return x + mu[None, :, None], mu


def contrast(d: np.ndarray, n: np.ndarray, level: float, margin: float):
    """stats.contrast vectorised over tables: ``d`` (T, R, N) the per-seed differences
    smallest - reference of R rows, ``n`` (T, R) the seeds each row has. Verdicts (T, R):
    WORSE (*sensitive*), EQUIVALENT (*insensitive*) or OPEN."""
    mask = np.arange(d.shape[-1]) < n[..., None]
    mean = (d * mask).sum(-1) / n
    sd = np.sqrt((((d - mean[..., None]) * mask) ** 2).sum(-1) / (n - 1))
    se = sd / np.sqrt(n)
    lower = holm_rows(special.stdtr(n - 1, mean / se))
    tost = np.maximum(
        special.stdtr(n - 1, -(mean + margin) / se), special.stdtr(n - 1, (mean - margin) / se)
    )
    same = holm_rows(tost)
    return np.where(same < level, EQUIVALENT, np.where((lower < level) & (mean < 0), WORSE, OPEN))


def batch_null(rng, tables, rows, rho, margin, levels, seeding):
    """The batch contrast under the null: per table whether any look said *sensitive*. Every
    row's two groups have sd 1 and correlation rho at one seed."""
    shared = rng.standard_normal((tables, rows, 1, MAX_SEEDS))
    own = rng.standard_normal((tables, rows, 2, MAX_SEEDS))
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * own
    d = x[:, :, 1] - x[:, :, 0]
    n = np.full((tables, rows), FIRST)
    erred = np.zeros(tables, dtype=bool)
    for level in levels:
        verdict = contrast(d, n, level, margin)
        erred |= (verdict == WORSE).any(1)
        grow = (verdict == OPEN) if seeding == "open" else np.ones(n.shape, dtype=bool)
        n = np.minimum(MAX_SEEDS, n + grow)
    return erred


def design_levels(scale: float | None = None) -> list[float]:
    """The levels of the looks: normbench's (sequential.look_alpha), or those of a trial scale of
    the same shape."""
    fractions = [(FIRST + i) / MAX_SEEDS for i in range(1 + MAX_SEEDS - FIRST)]
    if scale is None:
        return [
            sequential.look_alpha(ALPHA, fractions, look) for look in range(1, len(fractions) + 1)
        ]
    spent = [0.0] + [ALPHA * t**sequential.SHAPE for t in fractions]
    return [min(ALPHA, scale * (b - a)) for a, b in zip(spent, spent[1:], strict=False)]


CELLS = [(k, rho, best) for best in (True, False) for k in (2, 5, 10) for rho in (0.0, 0.5, 0.9)]


def null_errors(tables, levels, gamma, margin, seed=1):
    out = {}
    for c, (k, rho, best) in enumerate(CELLS):
        rng = np.random.default_rng([seed, c])
        x, mu = draw(rng, tables, k, rho, 0.0)
        out[(k, rho, best)] = until_decided(x, mu, margin, best, levels, gamma)[0].mean()
    return out


MARGINS = (0.0, 0.5, 1.0)  # null: margin 0 never says equivalent, so nothing stops early
BATCH = [(rows, rho) for rows in range(1, 6) for rho in (0.0, 0.5, 0.9)]
FIXED = (4, 8, 12, 16)


def batch_errors(tables, levels, margin, seeding, seed=1):
    out = {}
    for c, (rows, rho) in enumerate(BATCH):
        rng = np.random.default_rng([seed, 100 + c, int(margin * 10)])
        out[(rows, rho)] = batch_null(rng, tables, rows, rho, margin, levels, seeding).mean()
    return out


def efficiency(tables, levels, gamma, margin, seed=2):
    """Per cell: until decided's (decided, runs, wrong) and each fixed design's (decided, runs,
    wrong), on the same draws (the procedure reads the first MAX_SEEDS seeds)."""
    out = {}
    for c, (k, rho, best) in enumerate(CELLS):
        rng = np.random.default_rng([seed, c, int(margin * 10)])
        x, mu = draw(rng, tables, k, rho, 1.0, max(FIXED))
        erred, decided, runs = until_decided(x[..., :MAX_SEEDS], mu, margin, best, levels, gamma)
        row = {"until": (decided.mean(), runs.mean(), erred.mean())}
        for seeds in FIXED:
            f_erred, f_decided = fixed(x, mu, margin, best, seeds)
            row[seeds] = (f_decided.mean(), k * seeds, f_erred.mean())
        out[(k, rho, best)] = row
    return out


def worst_null(tables, levels, seed):
    """The largest error of every null setting: convergence with futility obeyed and ignored
    (every margin), and the batch contrast (every margin, both seedings)."""
    worst = {}
    for margin in MARGINS:
        for name, gamma in (("futility obeyed", FUTILITY), ("futility ignored", None)):
            e = null_errors(tables, levels, gamma, margin, seed=seed)
            worst[name] = max(worst.get(name, 0.0), max(e.values()))
        for seeding in ("open", "cap"):
            e = batch_errors(tables, levels, margin, seeding, seed=seed)
            worst["batch"] = max(worst.get("batch", 0.0), max(e.values()))
    return worst


def calibrate(tables: int) -> None:
    """The largest scale of the levels whose worst null cell stays at alpha, every setting of
    ``worst_null`` (futility obeyed and ignored, the batch contrast), by bisection on common
    random numbers (seed 3: not the table's)."""
    low, high = 1.0, 1.84
    for _ in range(7):
        mid = (low + high) / 2
        levels = design_levels(mid)
        worst = worst_null(tables, levels, seed=3)
        shown = ", ".join(f"{name} {value:.4f}" for name, value in worst.items())
        print(f"scale {mid:.3f}: levels {[round(v, 4) for v in levels]}, worst: {shown}")
        low, high = (mid, high) if max(worst.values()) <= ALPHA else (low, mid)
    print(f"calibrated scale {low:.3f} (sequential.CALIBRATED)")


def efficiency_table(tables: int, levels: list[float], margin: float) -> list[dict]:
    """The 1 sd gap's table at one margin: decided per run against each fixed design."""
    result = efficiency(tables, levels, FUTILITY, margin)
    print(
        f"\n1 sd gap, margin {margin} sd, {tables} tables a cell, futility by conditional power\n"
    )
    heads = " | ".join(f"ratio, fixed {s}" for s in FIXED)
    print(
        "| groups | correlation | against | until decided: decided, runs | "
        f"fixed {MAX_SEEDS}: decided, runs | {heads} | wrong: until decided, fixed {MAX_SEEDS} |\n|"
        + "---|"
        * (6 + len(FIXED))
    )
    rows = []
    for (k, rho, best), row in result.items():
        dec, runs, err = row["until"]
        ratios = {
            s: (dec / runs) / (row[s][0] / row[s][1]) if row[s][0] else math.inf for s in FIXED
        }
        rows.append(ratios)
        f_dec, f_runs, f_err = row[MAX_SEEDS]
        shown = " | ".join(f"{ratios[s]:.2f}" for s in FIXED)
        print(
            f"| {k} | {rho:g} | {'best' if best else 'reference'} | {dec:.2f} in {runs:.1f} | "
            f"{f_dec:.2f} in {f_runs} | {shown} | {err:.3f}, {f_err:.3f} |"
        )
    return rows


def main() -> None:
    args = sys.argv[1:]
    scale = None
    if "--max-seeds" in args:  # the cap (--max-seeds of the sweep); the fixed designs stay 4-16
        global MAX_SEEDS
        at = args.index("--max-seeds")
        MAX_SEEDS = int(args[at + 1])
        del args[at : at + 2]
    if "--scale" in args:
        at = args.index("--scale")
        scale = float(args[at + 1])
        del args[at : at + 2]
    if args[:1] == ["calibrate"]:
        calibrate(int(args[1]) if len(args) > 1 else 4000)
        return
    tables = int(args[0]) if args else 4000
    levels = design_levels(scale)
    start = time.process_time()
    se = math.sqrt(0.05 * 0.95 / tables)
    print(f"levels {[round(v, 4) for v in levels]}, futility below conditional power {FUTILITY}")
    print(f"\nnull, {tables} tables a cell (standard error at 0.05: {se:.4f})\n")
    heads = " | ".join(f"margin {m:g}: obeyed | ignored" for m in MARGINS)
    print(f"| groups | correlation | against | {heads} |\n|" + "---|" * (3 + 2 * len(MARGINS)))
    errors = {
        (m, name): null_errors(tables, levels, gamma, m)
        for m in MARGINS
        for name, gamma in (("obeyed", FUTILITY), ("ignored", None))
    }
    for cell in CELLS:
        k, rho, best = cell
        shown = " | ".join(f"{errors[key][cell]:.4f}" for key in errors)
        print(f"| {k} | {rho:g} | {'best' if best else 'reference'} | {shown} |")
    for name in ("obeyed", "ignored"):
        worst = max(max(e.values()) for (m, n), e in errors.items() if n == name)
        print(f"futility {name}: worst {worst:.4f}")
    print(f"\nbatch contrast, false sensitive, {tables} tables a cell\n")
    heads = " | ".join(f"margin {m:g}: open | cap" for m in MARGINS)
    print(f"| rows | correlation | {heads} |\n|" + "---|" * (2 + 2 * len(MARGINS)))
    batch = {
        (m, seeding): batch_errors(tables, levels, m, seeding)
        for m in MARGINS
        for seeding in ("open", "cap")
    }
    for cell in BATCH:
        shown = " | ".join(f"{batch[key][cell]:.4f}" for key in batch)
        print(f"| {cell[0]} | {cell[1]:g} | {shown} |")
    print(f"batch: worst {max(max(e.values()) for e in batch.values()):.4f}")
    ratios = []
    for margin in (0.5, 1.0):
        ratios += efficiency_table(tables // 2, levels, margin)
    print(
        "\n| against fixed | median | smallest | largest | settings below 1 |\n"
        "|---|---|---|---|---|"
    )
    for s in FIXED:
        r = np.array([row[s] for row in ratios])
        print(
            f"| {s} seeds | {np.median(r):.2f} | {r.min():.2f} | {r.max():.2f} | "
            f"{(r < 1).sum()} of {len(r)} |"
        )
    print(f"\nCPU {time.process_time() - start:.0f} s")


if __name__ == "__main__":
    main()
