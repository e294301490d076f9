"""What ``diagnostics=true`` adds to a run's wall time (target: <= 5%, issue 63): the same run
with and without it, in pairs whose order alternates, each run from scratch in a fresh
directory, in one process (the data generated and cached by a first, untimed run).

Per configuration, with the machine's load as each pair ends (a shared machine moves wall
times by more than the effect):
- the ratio wall(on) / wall(off) per pair, their median, and the geometric mean with its 95%
  t interval over pairs (scipy.stats.t on the log ratios; "inconclusive" against the 5% target
  when the interval straddles 1.05);
- the same for the process's CPU time (``time.process_time``: the runs train on one thread),
  which other processes on the machine move far less than wall time: the work diagnostics
  add, where wall time measures the load;
- the activation statistics' own seconds (normbench.training.activations.measure, timed
  inside the diagnosed runs) over those runs' wall time: the part of the overhead that is
  new in 0.6, free of the noise between runs.

The evaluation cadence stays the default (train.eval_every=250): the budget is shortened, so
that the fixed costs of diagnostics (step 0) weigh more than in a full run, not less.

Run: python benchmarks/diagnostics_overhead.py [--pairs 4] [--steps 500]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from scipy import stats

from normbench.experiment.compose import compose
from normbench.training import diagnostics
from normbench.training.run import run_experiment

CONFIGS = {
    "transformer layernorm, mnist1d (default)": ["model=transformer", "norm=layernorm"],
    "transformer layernorm, pysource (LM)": ["model=transformer", "data=pysource"],
    "cnn batchnorm, mnist1d": ["model=cnn", "norm=batchnorm"],
}
TARGET = 1.05  # at most 5% of a run's wall time


def measured(seconds: list[float]):
    """``normbench.training.activations.measure`` that adds its seconds to ``seconds``."""
    original = diagnostics.measure

    def timed(*args, **kwargs):
        tick = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - tick)

    return original, timed


def wall(overrides: list[str], runs_dir: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run from scratch in ``runs_dir``."""
    tick, cpu = time.perf_counter(), time.process_time()
    outcome = run_experiment(compose(overrides), runs_dir, progress=False)
    if outcome.status != "complete":
        raise SystemExit(f"{overrides}: {outcome.status} {outcome.error}")
    return time.perf_counter() - tick, time.process_time() - cpu


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the ratios and its 95% t interval (on the log ratios)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def verdict(high: float, low: float) -> str:
    """Against the 5% target: within when the whole interval is below it, over when above."""
    if high <= TARGET:
        return "within 5%"
    if low > TARGET:
        return "over 5%"
    return "inconclusive"


def summary(name: str, ratios: list[float]) -> str:
    """A ratio's median, geometric mean, 95% t interval and verdict against the target."""
    mean, low, high = interval(ratios)
    return (
        f"{name} on/off median {statistics.median(ratios):.3f}, geometric mean {mean:.3f} "
        f"[95% t interval {low:.3f}, {high:.3f}] over {len(ratios)} pairs: {verdict(high, low)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--only", choices=list(CONFIGS), default=None)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start")
    with tempfile.TemporaryDirectory() as scratch:
        for label, overrides in CONFIGS.items():
            if args.only and label != args.only:
                continue
            overrides = [*overrides, f"train.max_steps={args.steps}", "threads=1"]
            wall(overrides, Path(scratch) / "warm")  # data generated and cached
            ratios, cpu_ratios, shares = [], [], []
            for pair in range(args.pairs):
                seconds: list[float] = []
                original, timed = measured(seconds)
                walls, cpus = {}, {}
                for on in (True, False) if pair % 2 == 0 else (False, True):
                    diagnostics.measure = timed if on else original
                    try:
                        where = Path(scratch) / f"{label[:3]}-{pair}-{on}"
                        switch = f"diagnostics={str(on).lower()}"
                        walls[on], cpus[on] = wall([*overrides, switch], where)
                    finally:
                        diagnostics.measure = original
                ratios.append(walls[True] / walls[False])
                cpu_ratios.append(cpus[True] / cpus[False])
                shares.append(sum(seconds) / walls[True])
                print(
                    f"  {label}: pair {pair}: wall on {walls[True]:.1f} s, off "
                    f"{walls[False]:.1f} s ({ratios[-1]:.3f}); CPU on {cpus[True]:.1f} s, off "
                    f"{cpus[False]:.1f} s ({cpu_ratios[-1]:.3f}); activation statistics "
                    f"{sum(seconds):.2f} s ({len(seconds)} measurements); load "
                    f"{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            print(f"{label}: {summary('wall', ratios)}", flush=True)
            print(f"{label}: {summary('CPU', cpu_ratios)}", flush=True)
            print(
                f"{label}: activation statistics {statistics.median(shares) * 100:.2f}% of "
                "the diagnosed run's wall (median over pairs)",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
