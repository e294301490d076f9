"""What a run's training steps cost: FLOPs, memory saved for backward, step time, throughput,
and the load of the machine while it ran. The trainer attaches one ``StepCost`` before its
first step and adds ``StepCost.summary()`` to the run's summary; nothing of it enters the run
id (it observes a run, as ``train_s`` does).

- **FLOPs per step** (``matmul_flops_per_step``): one training step's forward and backward
  counted by ``torch.utils.flop_counter.FlopCounterMode``, which counts matrix products,
  convolutions and attention only. Elementwise work is excluded: the norms' own arithmetic
  (means, variances, scaling), activations, the loss and the optimizer's update are not in it.
- **Bytes saved for backward** (``saved_bytes_per_step``): every tensor the forward of that
  step saves for its backward (``torch.autograd.graph.saved_tensors_hooks``), counted by
  storage: each distinct storage once at its whole size (a view saved twice, or two views of
  one tensor, count once), the parameters' own storages left out (they are held anyway). It
  is exact on any device, the activation memory the step needs at its peak.
- **Peak memory** (``peak_memory_bytes``, CUDA only): ``torch.cuda.max_memory_allocated``
  over the training steps of this attempt; None elsewhere.
- **Step time** (``step_s_median``, ``step_s_iqr``: the 75th less the 25th percentile, over
  ``timed_steps`` steps): each training step after the first ``WARMUP_STEPS`` of this
  attempt, the optimizer's update included, timed by CUDA events on a GPU (no wait for the
  device in the loop) and ``time.perf_counter`` elsewhere. The steps the diagnostics watch are
  left out (their hooks make them slower).
- **Throughput** (``examples_per_s``, ``tokens_per_s``): the batch, and its positions
  (padding included; None for inputs that are not sequences), over the median step time.
- **All-reduce share** (``allreduce_share_median``, CPU ranks of a data-parallel run only):
  the median over the timed steps of the gradient all-reduce's wall time over the step's
  (normbench.training.distributed.AllReduceClock: first bucket launched to last completed);
  None for one process and on CUDA.
- **Load** (``load_start``, ``load_end``): the 1-minute load average (``os.getloadavg``) when
  training began and ended, with ``cpu_count``: a run timed on a busy machine says so. The
  host and the device are meta.json's ``host`` and ``device``.

The counting step changes nothing the training reads: it runs on the model itself before the
first update, with the random number generators forked (their states restored), the buffers
(running statistics) and gradients put back as they were, no optimizer step, and the data
order restored, so that a run's metrics are bit for bit those it has without it (tested). It
runs eagerly (``torch.compiler.set_stance("force_eager")``): compiled code is counted as the
eager code it computes.
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from normbench.training.batches import Batch, DataOrder
from normbench.training.distributed import AllReduceClock

WARMUP_STEPS = 5  # steps of each attempt left untimed: first calls, allocator, caches


class Trainer(Protocol):
    """What the meter reads of the training loop (normbench.training.trainer.Trainer), and
    its ``step``, which it wraps. (A protocol: the trainer imports this module.)"""

    cfg: dict
    device: torch.device
    model: torch.nn.Module
    data_order: DataOrder
    step: Callable[..., tuple]
    allreduce_clock: AllReduceClock | None

    def batches(self) -> Iterator[Batch]: ...

    def autocast(self) -> contextlib.AbstractContextManager: ...


def saved_bytes(
    model: torch.nn.Module,
) -> tuple[Callable[[], int], contextlib.AbstractContextManager]:
    """A counter of the bytes saved for backward while the returned context is open, and the
    context: each distinct storage once at its whole size, ``model``'s parameters left out."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # no storage of its own (sparse, nested)
            key, size = id(tensor), tensor.numel() * tensor.element_size()
        if key not in parameters:
            seen.setdefault(key, size)
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    return (lambda: sum(seen.values())), hooks


