"""What both launchers share: the view they report to, and how a run that ended outside its
training loop is recorded (it failed before training began, or its process ended without
saying how).

Apart from launchers (which picks a launcher) so that the local pool (local) and submitit
(cluster) import it and launchers imports them: the imports point one way.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Protocol

from normbench.store.rundir import FINISHED, RunDir
from normbench.sweeps.grid import Job


class View(Protocol):
    def queued(self, rid: str) -> None: ...

    def started(self, rid: str) -> None: ...

    def done(
        self, rid: str, status: str, error: str | None = None, summary=None, skipped=False
    ) -> None: ...


def record_failure_before_training(cfg: dict, runs_dir: Path | str, error: str, trace: str):
    """A run that failed before its training began (a device the node lacks, an unreadable
    run directory) still gets meta.json, with its real error; a finished run is left alone."""
    from normbench import __version__
    from normbench.store.rundir import run_id
    from normbench.training.trainer import now

    run = RunDir(runs_dir, run_id(cfg))
    meta = run.read_meta()
    if meta is not None and meta.get("status") in FINISHED:
        return
    stamp = now()
    meta = {
        **(meta or {}),
        "run_id": run.run_id,
        "status": "failed",
        "started": (meta or {}).get("started", stamp),
        "finished": stamp,
        "error": error,
        "traceback": trace,
        "device": cfg["device"],
        "host": socket.gethostname(),
        "versions": {"normbench": __version__},
        "summary": (meta or {}).get("summary", {}),
    }
    try:
        run.write_config(cfg)
    finally:
        run.write_meta(meta)


def record_lost_run(
    runs_dir: Path, job: Job, status: str, error: str | None
) -> tuple[str, str | None]:
    """Mark a run whose process ended without saying how; returns the run's final status and
    error. A run that did record its end (it finished just before the process died) keeps it."""
    run = RunDir(runs_dir, job.run_id)
    meta = run.read_meta()
    if meta is not None and meta.get("status") != "running":
        return meta["status"], meta.get("error")
    if meta is not None:
        meta.update(status=status, error=error)
        if run.status() == "running":  # read again: the run may have just recorded its end
            run.write_meta(meta)
    return status, error
