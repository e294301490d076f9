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

from normbench.layers.models import ResidualUnit


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


def build_optimizers(
    model: torch.nn.Module, train: dict, lr_scale: float, fused: bool
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer | None]:
    """The run's optimizer (AdamW or SGD; weight decay on parameters of 2 dimensions or more)
    and, for ``train.optimizer=muon``, torch.optim.Muon on ``muon_parameters`` with AdamW on
    the rest (at train.lr; Muon at train.muon_lr and train.muon_momentum, Nesterov, the same
    decoupled weight decay). ``train.muon_lr=null``: Muon at train.lr with Moonlight's update
    scaling (0.2 sqrt(max(A, B)), torch's ``match_rms_adamw``), which makes its update RMS
    AdamW's so that one rate serves both (Liu et al. 2025); a sweep over train.lr then moves
    both. Both rates are scaled by ``lr_scale`` (train.lr_scaling)."""
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
        muon = torch.optim.Muon(
            hidden,
            lr=(train["lr"] if matched else train["muon_lr"]) * lr_scale,
            momentum=train["muon_momentum"],
            weight_decay=train["weight_decay"],
            adjust_lr_fn="match_rms_adamw" if matched else "original",
        )
        taken = {id(p) for p in hidden}
        params = [p for p in params if id(p) not in taken]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr = train["lr"] * lr_scale
    if train["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=train["momentum"], fused=fused), None
    return torch.optim.AdamW(groups, lr=lr, fused=fused), muon
