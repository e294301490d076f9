"""How often the across-workloads 95% interval of P(>ref) covers the truth, by simulation
(docs/statistics.md, "What an interval across 3-4 tasks can say").

    python scripts/bootstrap_coverage.py

Four tasks; in each, a group's scores are normal with a gap of 0.5 sd to the reference's, so
the true probability of improvement is Phi(0.5 / sqrt(2)) everywhere. 400 studies at 10, 5
and 3 runs per group and task, each interval from the report's 2,000 stratified resamples.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from normbench.report import aggregate

TASKS, STUDIES, RESAMPLES = 4, 400, 2000


def main() -> None:
    truth = stats.norm.cdf(0.5 / math.sqrt(2))
    for runs in (10, 5, 3):
        rng = np.random.default_rng(0)
        covered = 0
        for _ in range(STUDIES):
            tasks = [(rng.normal(0.5, 1, runs), rng.normal(0, 1, runs)) for _ in range(TASKS)]
            low, high = aggregate.stratified_bootstrap(
                tasks,
                aggregate.probability_of_improvement,
                samples=RESAMPLES,
                seed=int(rng.integers(1e9)),
            )
            covered += low <= truth <= high
        rate = covered / STUDIES
        half = 1.96 * math.sqrt(rate * (1 - rate) / STUDIES)
        print(f"{runs} runs per group and task: coverage {rate:.3f} ± {half:.3f}", flush=True)


if __name__ == "__main__":
    main()
