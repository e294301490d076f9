"""Report scaling: load and aggregate 10,000 runs (target <= 3 s on 2 cores).

Generates synthetic run directories (config.yaml and meta.json as normbench writes them:
10 norms x 5 ghost batches x 10 learning rates x 20 seeds), then times `load_runs` + `build`
(every table) twice: cold (no index yet: every file is read) and warm (the index is reused;
only meta.json is stat'ed).

Run: python benchmarks/report_scaling.py [--runs 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from normbench.experiment.compose import compose
from normbench.experiment.options import group_options
from normbench.report.tables import build
from normbench.store.catalog import INDEX, load_runs
from normbench.store.rundir import run_id


def generate(runs: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    norms = group_options("norm")
    grid = itertools.product(
        norms,
        [2, 4, 8, 16, 32],
        [1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 3e-2, 5e-2, 1e-1, 2e-1],
        range(20),
    )
    for norm, ghost, lr, seed in itertools.islice(grid, count):
        cfg = compose(
            [
                "model=cnn",
                f"norm={norm}",
                "norm.ghost_batch=" + str(ghost),
                f"train.lr={lr}",
                f"seed={seed}",
            ]
        )
        path = runs / f"{run_id(cfg)}-{ghost}"  # batch-independent norms share ids: keep all
        path.mkdir()
        (path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
        acc = float(rng.uniform(0.8, 0.99))
        summary = {
            "final_val_acc": acc,
            "best_val_acc": acc,
            "steps": 600,
            "steps_to_target": int(rng.integers(1, 6)) * 100,
            "time_to_target_s": 2.0,
            "train_loss_auc": float(rng.uniform(0.1, 1)),
            "train_s": 5.0,
            "wall_s": 6.0,
        }
        status = "diverged" if rng.random() < 0.02 else "complete"
        (path / "meta.json").write_text(json.dumps({"status": status, "summary": summary}))


def timed(runs: Path) -> float:
    start = time.perf_counter()
    report = build(load_runs(runs))
    assert len(report.tables["convergence"]) > 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        start = time.perf_counter()
        generate(runs, args.runs)
        print(f"generated {args.runs} runs in {time.perf_counter() - start:.0f} s")
        cold, warm = [], []
        for _ in range(args.repeats):
            (runs / INDEX).unlink(missing_ok=True)
            cold.append(timed(runs))
            warm.append(timed(runs))
    print(f"{'measure':<44}{'seconds':>10}{'target':>10}")
    print(
        f"{f'load + aggregate {args.runs} runs, cold (no index)':<44}"
        f"{statistics.median(cold):>10.2f}"
    )
    print(
        f"{f'load + aggregate {args.runs} runs, warm (index)':<44}"
        f"{statistics.median(warm):>10.2f}{'<= 3.0':>10}"
    )


if __name__ == "__main__":
    main()
