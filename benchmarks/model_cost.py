"""Model cost: normbench's Pre-LN Transformer units against torch.nn.TransformerEncoder
(norm_first=True) of the same width, depth, heads and MLP size (target ratio <= 1.10).

Both take the same (N, T, D) input; forward + backward time of the encoder stack (embedding
and head excluded: they are not what differs). Interleaved repeats, medians.

Run: python benchmarks/model_cost.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from timing import add_device_argument, fwd_bwd_seconds
from torch import nn

from normbench.experiment.compose import compose
from normbench.layers.models import build_model

SHAPES = [  # (batch, tokens, width, depth, heads)
    (32, 10, 64, 4, 4),  # the default run
    (64, 32, 128, 6, 8),
]


def ours(batch: int, tokens: int, width: int, depth: int, heads: int) -> nn.Module:
    cfg = compose(
        [
            f"model.width={width}",
            f"model.depth={depth}",
            f"model.heads={heads}",
            "model.mlp_ratio=2",
            "norm=layernorm",
            "placement=pre",
        ]
    )
    model = build_model(cfg, (1, 40), 10)

    class Stack(nn.Module):  # the units and the final norm, as the model runs them
        def __init__(self):
            super().__init__()
            self.units, self.final_norm = model.units, model.final_norm

        def forward(self, h):
            for unit in self.units:
                h = unit(h)
            return self.final_norm(h)

    return Stack()


def reference(batch: int, tokens: int, width: int, depth: int, heads: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(
        width,
        heads,
        dim_feedforward=2 * width,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
    )
    return nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(width), enable_nested_tensor=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=10)
    add_device_argument(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    where = device.type if device.type != "cpu" else f"cpu, {torch.get_num_threads()} threads"
    print(f"forward+backward ms, fp32, {where}, median of {args.repeats}")
    print(f"{'N,T,D,depth,heads':<22}{'torch':>9}{'normbench':>11}{'ratio':>8}{'target':>9}")
    for shape in SHAPES:
        x = torch.randn(shape[0], shape[1], shape[2], device=device)
        a, b = ours(*shape).to(device), reference(*shape).to(device)
        times_a, times_b = [], []
        for _ in range(args.repeats):
            times_b.append(fwd_bwd_seconds(b, x, args.iterations, warmup=5))
            times_a.append(fwd_bwd_seconds(a, x, args.iterations, warmup=5))
        ms_a, ms_b = statistics.median(times_a) * 1e3, statistics.median(times_b) * 1e3
        print(
            f"{','.join(map(str, shape)):<22}{ms_b:>9.2f}{ms_a:>11.2f}{ms_a / ms_b:>8.2f}"
            f"{'<= 1.10':>9}"
        )


if __name__ == "__main__":
    main()
