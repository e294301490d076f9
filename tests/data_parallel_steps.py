"""The training steps of a run, traced for the data-parallel invariance tests
(tests/training/test_distributed.py): each step's loss over the global batch and the
gradient every parameter gets, from the real Trainer, in one process or as one rank of
several (a module of its own so that the launcher's spawned ranks can import it)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from normbench.store.rundir import RunDir
from normbench.training.distributed import Ranks, join
from normbench.training.trainer import Trainer

CPU = torch.device("cpu")


def traced(cfg: dict, steps: int, runs_dir: str, ranks: Ranks | None = None) -> dict:
    """``steps`` training steps of ``cfg``: per step the global batch's mean loss and the
    flattened gradients (after DDP's all-reduce: the same on every rank); then the
    validation loss rank 0 evaluates, and its running statistics after the evaluation."""
    torch.set_num_threads(1)
    trainer = Trainer(cfg, CPU, RunDir(Path(runs_dir), "traced"), False, ranks)
    trainer.begin()
    losses, gradients = [], []
    for _ in range(steps):
        x, y, mask = next(trainer.training_batches)
        loss = trainer.step(x, y, mask, want_grad_norm=True)[0].detach()
        if ranks is not None:
            dist.all_reduce(loss)
            loss /= ranks.world
        losses.append(loss.item())
        gradients.append(torch.cat([p.grad.flatten() for p in trainer.params]).clone())
    val_loss = trainer.evaluate_on_leader("val")[0]
    buffers = {k: v.clone() for k, v in trainer.model.state_dict().items() if "running" in k}
    return {
        "losses": losses,
        "gradients": torch.stack(gradients),
        "val_loss": val_loss,
        "buffers": buffers,  # rank 0's, after the evaluation
    }


def traced_ranks(cfgs: list[dict], steps: int, runs_dir: str) -> list[dict]:
    """``traced`` for each of ``cfgs``, as one rank of a launched run (rank 0's answer is
    the launcher's return value)."""
    cfg = cfgs[0]
    ranks = join(cfg, CPU)
    try:
        return [traced(c, steps, runs_dir, ranks) for c in cfgs]
    finally:
        dist.destroy_process_group()
