"""Step efficiency: the FLOP/s a training step of the ladder's top CPU rung achieves, as a
share of the FLOP/s of a large matrix product on the same threads (the machine's practical
limit), eager and under ``train.compile=true`` (torch.compile), side by side (issue 49, item 7).

The rung: the causal LM on pysource as ``conf/model/transformer.yaml`` + ``data=pysource``
compose it, at ``--width`` (default 128, the top of a CPU width ladder). The step is
normbench's own (``Trainer.step``: forward, cross-entropy, backward, gradient clipping, fused
AdamW, schedule), on the run's own batches. A step's FLOPs are counted once by
``torch.utils.flop_counter.FlopCounterMode`` over a forward and backward: matrix products and
attention only (elementwise work, norms and the optimizer are not counted, so the share is a
lower bound on how busy the machine is). 6 N T (N the non-embedding parameters, T the tokens
of a batch; Kaplan et al. 2020) is printed beside it. The matrix product is an n x n float32
``torch.mm`` (2 n^3 FLOPs). Each repeat times the matrix product, the eager step and the
compiled step back to back, interleaved; medians reported. The compiled model's first
``--warmup`` steps (its compilation) are timed apart: the compile seconds are what a run must
win back.

Run (a quiet machine; the README gives the command the figures came from):
    python benchmarks/step_efficiency.py [--width 128] [--threads 2] [--steps 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from timing import synchronize
from torch.utils.flop_counter import FlopCounterMode

from normbench.experiment.compose import compose
from normbench.store.rundir import RunDir
from normbench.training.trainer import Trainer


def rung(args: argparse.Namespace, compiled: bool) -> list[str]:
    """The overrides of the rung measured."""
    return [
        "data=pysource",
        f"model.width={args.width}",
        f"model.depth={args.depth}",
        f"batch_size={args.batch_size}",
        f"data.context={args.context}",
        f"threads={args.threads}",
        f"train.compile={str(compiled).lower()}",
        "device=cpu",
    ]


def trainer(args: argparse.Namespace, compiled: bool, runs: str) -> Trainer:
    cfg = compose(rung(args, compiled))
    built = Trainer(cfg, torch.device("cpu"), RunDir(runs, f"compiled-{compiled}"), False)
    built.setup()
    return built


def step_flops(run: Trainer, x: torch.Tensor, y: torch.Tensor) -> int:
    """Matrix-product and attention FLOPs of one forward and backward, eager."""
    with FlopCounterMode(display=False) as counter:
        logits = run.model(x)
        F.cross_entropy(logits.flatten(0, -2), y.flatten()).backward()
    run.model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def six_n_t(run: Trainer, tokens: int) -> int:
    """6 N T, N the parameters outside the embedding, the positions and the head."""
    outside = ("embed.", "pos", "head.")
    n = sum(p.numel() for name, p in run.model.named_parameters() if not name.startswith(outside))
    return 6 * n * tokens


def steps_seconds(run: Trainer, batches, steps: int) -> float:
    """Seconds per training step over ``steps`` steps."""
    start = time.perf_counter()
    for _ in range(steps):
        x, y, mask = next(batches)
        run.step(x, y, mask, want_grad_norm=False)
    synchronize(run.device)
    return (time.perf_counter() - start) / steps


def matmul_flops_per_s(size: int, iterations: int) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm-up
    start = time.perf_counter()
    for _ in range(iterations):
        torch.mm(a, b)
    return 2 * size**3 * iterations / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=30, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compile's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-iterations", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    modes = [False] if args.no_compile else [False, True]
    with tempfile.TemporaryDirectory() as runs:
        runs_by_mode = {compiled: trainer(args, compiled, runs) for compiled in modes}
        batches = {compiled: run.batches() for compiled, run in runs_by_mode.items()}
        x, y, _ = next(batches[False])
        flops = step_flops(runs_by_mode[False], x, y)
        formula = six_n_t(runs_by_mode[False], x.numel())
        warmup = {}
        for compiled, run in runs_by_mode.items():  # compilation happens here
            warmup[compiled] = steps_seconds(run, batches[compiled], args.warmup) * args.warmup
        timings: dict[str, list[float]] = {"matmul": [], "eager": [], "compiled": []}
        for _ in range(args.repeats):
            timings["matmul"].append(matmul_flops_per_s(args.matmul_size, args.matmul_iterations))
            for compiled, run in runs_by_mode.items():
                seconds = steps_seconds(run, batches[compiled], args.steps)
                timings["compiled" if compiled else "eager"].append(seconds)
    peak = statistics.median(timings["matmul"])
    print(
        f"rung: {' '.join(rung(args, False)[:-2])}; {args.threads} thread(s), "
        f"median of {args.repeats} x {args.steps} steps"
    )
    print(
        f"FLOPs a step: {flops / 1e9:.3f} G counted (matmuls, attention, fwd+bwd); "
        f"6NT {formula / 1e9:.3f} G"
    )
    print(f"matmul {args.matmul_size}^2: {peak / 1e9:.2f} GFLOP/s")
    print(f"{'step':<10}{'ms':>9}{'GFLOP/s':>10}{'/ matmul':>10}{'first steps s':>15}")
    for name in ("eager", "compiled")[: len(modes)]:
        seconds = statistics.median(timings[name])
        first = warmup[name == "compiled"]
        print(
            f"{name:<10}{seconds * 1e3:>9.2f}{flops / seconds / 1e9:>10.2f}"
            f"{flops / seconds / peak:>10.3f}{first:>15.2f}"
        )
    if not args.no_compile:
        eager, compiled = (statistics.median(timings[k]) for k in ("eager", "compiled"))
        pays_after = (warmup[True] - warmup[False]) / max(eager - compiled, 1e-12)
        print(
            f"compiled / eager step time: {compiled / eager:.3f}; compilation "
            f"{warmup[True] - warmup[False]:.1f} s more, won back after {pays_after:.0f} steps"
            if compiled < eager
            else f"compiled / eager step time: {compiled / eager:.3f}: compiling does not pay"
        )


if __name__ == "__main__":
    main()
