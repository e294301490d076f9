"""How often a verdict is wrong, measured: the family-wise error of *worse* against the best
(chosen after looking) and of *better or worse* against a named reference, by simulation with
normbench's own verdicts (docs/statistics.md's table).

    python scripts/verdict_errors.py [TABLES]

Groups that are in truth identical (any *worse*, *better* is an error), at correlations 0,
0.5 and 0.9 between groups at one seed, 2, 5, 10 and 20 groups, 3, 4, 6 and 8 seeds, with
every group's noise alike or with one group of noise of its own, twice as wide (as BatchNorm's
is against the others'), paired by seed and unpaired (the same results, seeds that do not
match). alpha 0.05.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from normbench.report.stats import compare_with_best, compare_with_reference


def groups_at(rng, k: int, seeds: int, rho: float, unequal: bool, paired: bool) -> list[dict]:
    shared = rng.standard_normal(seeds)
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((k, seeds))
    if unequal:
        x[0] = 2 * rng.standard_normal(seeds)
    return [
        {s + (0 if paired else 1000 * i): v for s, v in enumerate(row)} for i, row in enumerate(x)
    ]


def main() -> None:
    tables = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = np.random.default_rng(0)
    print(
        "| groups | spreads | correlation | worse vs best, paired | unpaired | vs a named "
        "reference, paired | unpaired |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = {}
    for k in (2, 5, 10, 20):
        for unequal in (False, True):
            for rho in (0.0, 0.5, 0.9):
                cells = []
                for against in ("best", "reference"):
                    for paired in (True, False):
                        errors = 0
                        for seeds in (3, 4, 6, 8):
                            for _ in range(tables // 4):
                                g = groups_at(rng, k, seeds, rho, unequal, paired)
                                if against == "best":
                                    _, verdicts = compare_with_best(g, 0.05, 0.5)
                                else:
                                    verdicts = compare_with_reference(g, 1, 0.05, 0.5)
                                errors += any(v.verdict in ("worse", "better") for v in verdicts)
                        rate = errors / (tables // 4 * 4)
                        worst[(against, paired)] = max(worst.get((against, paired), 0), rate)
                        cells.append(f"{rate:.3f}")
                spreads = "one wider" if unequal else "alike"
                print(f"| {k} | {spreads} | {rho:g} | " + " | ".join(cells) + " |", flush=True)
    print("\nlargest:", {f"{a}, {'paired' if p else 'unpaired'}": r for (a, p), r in worst.items()})


if __name__ == "__main__":
    main()
