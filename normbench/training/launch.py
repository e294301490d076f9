"""Starting a data-parallel run (``train.devices=N``): its N ranks launched on this machine by
PyTorch's own launcher (torch.distributed.run's Python API, ``elastic_launch``), gloo on a CPU
and NCCL on CUDA; each rank trains with normbench.training.distributed's parts.

The process that runs ``normbench run`` holds the run's lock and launches the ranks; rank 0
trains and records the run as one process does (``train_and_record``: config, meta.json,
metrics, checkpoints), the others train beside it and write nothing.

The ranks talk over 127.0.0.1 only: the launcher's store listens on a socket bound to the
loopback address on a port the kernel picks free (never a busy one; ``LoopbackRendezvous``),
and gloo and NCCL are told to use the loopback interface. A rank that fails, is killed or
waits at a collective past ``train.timeout_s`` ends the run: the launcher stops every other
rank (SIGTERM, then SIGKILL), and the run is marked ``failed`` with the first failure in one
line; Ctrl-C or SIGTERM marks it ``interrupted``. Either way nothing is counted as a result,
and a checkpoint (``train.checkpoint_every``) resumes it with the same number of ranks.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.elastic.rendezvous.api import (
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
)
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import (
    StaticTCPRendezvous,
    create_rdzv_handler,
)
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from normbench.core.text import plain
from normbench.store.rundir import Labels, RunDir
from normbench.training.distributed import LOOPBACK, Ranks, join, leader_trains
from normbench.training.trainer import Trainer

RENDEZVOUS = "normbench-loopback"  # the launcher's rendezvous backend, registered below
# Rank 0's training and recording of the run: normbench.training.run.train_and_record, passed
# in (that module launches through this one), returning its Outcome.
Train = Callable[..., Any]


# ------------------------------------------------------------------- the launching process
def launch(
    train: Train, cfg: dict, run: RunDir, device: torch.device, progress: bool, labels: Labels
) -> tuple[str, dict, str | None]:
    """Train ``run`` on ``train.devices`` ranks and return its (status, summary, error) as
    rank 0 recorded them, or as the launcher saw the run end: a rank's failure overrides what
    rank 0 wrote (it was stopped because of it), and a run whose rank 0 could not record its
    end is marked here. Ctrl-C and SIGTERM mark the run interrupted and raise
    KeyboardInterrupt, as one process does."""
    devices = cfg["train"]["devices"]
    config = launch_config(devices, run.run_id, cfg["train"]["timeout_s"])
    entry = (train, cfg, str(run.path.parent), run.run_id, str(device), progress, labels)
    handlers = {s: signal.getsignal(s) for s in LAUNCHER_SIGNALS}
    try:
        with launcher_quiet(), launcher_signals(handlers):
            elastic_launch(config, rank_main)(*entry)
    except ChildFailedError as err:
        rank, failure = first_cause(err.failures)
        if rank == 0 and (run.read_meta() or {}).get("status") == "failed":
            return mark_ended(run, "failed", None)  # rank 0 recorded its own error
        error = f"rank {rank} of {devices}: {failure_line(failure)}"
        return mark_ended(run, "failed", error, failure_text(failure))
    except SignalException as err:
        mark_ended(run, "interrupted", f"{signal.Signals(err.sigval).name} while training")
        raise KeyboardInterrupt from None
    finally:
        for signum, handler in handlers.items():  # the launcher installs its own
            signal.signal(signum, handler)
    return mark_ended(run, "failed", "rank 0 ended without recording the run")


def launch_config(devices: int, name: str, timeout_s: float) -> LaunchConfig:
    """torch's launcher on this machine: ``devices`` ranks started by spawning, never
    restarted, meeting through the loopback rendezvous within ``timeout_s``."""
    register_rendezvous()
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=devices,
        run_id=name,
        rdzv_backend=RENDEZVOUS,
        rdzv_endpoint=f"{LOOPBACK}:0",
        rdzv_configs={"rank": 0, "timeout": math.ceil(timeout_s)},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        local_addr=LOOPBACK,
    )


# The signals the launcher turns into stopping its ranks (TORCHELASTIC_SIGNALS_TO_HANDLE).
LAUNCHER_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def launcher_signals(handlers: dict[int, Any]) -> Iterator[None]:
    """The launcher turns into stopping its ranks only the signals this process does not
    ignore: a sweep's worker ignores SIGINT (its parent stops it with SIGTERM when a Ctrl-C
    reaches the whole process group), and the launcher, which would otherwise take the
    Ctrl-C too, would stop the ranks twice over (the second stop racing the first)."""
    handled = [s.name for s in LAUNCHER_SIGNALS if handlers[s] is not signal.SIG_IGN]
    before = os.environ.get(SIGNALS_TO_HANDLE)
    os.environ[SIGNALS_TO_HANDLE] = ",".join(handled)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SIGNALS_TO_HANDLE, None)
        else:
            os.environ[SIGNALS_TO_HANDLE] = before


SIGNALS_TO_HANDLE = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # read by the launcher when it starts


@contextlib.contextmanager
def launcher_quiet() -> Iterator[None]:
    """The launcher's own log (each rank started and stopped, a failed rank's traceback
    several times over, 'Received 2 death signal') kept off the terminal while it runs: the
    run's end is one line, and the failing rank's traceback goes into meta.json. Each of the
    launcher's modules sets its own logger's level, so every one is quieted, not their
    parent alone."""
    known = list(logging.root.manager.loggerDict)
    names = [n for n in known if n.startswith(("torch.distributed", "torch.multiprocessing"))]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def mark_ended(
    run: RunDir, status: str, error: str | None, traceback: str | None = None
) -> tuple[str, dict, str | None]:
    """The run's end as meta.json has it, after the ranks are gone: ``status`` with ``error``
    (None: the error rank 0 recorded) and the failing rank's ``traceback``, unless rank 0
    recorded a finished run (a rank that failed after it is no failure of the run)."""
    meta = run.read_meta() or {"run_id": run.run_id, "summary": {}}
    if meta.get("status") not in ("complete", "diverged"):
        meta.update(status=status, error=meta.get("error") if error is None else error)
        if traceback:
            meta["traceback"] = traceback
        run.write_meta(meta)
    return meta["status"], meta.get("summary") or {}, meta.get("error")


def first_cause(failures: dict[int, ProcessFailure]) -> tuple[int, ProcessFailure]:
    """The rank whose failure ended the run: one killed by a signal (the others fail after it,
    at their next collective, and record their error before the launcher sees the kill),
    else the one that recorded its error first."""
    killed = [(rank, f) for rank, f in sorted(failures.items()) if f.exitcode < 0]
    return killed[0] if killed else min(failures.items(), key=lambda item: item[1].timestamp)


def failure_text(failure: ProcessFailure) -> str | None:
    """A rank's failure as the launcher recorded it (its traceback), if it recorded one."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("extraInfo", {}).get("py_callstack") or message.get("message")
    return str(message) if message else None


