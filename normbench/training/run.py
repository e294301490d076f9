"""One training run, from a validated config to a finished run directory.

``run_experiment`` owns the run's life cycle (skip if finished, status transitions, errors,
``--force`` without losing the previous result); ``normbench.training.trainer`` owns the loop.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import secrets
import shutil
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from normbench import __version__
from normbench.core.errors import StoreError, UsageError
from normbench.data.hubcache import provenance as data_provenance
from normbench.store.index import record_run
from normbench.store.provenance import fingerprint, is_stale
from normbench.store.rundir import (
    FINISHED,
    Labels,
    Rerun,
    RunDir,
    is_run_id,
    real_directory,
    run_id,
)
from normbench.training import checkpoint
from normbench.training.distributed import Ranks, announce
from normbench.training.launch import launch
from normbench.training.trainer import Trainer, now


@dataclass
class Outcome:
    """What became of a run: its id, directory, final status and summary numbers."""

    run_id: str
    path: Path
    status: str
    summary: dict = field(default_factory=dict)
    error: str | None = None
    skipped: bool = False
    stale: bool = False  # skipped, but made by other code than the installed one


def resolve_device(name: str) -> torch.device:
    """auto picks cuda, then mps, then cpu; asking for a device that is not there is refused."""
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if (name == "cuda" and not cuda) or (name == "mps" and not mps):
        present = ", ".join(d for d, ok in (("cpu", True), ("cuda", cuda), ("mps", mps)) if ok)
        raise UsageError(f"device={name} is not available on this machine; valid: auto, {present}")
    return torch.device(name)


def run_experiment(
    cfg: dict,
    runs_dir: Path | str,
    rerun: Rerun | None = None,
    progress: bool = True,
    labels: Labels | None = None,
    ranks: Ranks | None = None,
) -> Outcome:
    """Train the run ``cfg`` describes unless a finished one exists (see
    RunDir.needs_training); record everything. ``labels`` (tags, a note) are added to the
    run's meta.json, also when it was finished before. ``ranks``: this process is rank 0 of a
    data-parallel run whose ranks have joined already (the tasks of one SLURM job,
    normbench.training.tasks); it tells the others whether it trains (``announce``).

    A failure is recorded as status ``failed`` (with its error text) and returned, not raised.
    KeyboardInterrupt marks the run ``interrupted``, keeps its metrics, and propagates. A run
    with a checkpoint resumes from it (``rerun.force``: starts afresh).
    """
    device = resolve_device(cfg["device"])
    check_devices(cfg["train"]["devices"], device)
    run = RunDir(runs_dir, run_id(cfg))
    try:
        return _run_locked(cfg, run, device, rerun, progress, labels, ranks)
    except OSError as err:
        if err.errno in NO_SPACE:  # one line naming the run, never a chained traceback
            where = f" writing {Path(err.filename).name}" if err.filename else ""
            raise StoreError(
                f"{run.run_id}: no space left on device{where} in {run.path.parent}; free "
                "some and run it again (`normbench runs clean` removes half-written runs)"
            ) from None
        raise


def check_devices(devices: int, device: torch.device) -> None:
    """train.devices ranks need as many GPUs on CUDA (one each); a CPU runs any number (gloo);
    MPS has no collective backend."""
    if devices == 1 or device.type == "cpu":
        return
    present = torch.cuda.device_count() if device.type == "cuda" else 1
    if devices > present:
        raise UsageError(
            f"train.devices={devices} needs {devices} {device.type} devices and this machine "
            f"has {present}; valid: at most {present}, or device=cpu"
        )


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, or a full quota


def kept_outcome(run: RunDir, previous: dict, cfg: dict) -> Outcome:
    """The Outcome of a finished run that is kept, not trained again."""
    return Outcome(
        run.run_id,
        run.path,
        previous["status"],
        previous.get("summary", {}),
        skipped=True,
        stale=is_stale(previous, cfg),
    )


def _run_locked(
    cfg: dict,
    run: RunDir,
    device: torch.device,
    rerun: Rerun | None,
    progress: bool,
    labels: Labels | None,
    ranks: Ranks | None = None,
) -> Outcome:
    """run_experiment's work: a finished run in a read-only runs directory is skipped without
    a lock (none can be taken there); otherwise under the run's lock, as its docstring says."""
    if not os.access(run.path.parent, os.W_OK):  # read-only: no lock to take, nothing to write
        previous = run.read_meta()
        if run.path.parent.is_dir() and not run.needs_training(previous, cfg, rerun or Rerun()):
            return kept_outcome(run, previous, cfg)
    clean_staging(run.path.parent)
    with run.lock():  # another process training this run: wait for it, then look again
        previous = run.read_meta()
        if not run.needs_training(previous, cfg, rerun or Rerun()):
            if labels:
                run.write_meta(labels.apply(previous))
                record_run(run.path.parent, run.run_id)
            return kept_outcome(run, previous, cfg)
        kept = Labels(tuple((previous or {}).get("tags") or ()), (previous or {}).get("note"))
        labels = labels or Labels()
        labels = Labels(kept.tags + labels.tags, labels.note or kept.note)
        if rerun and rerun.force and previous and previous.get("status") in FINISHED:
            outcome = train_replacing(cfg, run, device, progress, labels, ranks)
        else:
            if rerun and rerun.force:
                (run.path / checkpoint.FILE_NAME).unlink(missing_ok=True)
            outcome = train_and_record(cfg, run, device, progress, labels, ranks)
        record_run(run.path.parent, run.run_id)  # the next report need not read it
        return outcome


