"""A group's results against the plain definition they speed up: results from arrays as row
by row, seeds made int64 only where that is exact."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from normbench.report.base import ACCURACY, BITS_PER_BYTE, Method
from normbench.report.results import seed_array, seeded_results


def plain_results(part: pd.DataFrame, column: str, metric, method) -> dict[int, float]:
    """seeded_results as its docstring defines it, row by row."""
    by_seed: dict[int, list[float]] = {}
    for _, run in part.sort_values("seed", kind="stable").iterrows():
        chance = metric.chance(float(run["num_classes"]))
        value = run[column]
        if run["status"] == "diverged" and method.diverged == "chance":
            by_seed.setdefault(int(run["seed"]), []).append(chance)
        elif run["status"] == "complete" and value is not None and math.isfinite(value):
            kept = value if metric.higher_is_better else min(value, chance)
            by_seed.setdefault(int(run["seed"]), []).append(float(kept))
    return {seed: math.fsum(v) / len(v) for seed, v in by_seed.items()}


SEEDS = {  # as a store gives them (Python ints as objects), and as tests and users may
    "objects": lambda seeds: seeds.astype(object),
    "int64": lambda seeds: seeds,
    "floats": lambda seeds: seeds.astype(float),
}


@pytest.mark.parametrize("metric", [ACCURACY, BITS_PER_BYTE])
@pytest.mark.parametrize("diverged", ["chance", "exclude"])
@pytest.mark.parametrize("seed_kind", list(SEEDS))
@pytest.mark.parametrize("counts", [(10.0,), (4.0, 10.0, 256.0)])
def test_seeded_results_from_arrays_are_the_row_by_row_definition(
    metric, diverged, seed_kind, counts
):
    rng = np.random.default_rng(3)
    size = 40
    part = pd.DataFrame(
        {
            "seed": SEEDS[seed_kind](rng.integers(0, 12, size)),  # unsorted, some seeds twice
            "status": rng.choice(["complete", "diverged", "failed", "running"], size),
            "value": np.where(rng.random(size) < 0.1, np.nan, rng.random(size) * 6),
            "num_classes": rng.choice(counts, size),
        }
    )
    method = Method(diverged=diverged)
    got = seeded_results(part, "value", metric, method)
    want = plain_results(part, "value", metric, method)
    assert list(got) == list(want) and list(got) == sorted(got)
    assert all(got[seed] == want[seed] for seed in want)  # the same floats, not close ones


def test_seed_array_makes_int64_only_of_exact_integers():
    exact = [
        np.array([3, 1, 2], dtype=object),
        np.array([1.0, 2.0]),
        np.array([True, 2], dtype=object),
    ]
    for seeds in exact:
        assert seed_array(seeds).dtype == np.int64 and (seed_array(seeds) == seeds).all()
    kept = [
        np.array([1.5, 2.0]),
        np.array([math.nan, 1.0]),
        np.array([None, 1], dtype=object),
        np.array(["3", 1], dtype=object),
        np.array([10**30, 1], dtype=object),
    ]
    for seeds in kept:
        assert seed_array(seeds) is seeds
