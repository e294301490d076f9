"""Which training batches a run takes, in which order: every epoch a fresh permutation of the
samples, or windows at random positions of a byte stream, both drawn from the run's seed.

Apart from the loop (normbench.training.trainer) so that the order, and its state in a
checkpoint, can be read in one place; it decides a run's numbers, so the source hash covers it
(normbench.store.provenance).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from normbench.training.augment import augment, augmentation_generator

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # inputs, targets, mask


def batches(
    train: dict[str, torch.Tensor | None],
    context: int | None,
    order: DataOrder,
    share: slice | None = None,
) -> Iterator[Batch]:
    """Endless training batches from the split's tensors on the device (``train``): each
    epoch a fresh permutation from the seed. A byte stream (``context``: its window length)
    gives windows at random positions instead, drawn from the same generator. ``share``: a
    data-parallel rank's rows of each batch (every rank draws the whole batch, the same)."""
    if context is not None:
        stream = train["bytes"]
        offsets = torch.arange(context, device=order.device)
        while True:
            starts = torch.randint(
                len(stream) - context, (order.batch_size, 1), generator=order.generator
            )
            rows = starts[share or slice(None)].to(order.device) + offsets
            yield stream[rows].long(), stream[rows + 1].long(), None
    while True:
        idx = order.next()[share or slice(None)]
        mask = None if train["mask"] is None else train["mask"][idx]
        x = augment(train["x"][idx], order.augment, order.augmenting, order.batch_size, share)
        yield x, train["y"][idx], mask


class DataOrder:
    """Which training samples each step takes: every epoch a fresh permutation, drawn from a
    generator seeded with the run's seed (a byte stream draws its windows from the same
    generator, without epochs); images are augmented (data.augment) by draws from a generator
    of their own. Its state (the generator now and as it was before this
    epoch's draw, and the steps taken in this epoch) goes into a checkpoint."""

    def __init__(
        self,
        samples: int,
        batch_size: int,
        seed: int,
        device: torch.device,
        augment: str = "none",
    ):
        self.samples, self.batch_size, self.device = samples, batch_size, device
        self.augment = augment  # data.augment (normbench.training.augment)
        self.augmenting = augmentation_generator(seed)  # its draws, apart from the order's
        self.steps_per_epoch = samples // batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch_start: torch.Tensor | None = None  # generator state before this epoch
        self.order: torch.Tensor | None = None
        self.position = 0  # steps taken in this epoch

    def next(self) -> torch.Tensor:
        """The indices of the next batch."""
        if self.order is None or self.position == self.steps_per_epoch:
            self.draw()
        start = self.position * self.batch_size
        self.position += 1
        return self.order[start : start + self.batch_size]

    def draw(self) -> None:
        self.epoch_start = self.generator.get_state()
        self.order = torch.randperm(self.samples, generator=self.generator).to(self.device)
        self.position = 0

    def state_dict(self) -> dict:
        return {
            "generator": self.generator.get_state(),
            "epoch_start": self.epoch_start,
            "position": self.position,
            "augmenting": self.augmenting.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if "augmenting" in state:  # (checkpoints made before data.augment have none)
            self.augmenting.set_state(state["augmenting"])
        if state["epoch_start"] is None:  # before the first epoch, or a stream
            self.generator.set_state(state["generator"])
            return
        self.generator.set_state(state["epoch_start"])
        self.draw()  # the same permutation, and the generator where it was
        self.position = state["position"]
