"""Print how far each norm's bf16/fp16 output is from float64 (normbench.numerics): the fused
kernels first, then every norm x case x precision x norm.fp32_stats against the activation
scale, then the largest errors with norm.fp32_stats on and off.

    python scripts/precision_error.py                 # CPU (and CUDA when there is one)
    python scripts/precision_error.py --device cuda   # one device
    python scripts/precision_error.py --csv errors.csv

About a minute and a half on this 2-core CPU.
"""

from __future__ import annotations

import argparse
import warnings

import pandas as pd
import torch

from normbench.layers.numerics import available_devices, fused_kernel_errors, norm_errors


def scientific(value: float) -> str:
    return f"{value:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["all", "cpu", "cuda"], default="all")
    parser.add_argument("--csv", help="also write the norm table (one row per measurement)")
    parser.add_argument("--top", type=int, default=10, help="largest errors to list")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device on this machine")
    devices = available_devices() if args.device == "all" else [torch.device(args.device)]
    # F.rms_norm warns that a half input with a float32 weight cannot use its fused kernel
    # (norm.fp32_stats=false): that is part of what is measured.
    warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
    pd.set_option("display.width", 250, "display.max_rows", 1000)

    for device in devices:
        fused = fused_kernel_errors(device)
        print(f"\nFused kernels on {device.type}, half input: error / error of float32 rounded")
        ratios = fused.pivot_table(
            index=["op", "dtype", "weights"], columns="offset", values="ratio"
        )
        print(ratios.round(2).to_string())

    errors = norm_errors(devices=devices)
    if args.csv:
        errors.to_csv(args.csv, index=False)
    index = ["device", "norm", "case", "precision", "fp32_stats"]
    table = errors.pivot_table(index=index, columns=["kind", "scale"], values="error", dropna=False)
    print("\nNorm output, largest error over largest output, against float64 on the same input")
    print(table.map(scientific).to_string())

    meaningful = errors[errors["input_step"] < 1]  # the rounded input still has its spread
    for fp32_stats in (True, False):
        rows = meaningful[meaningful["fp32_stats"] == fp32_stats]
        largest = rows.sort_values("error", ascending=False).head(args.top)
        print(f"\nLargest errors, norm.fp32_stats={str(fp32_stats).lower()} (input_step < 1)")
        print(largest.drop(columns="fp32_stats").to_string(index=False))
    scales = errors.groupby(["precision", "kind", "scale"])["input_step"].max()
    print("\nInput step (dtype's rounding step at the largest input, in input stds)")
    print(scales.unstack("scale").map(scientific).to_string())


if __name__ == "__main__":
    main()
