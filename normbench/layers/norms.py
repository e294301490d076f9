"""Normalization layers behind one constructor, ``make_norm(name, num_features, layout, **opts)``.

Which norms there are, and which options each takes, is the norm table's
(normbench.layers.keys.NORM_TABLE, torch-free); this module holds the classes of the norms
that take statistics, the registry derived from the table (NORMS, every shipped norm's class
wherever it lives: the element-wise ones in normbench.layers.elementwise, the single-gain
ones in normbench.layers.single_gain), and the run's norm bound to its config section
(norm_factory), built the same way for a shipped norm and a plugin. The base classes are
normbench.layers.norm_base's, re-exported here.

Every layer takes ``forward(x, mask=None, cond=None)`` so a model can call any norm the same
way. Two layouts:

- ``channels``: x is (N, C, *S), features on dim 1 (CNN activations).
- ``tokens``:   x is (N, T, D), features last (Transformer activations); ``mask`` (N, T) is
  True for real tokens, and statistics that run over tokens skip padded positions.

Where PyTorch has a fused op for a layout it is the implementation; custom code covers only
what PyTorch lacks (masked statistics, SwitchNorm's mixture, AdaLN's modulation).
Statistics are computed in float32 under autocast (``fp32_stats``): on CPU, autocast would
otherwise run layer_norm/group_norm/batch_norm in bf16/fp16 and lose the variance.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.core.registry import resolve

# Re-exported (F401): models and users import the base classes from here, and a config may
# name a moved norm by its old import path (normbench.layers.norms:DyT, before 0.6).
from normbench.layers.elementwise import Derf, DyISRU, DyT  # noqa: F401
from normbench.layers.generators import own_generator
from normbench.layers.keys import (
    NORM_SHARED_KEYS,
    NORM_TABLE,
    NormEntry,
    norm_entry,
    taken_options,
)
from normbench.layers.norm_base import (  # noqa: F401
    LAYOUTS,
    LOW_PRECISION,
    AffineNorm,
    Norm,
    feature_view,
    masked_moments,
    mean_of_squares,
)
from normbench.layers.single_gain import ScaleNorm, SingleScaleRMSNorm  # noqa: F401
from normbench.layers.sync_batchnorm import data_parallel, synchronized_batch_norm


class BatchStatisticsNorm(AffineNorm):
    """What BatchNorm and SwitchNorm share: batch statistics, per ghost batch, and running
    statistics for eval mode.

    ``ghost_batch`` splits the batch into chunks of that many samples, each normalized with its
    own statistics (the per-device batch of data-parallel training); every chunk updates the
    running statistics, which eval mode uses. ``eval_stats`` says which running statistics a
    data-parallel run evaluates with: ``rank0``'s (DistributedDataParallel broadcasts rank 0's
    buffers) or the ``mean`` over ranks (timm's distribute_bn); the training loop acts on it
    (normbench.training.distributed.evaluation_statistics).
    """

    def __init__(
        self,
        num_features: int,
        layout: str,
        momentum: float = 0.1,
        ghost_batch: int | None = None,
        eval_stats: str = "rank0",
        **common,
    ):
        super().__init__(num_features, layout, **common)
        self.momentum = momentum
        self.ghost_batch = ghost_batch
        self.eval_stats = eval_stats
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def ghost_size(self, batch: int) -> int:
        """Samples per statistics chunk: the ghost batch when training, else the whole batch."""
        return self.ghost_batch if self.training and self.ghost_batch else batch


class BatchNorm(BatchStatisticsNorm):
    """Per feature over the batch: channels over (N, S), tokens over all real tokens (N, T);
    one F.batch_norm per ghost batch (on a CPU faster than SwitchNorm's all-chunks-at-once
    moments: 1.9x against 3.5x a whole-batch F.batch_norm at ghost batch 4).

    ``sync="global"``: in a data-parallel run (torch.distributed initialised, more than one
    rank) the statistics are over the global batch, every rank's samples, as if one process
    held it: on CUDA through torch.nn.SyncBatchNorm, elsewhere (gloo on a CPU, which
    SyncBatchNorm refuses) through ``synchronized_batch_norm``. ``"device"``: over this
    process's batch, DistributedDataParallel's default."""

    def __init__(self, num_features: int, layout: str, sync: str = "device", **options):
        super().__init__(num_features, layout, **options)
        self.sync = sync

    def bn(self, x: Tensor) -> Tensor:
        if self.sync == "global" and self.training and data_parallel():
            if x.is_cuda:
                return self.torch_sync_bn()(x)
            return synchronized_batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias,
                self.momentum, self.eps,
            )  # fmt: skip
        return F.batch_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training,
            self.momentum,
            self.eps,
        )

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        size = self.ghost_size(x.shape[0])
        if self.layout == "channels":
            return torch.cat([self.bn(chunk) for chunk in x.split(size)])
        if mask is None:  # (N, T, D) -> (N, D, T): features on dim 1, tokens as space
            h = x.transpose(1, 2)
            return torch.cat([self.bn(chunk) for chunk in h.split(size)]).transpose(1, 2)
        # Only real tokens enter the statistics; padded positions come out as zeros.
        real = [self.bn(x[i : i + size][mask[i : i + size]]) for i in range(0, x.shape[0], size)]
        out = torch.zeros_like(x)
        out[mask] = torch.cat(real)
        return out

    def torch_sync_bn(self) -> nn.SyncBatchNorm:
        """torch's SyncBatchNorm on this layer's parameters and running statistics, kept out
        of the module tree (its tensors are this layer's: no second copy in state_dict)."""
        layer = self.__dict__.get("_torch_sync")
        if layer is None:
            layer = nn.SyncBatchNorm(self.num_features, self.eps, self.momentum)
            layer.weight, layer.bias = self.weight, self.bias
            layer.running_mean, layer.running_var = self.running_mean, self.running_var
            self.__dict__["_torch_sync"] = layer
        return layer.train(self.training)


class LayerNorm(AffineNorm):
    """Per sample over (C, S) with a per-C affine (channels: GroupNorm with one group);
    per token over D (tokens: F.layer_norm)."""

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "channels":
            return F.group_norm(x, 1, self.weight, self.bias, self.eps)
        return F.layer_norm(x, (self.num_features,), self.weight, self.bias, self.eps)


class RMSNorm(Norm):
    """Divide by the root mean square, no centring, per-feature scale: per sample over (C, S);
    per token over D."""

    def __init__(self, num_features: int, layout: str, **common):
        super().__init__(num_features, layout, **common)
        self.weight = nn.Parameter(torch.ones(num_features))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "tokens":
            return F.rms_norm(x, (self.num_features,), self.weight, self.eps)
        return F.rms_norm(x, x.shape[1:], None, self.eps) * feature_view(self.weight, x, "channels")


class InstanceNorm(AffineNorm):
    """Per (sample, feature) over space: channels over S (F.instance_norm); tokens over the
    real tokens T (F.instance_norm without padding, masked moments with it)."""

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "channels":
            return F.instance_norm(x, weight=self.weight, bias=self.bias, eps=self.eps)
        if mask is None:
            y = F.instance_norm(x.transpose(1, 2), weight=self.weight, bias=self.bias, eps=self.eps)
            return y.transpose(1, 2)
        mean, var = masked_moments(x, (1,), mask[..., None])
        return self.affine((x - mean) * torch.rsqrt(var + self.eps))


class GroupNorm(AffineNorm):
    """Per (sample, group) over (C/G, S); tokens per (token, group) over D/G. One group is
    LayerNorm."""

    def __init__(self, num_features: int, layout: str, groups: int = 8, **common):
        super().__init__(num_features, layout, **common)
        if num_features % groups:
            raise ValueError(f"groups={groups} must divide num_features={num_features}")
        self.groups = groups

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "channels":
            return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        # Per (token, group): layer_norm over each group's D/G features, the fused kernel
        # for this layout (F.group_norm on (N*T, D) is several times slower), then the affine.
        grouped = x.unflatten(-1, (self.groups, self.num_features // self.groups))
        y = F.layer_norm(grouped, grouped.shape[-1:], eps=self.eps).flatten(-2)
        return torch.addcmul(self.bias, y, self.weight)


class SwitchNorm(BatchStatisticsNorm):
    """Switchable Normalization (Luo et al. 2018): the IN, LN and BN means and variances of
    the DESIGN table, mixed by two softmax weight vectors (means, variances) initialised equal.

    Eval mode replaces the BN statistics with running statistics; ``ghost_batch`` takes BN
    statistics over chunks of samples, as BatchNorm does.

    Numerics: the paper's E[x^2] - mean^2 loses every digit once the mean is large against the
    spread (output error 0.1-0.15 at mean/std = 1,000 in float32). Here the moments are of
    ``d = x - shift``, the shift being each sample's first (real) position per feature (exact to
    subtract, and within a few standard deviations of the mean unless the data drift along
    space). The IN moments of d are accurate; the LN (channels) and BN moments combine them
    with the parallel-variance formula (Chan et al.): the mean over groups of the variance plus
    the squared distance of the group's mean from the pooled one. The tokens LN (per token over
    features) adds the shift's own spread over features, ``k``, exactly:
    E[(d + k)^2] = E[d^2] + 2 E[d k] + E[k^2]. What stays E[x^2] - mean^2-like is that LN
    variance for a token whose feature mean sits far (in units of its spread over features)
    from its sequence's first token. The output is computed in shifted coordinates too, so the
    large mean never meets the data.
    """

    def __init__(self, num_features: int, layout: str, **options):
        super().__init__(num_features, layout, **options)
        self.mean_weight = nn.Parameter(torch.ones(3))  # order: IN, LN, BN
        self.var_weight = nn.Parameter(torch.ones(3))

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        # Channels: (N, C, L) with space flattened; tokens stay (N, T, D). Statistics are
        # (N, C, 1) or (N, 1, D) per sample and feature. The shift carries no gradient: in
        # exact arithmetic the output does not depend on it. Means are kept relative to one
        # scalar, the first sample's first value (``base``), so that with a common offset
        # every number below is of the order of the spread, not of the offset.
        channels = self.layout == "channels"
        h = x.flatten(2) if channels else x
        mask = None if channels else mask
        shift = self.first_position(h, mask).detach()
        base = shift[:1, :1, :1]
        relative_shift = shift - base
        d = h - shift
        square = None if channels else d * d  # tokens: one d^2 serves IN and LN
        mean_d, var_in, count = self.sample_moments(d, square, mask)
        mean_in = relative_shift + mean_d  # relative to base, as every mean below
        if channels:  # per sample over (C, S): the IN groups of equal size, pooled
            mean_ln = mean_in.mean(1, keepdim=True)
            var_ln = (var_in + (mean_in - mean_ln).square()).mean(1, keepdim=True)
        else:  # per token over D: d + k is x less the mean of the shift over features
            k = relative_shift - relative_shift.mean(2, keepdim=True)  # (N, 1, D)
            features = self.num_features
            mean_ln_d = d.sum(2, keepdim=True) / features  # (N, T, 1), the mean of d + k
            square_ln = (
                square.sum(2, keepdim=True) / features
                + 2 / features * torch.matmul(d, k.transpose(1, 2))  # E[d k]
                + k.square().mean(2, keepdim=True)
            )
            var_ln = (square_ln - mean_ln_d.square()).clamp_min(0)
        mean_bn, var_bn = self.batch_moments(mean_in, var_in, count, base)
        mw, vw = self.mean_weight.softmax(0), self.var_weight.softmax(0)
        var = (vw[0] * var_in + vw[2] * var_bn + self.eps) + vw[1] * var_ln
        offset = mw[0] * mean_d + mw[2] * (mean_bn - relative_shift)  # mixed mean less shift
        weight, bias = (
            (self.weight[:, None], self.bias[:, None]) if channels else (self.weight, self.bias)
        )
        scale = weight * torch.rsqrt(var)
        if channels:  # statistics are (N, C, 1): the mean folds into the bias
            offset = offset + mw[1] * (mean_ln - relative_shift)
            return torch.addcmul(bias - offset * scale, d, scale).view(x.shape)
        # Small terms first: (N, 1, D) + (N, T, 1) is the one full-size addition.
        offset = (offset - mw[1] * k) + mw[1] * mean_ln_d
        return torch.addcmul(bias, d - offset, scale)

    def first_position(self, h: Tensor, mask: Tensor | None) -> Tensor:
        """Each sample's first (real) position per feature: (N, C, 1) or (N, 1, D)."""
        if self.layout == "channels":
            return h[:, :, :1]
        if mask is None:
            return h[:, :1]
        first_real = mask.int().argmax(1)  # 0 for a sequence without real tokens
        return h[torch.arange(h.shape[0], device=h.device), first_real][:, None]

    def sample_moments(
        self, d: Tensor, square: Tensor | None, mask: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Per (sample, feature) over space, real tokens only: the mean of d and the variance,
        (N, C, 1) or (N, 1, D); and the number of real positions per sample, (N, 1, 1).
        ``square`` is d^2 where the caller has it (tokens)."""
        space = 2 if self.layout == "channels" else 1
        if mask is None:
            count = torch.full_like(d[:, :1, :1], d.shape[space])
            mean = d.sum(space, keepdim=True) / count  # a sum's backward is a broadcast
            if square is None:
                mean_square = mean_of_squares(d, space)
            else:
                mean_square = square.sum(space, keepdim=True) / count
        else:  # sums over the real tokens as (N, 1, T) @ (N, T, D)
            real = mask[:, None, :].to(d.dtype)
            count = real.sum(2, keepdim=True)
            per_position = count.clamp_min(1)
            mean = torch.bmm(real, d) / per_position
            mean_square = torch.bmm(real, square) / per_position
        return mean, (mean_square - mean.square()).clamp_min(0), count

    def batch_moments(
        self, mean_in: Tensor, var_in: Tensor, count: Tensor, base: Tensor
    ) -> tuple[Tensor, Tensor]:
        """BN mean and variance per feature over the batch and space, per ghost batch, pooled
        from the per-sample ones (each weighted by its real positions) by the parallel-variance
        formula, broadcast back to every sample; running ones in eval. Means are relative to
        ``base`` (a scalar), in and out. Updates the running statistics.

        All chunks at once (index_add over a chunk index): a ghost batch of 2 costs the kernels
        of one batch, where a loop over chunks would cost 16 times as many at batch 32."""
        if not self.training:
            shape = (-1, 1) if self.layout == "channels" else (-1,)
            return self.running_mean.view(shape) - base, self.running_var.view(shape)
        batch = mean_in.shape[0]
        size = self.ghost_size(batch)
        chunks = -(-batch // size)  # the last chunk may be smaller
        chunk = torch.arange(batch, device=mean_in.device) // size  # each sample's chunk

        def per_chunk(t: Tensor) -> Tensor:  # (N, ...) summed into (chunks, ...)
            return t.new_zeros(chunks, *t.shape[1:]).index_add(0, chunk, t)

        positions = per_chunk(count)  # real positions per chunk
        weight = count / positions[chunk]
        mean = per_chunk(mean_in * weight)
        var = per_chunk(weight * (var_in + (mean_in - mean[chunk]).square()))
        self.update_running(mean + base, var, positions)
        return mean[chunk], var[chunk]

    @torch.no_grad()
    def update_running(self, mean: Tensor, var: Tensor, positions: Tensor):
        """Running statistics as PyTorch's BatchNorm keeps them (unbiased variance), updated
        once per chunk in order: after K chunks, (1-m)^K of the old value remains and chunk k
        contributes m (1-m)^(K-1-k)."""
        chunks, m = mean.shape[0], self.momentum
        decay = (1 - m) ** torch.arange(chunks - 1, -1, -1, device=mean.device)
        contribution = (m * decay).view(-1, 1)
        unbiased = var.flatten(1) * positions.flatten(1) / (positions.flatten(1) - 1).clamp_min(1)
        for buffer, value in ((self.running_mean, mean.flatten(1)), (self.running_var, unbiased)):
            fresh = (contribution * value).sum(0).to(buffer.dtype)
            buffer.mul_((1 - m) ** chunks).add_(fresh)


# norm.impl=fused: one call of PyTorch's fused kernel, the module's parameters and buffers
# (state_dict unchanged), without the module's wrapper (Norm.forward: float32 statistics
# under autocast, masks). Under autocast the kernel runs in the precision autocast gives it
# (norm.fp32_stats is not applied); the rules refuse what one kernel cannot take (a padding
# mask, ghost batches, synchronized statistics).
class FusedLayerNorm(LayerNorm):
    """tokens: F.layer_norm over D; channels: F.group_norm with one group (per sample over
    (C, S) with a per-C affine, which F.layer_norm cannot take in one call)."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        if self.layout == "tokens":
            return F.layer_norm(x, (self.num_features,), self.weight, self.bias, self.eps)
        return F.group_norm(x, 1, self.weight, self.bias, self.eps)


class FusedRMSNorm(RMSNorm):
    """tokens: F.rms_norm over D; channels: F.rms_norm over (C, S), then the per-C scale."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        if self.layout == "tokens":
            return F.rms_norm(x, (self.num_features,), self.weight, self.eps)
        return F.rms_norm(x, x.shape[1:], None, self.eps) * feature_view(self.weight, x, "channels")


class FusedGroupNorm(GroupNorm):
    """F.group_norm: channels as they are; tokens as (N·T, D), each token a sample."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        if self.layout == "channels":
            return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        flat = x.reshape(-1, self.num_features)
        return F.group_norm(flat, self.groups, self.weight, self.bias, self.eps).view_as(x)


class FusedBatchNorm(BatchNorm):
    """F.batch_norm over the whole batch: channels as they are; tokens as (N·T, D), every
    position a sample (no padding mask: refused with data=tokens)."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        flat = x if self.layout == "channels" else x.reshape(-1, self.num_features)
        y = F.batch_norm(
            flat, self.running_mean, self.running_var, self.weight, self.bias,
            self.training, self.momentum, self.eps,
        )  # fmt: skip
        return y.view_as(x)


class AdaLN(Norm):
    """LayerNorm without affine, modulated as x * (1 + scale) + shift, where (scale, shift) is a
    zero-initialised linear projection of a per-sample condition ``cond`` (N, cond_dim). Zero
    init: training starts as plain LayerNorm.

    What it conditions on: DiT's AdaLN (Peebles & Xie 2023) regresses scale and shift from an
    external condition (timestep and class embeddings). normbench's models are encoder
    classifiers and have none, so without ``cond`` the condition is the mean of the norm's own
    input (over S, or over the real tokens): an input-conditioned, FiLM-like affine, not DiT's
    AdaLN, and its results say nothing about AdaLN with a real condition.

    Capacity: the projection holds cond_dim * 2d + 2d parameters per norm, 2d^2 + 2d with the
    default cond_dim = d (8,320 at d = 64, against 2d = 128 for LayerNorm's affine), so a model
    with AdaLN is a larger model; the run summary's ``parameters`` says by how much.
    """

    def __init__(self, num_features: int, layout: str, cond_dim: int | None = None, **common):
        super().__init__(num_features, layout, **common)
        self.modulation = nn.Linear(cond_dim or num_features, 2 * num_features)
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)

    def normalize(self, x: Tensor, mask: Tensor | None, cond: Tensor | None) -> Tensor:
        if self.layout == "channels":
            y = F.group_norm(x, 1, eps=self.eps)
            if cond is None:
                cond = x.flatten(2).mean(2)
        else:
            y = F.layer_norm(x, (self.num_features,), eps=self.eps)
            if cond is None and mask is None:
                cond = x.mean(1)
            elif cond is None:  # the mean of the real tokens
                real = mask[..., None].to(x.dtype)
                cond = (x * real).sum(1) / real.sum(1).clamp_min(1)
        scale, shift = self.modulation(cond).chunk(2, dim=-1)  # (N, features) each
        if self.layout == "channels":
            scale, shift = (t.view(*t.shape, *([1] * (x.dim() - 2))) for t in (scale, shift))
        else:
            scale, shift = scale[:, None, :], shift[:, None, :]
        return torch.addcmul(shift, y, 1 + scale)


class Identity(Norm):
    """No normalization."""

    def forward(self, x: Tensor, mask: Tensor | None = None, cond: Tensor | None = None) -> Tensor:
        return x


def norm_class(entry: NormEntry, what: str) -> Callable[..., nn.Module]:
    """The class an entry names: a shipped norm's, or a plugin's, imported by its path (a
    failure is one line naming ``what``, ``norm=NAME``)."""
    module, _, name = entry.target.partition(":")
    return globals()[name] if module == __name__ else resolve(entry.target, what)


# The registry: each shipped norm of the table (normbench.layers.keys.NORM_TABLE), its class.
NORMS: dict[str, type[Norm]] = {
    name: norm_class(entry, f"norm={name}") for name, entry in NORM_TABLE.items()
}


# A norm bound to its options: make_norm(num_features, layout="channels") -> nn.Module. What
# every model builds its norms with, a user's model builder too (normbench.api).
NormFactory = Callable[..., nn.Module]


class BoundNorm:
    """The run's norm bound to its config section: ``make(num_features, layout)`` builds one.
    Each norm is built on a generator of its own (normbench.layers.generators): whatever a norm
    draws, shipped or yours, the rest of the model is initialised as it would be with any other
    norm at the same seed. ``at(position)`` is the factory for the norms at one position, with
    that position's own options where the config sets them (the same numbering of generators).
    ``cls`` is the implementation norm.impl chose (``implementation``); ``compiled``: each
    norm is compiled in place (nn.Module.compile: its parameters' names stay)."""

    def __init__(
        self,
        cls: Callable[..., nn.Module],
        options: dict,
        positions: dict[str, dict],
        built: itertools.count | None = None,
        compiled: bool = False,
    ):
        self.cls, self.options, self.positions = cls, options, positions
        self.built = built if built is not None else itertools.count()
        self.compiled = compiled

    def __call__(self, num_features: int, layout: str = "channels") -> nn.Module:
        with own_generator(f"norm {next(self.built)}"):
            layer = self.cls(num_features, layout, **self.options)
        if self.compiled:
            layer.compile()
        return layer

    def at(self, position: str) -> BoundNorm:
        own = self.positions.get(position)
        if not own:
            return self
        return BoundNorm(self.cls, {**self.options, **own}, {}, self.built, self.compiled)


def implementation(entry: NormEntry, impl: str, what: str) -> Callable[..., nn.Module]:
    """The class that computes ``entry``'s norm as norm.impl says: its own (``module``,
    ``compiled``) or its fused one (``fused``); a norm without one is refused in one line
    naming the implementations it has (the rules refuse it first in a run)."""
    if impl not in entry.implementations:
        raise ValueError(
            f"norm.impl={impl}: {what} has no fused kernel; valid: "
            + ", ".join(entry.implementations)
        )
    return globals()[entry.fused] if impl == "fused" else norm_class(entry, what)


def at_position(make_norm: NormFactory, position: str) -> NormFactory:
    """The factory for the norms at ``position`` (normbench.layers.keys.POSITIONS); a factory
    that is not the run's (a test's, a user's) builds the same norm everywhere."""
    return make_norm.at(position) if isinstance(make_norm, BoundNorm) else make_norm


def norm_factory(norm: dict) -> BoundNorm:
    """The run's norm bound to its config section (BoundNorm), shipped or a plugin alike: the
    class its entry names, built with the options the entry takes (taken_options). Its
    per-position keys (``alpha_init_attention`` ...: NormEntry.per_position), where set,
    replace the option at that position."""
    entry = norm_entry(norm)
    positions: dict[str, dict] = {}
    for key, (option, position) in entry.position_keys().items():
        if norm.get(key) is not None:
            positions.setdefault(position, {})[option] = norm[key]
    what, impl = f"norm={norm['name']}", norm.get("impl") or "module"
    cls = implementation(entry, impl, what)
    return BoundNorm(cls, taken_options(entry, norm), positions, compiled=impl == "compiled")


def make_norm(name: str, num_features: int, layout: str = "channels", **options) -> Norm:
    """Build the shipped norm ``name`` for ``num_features`` features in ``layout``.

    ``options`` use the ``norm.*`` config key names. Keys a norm has no use for are ignored, so
    one config can be crossed with every norm; names no norm knows are an error. ``impl``
    (norm.impl): ``module``, ``fused`` or ``compiled``.
    """
    if name not in NORM_TABLE:
        raise ValueError(f"norm={name!r} is not one of {sorted(NORM_TABLE)}")
    known = NORM_SHARED_KEYS.union(*(entry.takes for entry in NORM_TABLE.values()))
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown norm option(s) {sorted(unknown)}; known: {sorted(known)}")
    entry, impl = NORM_TABLE[name], options.get("impl") or "module"
    layer = implementation(entry, impl, f"norm={name}")(
        num_features, layout, **taken_options(entry, options)
    )
    if impl == "compiled":
        layer.compile()
    return layer
