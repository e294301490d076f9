"""The parts of a data-parallel run (``train.devices=N``, normbench.training.launch starts its
ranks) that a rank's training loop uses: its place among the ranks and its share of each
global batch, joining the process group over the loopback interface, the model under
DistributedDataParallel, and the collectives that keep the ranks' decisions the same (the
logged training loss over every rank's share, rank 0's evaluation on every rank, the running
statistics evaluation reads).

``batch_size`` stays the global batch: every rank draws the same permutation from the run's
seed and takes its share, the rows ``rank * share`` to ``(rank + 1) * share`` of each global
batch, so the ranks together take exactly the batch one process would, in the same order, on
every rerun. Only rank 0 evaluates and writes the run directory.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Ranks:
    """This process's place among the run's ranks."""

    rank: int
    world: int

    @property
    def leader(self) -> bool:
        """Rank 0: the one that evaluates and writes the run directory."""
        return self.rank == 0

    def share(self, batch_size: int) -> slice:
        """This rank's rows of a global batch of ``batch_size`` samples."""
        size = batch_size // self.world
        return slice(self.rank * size, (self.rank + 1) * size)


# ------------------------------------------------------------------------- joining
def join(
    cfg: dict, device: torch.device, place: Ranks | None = None, store_path: str = ""
) -> Ranks:
    """Join the run's process group over the loopback interface: through the rendezvous the
    launcher set up (MASTER_ADDR and MASTER_PORT), or, given this process's ``place`` among
    the tasks of one scheduler job, through a file store at ``store_path`` that every task
    of the job opens (no address and no port to agree on: the tasks meet in a file)."""
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    os.environ["NCCL_SOCKET_IFNAME"] = loopback_interface()
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=cfg["train"]["timeout_s"])
    if place is None:
        dist.init_process_group(backend, timeout=timeout)
    else:
        store = dist.FileStore(store_path, place.world)
        store.set_timeout(timeout)
        dist.init_process_group(
            backend, timeout=timeout, store=store, rank=place.rank, world_size=place.world
        )
    return Ranks(dist.get_rank(), dist.get_world_size())


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1 (lo on Linux, lo0 on macOS)."""
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return "lo"


def announce(trains: bool, device: torch.device) -> None:
    """Rank 0 tells the others whether it trains the run: it does unless the run was
    finished before (it holds the run's lock and decides; the others wait for its word)."""
    dist.broadcast(torch.tensor([int(trains)], device=device), src=0)


def leader_trains(device: torch.device) -> bool:
    """Wait for rank 0's word (``announce``): True when it trains the run."""
    word = torch.tensor([0], device=device)
    dist.broadcast(word, src=0)
    return bool(word.item())


# --------------------------------------------------------------- the training loop's parts
def reduce_window(loss: torch.Tensor, correct: torch.Tensor, samples: int) -> tuple[float, float]:
    """The global batch's mean training loss and accuracy since the last logging step, from
    each rank's sum of its per-step mean losses and its correct count: the mean of the
    ranks' means (equal shares) and the correct predictions over all samples."""
    totals = torch.stack(
        [loss.double().cpu(), correct.double().cpu(), torch.tensor(float(samples))]
    ).to(loss.device)
    dist.all_reduce(totals)
    world = dist.get_world_size()
    return totals[0].item() / world, totals[1].item() / totals[2].item()


def from_leader(values: tuple[float, ...], device: torch.device) -> tuple[float, ...]:
    """Rank 0's ``values`` on every rank, so that every rank takes the same decisions
    (divergence, the end) from the numbers rank 0 evaluated."""
    shared = torch.tensor(
        [math.nan if v is None else v for v in values], dtype=torch.float64, device=device
    )
    dist.broadcast(shared, src=0)
    return tuple(None if math.isnan(v) else v for v in shared.tolist())


@contextlib.contextmanager
def evaluation_statistics(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block, each layer with ``eval_stats="mean"`` holds the mean of its running
    statistics over the ranks (timm's distribute_bn, AlgoPerf's workloads); afterwards its own
    again, so that evaluation changes nothing in training. Layers with ``rank0`` keep rank
    0's, which rank 0 evaluates with (DistributedDataParallel's buffer broadcast). Every rank
    must enter it together (an all-reduce)."""
    averaged = [
        module
        for module in model.modules()
        if getattr(module, "eval_stats", None) == "mean" and hasattr(module, "running_mean")
    ]
    kept = [(m.running_mean.clone(), m.running_var.clone()) for m in averaged]
    for module in averaged:
        for buffer in (module.running_mean, module.running_var):
            dist.all_reduce(buffer)
            buffer.div_(dist.get_world_size())
    try:
        yield
    finally:
        for module, (mean, var) in zip(averaged, kept, strict=True):
            module.running_mean.copy_(mean)
            module.running_var.copy_(var)


def data_parallel_model(
    model: torch.nn.Module, device: torch.device, clock: AllReduceClock | None = None
) -> torch.nn.Module:
    """The model under DistributedDataParallel (gradients averaged over the ranks in the
    backward pass; rank 0's buffers broadcast at each forward, DDP's default), its gradient
    all-reduce timed by ``clock`` where one is given."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    wrapped = DistributedDataParallel(model, device_ids=ids)
    if clock is not None:
        wrapped.register_comm_hook(None, clock.hook)
    return wrapped


class AllReduceClock:
    """The wall time of each step's gradient all-reduce on a CPU (gloo), from the launch of
    its first gradient bucket to the completion of its last: a DDP communication hook that
    runs torch's ``allreduce_hook`` (DDP's own averaging: the same results) and notes both
    times. With one bucket (DDP's buckets hold 25 MB of gradients: every model here at its
    shipped sizes) nothing of the backward overlaps it, and it is the time the step waits for
    the ranks' gradients; with several, backward work between them is inside it (an upper
    bound). Not for CUDA, where the collective runs on a stream the host does not wait for."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None

    def hook(self, state, bucket):
        """DDP's communication hook: (its state, a dist.GradBucket) to a Future of the bucket's
        averaged gradients. Not annotated: DDP checks the annotations it finds, and under
        ``from __future__ import annotations`` they are strings it does not recognise."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        if self.first is None:
            self.first = time.perf_counter()

        def completed(future: torch.futures.Future) -> torch.Tensor:
            self.last = time.perf_counter()
            return future.value()

        return allreduce_hook(state, bucket).then(completed)

    def take(self) -> float | None:
        """The seconds of the all-reduce since the last call (None when none ran)."""
        seconds = None if self.first is None or self.last is None else self.last - self.first
        self.first = self.last = None
        return seconds
