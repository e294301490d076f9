"""Norm cost: every shipped norm's forward + backward against LayerNorm, in both layouts, and
each fused kernel against its module, by `normbench cost` (which this script only calls: the
timing, interleaved in blocks with paired ratios and intervals, is normbench.layers.timing;
docs/cost.md). Activations of the models' sizes: width 64, batch 64, 128 positions.

Run: python benchmarks/norm_cost.py [--repeats 5] [--device cuda]   (repeats: blocks, >= 3)
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from normbench.layers.keys import NORM_TABLE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved blocks (>= 3)")
    parser.add_argument("--device", default="cpu", help="cpu (the default) or cuda")
    args = parser.parse_args()
    norms = ",".join(["layernorm", *(name for name in NORM_TABLE if name != "layernorm")])
    for model in ("transformer", "cnn"):
        command = [sys.executable, "-m", "normbench", "cost", f"norm={norms}", f"model={model}"]
        command += ["--widths", "64", "--batch", "64", "--positions", "128"]
        command += ["--blocks", str(max(args.repeats, 3)), "--device", args.device]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
