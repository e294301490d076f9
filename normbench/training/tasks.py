"""A data-parallel run (``train.devices=N``) as the N tasks of one scheduler job (SLURM, or
submitit's local executor), each task one rank: what the launching process and its ranks
do on this machine (normbench.training.launch), done by the tasks themselves.

The tasks meet in a file store in the job's private folder, so that no address or port has
to be agreed on, and gloo and NCCL then talk over the loopback interface: the tasks must
share one node (the submitit launcher asks for one and refuses more). Task 0 is rank 0: it
takes the run's lock, decides whether the run needs training and tells the others
(``announce``), then trains and records it as a local rank 0 does; the others train beside
it and write nothing.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist

from normbench.store.rundir import Rerun, RunDir, run_id
from normbench.training.distributed import Ranks, announce, join, leader_trains
from normbench.training.launch import ignore_signal, rank_device, stop_once
from normbench.training.run import Outcome, check_devices, resolve_device, run_experiment
from normbench.training.trainer import Trainer

# The signals that stop a task's rank (a Ctrl-C, scancel's SIGTERM, a time-limit warning):
# each ends the run interrupted; the others notice at their next collective.
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)


def run_task(
    cfg: dict, runs_dir: str, rerun: Rerun, place: Ranks, store_path: Path
) -> Outcome | None:
    """Run this task's rank of the run ``cfg``: rank 0's Outcome, None on the other ranks.

    ``place`` is the task's rank among the job's tasks, ``store_path`` the file every task of
    this attempt of the job opens to meet the others. KeyboardInterrupt (any of ``STOPS``)
    propagates once rank 0 has marked the run interrupted."""
    device = resolve_device(cfg["device"])
    check_devices(cfg["train"]["devices"], device)
    for signum in STOPS:
        signal.signal(signum, stop_once)
    # what torch's launcher tells each rank, for code that reads it (a user's norm)
    os.environ.update(RANK=str(place.rank), LOCAL_RANK=str(place.rank), WORLD_SIZE=str(place.world))
    cfg = {**cfg, "threads": 1}  # each rank one thread: N ranks, N cores (as locally)
    torch.set_num_threads(1)
    ranks = join(cfg, device, place, str(store_path))
    here = rank_device(device, ranks)
    try:
        if ranks.leader:
            outcome = run_experiment(cfg, runs_dir, rerun, progress=False, ranks=ranks)
            if outcome.skipped:  # finished before: rank 0 trained nothing and said nothing
                announce(False, here)
            return outcome
        if leader_trains(here):
            Trainer(cfg, here, RunDir(Path(runs_dir), run_id(cfg)), False, ranks).fit()
        return None
    finally:
        # the run has ended: a stop request now would raise in the interpreter's teardown
        for signum in STOPS:
            signal.signal(signum, ignore_signal)
        dist.destroy_process_group()
