"""Run every benchmark, one after another, and print their tables.

Run: python benchmarks/run_all.py   (about 13 minutes on 2 cores)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPTS = [
    "startup.py",
    "loop_overhead.py",
    "model_cost.py",
    "norm_cost.py",
    "cost_overhead.py",
    "sweep_scaling.py",
    "store_scale.py",
]

if __name__ == "__main__":
    here = Path(__file__).parent
    for script in SCRIPTS:
        print(f"\n== {script}", flush=True)
        subprocess.run([sys.executable, str(here / script)], check=True)
