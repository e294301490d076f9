"""Loop overhead: normbench's training loop against a plain PyTorch loop (target >= 0.95).

Both train the same kind of model (built by normbench, same seed) on the same data and batch
size with the same recipe (fused AdamW, gradient clipping, warm-up + cosine schedule). The
plain loop has no logging, no progress bar and no evaluation; normbench's loop runs as a
sweep worker does (progress bar off, logging every 10 steps, evaluation as configured), timed
by its own training clock, which excludes evaluation. Each pair runs back to back in this
process, repeated; medians reported.

Run: python benchmarks/loop_overhead.py [--steps 600] [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from timing import add_device_argument, synchronize

from normbench.data.datasets import input_shape, load
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.store.rundir import RunDir, run_id
from normbench.training.trainer import Trainer

MODELS = {"transformer": ["model=transformer"], "cnn": ["model=cnn", "norm=batchnorm"]}


def plain_loop(cfg: dict, steps: int, device: torch.device) -> float:
    """Steps per second of the plainest loop with normbench's recipe."""
    torch.manual_seed(cfg["seed"])
    data = load(cfg["data"])
    x, y = torch.from_numpy(data.train.x).to(device), torch.from_numpy(data.train.y).to(device)
    model = build_model(cfg, input_shape(cfg["data"]), data.num_classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["train"]["lr"], fused=True)
    warmup = cfg["train"]["warmup_steps"]

    def factor(step: int) -> float:  # linear warm-up, then cosine to zero
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    size, generator = cfg["batch_size"], torch.Generator().manual_seed(0)
    order = torch.randperm(len(y), generator=generator).to(device)
    synchronize(device)
    start = time.perf_counter()
    for step in range(steps):
        idx = order[(step * size) % (len(y) - size) :][:size]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["train"]["grad_clip"])
        optimizer.step()
        schedule.step()
    synchronize(device)
    return steps / (time.perf_counter() - start)


def normbench_loop(cfg: dict, device: torch.device) -> float:
    """Steps per second of Trainer.fit, by its training clock (evaluation excluded)."""
    with tempfile.TemporaryDirectory() as runs:
        run = RunDir(runs, run_id(cfg))
        run.path.mkdir(parents=True)
        trainer = Trainer(cfg, device, run, progress=False)
        trainer.fit()
        return trainer.summary["steps"] / trainer.summary["train_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    add_device_argument(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    print(
        f"steps/s, fp32, {device.type}, {args.steps} steps, {args.threads} CPU thread(s), "
        f"median of {args.repeats}"
    )
    print(f"{'model':<14}{'plain':>10}{'normbench':>12}{'ratio':>8}{'target':>9}")
    for name, overrides in MODELS.items():
        cfg = compose(
            [
                *overrides,
                f"device={device.type}",
                f"train.max_steps={args.steps}",
                "train.eval_every=200",
            ]
        )
        plain, ours = [], []
        for _ in range(args.repeats):
            plain.append(plain_loop(cfg, args.steps, device))
            ours.append(normbench_loop(cfg, device))
        ratio = statistics.median(ours) / statistics.median(plain)
        print(
            f"{name:<14}{statistics.median(plain):>10.1f}{statistics.median(ours):>12.1f}"
            f"{ratio:>8.2f}{'>= 0.95':>9}"
        )


if __name__ == "__main__":
    main()
