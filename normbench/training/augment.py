"""data.augment: what the training loop does to each batch of images before the step, on the
device: ``crop_flip`` pads each image by 4 pixels (reflected, as airbench does; Jordan 2024)
and takes a random crop of its size, then flips it left-right with probability 1/2 (the
augmentation of the CIFAR-10 ResNets since He et al. 2016); ``flip`` only flips.

The draws come from a generator of their own, seeded from the run's seed and kept in the
data order's checkpoint state (normbench.training.batches), so a resumed run augments as an
uninterrupted one does. Validation and test are never augmented.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD = 4  # pixels each side: a crop moves an image by up to 4 pixels either way
SALT = 0x5EED_A116  # the augmentation generator's seed is the run's plus this


def augmentation_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed + SALT)


def augment(
    x: torch.Tensor,
    kind: str,
    generator: torch.Generator,
    batch_size: int,
    share: slice | None = None,
) -> torch.Tensor:
    """``x``, the rows ``share`` of a batch of ``batch_size`` images (b, C, H, W), augmented
    as ``kind`` says. The draws are made for the whole batch, so every data-parallel rank
    draws the same and takes its own rows."""
    if kind == "none":
        return x
    rows = share or slice(None)
    flips = torch.rand(batch_size, generator=generator)[rows] < 0.5
    if kind == "crop_flip":
        shifts = torch.randint(0, 2 * PAD + 1, (batch_size, 2), generator=generator)[rows]
        x = crop(x, shifts.to(x.device))
    return torch.where(flips.to(x.device)[:, None, None, None], x.flip(3), x)


def crop(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Each image of ``x`` reflect-padded by PAD and cropped back to its size at its own
    offset (``shifts``: (b, 2) rows and columns, 0 .. 2 PAD): two gathers, rows then columns
    (a few times faster than one four-index lookup)."""
    b, channels, height, width = x.shape
    padded = F.pad(x, (PAD, PAD, PAD, PAD), mode="reflect")
    rows = shifts[:, 0, None] + torch.arange(height, device=x.device)  # (b, H)
    rows = rows[:, None, :, None].expand(b, channels, height, width + 2 * PAD)
    cropped = padded.gather(2, rows)
    cols = shifts[:, 1, None] + torch.arange(width, device=x.device)  # (b, W)
    return cropped.gather(3, cols[:, None, None, :].expand(b, channels, height, width))
