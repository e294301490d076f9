"""A run's optimizers and their learning-rate schedule: AdamW or SGD, Muon on the residual
sublayers' weight matrices beside AdamW, the batch-size scaling of the rates, and the warm-up
and decay every optimizer follows.

Apart from the loop (normbench.training.trainer) because which parameter goes to which
optimizer at which rate is a question of its own (Muon's split, Moonlight's update scaling),
checked by tests that build optimizers without training.
"""

from __future__ import annotations

import math

import torch

from normbench.layers.models import Attention, ResidualUnit
from normbench.layers.mup import MUP_SCALING, WidthScaling


def lr_scaling(cfg: dict) -> float:
    """train.lr_scaling: lr * (batch_size / base_batch_size) ** (1 | 1/2 | 0)."""
    power = {"none": 0.0, "linear": 1.0, "sqrt": 0.5}[cfg["train"]["lr_scaling"]]
    return (cfg["batch_size"] / cfg["train"]["base_batch_size"]) ** power


def lr_factor(train: dict, total_steps: int, step: int) -> float:
    """The rate's factor at ``step`` of ``total_steps``: linear warm-up over
    train.warmup_steps, then constant or cosine decay to zero (train.schedule)."""
    warmup = train["warmup_steps"]
    if step < warmup:
        return (step + 1) / warmup
    if train["schedule"] == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def muon_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters Muon updates: the 2-D weight matrices of the residual sublayers
    (attention's qkv and output projections, the MLP's two layers), as in Jordan et al.'s Muon
    (2024, "Muon: an optimizer for hidden layers in neural networks") and Moonlight (Liu et
    al. 2025, "Muon is Scalable for LLM Training"): the embeddings, the head, the norms
    (QK-norm's gains, AdaLN's projection) and every bias stay with AdamW."""
    found = {}
    for unit in model.modules():
        if isinstance(unit, ResidualUnit):
            for p in unit.sublayer.parameters():
                if p.dim() == 2 and p.requires_grad:
                    found[id(p)] = p
    return list(found.values())


class SplitMuon(torch.optim.Muon):
    """torch.optim.Muon, except that a parameter group with ``splits`` > 1 has each of its
    matrices orthogonalised as that many row blocks apart: the fused attention projection
    (3 width x width, normbench.layers.models.Attention.qkv) as its Q, K and V, the separate
    matrices Jordan et al.'s and Moonlight's references orthogonalise (orthogonalised whole,
    the three updates would share one orthogonal matrix, so Q's and K's spectra would not be
    Muon's). Each block gets Muon's momentum, Newton-Schulz step, rate adjustment (of its own
    shape) and weight decay, exactly as torch.optim.Muon updates a matrix of that shape: the
    blocks are views of the parameter, its gradient and its momentum buffer."""

    @torch.no_grad()
    def step(self, closure=None):
        from torch.optim._muon import muon

        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            has_complex = self._init_group(group, params, grads, buffers)
            splits = group.get("splits", 1)
            if splits > 1:
                params, grads, buffers = (
                    [block for tensor in tensors for block in tensor.chunk(splits)]
                    for tensors in (params, grads, buffers)
                )
            muon(
                params,
                grads,
                buffers,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                nesterov=group["nesterov"],
                ns_coefficients=group["ns_coefficients"],
                eps=group["eps"],
                ns_steps=group["ns_steps"],
                adjust_lr_fn=group["adjust_lr_fn"],
                has_complex=has_complex,
            )
        return loss


def fused_qkv(model: torch.nn.Module) -> set[int]:
    """The ids of the fused attention projections' weights (``qkv``: Q, K and V stacked)."""
    return {id(unit.qkv.weight) for unit in model.modules() if isinstance(unit, Attention)}


def build_optimizers(
    model: torch.nn.Module, train: dict, lr_scale: float, fused: bool
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer | None]:
    """The run's optimizer (AdamW or SGD; weight decay on parameters of 2 dimensions or more)
    and, for ``train.optimizer=muon``, torch.optim.Muon on ``muon_parameters`` with AdamW on
    the rest (at train.lr; Muon at train.muon_lr and train.muon_momentum, Nesterov, the same
    decoupled weight decay; ``train.muon_qkv=split``: the attention's Q, K and V apart,
    ``SplitMuon``). AdamW's betas are (0.9, train.adam_beta2). ``train.muon_lr=null``: Muon
    at train.lr with Moonlight's update scaling (0.2 sqrt(max(A, B)), torch's
    ``match_rms_adamw``), which makes its update RMS
    AdamW's so that one rate serves both (Liu et al. 2025); a sweep over train.lr then moves
    both. Both rates are scaled by ``lr_scale`` (train.lr_scaling). A muP model's layers
    get muP's rates (``mup_multipliers``)."""
    muon = None
    params = list(model.parameters())
    if train["optimizer"] == "muon":
        hidden = muon_parameters(model)
        if not hidden:
            raise ValueError(
                "train.optimizer=muon found no 2-D weight matrix in a residual sublayer "
                "(normbench.layers.models.ResidualUnit) of this model"
            )
        matched = train["muon_lr"] is None
        stacked = fused_qkv(model) if train["muon_qkv"] == "split" else set()
        muon_groups = [
            group
            for group in (
                {"params": [p for p in hidden if id(p) not in stacked]},
                {"params": [p for p in hidden if id(p) in stacked], "splits": 3},
            )
            if group["params"]
        ]
        muon = SplitMuon(
            muon_groups,
            lr=(train["lr"] if matched else train["muon_lr"]) * lr_scale,
            momentum=train["muon_momentum"],
            weight_decay=train["weight_decay"],
            adjust_lr_fn="match_rms_adamw" if matched else "original",
        )
        taken = {id(p) for p in hidden}
        params = [p for p in params if id(p) not in taken]
    lr = train["lr"] * lr_scale
    groups = param_groups(model, params, train, lr)
    if train["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=train["momentum"], fused=fused), None
    betas = (0.9, train["adam_beta2"])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused), muon


def param_groups(
    model: torch.nn.Module, params: list[torch.nn.Parameter], train: dict, lr: float
) -> list[dict]:
    """Weight decay on parameters of 2 dimensions or more, none on the rest: the first two
    groups, at the optimizer's rate ``lr`` (the trainer reads the first group's as the run's). A
    muP model (normbench.layers.mup) moves each parameter whose rate muP scales to a group of
    its own multiplier after them: lr times it, weight decay divided by it, so that AdamW's
    decoupled decay per step (lr x weight_decay) stays the base width's, as the ``mup``
    package's MuAdam and MuSGD do."""
    multipliers = mup_multipliers(model, train["optimizer"])
    groups = {
        (True, 1.0): {"params": [], "weight_decay": train["weight_decay"]},
        (False, 1.0): {"params": [], "weight_decay": 0.0},
    }
    for p in params:
        decays, multiplier = p.dim() >= 2, multipliers.get(id(p), 1.0)
        group = groups.setdefault(
            (decays, multiplier),
            {
                "params": [],
                "weight_decay": train["weight_decay"] / multiplier if decays else 0.0,
                "lr": lr * multiplier,
            },
        )
        group["params"].append(p)
    return list(groups.values())


def mup_multipliers(model: torch.nn.Module, optimizer: str) -> dict[int, float]:
    """{id(parameter): its rate's multiplier} under muP for width, m = width / base_width
    (Yang et al. 2022, Table 3, in the ``mup`` package's form, whose readout carries a 1/m
    multiplier): AdamW: hidden (matrix-like) weights lr / m, everything else lr. SGD:
    vector-like parameters (one width dimension: the input layer, biases, norms' gains, the
    readout) lr * m, hidden weights lr (fan-in and fan-out grow alike), scalars lr. Empty for
    a standard model."""
    scaling: WidthScaling | None = getattr(model, MUP_SCALING, None)
    if scaling is None:
        return {}
    ratio, dims = scaling.ratio, scaling.dims
    scaled = {"adamw": {2: 1.0 / ratio}, "sgd": {1: ratio}}[optimizer]
    return {
        id(p): scaled[dims[name]] for name, p in model.named_parameters() if dims[name] in scaled
    }