STAGING = ".staging"  # runs/.staging/<run_id>-<8 hex>/<run_id>/: a forced rerun, while it trains


def train_replacing(
    cfg: dict,
    run: RunDir,
    device: torch.device,
    progress: bool,
    labels: Labels,
    ranks: Ranks | None = None,
) -> Outcome:
    """``--force`` on a finished run: train into a fresh directory beside it and swap it in
    only once the new run has finished, so that a forced rerun that is interrupted or fails
    never destroys the result it was asked to replace; what it trained is then discarded.
    (The caller holds the run's lock; a process killed here leaves its staging directory to
    ``clean_staging``.)"""
    staging = real_directory(run.path.parent / STAGING) / f"{run.run_id}-{secrets.token_hex(4)}"
    fresh = RunDir(staging, run.run_id)
    try:
        outcome = train_and_record(cfg, fresh, device, progress, labels, ranks)
        if outcome.status in FINISHED:
            fault_point("trained")
            os.replace(run.path, staging / REPLACED)
            fault_point("moved aside")  # a kill here leaves no run directory: clean_staging
            os.replace(fresh.path, run.path)  # puts the new result (complete) in its place
            fault_point("moved in")
        return Outcome(run.run_id, run.path, outcome.status, outcome.summary, outcome.error)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


REPLACED = "replaced"  # runs/.staging/<run_id>-<8 hex>/replaced/: the previous result, moved aside


