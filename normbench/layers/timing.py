"""What a norm costs in time, on this machine: each norm's forward and backward timed against a
reference's, interleaved in blocks within one process (``normbench cost``).

On a shared machine the speed changes from one second to the next; what holds is a ratio of
two timings taken side by side. So every candidate (a norm and an implementation, norm.impl) is
timed once per block, in a fresh random order each block, with ``torch.utils.benchmark``; each
block gives each comparison one paired ratio, and the ratio reported is the geometric mean over
the blocks with a 95% t interval on the mean log ratio (``scipy.stats.t``, blocks - 1 degrees
of freedom): the blocks are the independent replicates, the load they share cancels in each
ratio. With one torch thread (the default) the clock is the thread's CPU time, which waiting
for a core that another process holds does not inflate; with more threads, wall time. A
verdict says ``faster`` or ``slower`` only where the interval excludes 1 (no margin:
any difference the interval shows), else ``inconclusive``.

Activations: ``tokens`` (the Transformer's layout) are (batch, positions, width), features
last; ``channels`` (the CNN's and the ResNet's) are (batch, width, positions), contiguous
(N, C, L: the 1-D activations of the shipped convolutional models, channels first, not
channels-last). ``bf16`` and ``fp16`` time the norm as a training step under autocast runs it:
a low-precision input, float32 parameters, inside ``torch.autocast``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats
from torch.utils import benchmark

from normbench.layers.keys import NORM_TABLE
from normbench.layers.norms import make_norm

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CPU = torch.device("cpu")
CONFIDENCE = 0.95
BLOCK_SECONDS = 0.01  # each candidate's share of a block: calls enough to fill it


@dataclass(frozen=True)
class Candidate:
    """One thing to time: a norm in one implementation, at one width and dtype."""

    norm: str
    impl: str
    width: int
    dtype: str


@dataclass(frozen=True)
class Ratio:
    """One comparison: the candidate's time over the reference's, its interval and verdict."""

    candidate: Candidate
    reference: Candidate
    ratio: float
    low: float
    high: float
    blocks: int

    @property
    def verdict(self) -> str:
        if self.high < 1:
            return "faster"
        if self.low > 1:
            return "slower"
        return "inconclusive"


def activation(layout: str, width: int, batch: int, positions: int, dtype: str) -> torch.Tensor:
    """A seeded activation of the layout's shape (see the module's docstring)."""
    shape = (batch, positions, width) if layout == "tokens" else (batch, width, positions)
    generator = torch.Generator().manual_seed(width)
    return torch.randn(shape, generator=generator).to(DTYPES[dtype])


def forward_backward(
    candidate: Candidate, layout: str, batch: int, positions: int, device: torch.device
) -> Callable[[], object]:
    """A call that runs the candidate's forward and backward once (gradients of the input and
    the parameters by torch.autograd.grad, so none accumulates), in train mode."""
    torch.manual_seed(0)
    groups = 8 if candidate.width % 8 == 0 else 1  # groupnorm: 8 groups where they divide
    layer = make_norm(candidate.norm, candidate.width, layout, impl=candidate.impl, groups=groups)
    layer.to(device)
    x = activation(layout, candidate.width, batch, positions, candidate.dtype).to(device)
    x.requires_grad_()
    inputs = [x, *layer.parameters()]
    low_precision = candidate.dtype != "fp32"

    def run() -> object:
        with torch.autocast(device.type, dtype=DTYPES[candidate.dtype], enabled=low_precision):
            y = layer(x)
        return torch.autograd.grad(y, inputs, torch.ones_like(y), allow_unused=True)

    return run


def timed_blocks(
    calls: dict[Candidate, Callable[[], object]],
    blocks: int,
    device: torch.device = CPU,
    seed: int = 0,
) -> dict[Candidate, list[float]]:
    """Seconds per call of each candidate in each block, the candidates in a fresh random order
    every block. Each is warmed up and calibrated first (calls to fill BLOCK_SECONDS). With one
    torch thread on a CPU the clock is the thread's CPU time (``time.thread_time``): time spent
    waiting for a core another process holds is not counted; with more, or on a GPU, wall time
    (torch.utils.benchmark waits for the GPU around each measurement)."""
    one_thread = device.type == "cpu" and torch.get_num_threads() == 1
    clock = time.thread_time if one_thread else time.perf_counter
    timers = {
        c: benchmark.Timer(stmt="run()", globals={"run": run}, timer=clock)
        for c, run in calls.items()
    }
    numbers = {}
    for candidate, timer in timers.items():
        timer.timeit(3)  # first calls: allocations, compilation
        once = timer.timeit(5).mean
        numbers[candidate] = max(1, math.ceil(BLOCK_SECONDS / max(once, 1e-9)))
    order = list(timers)
    shuffle = random.Random(seed)
    seconds: dict[Candidate, list[float]] = {c: [] for c in timers}
    for _ in range(blocks):
        shuffle.shuffle(order)
        for candidate in order:
            seconds[candidate].append(timers[candidate].timeit(numbers[candidate]).mean)
    return seconds


def paired_ratio(
    seconds: dict[Candidate, list[float]], candidate: Candidate, reference: Candidate
) -> Ratio:
    """The geometric mean of the per-block ratios and its 95% t interval on the log scale."""
    logs = np.log(np.array(seconds[candidate])) - np.log(np.array(seconds[reference]))
    mean = float(logs.mean())
    if len(logs) < 2 or logs.std(ddof=1) == 0:
        low = high = mean
    else:
        low, high = stats.t.interval(CONFIDENCE, len(logs) - 1, loc=mean, scale=stats.sem(logs))
    return Ratio(candidate, reference, math.exp(mean), math.exp(low), math.exp(high), len(logs))


def candidates(
    norms: list[str], impls: list[str], widths: list[int], dtypes: list[str]
) -> tuple[list[Candidate], list[str]]:
    """Every (norm, impl, width, dtype) a norm has, and a note for each implementation a norm
    lacks (left out, not refused: the grid crosses norms that have different ones)."""
    grid, notes = [], []
    for norm in norms:
        has = NORM_TABLE[norm].implementations
        for impl in impls:
            if impl not in has:
                notes.append(f"{norm}: no {impl} implementation (it has {', '.join(has)})")
                continue
            grid += [Candidate(norm, impl, w, d) for w in widths for d in dtypes]
    return grid, notes


def comparisons(grid: list[Candidate], reference: str) -> Iterator[tuple[Candidate, Candidate]]:
    """Each candidate against the reference norm in the same implementation, width and dtype;
    and each implementation other than the module against the module of its norm."""
    present = set(grid)
    for c in grid:
        against_norm = Candidate(reference, c.impl, c.width, c.dtype)
        if c.norm != reference and against_norm in present:
            yield c, against_norm
        against_module = Candidate(c.norm, "module", c.width, c.dtype)
        if c.impl != "module" and against_module in present:
            yield c, against_module


def group_of(c: Candidate) -> tuple[int, str]:
    """Candidates are timed against each other within one width and dtype."""
    return c.width, c.dtype


def measure(
    norms: list[str],
    impls: list[str],
    widths: list[int],
    dtypes: list[str],
    layout: str,
    reference: str,
    blocks: int,
    batch: int,
    positions: int,
    device: torch.device,
) -> tuple[dict[Candidate, list[float]], list[Ratio], list[str]]:
    """Time every candidate, interleaved in blocks within each (width, dtype), and compare."""
    grid, notes = candidates(norms, impls, widths, dtypes)
    seconds: dict[Candidate, list[float]] = {}
    for group in dict.fromkeys(group_of(c) for c in grid):
        members = [c for c in grid if group_of(c) == group]
        calls = {c: forward_backward(c, layout, batch, positions, device) for c in members}
        seconds.update(timed_blocks(calls, blocks, device))
    ratios = [paired_ratio(seconds, c, r) for c, r in comparisons(grid, reference)]
    return seconds, ratios, notes
