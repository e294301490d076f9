"""Checkpoints: a run's whole training state in runs/<run_id>/checkpoint.pt, so that an
interrupted run (Ctrl-C, SIGTERM, kill -9, a lost node, a time limit, a preemption) resumes
where its last checkpoint left it, and on CPU ends with the very metrics an uninterrupted run
would have had.

A checkpoint holds only tensors and plain containers, so it loads with
``torch.load(weights_only=True)``: no pickled code runs when a run resumes. It is written to a
temporary name and renamed into place, so a kill during the write leaves the previous one.

Two things write one: ``train.checkpoint_every`` (every N steps; null = never), and a stop
request: a scheduler's warning that the job is about to end (submitit's USR2 before a time
limit or a preemption) asks the training loop to save its state at the next step boundary and
stop, whatever checkpoint_every says.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.store.rundir import atomic_write

FILE_NAME = "checkpoint.pt"
FORMAT = 1  # bumped when the layout changes: an older checkpoint is then not loaded


class StopRequested(KeyboardInterrupt):
    """The training loop stopped at a step boundary on request, its state saved.

    A KeyboardInterrupt, so everything that records an interrupted run records this one too.
    """


_stop_requested = False


def request_stop(signum: int | None = None, frame: Any = None) -> None:
    """Ask the running training loop to checkpoint and stop; usable as a signal handler."""
    global _stop_requested
    _stop_requested = True


def stop_requested() -> bool:
    return _stop_requested


def clear_stop_request() -> None:
    global _stop_requested
    _stop_requested = False


def save(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    atomic_write(path, buffer.getvalue())


def load(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` on the CPU, or None when there is none, it is of another
    format, or it cannot be read (the run then starts afresh: same result, more time)."""
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError):
        return None
    return state if isinstance(state, dict) and state.get("format") == FORMAT else None


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every random generator a run draws from: torch's (CPU and the device's) and numpy's,
    numpy's as tensors and numbers so that it loads with weights_only."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    elif device.type == "mps":
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["kind"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["position"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    elif device.type == "mps" and "mps" in state:
        torch.mps.set_rng_state(state["mps"])
