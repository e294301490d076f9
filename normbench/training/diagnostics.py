"""Why a norm or placement behaves as it does: per residual unit, at every evaluation and at
step 0 (the first batch's forward and backward, before the first update: the model at
initialisation), the gradient norm of the sublayer's weights and the statistics of the
activations entering and leaving its norm; for BatchNorm and SwitchNorm the gap between batch
statistics (train mode) and running statistics (eval mode) on the validation set; for
SwitchNorm its mixing weights.

And the signs of instability that Wortsman et al. (2023) watch before a divergence: the
largest attention logit of each attention unit (q.k^T / sqrt(d) after QK-norm, before the
softmax: attention-logit growth), the mean log Z of the output logits (output-logit
divergence), and the RMS of the residual stream each unit leaves.

And the activation statistics of the norm papers of 2025-26 (normbench.training.activations):
per unit, the excess kurtosis and largest |x| of the stream it leaves and of its sublayer's
output, and its attention sink, measured on a fixed evaluation batch in eval mode before each
row is recorded.

Cheap when on (`diagnostics=true`): hooks live only during the one training step of each
evaluation (and the first), where attention's logits are formed once more explicitly; the
extra train-mode validation pass runs only for batch-dependent norms. Off, nothing is added to
a step. Nothing here draws random numbers or changes a parameter or buffer, so a diagnosed run
trains exactly as an undiagnosed one.

Sublayer types differ by construction (an attention unit's gradient norm is not an MLP's), so
depth profiles compare units of one type: normbench.tables' ``by_sublayer`` and
``last_over_first``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict

import torch
from torch import nn

from normbench.layers.models import ResidualUnit
from normbench.layers.norms import SwitchNorm
from normbench.store.rundir import DIAGNOSTICS_COLUMNS, RunDir
from normbench.training.activations import UnitActivations, measure, passed_mask

NO_ACTIVATIONS = UnitActivations(math.nan, math.nan, math.nan, math.nan)


class Diagnostics:
    """Collects diagnostics rows for one run and writes diagnostics.parquet."""

    def __init__(
        self,
        model: nn.Module,
        run: RunDir,
        probe: tuple[torch.Tensor, torch.Tensor | None] | None = None,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        self.model = model
        self.units: list[ResidualUnit] = [m for m in model.modules() if isinstance(m, ResidualUnit)]
        # Per unit, the modules of its sublayer that can tell their largest attention logit.
        self.attentions = [
            [m for m in unit.sublayer.modules() if callable(getattr(m, "largest_logit", None))]
            for unit in self.units
        ]
        self.run = run
        self.rows: list[dict] = []
        self.activations: dict[int, tuple[float, float, float, float]] = {}
        self.stream_rms: dict[int, float] = {}
        self.max_logits: dict[int, float] = {}
        self.log_z = math.nan
        self.grads: list[float] = []
        # The fixed evaluation batch (x, padding mask) of the activation statistics
        # (normbench.training.activations), the run's autocast, and the last measurement.
        self.probe, self.autocast = probe, autocast
        self.unit_activations: dict[int, UnitActivations] = {}

    def measure_activations(self) -> None:
        """The activation statistics of every unit on the fixed evaluation batch, kept for the
        next ``record`` (normbench.training.activations.measure); nothing without a batch."""
        if self.probe is not None:
            self.unit_activations = measure(self.model, self.units, self.probe, self.autocast)

    def grad_norms(self) -> list[float]:
        """L2 norm of each unit's sublayer gradients (call after unscaling, before clipping)."""
        norms = []
        for unit in self.units:
            grads = [p.grad for p in unit.sublayer.parameters() if p.grad is not None]
            norms.append(
                float(
                    torch.linalg.vector_norm(
                        torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
                    )
                )
                if grads
                else math.nan
            )
        self.grads = norms
        return norms

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """For the next forward pass, record per unit the mean and std entering and leaving
        its (first) norm, the RMS of the residual stream it leaves and its largest attention
        logit, and the mean log Z of the model's output logits (kept until the next watch)."""
        self.activations.clear()
        self.stream_rms.clear()
        self.max_logits.clear()
        self.log_z = math.nan

        def norm_hook(index: int):
            def record(module, inputs, output):
                x, y = inputs[0].detach().float(), output.detach().float()
                self.activations[index] = (
                    float(x.mean()),
                    float(x.std()),
                    float(y.mean()),
                    float(y.std()),
                )

            return record

        def stream_hook(index: int):
            def record(module, args, kwargs, output):
                real = output.detach().float()
                mask = passed_mask(args, kwargs)
                if mask is not None and real.dim() == 3:  # tokens: the real ones only
                    real = real[mask]
                self.stream_rms[index] = float(real.square().mean().sqrt())

            return record

        def logit_hook(index: int):
            def record(module, args, kwargs, output):
                largest = module.largest_logit(args[0], passed_mask(args, kwargs))
                self.max_logits[index] = max(self.max_logits.get(index, -math.inf), largest)

            return record

        def output_hook(module, inputs, output):
            log_z = torch.logsumexp(output.detach().float(), dim=-1)
            self.log_z = float(log_z.mean())

        handles = [
            unit.norm.register_forward_hook(norm_hook(i)) for i, unit in enumerate(self.units)
        ]
        for index, (unit, attentions) in enumerate(zip(self.units, self.attentions, strict=True)):
            handles.append(unit.register_forward_hook(stream_hook(index), with_kwargs=True))
            handles += [
                attention.register_forward_hook(logit_hook(index), with_kwargs=True)
                for attention in attentions
            ]
        handles.append(self.model.register_forward_hook(output_hook))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def record(self, step: int, train_mode_acc: float | None, eval_mode_acc: float) -> None:
        for index, unit in enumerate(self.units):
            in_mean, in_std, out_mean, out_std = self.activations.get(index, (math.nan,) * 4)
            row = {
                "step": step,
                "unit": index,
                "depth": index / max(1, len(self.units) - 1),
                "sublayer": type(unit.sublayer).__name__.lower(),
                "grad_norm": self.grads[index] if self.grads else math.nan,
                "in_mean": in_mean,
                "in_std": in_std,
                "out_mean": out_mean,
                "out_std": out_std,
                "resid_rms": self.stream_rms.get(index, math.nan),
                "max_logit": self.max_logits.get(index, math.nan),
                "log_z": self.log_z,
                **asdict(self.unit_activations.get(index, NO_ACTIVATIONS)),
                "train_mode_val_acc": math.nan if train_mode_acc is None else train_mode_acc,
                "eval_mode_val_acc": eval_mode_acc if train_mode_acc is not None else math.nan,
            }
            weights = switch_weights(unit.norm)
            for prefix, values in (("sn_mean", weights[0]), ("sn_var", weights[1])):
                for name, value in zip(("in", "ln", "bn"), values, strict=True):
                    row[f"{prefix}_{name}"] = value
            self.rows.append(row)

    def write(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({name: [row[name] for row in self.rows] for name in DIAGNOSTICS_COLUMNS})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        from normbench.store.rundir import atomic_write

        atomic_write(self.run.path / "diagnostics.parquet", sink.getvalue().to_pybytes())


def switch_weights(norm: nn.Module) -> tuple[list[float], list[float]]:
    """SwitchNorm's mixing weights (IN, LN, BN) for means and variances; NaN otherwise."""
    if not isinstance(norm, SwitchNorm):
        return [math.nan] * 3, [math.nan] * 3
    return (
        norm.mean_weight.detach().softmax(0).tolist(),
        norm.var_weight.detach().softmax(0).tolist(),
    )


@contextlib.contextmanager
def frozen_buffers(model: nn.Module) -> Iterator[None]:
    """Run forwards in train mode without moving BatchNorm's running statistics."""
    saved = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(saved[name])
