"""Norm cost: forward + backward time of every norm in both layouts against F.layer_norm on
the same tensor, so the price of each norm is visible; then each custom norm (switchnorm,
scalenorm, dyt, adaln, masked statistics) against its nearest fused op (target: within 3x).

Activations of a typical size: channels (64, 64, 128) as in the CNN; tokens (64, 128, 64)
as in the Transformer; "masked" is the tokens layout with a quarter of the positions padded.
Every ratio is the median over repeats of a pair timed back to back (machine noise hits both).

Run: python benchmarks/norm_cost.py [--repeats 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from timing import add_device_argument, fwd_bwd_seconds

from normbench.layers.norms import NORMS, make_norm

SHAPES = {"channels": (64, 64, 128), "tokens": (64, 128, 64), "masked": (64, 128, 64)}
FEATURES = 64


def layer_norm(t: torch.Tensor, column: str) -> torch.Tensor:
    """The reference: per sample over (C, S) for channels, per token over D for tokens."""
    return F.layer_norm(t, t.shape[1:] if column == "channels" else t.shape[-1:])


def batch_norm(t: torch.Tensor, column: str) -> torch.Tensor:
    if column == "channels":
        return F.batch_norm(t, None, None, training=True)
    return F.batch_norm(t.transpose(1, 2), None, None, training=True).transpose(1, 2)


def instance_norm(t: torch.Tensor, column: str) -> torch.Tensor:
    if column == "channels":
        return F.instance_norm(t)
    return F.instance_norm(t.transpose(1, 2)).transpose(1, 2)


# Custom norm -> (its nearest fused op, why): the op it stands in for or is built around.
# Masked statistics are priced against the same fused op on the unmasked tensor.
NEAREST = {
    "switchnorm": (batch_norm, "F.batch_norm: SwitchNorm is a drop-in for BatchNorm"),
    "scalenorm": (layer_norm, "F.layer_norm: one norm per sample/token"),
    "dyt": (layer_norm, "F.layer_norm: the op DyT replaces"),
    "adaln": (layer_norm, "F.layer_norm: AdaLN is it plus a modulation"),
    "batchnorm": (batch_norm, "F.batch_norm on all tokens"),
    "instancenorm": (instance_norm, "F.instance_norm on all tokens"),
}
CUSTOM = [  # (norm, column) pairs the 3x target is about
    *((name, column) for name in ("switchnorm", "scalenorm", "dyt", "adaln") for column in SHAPES),
    ("batchnorm", "masked"),
    ("instancenorm", "masked"),
]


def ratio(own, reference, x: torch.Tensor, repeats: int, iterations: int) -> float:
    """Median over repeats of own / reference, each pair timed back to back."""
    pairs = [
        fwd_bwd_seconds(own, x, iterations) / fwd_bwd_seconds(reference, x, iterations)
        for _ in range(repeats)
    ]
    return statistics.median(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    add_device_argument(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    inputs, masks = {}, {}
    for column, shape in SHAPES.items():
        inputs[column] = torch.randn(*shape, device=device, requires_grad=True)
        masks[column] = None
        if column == "masked":
            masks[column] = torch.ones(shape[:2], dtype=torch.bool, device=device)
            masks[column][:, -shape[1] // 4 :] = False

    def norm_fn(name: str, column: str, **options):
        layout = "channels" if column == "channels" else "tokens"
        layer = make_norm(name, FEATURES, layout, **options).to(device)
        return lambda t: layer(t, mask=masks[column])

    def reference_fn(op, column: str):
        return lambda t: op(t, column)

    reference_ms = {
        column: statistics.median(
            fwd_bwd_seconds(reference_fn(layer_norm, column), x, args.iterations)
            for _ in range(args.repeats)
        )
        * 1e3
        for column, x in inputs.items()
    }
    print(
        f"forward+backward time relative to F.layer_norm on the same tensor, {device.type} "
        f"(median of {args.repeats} pairs; F.layer_norm's ms in the header)"
    )
    print(f"{'norm':<28}" + "".join(f"{f'{c} ({reference_ms[c]:.3f} ms)':>24}" for c in SHAPES))
    rows = [(name, {}) for name in NORMS]
    rows += [("batchnorm, ghost_batch=4", {"ghost_batch": 4})]
    rows += [("switchnorm, ghost_batch=4", {"ghost_batch": 4})]
    for label, options in rows:
        name = label.split(",")[0]
        cells = []
        for column, x in inputs.items():
            if options and column != "channels":
                cells.append(f"{'':>24}")
                continue
            own = norm_fn(name, column, **options)
            value = ratio(own, reference_fn(layer_norm, column), x, args.repeats, args.iterations)
            cells.append(f"{value:>24.2f}")
        print(f"{label:<28}" + "".join(cells))

    print("\ncustom norms against their nearest fused op (target <= 3.00)")
    print(f"{'norm':<14}{'column':<10}{'ratio':>7}  nearest fused op")
    for name, column in CUSTOM:
        op, why = NEAREST[name]
        value = ratio(
            norm_fn(name, column),
            reference_fn(op, column),
            inputs[column],
            args.repeats,
            args.iterations,
        )
        print(f"{name:<14}{column:<10}{value:>7.2f}  {why}")


if __name__ == "__main__":
    main()
