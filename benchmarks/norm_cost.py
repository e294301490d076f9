"""Norm cost: forward + backward time of every norm in both layouts against F.layer_norm on
the same tensor, so the price of each norm is visible. Custom norms (switchnorm, scalenorm,
dyt, adaln, masked statistics) should stay within 3x of the nearest fused op.

Activations of a typical size: channels (64, 64, 128) as in the CNN; tokens (64, 128, 64)
as in the Transformer; "masked" is the tokens layout with a quarter of the positions padded.

Run: python benchmarks/norm_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from normbench.norms import NORMS, make_norm

SHAPES = {"channels": (64, 64, 128), "tokens": (64, 128, 64), "masked": (64, 128, 64)}


def seconds(fn, x: torch.Tensor, iterations: int) -> float:
    for _ in range(3):
        fn(x).sum().backward()
    start = time.perf_counter()
    for _ in range(iterations):
        fn(x).sum().backward()
    return (time.perf_counter() - start) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(
        "forward+backward time relative to F.layer_norm on the same tensor "
        f"(median of {args.repeats}; absolute ms of F.layer_norm in the header)"
    )
    baselines, ratios = {}, {name: {} for name in NORMS}
    for column, shape in SHAPES.items():
        x = torch.randn(*shape, requires_grad=True)
        features = shape[1] if column == "channels" else shape[2]
        mask = None
        if column == "masked":
            mask = torch.ones(shape[0], shape[1], dtype=torch.bool)
            mask[:, -shape[1] // 4 :] = False

        normalized = shape[1:] if column == "channels" else shape[2:]

        def reference(t, normalized=normalized):
            return F.layer_norm(t, normalized)

        base = statistics.median(
            seconds(reference, x, args.iterations) for _ in range(args.repeats)
        )
        baselines[column] = base
        for name in NORMS:
            layout = "channels" if column == "channels" else "tokens"
            layer = make_norm(name, features, layout)
            # side by side: each repeat times the reference and the norm back to back, and
            # the ratio of the pair is kept (machine noise hits both alike)
            pairs = []
            for _ in range(args.repeats):
                ref = seconds(reference, x, args.iterations)
                own = seconds(lambda t, m=mask, layer=layer: layer(t, mask=m), x, args.iterations)
                pairs.append(own / ref)
            ratios[name][column] = statistics.median(pairs)
    header = "".join(f"{f'{c} ({baselines[c] * 1e3:.2f} ms)':>24}" for c in SHAPES)
    print(f"{'norm':<14}{header}")
    for name in NORMS:
        print(f"{name:<14}" + "".join(f"{ratios[name][c]:>24.2f}" for c in SHAPES))
    ghost = make_norm("batchnorm", 64, "channels", ghost_batch=4)
    x = torch.randn(*SHAPES["channels"], requires_grad=True)
    chunked = statistics.median(seconds(ghost, x, args.iterations) for _ in range(args.repeats))
    print(f"{'batchnorm, ghost_batch=4':<38}{chunked / baselines['channels']:>24.2f}")
    ghost = make_norm("switchnorm", 64, "channels", ghost_batch=4)
    chunked = statistics.median(seconds(ghost, x, args.iterations) for _ in range(args.repeats))
    print(f"{'switchnorm, ghost_batch=4':<38}{chunked / baselines['channels']:>24.2f}")


if __name__ == "__main__":
    main()
