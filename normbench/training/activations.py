"""The activation statistics that the norm papers of 2025-26 report, per residual unit, on a
fixed evaluation batch (``diagnostics=true``; docs/diagnostics.md):

- **excess kurtosis** (Fisher's: the fourth central moment over the squared second, minus 3;
  ``scipy.stats.kurtosis`` with its defaults ``fisher=True, bias=True``) of the residual
  stream each unit leaves and of its sublayer's output. As Bondarenko et al. (2023,
  "Quantizable Transformers", validate_clm.py of their code) measure it: over every value of
  one sample (its real tokens' features, or its channels at every position), then averaged
  over the samples. Outlier Safe Pre-training (Park et al. 2025) reports it.
- **largest absolute activation** of the same two tensors: the largest |x| over the batch's
  real values (the "massive activations" of Sun et al. 2024; Qiu et al. 2025 report it).
- **attention sink** of each attention unit (Qiu et al. 2025, gated attention): the softmax
  weight that a query puts on the first key, averaged over the samples, the heads and the real
  query positions after the first (the first query can attend only to itself when causal:
  its weight 1 says nothing), each (sample, head, query) weighing the same.

The batch is the first ``PROBE_SAMPLES`` validation samples (the whole validation set when it
is smaller): the same at every diagnosed step, so that a change is the model's. It is run in
eval mode (running statistics, as the model is evaluated) under ``torch.no_grad`` with
forward hooks that are removed before ``measure`` returns: nothing here draws a random number,
moves a buffer or keeps a graph, so a diagnosed run trains bit for bit as an undiagnosed one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

# The fixed evaluation batch: the first validation samples. 64: on the byte LM, 256 windows
# cost 3% of the CPU time of the 250 steps between evaluations, 64 cost 0.5%.
PROBE_SAMPLES = 64
SINK_CHUNK_ELEMENTS = 1 << 24  # attention weights formed at once for the sink: 64 MiB


@dataclass(frozen=True)
class UnitActivations:
    """One residual unit's activation statistics on the fixed batch; NaN where not defined
    (``attn_sink`` of a unit without attention)."""

    resid_kurtosis: float
    resid_max_abs: float
    sublayer_kurtosis: float
    sublayer_max_abs: float
    attn_sink: float = math.nan


def probe_batch(val: dict[str, Tensor | None]) -> tuple[Tensor, Tensor | None]:
    """The fixed evaluation batch: the first PROBE_SAMPLES validation inputs and their padding
    mask (None without padding), from the trainer's device tensors of the split."""
    rows = slice(0, PROBE_SAMPLES)
    return val["x"][rows], None if val["mask"] is None else val["mask"][rows]


def real_weights(x: Tensor, real: Tensor) -> Tensor:
    """A weight per value of tokens x (N, T, D), flat per sample (N, T * D): 1 at the real
    tokens that ``real`` (N, T) marks, 0 at padding."""
    return real[..., None].expand(x.shape).flatten(1).to(torch.float32)


def excess_kurtosis(x: Tensor, real: Tensor | None = None) -> Tensor:
    """Fisher's excess kurtosis m4 / m2^2 - 3 of each sample's values (x: (N, ...); ``real``:
    the padding mask (N, T) of tokens (N, T, D), None: every value is real), with the biased
    central moments m_k = mean((x - mean(x))^k) over the sample's real values:
    scipy.stats.kurtosis(fisher=True, bias=True). Returns (N,) in float32; NaN for a sample
    whose values are all equal.

    The centred values are divided by their largest magnitude first (kurtosis does not change
    with the scale), so that their fourth power cannot overflow float32 however large the
    activations."""
    values = x.detach().float().flatten(1)
    if real is None:
        count = torch.full_like(values[:, 0], values.shape[1])
        centred = values - values.mean(1, keepdim=True)
    else:
        weight = real_weights(x, real)
        count = weight.sum(1)
        centred = (values - ((values * weight).sum(1) / count)[:, None]) * weight
    scaled = centred / centred.abs().amax(1, keepdim=True)
    m2 = scaled.square().sum(1) / count
    m4 = scaled.square().square().sum(1) / count
    return m4 / m2.square() - 3


def max_abs(x: Tensor, real: Tensor | None = None) -> float:
    """The largest |x| over the real values of the batch (``real`` as for excess_kurtosis)."""
    values = x.detach().float().abs().flatten(1)
    return float((values if real is None else values * real_weights(x, real)).amax())


def attention_probabilities(
    q: Tensor, k: Tensor, real: Tensor | None, causal: bool, scale: float | None
) -> Tensor:
    """The softmax weights (N, H, T, T), rows the queries, that scaled dot-product attention
    forms from q and k (N, H, T, head_dim) at ``scale`` (None: 1 / sqrt(head_dim)), padded keys
    (``real`` (N, T), True at real tokens) and, when ``causal``, later keys weighted 0; in
    float32 (they are formed explicitly: call this only when diagnosing)."""
    t = q.shape[-2]
    logits = q.float() @ k.float().transpose(-2, -1)
    logits = logits * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    excluded = torch.zeros(t, t, dtype=torch.bool, device=q.device)
    if causal:
        excluded = torch.ones_like(excluded).triu(1)
    if real is not None:
        excluded = excluded | ~real[:, None, None, :]
    return logits.masked_fill(excluded, -math.inf).softmax(-1)


