"""BatchNorm's statistics over the global batch of a data-parallel run (norm.sync=global)
where torch.nn.SyncBatchNorm cannot run: on a CPU, over gloo. BatchNorm
(normbench.layers.norms) calls ``synchronized_batch_norm`` when ``data_parallel()``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def data_parallel() -> bool:
    """Whether this process is one rank of several (torch.distributed initialised)."""
    distributed = torch.distributed
    return (
        distributed.is_available()
        and distributed.is_initialized()
        and (distributed.get_world_size() > 1)
    )


def synchronized_batch_norm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor,
    bias: Tensor,
    momentum: float,
    eps: float,
) -> Tensor:
    """Training-mode batch norm of ``x`` (N, C, *S) or (M, C) over the samples of every rank:
    the mean, then the variance about it, each summed over ranks by ``SumOverRanks``, whose
    backward is the all-reduce of the gradients, so that the gradients are those of one
    process holding the global batch (as torch.nn.SyncBatchNorm's, Ioffe & Szegedy 2015's
    formulas with the sums across ranks). Two passes, as F.batch_norm's, not
    E[x^2] - mean^2. The running statistics move as F.batch_norm moves them: the mean, and
    the unbiased variance (n / (n - 1))."""
    all_reduce = SumOverRanks.apply
    dims = [0, *range(2, x.dim())]
    local = torch.tensor([x.numel() // x.shape[1]], dtype=x.dtype, device=x.device)
    sums = all_reduce(torch.cat([x.sum(dims), local]))
    count = sums[-1].detach()
    mean = sums[:-1] / count
    shape = [1, -1] + [1] * (x.dim() - 2)
    centred = x - mean.view(shape)
    var = all_reduce(centred.square().sum(dims)) / count
    with torch.no_grad():
        running_mean.lerp_(mean.detach(), momentum)
        running_var.lerp_(var.detach() * count / (count - 1).clamp_min(1), momentum)
    scale = weight * torch.rsqrt(var + eps)
    return centred * scale.view(shape) + bias.view(shape)


class SumOverRanks(torch.autograd.Function):
    """The sum of a tensor over every rank, differentiable: each rank's output depends on every
    rank's input, so the gradient of an input is the sum over ranks of the output's gradients
    (what torch.distributed.nn.functional.all_reduce computed for a sum; torch 2.13 deprecates
    it, and its suggested replacement, the functional collective, has no backward)."""

    @staticmethod
    def forward(ctx, tensor: Tensor) -> Tensor:
        summed = tensor.clone()
        torch.distributed.all_reduce(summed)
        return summed

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        summed = grad.clone()
        torch.distributed.all_reduce(summed)
        return summed
