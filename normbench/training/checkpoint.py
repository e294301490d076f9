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
stop, whatever checkpoint_every says. ``Checkpointing`` is the training loop's side of both: the
trainer's methods that save its state and resume from it.
"""

from __future__ import annotations

import io
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.core.errors import StoreError
from normbench.core.files import open_regular
from normbench.core.text import plain
from normbench.store.rundir import MAX_BYTES, atomic_write

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


class Unusable(Exception):
    """A checkpoint that is there but cannot be resumed from (the run starts afresh)."""


# What a checkpoint must hold to be resumed from, and of which type (``save``'s callers).
STATE = {
    "step": int,
    "model": dict,
    "optimizer": dict,
    "scheduler": dict,
    "scaler": dict,
    "rng": dict,
    "data_order": dict,
    "window": dict,
    "rows": list,
    "diagnostics": list,
    "summary": dict,
    "train_s": (int, float),
    "wall_s": (int, float),
}


def load(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (a run directory's checkpoint.pt) on the CPU, or None when
    there is none. Read through the trusted reader (a regular file, never through a symlink,
    bounded) with ``weights_only``; ``Unusable`` naming what is wrong when it cannot be read,
    is of another format or lacks part of a run's state (the run then starts afresh: the same
    result, more time)."""
    try:
        with open_regular(path, MAX_BYTES["checkpoint.pt"], root=path.parent.parent) as handle:
            state = torch.load(handle, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except StoreError as err:
        raise Unusable(str(err)) from None
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as err:
        raise Unusable(f"{path}: not a checkpoint ({type(err).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise Unusable(f"{path}: not a checkpoint of format {FORMAT} (another version's?)")
    for key, kind in STATE.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise Unusable(f"{path}: no {key} in it (a checkpoint without a run's state)")
    return state


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


class Checkpointing:
    """The training loop's checkpoints: when it saves one, what it saves, and how it resumes
    from one. A part of ``normbench.training.trainer.Trainer``, whose state (model,
    optimisers, schedules, generators, data order, window, records so far) it reads and
    restores."""

    @property
    def checkpoint_path(self) -> Path:
        return self.run.path / FILE_NAME

    def checkpoint_before(self, step: int, first: int) -> None:
        """Before ``step``: on a stop request (the job is about to end), save and stop; when
        ``train.checkpoint_every`` is due, save (not again at the step resumed from)."""
        if stop_requested():
            self.save_checkpoint(step - 1)
            raise StopRequested
        if self.checkpoint_due(step - 1) and step - 1 > first:
            self.save_checkpoint(step - 1)

    def checkpoint_due(self, step: int) -> bool:
        every = self.cfg["train"]["checkpoint_every"]
        return bool(every) and step % every == 0

    def save_checkpoint(self, step: int) -> None:
        """Save everything the steps after ``step`` depend on. The training clock moves on by
        the time the save took, so that saving is not counted as training time. In a
        data-parallel run rank 0 saves (the ranks' states are the same but for their
        per-device BatchNorm buffers, which rank 0's replace at the next forward)."""
        if not self.writes:
            return
        started = time.perf_counter()
        save(
            self.checkpoint_path,
            {
                "step": step,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                **self.muon_state(),
                "rng": rng_state(self.device),
                "data_order": self.data_order.state_dict(),
                "window": self.window.state_dict(),
                "rows": self.rows,
                "diagnostics": self.diagnostics.rows if self.diagnostics else [],
                "summary": self.summary,
                "train_s": self.train_s + (started - self.tick),
                "wall_s": self.wall_s + (started - self.attempt_start),
                "first_step": self.first_step,
            },
        )
        self.tick += time.perf_counter() - started

    def muon_state(self) -> dict:
        """Muon's optimizer and schedule, beside the AdamW ones a checkpoint always holds (so
        that the checkpoints of every other optimizer keep their layout)."""
        if self.muon is None:
            return {}
        return {"muon": self.muon.state_dict(), "muon_scheduler": self.muon_scheduler.state_dict()}

    def resume(self) -> int:
        """Load the run's checkpoint if it has one; returns the step to continue after. A
        checkpoint that cannot be resumed from (unreadable, another format, without a model
        state, of another model's shapes) means starting afresh, with a warning on stderr:
        the same result, more time."""
        try:
            state = load(self.checkpoint_path)
            if state is None:
                return 0
            self.restore(state)
        except Unusable as err:
            problem = str(err)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
            problem = f"{self.checkpoint_path}: cannot resume from it ({type(err).__name__})"
        else:
            return state["step"]
        sys.stderr.write(f"warning: {plain(problem)}; starting the run afresh\n")
        self.setup()  # the model, optimiser and generators as they start (a restore may
        self.window.clear()  # have changed some of them before it failed)
        return 0

    def restore(self, state: dict) -> None:
        """The training state of a checkpoint (``load`` checked its keys): the model,
        optimiser, schedules and generators first, as they can fail on another model's state;
        then the run's records so far."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.muon is not None:  # a checkpoint without Muon's state cannot resume it
            self.muon.load_state_dict(state["muon"])
            self.muon_scheduler.load_state_dict(state["muon_scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"], self.device)
        self.data_order.load_state_dict(state["data_order"])
        self.window.load_state_dict(state["window"])
        self.loss_scale = self.scaler.get_scale()
        self.rows = state["rows"]
        if self.diagnostics is not None:
            self.diagnostics.rows = state["diagnostics"]
        self.summary = state["summary"]
        self.train_s, self.wall_s = state["train_s"], state["wall_s"]
        self.first_step = state.get("first_step")
        self.resumed_from = state["step"]
