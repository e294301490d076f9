"""What recording a run's cost (normbench.training.cost) adds to its wall time: the same run
with and without it, side by side in one process, in pairs whose order alternates (target:
<= 2%). Without it is the trainer with StepCost swapped for a meter that counts and times
nothing (a benchmark's control; the tests check that the counting changes no metric).

Two figures per configuration: the median over pairs of wall(with) / wall(without), which the
machine's noise moves by more than the effect on a shared machine; and the counting step's own
seconds (attach, timed inside the run with cost) over the run's wall time, the part of the
overhead that does not vanish in the noise (timing each step adds two clock reads).

Run: python benchmarks/cost_overhead.py [--pairs 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from normbench.experiment.compose import compose
from normbench.training import cost
from normbench.training.run import run_experiment

CONFIGS = {
    "cnn batchnorm (the README's first run)": ["model=cnn", "norm=batchnorm"],
    "transformer layernorm, pysource": ["model=transformer", "norm=layernorm", "data=pysource"],
}


class NoCost:
    """The control: attaches without counting or timing, adds nothing to the summary."""

    @classmethod
    def attach(cls, trainer) -> NoCost:
        return cls()

    def summary(self) -> dict:
        return {}


class TimedAttach(cost.StepCost):
    """StepCost whose attaching (the counting step) is timed, into ``TimedAttach.seconds``."""

    seconds: list[float] = []

    @classmethod
    def attach(cls, trainer) -> cost.StepCost:
        tick = time.perf_counter()
        meter = super().attach(trainer)
        cls.seconds.append(time.perf_counter() - tick)
        return meter


def wall(overrides: list[str], meter: type, runs_dir: Path) -> float:
    """Seconds of one run from scratch (a fresh directory) with ``meter`` as the trainer's."""
    cost.StepCost, original = meter, cost.StepCost
    try:
        tick = time.perf_counter()
        run_experiment(compose(overrides), runs_dir, progress=False)
        return time.perf_counter() - tick
    finally:
        cost.StepCost = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start")
    print(f"{'configuration':<40}{'with / without (median)':>26}{'counting / wall':>18}")
    with tempfile.TemporaryDirectory() as scratch:
        for label, overrides in CONFIGS.items():
            overrides = [*overrides, f"train.max_steps={args.steps}", "threads=1"]
            wall(overrides, NoCost, Path(scratch) / "warm")  # data generated and cached
            ratios, shares = [], []
            for pair in range(args.pairs):
                TimedAttach.seconds.clear()
                order = [TimedAttach, NoCost] if pair % 2 == 0 else [NoCost, TimedAttach]
                walls = {
                    m: wall(overrides, m, Path(scratch) / f"{pair}-{m.__name__}") for m in order
                }
                ratios.append(walls[TimedAttach] / walls[NoCost])
                shares.append(TimedAttach.seconds[0] / walls[TimedAttach])
            print(
                f"{label:<40}"
                + f"{statistics.median(ratios):>19.3f} ({', '.join(f'{r:.3f}' for r in ratios)})"
                + f"{statistics.median(shares) * 100:>16.2f} %"
            )
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
