"""Is data loading the bottleneck of a CIFAR-10 step? normbench's loop on data=cifar10 read
from the cache (checked, decoded once, augmented per batch on the device: crop_flip) against
the same loop on data=cifar10 without augmentation and a plain PyTorch loop on in-memory
tensors of CIFAR-10's shapes (3x32x32, 10 classes), the same model and batch size. Target:
the real loader's steps/s >= 0.95 of the in-memory loop's.

The set is a fixture in the hub's own parquet format (install_fixture in tests/helpers.py:
PNG images, installed through normbench's decoding and manifest) in a temporary cache: this
machine fetches nothing. Also timed: the set-up, checking the cache (sha256 of every file)
and reading the decoded arrays, once per run. Pairs run back to back in this process,
repeated; medians reported.

Run: python benchmarks/data_loading.py [--scale 10] [--steps 40] [--repeats 3] [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import add_device_argument, synchronize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fixture writer (tests/helpers.py)

from helpers import install_fixture  # noqa: E402

from normbench.data import hubcache  # noqa: E402
from normbench.data.datasets import load  # noqa: E402
from normbench.experiment.compose import compose  # noqa: E402
from normbench.layers.models import build_model  # noqa: E402
from normbench.store.rundir import RunDir, run_id  # noqa: E402
from normbench.training.trainer import Trainer  # noqa: E402


def normbench_loop(cfg: dict, device: torch.device) -> float:
    """Steps per second of Trainer.fit by its training clock (evaluation excluded)."""
    with tempfile.TemporaryDirectory() as runs:
        run = RunDir(runs, run_id(cfg))
        run.path.mkdir(parents=True)
        trainer = Trainer(cfg, device, run, progress=False)
        trainer.fit()
        return trainer.summary["steps"] / trainer.summary["train_s"]


def in_memory_loop(cfg: dict, steps: int, device: torch.device) -> float:
    """Steps per second of a plain loop on random tensors of CIFAR-10's shapes, on the device."""
    torch.manual_seed(0)
    size = cfg["batch_size"]
    x = torch.randn(size * 8, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (size * 8,), device=device)
    model = build_model(cfg, (3, 32, 32), 10).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    synchronize(device)
    start = time.perf_counter()
    for step in range(steps):
        at = (step % 8) * size
        loss = F.cross_entropy(model(x[at : at + size]), y[at : at + size])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    synchronize(device)
    return steps / (time.perf_counter() - start)


def setup_seconds(data: dict) -> float:
    """Checking the cache and reading the decoded arrays, as a run's set-up does (the hashes
    cleared first: a new process hashes every file once)."""
    hubcache._hash_once.cache_clear()
    start = time.perf_counter()
    load(data)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10, help="300 x scale train images")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    add_device_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NORMBENCH_CACHE"] = cache
        install_fixture("cifar10", scale=args.scale)
        common = [
            "model=resnet",
            "norm=batchnorm",
            "placement=post",
            "data=cifar10",
            f"model.width={args.width}",
            "model.depth=2",
            f"batch_size={args.batch_size}",
            f"train.max_steps={args.steps}",
            f"train.eval_every={args.steps}",
            f"device={args.device}",
        ]
        loaded = compose([*common, "data.augment=crop_flip"])
        plain = compose([*common, "data.augment=none"])
        rows = {"real loader, crop_flip": [], "real loader, no augmentation": [], "in memory": []}
        setups = []
        for _ in range(args.repeats):
            rows["real loader, crop_flip"].append(normbench_loop(loaded, device))
            rows["real loader, no augmentation"].append(normbench_loop(plain, device))
            rows["in memory"].append(in_memory_loop(loaded, args.steps, device))
            setups.append(setup_seconds(loaded["data"]))
    memory = statistics.median(rows["in memory"])
    images = 300 * args.scale
    print(
        f"CIFAR-10 fixture: {images} train images; resnet width {args.width}, depth 2, "
        f"BatchNorm, batch {args.batch_size}, {args.steps} steps, {args.device}, "
        f"{args.threads} thread(s); medians of {args.repeats}"
    )
    print(f"{'loop':32} {'steps/s':>8} {'/ in memory':>12}")
    for name, values in rows.items():
        value = statistics.median(values)
        print(f"{name:32} {value:8.1f} {value / memory:12.2f}")
    print(f"set-up (check + read, once a run): {statistics.median(setups):.2f} s")


if __name__ == "__main__":
    main()