def failure_line(failure: ProcessFailure) -> str:
    """One line for a rank's failure: its exception, or the signal that killed it."""
    if failure.signal_name() != "<N/A>" and failure.exitcode < 0:
        return f"killed by {failure.signal_name()}"
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    first = next((line for line in str(message).splitlines() if line.strip()), "")
    return plain(first) or f"exited with code {failure.exitcode}"


# ------------------------------------------------------------------------- a rank's process
def rank_main(
    train: Train,
    cfg: dict,
    runs_dir: str,
    run_id: str,
    device: str,
    progress: bool,
    labels: Labels,
) -> None:
    """One rank: join the others, train, leave. Rank 0 records the run (and fails its process
    when the run failed, so that the launcher stops the others at once); the others train
    without writing."""
    die_with_launcher()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_once)
    ranks = join(cfg, torch.device(device))
    cfg = {**cfg, "threads": 1}  # each rank one thread: N ranks, N cores
    torch.set_num_threads(1)
    place = rank_device(torch.device(device), ranks)
    run = RunDir(Path(runs_dir), run_id)
    try:
        if ranks.leader:
            outcome = train(cfg, run, place, progress, labels, ranks)
            if outcome.status == "failed":
                raise RankFailed(outcome.error or "failed")
        elif leader_trains(place):  # rank 0 always does here: it was launched to train
            Trainer(cfg, place, run, False, ranks).fit()
    finally:
        # the run has ended either way: a stop request now (the launcher stopping every rank
        # after another failed) would raise in the interpreter's teardown, a stray traceback
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, ignore_signal)
        dist.destroy_process_group()


