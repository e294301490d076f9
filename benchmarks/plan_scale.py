"""Planning a large grid (issue 33: a 10,000-run `sweep --dry-run` in <= 15 s): 10 norms x 4
placements x 2 precisions x 5 batch sizes x seeds on the Transformer (80 group combinations,
each of which Hydra composed before), into an empty runs directory, its listing thrown away.
With ``--baseline CHECKOUT`` the same command runs with that checkout's normbench too (at
``--baseline-runs`` as well), each from a working directory outside both checkouts. Wall and
CPU seconds (the children's user + system time: what the machine's other tenants disturb
least).

Run: python benchmarks/plan_scale.py [--runs 10000] [--baseline /path/to/main]
     [--baseline-runs 1000]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
NORMS = "batchnorm,groupnorm,layernorm,rmsnorm,switchnorm,instancenorm,scalenorm,dyt,none,derf"


def grid(runs: int) -> list[str]:
    """Overrides of a grid of ``runs`` runs (a multiple of 400)."""
    return [
        "model=transformer",
        f"norm={NORMS}",
        "placement=pre,post,peri,mix",
        "precision=fp32,bf16",
        "batch_size=8,16,32,64,128",
        f"seed=range({runs // 400})",
    ]


def plan_seconds(checkout: Path, runs: int, tmp: str) -> tuple[float, float]:
    """Wall and CPU seconds of `sweep GRID --dry-run` with ``checkout``'s normbench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", *grid(runs), "--dry-run"]
        + ["--runs-dir", f"{tmp}/runs"],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        stdout=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    parser.add_argument("--baseline-runs", type=int, default=1_000)
    args = parser.parse_args()
    rows = [("this", HERE, args.runs)]
    if args.baseline:
        rows += [
            ("this", HERE, args.baseline_runs),
            ("baseline", args.baseline, args.baseline_runs),
        ]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'version':<10}{'runs':>8}{'wall s':>10}{'CPU s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, checkout, runs in rows:
            wall, cpu = plan_seconds(checkout.resolve(), runs, tmp)
            print(f"{name:<10}{runs:>8}{wall:>10.2f}{cpu:>10.2f}")


if __name__ == "__main__":
    main()
