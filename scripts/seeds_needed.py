"""How many seeds a verdict needs, paired and unpaired, at a given correlation between groups
at one seed: the table of docs/statistics.md, by simulation with normbench's own verdicts.

    python scripts/seeds_needed.py 0.0 0.5 0.8 0.95        # correlations to tabulate

Ten groups, alpha 0.05, the best chosen after looking (normbench.report.stats.
compare_with_best). *worse*: one group one standard deviation of seed noise below nine equal
ones, found worse; *equivalent*: ten equal groups, the share of the nine comparisons with the
best found equivalent within a margin of one standard deviation. Seeds needed: the fewest per
group for which that happens in 80% of simulated tables. Unpaired: the same results with seeds
that do not match (Welch).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from normbench.report.stats import compare_with_best

GROUPS, ALPHA, POWER, TABLES = 10, 0.05, 0.8, 300


def table(rng, seeds: int, rho: float, gap: float, paired: bool) -> list[dict]:
    shared = rng.standard_normal(seeds)
    x = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((GROUPS, seeds))
    x[-1] -= gap
    offset = 0 if paired else 1000
    return [
        {s + offset * i * (not paired): v for s, v in enumerate(row)} for i, row in enumerate(x)
    ]


def power(seeds: int, rho: float, question: str, paired: bool) -> float:
    rng = np.random.default_rng(seeds)
    hits = 0
    for _ in range(TABLES):
        gap = 1.0 if question == "worse" else 0.0
        _, verdicts = compare_with_best(table(rng, seeds, rho, gap, paired), ALPHA, 1.0)
        if question == "worse":
            hits += verdicts[-1].verdict == "worse"
        else:  # the share of the nine comparisons with the best found equivalent
            others = [v for v in verdicts if v.verdict != "reference"]
            hits += sum(v.verdict == "equivalent" for v in others) / len(others)
    return hits / TABLES


def needed(rho: float, question: str, paired: bool, most: int = 40) -> str:
    for seeds in range(2, most + 1):
        if power(seeds, rho, question, paired) >= POWER:
            return str(seeds)
    return f"> {most}"


def main() -> None:
    correlations = [float(c) for c in sys.argv[1:]] or [0.0, 0.5, 0.8, 0.95]
    print("| correlation | worse, paired | unpaired | equivalent, paired | unpaired |")
    print("|---|---|---|---|---|")
    for rho in correlations:
        cells = [needed(rho, q, p) for q in ("worse", "equivalent") for p in (True, False)]
        print(f"| {rho:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