def stop_once(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM in a rank: KeyboardInterrupt (rank 0 records the run interrupted),
    once. A Ctrl-C reaches a rank twice, from the terminal and from the launcher stopping its
    ranks; the second must not break the first's exit."""
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, ignore_signal)
    raise KeyboardInterrupt


def ignore_signal(signum: int, frame: object) -> None:
    """A signal that has nothing left to do. A handler that does nothing, not SIG_IGN: a
    signal that arrived just before the handler changed (the terminal's Ctrl-C and the
    launcher's SIGTERM come together) would find SIG_IGN when Python runs its handler, and
    Python then prints 'OSError: Signal 15 ignored due to race condition' with a traceback."""


class RankFailed(RuntimeError):
    """Rank 0's run failed (its error is in meta.json): the launcher stops the others."""


def rank_device(device: torch.device, ranks: Ranks) -> torch.device:
    """A CUDA rank's own GPU (one per rank); a CPU rank's CPU."""
    if device.type != "cuda":
        return device
    place = torch.device("cuda", ranks.rank)
    torch.cuda.set_device(place)
    return place


def die_with_launcher() -> None:
    """On Linux, SIGTERM this rank when its launcher dies (even by SIGKILL), so that no rank
    outlives the run it belongs to."""
    if sys.platform != "linux":
        return
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(set_parent_death_signal, signal.SIGTERM)
    if os.getppid() == 1:  # the launcher died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


# ---------------------------------------------------------------------------- rendezvous
def register_rendezvous() -> None:
    """Register the loopback rendezvous with the launcher (once per process)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    with contextlib.suppress(ValueError):  # registered before
        rendezvous_handler_registry.register(RENDEZVOUS, loopback_rendezvous)


def loopback_rendezvous(params: RendezvousParameters) -> LoopbackRendezvous:
    """The launcher's static rendezvous (one node, rank 0), with its store on 127.0.0.1."""
    static = create_rdzv_handler(params)
    return LoopbackRendezvous(
        LOOPBACK, 0, static.rank, static.world_size, static.run_id, static.timeout.seconds
    )


class LoopbackRendezvous(StaticTCPRendezvous):
    """torch's static rendezvous, whose TCPStore listens on a socket bound to 127.0.0.1 (torch's
    own would listen on every interface) at a port the kernel picks free, so that the store
    neither binds another address nor meets a busy port. The ranks find it through
    MASTER_ADDR and MASTER_PORT, which the launcher sets from what this returns."""

    def get_backend(self) -> str:
        return RENDEZVOUS

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.bind((LOOPBACK, 0))
            self.listener.listen(64)
            self.master_port = self.listener.getsockname()[1]
            self._store = TCPStore(
                LOOPBACK,
                self.master_port,
                self.world_size,
                True,
                self.timeout,
                multi_tenant=True,
                master_listen_fd=self.listener.fileno(),
            )
        store = PrefixStore(self.run_id, self._store)
        info = RendezvousStoreInfo(LOOPBACK, self.master_port)
        return RendezvousInfo(store, self.rank, self.world_size, info)
