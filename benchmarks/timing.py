"""What the benchmarks share: a --device option and forward+backward timing that waits for
the device, so a GPU's queued kernels are counted (CUDA returns before they run)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="cpu", help="cpu (the default) or cuda: where the tensors live"
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fwd_bwd_seconds(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iterations: int, warmup: int = 3
) -> float:
    """Seconds per forward + backward of ``fn`` on ``x``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn(x).sum().backward()
    synchronize(x.device)
    start = time.perf_counter()
    for _ in range(iterations):
        fn(x).sum().backward()
    synchronize(x.device)
    return (time.perf_counter() - start) / iterations
