"""Sweep scaling: does a second worker halve the wall time, and what does the sweep cost?

A sweep of 8 short CNN runs, each repeat in a fresh runs directory (data cache warm):
- parallel ratio: wall time with --jobs 2 over --jobs 1 (target <= 0.6 on 2 cores);
- overhead: wall time of the --jobs 1 sweep over the sum of its runs' own wall times, as
  recorded in meta.json (target <= 1.10). What is left is worker start-up (a spawned
  interpreter importing torch), planning and bookkeeping. Shown too: over the sum of the
  runs' training time alone (train_s), which leaves out each run's set-up, evaluations and
  test pass as well.

Run: python benchmarks/sweep_scaling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = [
    "model=cnn",
    "norm=batchnorm,groupnorm",
    "seed=range(4)",
    "train.max_steps=400",
    "train.eval_every=100",
    "device=cpu",
]


def sweep(jobs: int) -> tuple[float, float, float]:
    """(wall seconds of the sweep, sum of its runs' wall seconds, sum of their train_s)."""
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "normbench",
                "sweep",
                *GRID,
                "--jobs",
                str(jobs),
                "--runs-dir",
                runs,
            ],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        summaries = [json.loads(p.read_text())["summary"] for p in Path(runs).glob("*/meta.json")]
    return wall, sum(s["wall_s"] for s in summaries), sum(s["train_s"] for s in summaries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sweep(1)  # warm the data cache and the file system
    one, two, overhead, over_training = [], [], [], []
    for _ in range(args.repeats):
        wall1, runs1, train1 = sweep(1)
        wall2, _, _ = sweep(2)
        one.append(wall1)
        two.append(wall2)
        overhead.append(wall1 / runs1)
        over_training.append(wall1 / train1)
    print(f"sweep of 8 runs, median of {args.repeats}")
    print(f"{'measure':<40}{'value':>10}{'target':>10}")
    print(f"{'--jobs 1 wall (s)':<40}{statistics.median(one):>10.1f}")
    print(f"{'--jobs 2 wall (s)':<40}{statistics.median(two):>10.1f}")
    ratio = statistics.median(two) / statistics.median(one)
    print(f"{'--jobs 2 / --jobs 1':<40}{ratio:>10.2f}{'<= 0.60':>10}")
    print(
        f"{'overhead: sweep wall / sum of run walls':<40}{statistics.median(overhead):>10.2f}"
        f"{'<= 1.10':>10}"
    )
    print(f"{'  ... / sum of run training times':<40}{statistics.median(over_training):>10.2f}")


if __name__ == "__main__":
    main()