def first_key_weights(probabilities: Tensor, real: Tensor | None = None) -> Tensor:
    """The weights (N, H, T, T: rows the queries) on the first key of the real queries at
    positions 1..T-1, flat: the first query and padded ones left out (``real`` (N, T) marks
    the real tokens; None: all are real)."""
    on_first = probabilities[..., 1:, 0].float()  # (N, H, T-1)
    if real is None:
        return on_first.flatten()
    return on_first[real[:, None, 1:].expand(on_first.shape)]


def attention_sink(probabilities: Tensor, real: Tensor | None = None) -> float:
    """The mean weight on the first key over the samples, heads and real query positions
    1..T-1 (``first_key_weights``), each (sample, head, query) weighing the same. NaN when no
    query is left (T = 1)."""
    weights = first_key_weights(probabilities, real)
    return float(weights.mean()) if weights.numel() else math.nan


def chunked_sink(
    q: Tensor,
    k: Tensor,
    real: Tensor | None,
    causal: bool,
    scale: float | None,
    chunk_elements: int = SINK_CHUNK_ELEMENTS,
) -> float:
    """``attention_sink`` of the weights that q and k (N, H, T, head_dim) form, computed a
    chunk of samples at a time so that no chunk's weights hold more than ``chunk_elements``
    values (64 MiB in float32), however long the context: 256 windows of 1,024 bytes at 4
    heads would otherwise be 4 GiB."""
    n, heads, t, _ = q.shape
    per_chunk = max(1, chunk_elements // (heads * t * t))
    total, count = 0.0, 0
    for start in range(0, n, per_chunk):
        rows = slice(start, start + per_chunk)
        mask = None if real is None else real[rows]
        weights = attention_probabilities(q[rows], k[rows], mask, causal, scale)
        on_first = first_key_weights(weights, mask)
        total, count = total + float(on_first.sum()), count + on_first.numel()
    return total / count if count else math.nan


def attends(module: nn.Module) -> bool:
    """Whether a module is attention whose weights can be formed again: it has normbench's
    Attention's ``queries_keys_values(x)`` and its ``causal`` and ``scale``."""
    has_attributes = hasattr(module, "causal") and hasattr(module, "scale")
    return callable(getattr(module, "queries_keys_values", None)) and has_attributes


def passed_mask(args: tuple, kwargs: dict) -> Tensor | None:
    """The padding mask a unit or sublayer was called with: ``(x, mask)`` or ``mask=``."""
    return kwargs.get("mask", args[1] if len(args) > 1 else None)


def measure(
    model: nn.Module,
    units: list[nn.Module],
    batch: tuple[Tensor, Tensor | None],
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[int, UnitActivations]:
    """One eval-mode forward of ``model`` on ``batch`` (x, padding mask) under no_grad and
    ``autocast`` (the run's precision), and per residual unit (``units``: their index is the
    key) the statistics of the stream it leaves, of its sublayer's output, and the attention
    sink of the attention inside its sublayer (the mean over such modules; NaN without). The
    model's training mode is restored and every hook removed, however the forward ends."""
    streams: dict[int, tuple[float, float]] = {}
    outputs: dict[int, tuple[float, float]] = {}
    sinks: dict[int, list[float]] = {}

    def keep(into: dict[int, tuple[float, float]], index: int):
        def hook(module, args, kwargs, output):
            real = passed_mask(args, kwargs)
            into[index] = (float(excess_kurtosis(output, real).mean()), max_abs(output, real))

        return hook

    def keep_sink(index: int):
        def hook(module, args, kwargs, output):
            real = passed_mask(args, kwargs)
            q, k, _ = module.queries_keys_values(args[0])
            sink = chunked_sink(q, k, real, module.causal, module.scale)
            sinks.setdefault(index, []).append(sink)

        return hook

    handles = []
    was_training = model.training
    try:
        for index, unit in enumerate(units):
            handles.append(unit.register_forward_hook(keep(streams, index), with_kwargs=True))
            handles.append(
                unit.sublayer.register_forward_hook(keep(outputs, index), with_kwargs=True)
            )
            handles += [
                attention.register_forward_hook(keep_sink(index), with_kwargs=True)
                for attention in unit.sublayer.modules()
                if attends(attention)
            ]
        model.eval()
        x, mask = batch
        with torch.no_grad(), autocast():
            model(x, mask=mask)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    nan = (math.nan, math.nan)
    return {
        index: UnitActivations(
            *streams.get(index, nan),
            *outputs.get(index, nan),
            sum(sinks[index]) / len(sinks[index]) if index in sinks else math.nan,
        )
        for index in range(len(units))
    }
