"""``normbench check-norm``: does a norm keep the contract every model relies on?

The contract (docs/your-own-norm.md): ``Norm(num_features, layout, **options)`` builds an
``nn.Module`` whose ``forward(x, mask=None, cond=None)`` takes channels (N, C, *S) or tokens
(N, T, D) with an optional padding mask (N, T, True = real token). Each check below builds the
norm, feeds it small seeded inputs on the CPU and states what holds; a norm passes when every
row does. Checks are deliberately behavioural: they see what a model would see, not the code.
A check that reads the output runs only on an output of the input's shape: after a wrong shape
it is skipped, not passed (on a wrong-shaped output it would check nothing a model relies on).
"""

from __future__ import annotations

import copy
import inspect
import io
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

LAYOUTS = ("channels", "tokens")
FEATURES = 8
BATCH = 6


@dataclass(frozen=True)
class Check:
    """One row of the table: what was checked, in which layout, whether it held, and why not
    (a skipped row did not hold: it was not run)."""

    name: str
    layout: str
    passed: bool
    detail: str = ""
    skipped: bool = False


WRONG_DTYPE = "output dtype"  # how shape_and_dtype's one failure that skips nothing begins
SKIPPED = "skipped: the output's shape is wrong"


def sample(layout: str, seed: int = 0, scale: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """A seeded input and, for tokens, a padding mask with a different length per sample."""
    generator = torch.Generator().manual_seed(seed)
    if layout == "channels":
        return torch.randn(BATCH, FEATURES, 5, generator=generator) * scale + 0.5, None
    x = torch.randn(BATCH, 7, FEATURES, generator=generator) * scale + 0.5
    lengths = torch.tensor([7, 6, 5, 4, 3, 7])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    return x, mask


def uses_ghost_batch(factory: Callable[..., nn.Module]) -> bool:
    try:
        return "ghost_batch" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def check_norm(factory: Callable[..., nn.Module], options: dict | None = None) -> list[Check]:
    """Every check in both layouts. ``factory(num_features, layout, **options)`` builds the
    norm (a class, or a function returning a module)."""
    options = options or {}
    rows = []
    for layout in LAYOUTS:

        def build(seed: int = 0, layout: str = layout, **extra) -> nn.Module:
            torch.manual_seed(seed)
            return factory(FEATURES, layout, **{**options, **extra})

        try:
            built = build()
            if not isinstance(built, nn.Module):
                raise TypeError(f"built a {type(built).__name__}, not an nn.Module")
        except Exception as err:  # the contract's first clause
            rows.append(Check("builds as Norm(num_features, layout)", layout, False, _err(err)))
            continue
        rows.append(Check("builds as Norm(num_features, layout)", layout, True))
        wrong_shape = False
        for name, check, reads_output in CHECKS:
            if name == "ghost batches" and not uses_ghost_batch(factory):
                continue
            if reads_output and wrong_shape:
                rows.append(Check(name, layout, False, SKIPPED, skipped=True))
                continue
            try:
                detail = check(build, layout)
            except Exception as err:  # a norm that raises fails the row, never the tool
                detail = _err(err)
            if check is shape_and_dtype and detail and not detail.startswith(WRONG_DTYPE):
                wrong_shape = True  # no tensor of the input's shape (or forward raised)
            rows.append(Check(name, layout, detail is None, detail or ""))
    return rows


def _err(err: Exception) -> str:
    return f"raised {type(err).__name__}: {err}"[:160]


def _close(a: Tensor, b: Tensor, tolerance: float = 1e-5) -> bool:
    return a.shape == b.shape and bool(
        torch.allclose(a.float(), b.float(), atol=tolerance, rtol=tolerance)
    )


# ----------------------------------------------------------------------------------- checks
def shape_and_dtype(build, layout) -> str | None:
    x, mask = sample(layout)
    y = build()(x, mask=mask)
    if not isinstance(y, Tensor):
        return f"returned {type(y).__name__}, not a tensor"
    if y.shape != x.shape:
        return f"output shape {tuple(y.shape)} != input shape {tuple(x.shape)}"
    if y.dtype != x.dtype:
        return f"{WRONG_DTYPE} {y.dtype} != input dtype {x.dtype}"
    return None


def padding_ignored(build, layout) -> str | None:
    """Changing padded positions changes neither the output at real tokens nor a buffer."""
    if layout == "channels":
        return None  # no padding in the channels layout
    x, mask = sample(layout)
    noisy = x.clone()
    noisy[~mask] = torch.randn(int((~mask).sum()), FEATURES) * 100 + 50
    first, second = build(), build()
    y1, y2 = first(x, mask=mask), second(noisy, mask=mask)
    if not _close(y1[mask], y2[mask], 1e-4):
        gap = (y1[mask] - y2[mask]).abs().max().item()
        return f"padding values reach real tokens' outputs (max change {gap:.3g})"
    for (name, a), (_, b) in zip(first.named_buffers(), second.named_buffers(), strict=True):
        if not _close(a, b, 1e-4):
            return f"padding values reach buffer {name}"
    return None


def eval_mode(build, layout) -> str | None:
    """In eval mode no buffer moves, and a sample's output does not depend on the others in
    its batch (batch statistics in eval mode would make predictions depend on the batch)."""
    norm = build()
    x, mask = sample(layout)
    norm.train()
    norm(x, mask=mask)  # one training step's statistics
    norm.eval()
    before = {name: b.clone() for name, b in norm.named_buffers()}
    with torch.no_grad():
        together = norm(x, mask=mask)
        alone = norm(x[:1], mask=None if mask is None else mask[:1])
    for name, buffer in norm.named_buffers():
        if not _close(before[name], buffer, 0):
            return f"buffer {name} changed in eval mode"
    real = slice(None) if mask is None else mask[:1]
    if not _close(together[:1][real], alone[real], 1e-4):
        return "in eval mode a sample's output depends on the rest of its batch"
    return None


def low_precision(build, layout) -> str | None:
    """Under bf16 and fp16 autocast (CPU) the output is finite, keeps the input's dtype and
    stays within 0.1 of float32 relative to its scale."""
    x, mask = sample(layout)
    reference = build()(x, mask=mask).detach()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            y = build()(x, mask=mask).detach()
        if not torch.isfinite(y).all():
            return f"non-finite output under {dtype} autocast"
        relative = (y.float() - reference).abs().max() / reference.abs().max().clamp_min(1e-6)
        if relative > 0.1:
            return f"under {dtype} autocast the output is {relative:.2f} off float32"
    return None


def ghost_batches(build, layout) -> str | None:
    """With ghost_batch=k, a batch is normalized as its chunks of k would be one by one."""
    x, mask = sample(layout)
    whole = build(ghost_batch=2)(x, mask=mask)
    parts = torch.cat(
        [
            build(ghost_batch=None)(x[i : i + 2], mask=None if mask is None else mask[i : i + 2])
            for i in range(0, BATCH, 2)
        ]
    )
    real = slice(None) if mask is None else mask
    if not _close(whole[real], parts[real], 1e-4):
        return "ghost_batch=2 differs from normalizing each chunk of 2 on its own"
    return None


def finite_gradients(build, layout) -> str | None:
    norm = build()
    x, mask = sample(layout)
    x.requires_grad_(True)
    y = norm(x, mask=mask)
    real = y if mask is None else y[mask]
    (real * torch.linspace(-1, 1, real.numel()).view_as(real)).sum().backward()
    if x.grad is None or not torch.isfinite(x.grad).all():
        return "the input's gradient is missing or not finite"
    for name, parameter in norm.named_parameters():
        if parameter.grad is not None and not torch.isfinite(parameter.grad).all():
            return f"gradient of {name} is not finite"
    return None


def state_dict_round_trip(build, layout) -> str | None:
    norm = build(seed=1)
    x, mask = sample(layout)
    norm.train()
    norm(x, mask=mask)  # move any running statistics
    buffer = io.BytesIO()
    torch.save(norm.state_dict(), buffer)
    buffer.seek(0)
    fresh = build(seed=2)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    norm.eval()
    fresh.eval()
    if not _close(norm(x, mask=mask), fresh(x, mask=mask), 0):
        return "a copy loaded from the state dict gives another output"
    return None


def seeded(build, layout) -> str | None:
    x, mask = sample(layout)
    a, b = build(seed=3), build(seed=3)
    if not _close(a(x, mask=mask), b(x, mask=mask), 0):
        return "two norms built after the same torch.manual_seed give different outputs"
    return None


def does_not_change_its_input(build, layout) -> str | None:
    x, mask = sample(layout)
    kept = copy.deepcopy(x)
    build()(x, mask=mask)
    return None if torch.equal(x, kept) else "forward changed its input in place"


# (row, check, whether it reads the output: skipped after a wrong shape), in order.
CHECKS: tuple[tuple[str, Callable, bool], ...] = (
    ("output shape and dtype", shape_and_dtype, False),
    ("padding changes no real output or buffer", padding_ignored, True),
    ("eval mode: no buffer moves, no batch dependence", eval_mode, True),
    ("bf16/fp16 autocast", low_precision, True),
    ("ghost batches", ghost_batches, True),
    ("finite gradients", finite_gradients, True),
    ("state_dict round trip", state_dict_round_trip, True),
    ("same seed, same output", seeded, True),
    ("input left unchanged", does_not_change_its_input, False),
)
