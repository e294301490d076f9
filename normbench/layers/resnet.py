"""model=resnet: He et al.'s ResNet of basic blocks, a norm after every convolution (v1 or
v2), the network Wu & He (GroupNorm) and Qiao et al. (Weight Standardization) measured batch
sensitivity on.

Apart from normbench.layers.models because it shares nothing with the residual unit there:
its blocks place their norms as the papers do, not by ``placement`` (only post, v1, and pre,
v2), so the placement study does not apply to it. ``build_model`` (normbench.layers.models)
builds it for model=resnet.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from normbench.layers.keys import RESNET_PLACEMENTS
from normbench.layers.norms import NormFactory, at_position
from normbench.layers.weight_std import StdConv1d, StdConv2d


class BasicBlock(nn.Module):
    """He et al.'s basic block at constant width with an identity shortcut, a norm after each
    of its two convolutions (bias-free, as in the paper: the norm's shift is the bias).

    ``version="post"``, v1 (He et al. 2016a): relu(x + N2(conv2(relu(N1(conv1(x)))))).
    ``version="pre"``, v2 pre-activation (He et al. 2016b): x + conv2(relu(N2(conv1(relu(N1(x)))))).
    ``std_conv`` is the convolution for the layers whose output goes straight into a norm
    (Weight Standardization's, when it is on): in v1 both, in v2 conv1 only (conv2 feeds the
    addition)."""

    def __init__(
        self,
        width: int,
        kernel_size: int,
        conv: type[nn.Module],
        std_conv: type[nn.Module],
        make_norm: NormFactory,
        version: str,
    ):
        super().__init__()
        if version not in RESNET_PLACEMENTS:
            raise ValueError(f"version must be one of {RESNET_PLACEMENTS}, got {version!r}")
        self.version = version
        pad = kernel_size // 2
        self.conv1 = std_conv(width, width, kernel_size, padding=pad, bias=False)
        self.norm1 = make_norm(width, "channels")
        second = std_conv if version == "post" else conv
        self.conv2 = second(width, width, kernel_size, padding=pad, bias=False)
        self.norm2 = make_norm(width, "channels")

    def forward(self, x: Tensor) -> Tensor:
        if self.version == "post":
            h = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
            return F.relu(x + h)
        return x + self.conv2(F.relu(self.norm2(self.conv1(F.relu(self.norm1(x))))))


class ResNet(nn.Module):
    """He et al.'s ResNet at small width, 1D for signals and 2D for images: a stem convolution,
    ``depth`` basic blocks at constant width and resolution (identity shortcuts), global
    average pooling, linear head; ReLU throughout.

    ``placement``: ``post`` is v1 (the stem is conv-N-ReLU, each block ends with ReLU after the
    addition), ``pre`` is v2 (the stem is a bare convolution, each block starts with N-ReLU, and
    a final N-ReLU precedes pooling, as in He et al. 2016b). ``model.weight_std``: Weight
    Standardization of exactly the convolutions followed by a norm (Qiao et al.: v1's stem and
    every block convolution; v2's first convolution of each block). ``model.zero_init_last_norm``:
    each block's last norm starts with its gain (gamma) at 0, so that every residual branch
    starts as nothing and each block as the identity (Goyal et al. 2017, the recipe Wu & He
    2018 train with); a norm without a gain (none, ScaleNorm's scalar aside) is left as it is."""

    def __init__(
        self,
        model: dict,
        make_norm: NormFactory,
        placement: dict,
        input_shape: tuple[int, ...],
        num_classes: int,
    ):
        super().__init__()
        version = placement["name"]
        if version not in RESNET_PLACEMENTS:
            raise ValueError(f"placement must be one of {RESNET_PLACEMENTS}, got {version!r}")
        width, depth, kernel = model["width"], model["depth"], model["kernel_size"]
        channels, *sides = input_shape
        std_conv, conv = {1: (StdConv1d, nn.Conv1d), 2: (StdConv2d, nn.Conv2d)}[len(sides)]
        std_conv = std_conv if model["weight_std"] else conv
        self.version = version
        stem = std_conv if version == "post" else conv
        self.stem = stem(channels, width, kernel, padding=kernel // 2, bias=False)
        self.stem_norm = make_norm(width, "channels") if version == "post" else None
        self.blocks = nn.ModuleList(
            BasicBlock(width, kernel, conv, std_conv, make_norm, version) for _ in range(depth)
        )
        if model.get("zero_init_last_norm", False):
            for block in self.blocks:
                gain = getattr(block.norm2, "weight", None)
                if isinstance(gain, nn.Parameter):
                    nn.init.zeros_(gain)
        final = at_position(make_norm, "final")
        self.final_norm = final(width, "channels") if version == "pre" else None
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        h = self.stem(x)
        if self.stem_norm is not None:
            h = F.relu(self.stem_norm(h))
        for block in self.blocks:
            h = block(h)
        if self.final_norm is not None:
            h = F.relu(self.final_norm(h))
        return self.head(h.flatten(2).mean(2))