def fault_point(step: str) -> None:
    """Called between the steps of a forced rerun's swap; does nothing. The tests replace it
    to kill the process at each step (tests/training/test_staging.py), which is how they
    show that no instant of the swap loses a finished result."""


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside the block act when it ends, for writes that must
    happen together: their handlers are swapped for ones that note the signal, and the signal
    is raised again afterwards. (Blocking them with pthread_sigmask would not do: the kernel
    may deliver a signal to any thread, torch's among them, and Python then runs the handler
    in the main thread anyway.) Only the main thread can swap handlers; elsewhere nothing is
    deferred. SIGKILL cannot wait: a run directory it leaves without meta.json is skipped as
    half-written and trained again."""
    received: list[int] = []
    try:
        previous = {s: signal.signal(s, lambda n, f: received.append(n)) for s in DEFERRED}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])


DEFERRED = (signal.SIGINT, signal.SIGTERM)


def clean_staging(runs_dir: Path) -> None:
    """Delete the staging directories that forced reruns killed by kill -9 (or a lost node)
    left behind: those whose runs no live process holds. A staging directory belongs to the
    run its name and its contents name; it is deleted while holding those runs' locks, and
    kept while any of them is held (a forced rerun training now) or cannot be taken. A run
    whose directory is missing gets its result back from it first (``restore``)."""
    staging = runs_dir / STAGING
    if staging.is_symlink() or not staging.is_dir():
        return
    with os.scandir(staging) as entries:
        left = [entry for entry in entries if entry.is_dir(follow_symlinks=False)]
    for entry in left:
        try:
            owners = {name for name in os.listdir(entry.path) if is_run_id(name)}
        except OSError:
            continue
        if is_run_id(entry.name.rpartition("-")[0]):
            owners.add(entry.name.rpartition("-")[0])
        with contextlib.ExitStack() as held:
            try:
                locks = [RunDir(runs_dir, owner).lock(wait=False) for owner in owners]
                if all(held.enter_context(lock) for lock in locks):
                    restore(runs_dir, Path(entry.path), entry.name.rpartition("-")[0])
                    shutil.rmtree(entry.path, ignore_errors=True)
            except StoreError:  # a symlinked lock: leave it to a person
                continue


def restore(runs_dir: Path, staging: Path, run_id: str) -> None:
    """A forced rerun killed between its two renames left no run directory: put back the new
    result when it is complete, else the previous one (the caller holds the run's lock)."""
    target = runs_dir / run_id
    if not is_run_id(run_id) or os.path.lexists(target):
        return
    fresh = RunDir(staging, run_id)
    previous = staging / REPLACED
    real = fresh.path.is_dir() and not fresh.path.is_symlink()
    if real and fresh.status() in FINISHED and fresh.intact():
        os.replace(fresh.path, target)
    if not os.path.lexists(target) and previous.is_dir() and not previous.is_symlink():
        os.replace(previous, target)
    if os.path.lexists(target):
        record_run(runs_dir, run_id)


# torch's futures wrap an error raised under a callback (a DDP communication hook's, such as
# normbench's AllReduceClock and torch's own allreduce_hook) in this, once per callback, and
# append the callbacks' Python stacks on further lines
CALLBACK_WRAPPER = "Got the following error when running the callback: "


def error_line(exc: BaseException) -> str:
    """A failed run's error in one line (its traceback is kept in meta.json): the exception's
    first line, the callback wrappers of torch's futures taken off, so that a gloo timeout
    under DDP's hooks reads as the timeout it is."""
    text = f"{type(exc).__name__}: {exc}"
    first = next((line for line in text.splitlines() if line.strip()), text)
    while CALLBACK_WRAPPER in first:
        first = first.split(CALLBACK_WRAPPER, 1)[1]
    return first.strip()


def train_and_record(
    cfg: dict,
    run: RunDir,
    device: torch.device,
    progress: bool,
    labels: Labels,
    ranks: Ranks | None = None,
) -> Outcome:
    """Train one run and keep its status, timings and errors in meta.json. A data-parallel
    run (train.devices > 1) is launched as its ranks, rank 0 of which comes back here with
    ``ranks`` to train and record it (normbench.training.distributed)."""
    if cfg["train"]["devices"] > 1 and ranks is None:
        status, summary, error = launch(train_and_record, cfg, run, device, progress, labels)
        return Outcome(run.run_id, run.path, status, summary, error)
    previous = run.read_meta() or {}
    resuming = (run.path / checkpoint.FILE_NAME).is_file()
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    meta = {
        "run_id": run.run_id,
        "status": "running",
        "started": previous.get("started", now()) if resuming else now(),
        "first_step": None,  # when training began: the end of set-up (data, model, optimiser)
        "finished": None,
        "error": None,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "host": socket.gethostname(),
        "command": sys.argv,
        "code": fingerprint(cfg),
        **data_provenance(cfg["data"]),  # a fetched set's fingerprint; nothing for the others
        "versions": {
            "normbench": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "summary": {},
        # the step each resumption started from, one per resumption from a checkpoint
        "resumed_from": previous.get("resumed_from", []) if resuming else [],
    }
    meta = labels.apply(meta)
    # A Ctrl-C or SIGTERM between the two would leave a run directory without meta.json:
    # signals wait for both, and an exception raised in the first still writes the second.
    with signals_deferred():
        try:
            run.write_config(cfg)
        finally:
            run.write_meta(meta)
    if not resuming:
        run.metrics_path.unlink(missing_ok=True)  # a forced re-run starts a fresh log
    start = time.perf_counter()
    if ranks is not None:
        announce(True, device)  # the other ranks wait for rank 0's word before training
    trainer = Trainer(cfg, device, run, progress, ranks)

    def finish(status: str, error: str | None = None) -> None:
        trainer.summary["wall_s"] = round(trainer.wall_s + time.perf_counter() - start, 3)
        if trainer.resumed_from is not None:
            meta["resumed_from"].append(trainer.resumed_from)
        if status in FINISHED:  # a finished run keeps its results, not its training state
            (run.path / checkpoint.FILE_NAME).unlink(missing_ok=True)
        meta.update(
            status=status,
            first_step=trainer.first_step,
            finished=now(),
            error=error,
            summary=trainer.summary,
        )
        run.write_meta(meta)

    try:
        status, error = trainer.fit(), None
    except KeyboardInterrupt:
        finish("interrupted")
        raise
    except Exception as exc:  # a run's failure is a recorded result, never a lost sweep
        status, error = "failed", error_line(exc)
        meta["traceback"] = traceback.format_exc()
    finish(status, error)
    return Outcome(run.run_id, run.path, status, trainer.summary, error)