@contextlib.contextmanager
def unchanged(model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Inside, ``model`` may run forward and backward: on leaving, its buffers and gradients
    are as they were and every random number generator is where it was."""
    buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    gradients = [(p, p.grad) for p in model.parameters()]
    devices = [device] if device.type == "cuda" else []  # the CPU's is always forked
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            with torch.no_grad():
                for buffer, saved in buffers:
                    buffer.copy_(saved)
            for p, grad in gradients:
                p.grad = grad


def count_step(
    model: torch.nn.Module, loss: Callable[[], torch.Tensor], device: torch.device
) -> tuple[int, int]:
    """(FLOPs, bytes saved for backward) of ``loss()`` and its backward through ``model``,
    eagerly, leaving the model's buffers, gradients and the random number generators as they
    were (``unchanged``)."""
    total, hooks = saved_bytes(model)
    counter = FlopCounterMode(display=False)
    with unchanged(model, device), torch.compiler.set_stance("force_eager"), counter:
        with hooks:
            value = loss()
        value.backward()
    return counter.get_total_flops(), total()


def next_batch(trainer: Trainer) -> Batch:
    """The batch the trainer's first step will take, drawn from a copy of its data order
    (its own generator at the same state), so that the trainer's order does not move."""
    live = trainer.data_order
    order = copy.copy(live)
    order.generator = torch.Generator().set_state(live.generator.get_state())
    trainer.data_order = order
    try:
        return next(trainer.batches())
    finally:
        trainer.data_order = live


class StepCost:
    """The cost of one run's training steps (see the module's docstring): counted once on
    attaching, timed at every step after, written into the summary at the end."""

    def __init__(self, trainer: Trainer):
        self.device = trainer.device
        self.batch_size = trainer.cfg["batch_size"]
        self.flops: int | None = None
        self.saved: int | None = None
        self.positions: int | None = None  # per sample, where the inputs are sequences
        self.seconds: list[float] = []  # CPU: each timed step's seconds
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # CUDA: each step's
        self.steps_seen = 0
        self.load_start = os.getloadavg()[0]
        self.clock = trainer.allreduce_clock  # a CPU rank's: its gradient all-reduce timed
        self.allreduce_shares: list[float] = []  # each timed step's all-reduce over its time

    @classmethod
    def attach(cls, trainer: Trainer) -> StepCost:
        """Count one step of ``trainer`` (FLOPs, bytes saved for backward), changing nothing it
        will train with, then time each of its steps from here on: ``trainer.step`` is wrapped
        by ``timed``. Call once, after set-up and before the first step."""
        meter = cls(trainer)
        meter.count(trainer)
        trainer.step = meter.timed(trainer.step)
        if meter.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(meter.device)
        return meter

    def count(self, trainer: Trainer) -> None:
        """FLOPs and bytes saved for backward of one step on the trainer's next batch (drawn
        from a copy of its data order), the loss a cross-entropy."""
        x, y, mask = next_batch(trainer)
        if x.dim() == 2 and not x.is_floating_point():  # (N, T) token ids: a sequence
            self.positions = x.shape[1]

        def loss() -> torch.Tensor:
            with trainer.autocast():
                logits = trainer.model(x, mask=mask)
            return F.cross_entropy(logits.float().flatten(0, -2), y.flatten())

        self.flops, self.saved = count_step(trainer.model, loss, self.device)

    def timed(self, step: Callable[..., tuple]) -> Callable[..., tuple]:
        """``step`` (Trainer.step), timed after the warm-up unless it is diagnosed."""

        def timed_step(x, y, mask, want_grad_norm: bool, diagnose: bool = False) -> tuple:
            self.steps_seen += 1
            if diagnose or self.steps_seen <= WARMUP_STEPS:
                return step(x, y, mask, want_grad_norm, diagnose)
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                result = step(x, y, mask, want_grad_norm)
                end.record()
                self.events.append((start, end))
                return result
            if self.clock is not None:
                self.clock.take()  # what the untimed steps before this one left
            tick = time.perf_counter()
            result = step(x, y, mask, want_grad_norm)
            self.seconds.append(time.perf_counter() - tick)
            allreduce = self.clock.take() if self.clock is not None else None
            if allreduce is not None:
                self.allreduce_shares.append(allreduce / self.seconds[-1])
            return result

        return timed_step

    def step_seconds(self) -> list[float]:
        """Each timed step's seconds (CUDA: waits once for the device, then reads the events)."""
        if not self.events:
            return self.seconds
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) / 1000 for start, end in self.events]

    def summary(self) -> dict[str, float | int | None]:
        """The summary's cost keys (None where a number could not be had: fewer than two
        timed steps, or peak memory off CUDA)."""
        seconds = self.step_seconds()
        median = iqr = None
        if len(seconds) >= 2:
            quartiles = statistics.quantiles(seconds, n=4, method="inclusive")
            median, iqr = statistics.median(seconds), quartiles[2] - quartiles[0]
        examples = self.batch_size / median if median else None
        cuda = self.device.type == "cuda"
        return {
            "matmul_flops_per_step": self.flops,
            "saved_bytes_per_step": self.saved,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(self.device) if cuda else None,
            "step_s_median": median,
            "step_s_iqr": iqr,
            "timed_steps": len(seconds),
            "examples_per_s": examples,
            "tokens_per_s": examples * self.positions if examples and self.positions else None,
            "load_start": self.load_start,
            "load_end": os.getloadavg()[0],
            "cpu_count": os.cpu_count(),
            "allreduce_share_median": (
                statistics.median(self.allreduce_shares) if self.allreduce_shares else None
            ),
        }
