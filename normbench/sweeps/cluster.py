"""The submitit launchers: one SLURM array job (``slurm``), or the same submission path run
on this machine (``submitit_local``).

On SLURM a run survives its time limit and preemption: submitit's signal (USR2,
``launcher.signal_delay_s`` before the end) makes the run save a checkpoint at the next step
boundary, and the job is requeued and resumes from it. A run that cannot be requeued, was
cancelled, or lost its node ends ``interrupted`` (never ``failed``); the same command again
resumes it.

Apart from the local pool (local): what runs on a node (RunJob), the scheduler's states and
the submission are submitit's alone.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import subprocess
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

from normbench.core.errors import UsageError
from normbench.store.rundir import Rerun, RunDir
from normbench.sweeps.grid import Job
from normbench.sweeps.jobs import View, record_failure_before_training, record_lost_run


def note_interruption(cfg: dict, runs_dir: Path | str, reason: str) -> dict[str, Any]:
    """Say in meta.json why a run that stopped on a signal was interrupted; its result."""
    from normbench.store.rundir import run_id

    run = RunDir(runs_dir, run_id(cfg))
    meta = run.read_meta() or {}
    if meta.get("status") == "interrupted":
        run.write_meta({**meta, "error": reason})
    return {"status": "interrupted", "error": reason, "summary": meta.get("summary", {})}


class RunJob:
    """The callable submitit ships to a node: trains one run and returns how it ended.

    Checkpointable in submitit's sense (it has ``checkpoint``): before a time limit or a
    preemption submitit sends USR2; the training loop then saves a checkpoint at the next step
    boundary and stops, and submitit's own handler requeues the job with the arguments
    ``checkpoint`` returns. SIGTERM (scancel, a preemption without warning) also saves and
    stops, without a requeue: the run ends ``interrupted`` and resumes when run again.
    """

    def __call__(self, cfg: dict, runs_dir: str, rerun: Rerun) -> dict[str, Any] | None:
        import submitit

        from normbench.training import checkpoint

        if cfg["train"]["devices"] > 1:
            return self.run_as_rank(cfg, runs_dir, rerun)
        from normbench.training.run import run_experiment

        warning = signal.Signals[f"SIG{submitit.JobEnvironment.USR_SIG}"]
        requeue = signal.getsignal(warning)  # submitit's: checkpoint, requeue, exit
        warned = []

        def on_warning(signum, frame) -> None:
            warned.append(signum)
            checkpoint.request_stop()

        signal.signal(warning, on_warning)
        signal.signal(signal.SIGTERM, checkpoint.request_stop)
        try:
            outcome = run_experiment(cfg, runs_dir, rerun, progress=False)
        except checkpoint.StopRequested:
            if not warned:
                return note_interruption(cfg, runs_dir, "stopped by SIGTERM (cancelled?)")
            reason = "time limit or preemption"
            if callable(requeue):
                try:
                    requeue(warning, None)  # exits this process when the job is requeued
                except submitit.core.utils.UncompletedJobError as err:
                    reason += f": {err}"
            return note_interruption(cfg, runs_dir, reason)
        except Exception as exc:  # failed before training began: record the real error
            error = f"{type(exc).__name__}: {exc}"
            record_failure_before_training(cfg, runs_dir, error, traceback.format_exc())
            return {"status": "failed", "error": error, "summary": {}}
        return {
            "status": outcome.status,
            "error": outcome.error,
            "summary": outcome.summary,
            "skipped": outcome.skipped,
        }

    def run_as_rank(self, cfg: dict, runs_dir: str, rerun: Rerun) -> dict[str, Any] | None:
        """One task of a data-parallel run's job (one task per rank, normbench.training.tasks):
        rank 0 returns how the run ended; the other ranks return None, or raise what failed
        them (submitit keeps it as that task's error). scancel, a time limit's warning or a
        preemption ends the run interrupted, not requeued; the same command resumes it from
        its last checkpoint (train.checkpoint_every) on as many ranks."""
        import submitit

        from normbench.training.distributed import Ranks
        from normbench.training.tasks import run_task

        job = submitit.JobEnvironment()
        leader = job.global_rank == 0
        # this attempt's meeting file: a requeued job (same id) meets in a fresh one
        attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
        store = Path(job.paths.folder) / f"{job.job_id}.{attempt}.rendezvous"
        try:
            outcome = run_task(cfg, runs_dir, rerun, Ranks(job.global_rank, job.num_tasks), store)
        except KeyboardInterrupt:
            reason = "stopped by a signal (scancel, a time limit or a preemption)"
            return note_interruption(cfg, runs_dir, reason) if leader else None
        except Exception as exc:
            if not leader:
                raise
            error = f"{type(exc).__name__}: {exc}"
            record_failure_before_training(cfg, runs_dir, error, traceback.format_exc())
            return {"status": "failed", "error": error, "summary": {}}
        if outcome is None:
            return None
        return {
            "status": outcome.status,
            "error": outcome.error,
            "summary": outcome.summary,
            "skipped": outcome.skipped,
        }

    def checkpoint(self, cfg: dict, runs_dir: str, rerun: Rerun):
        """What the requeued job runs: the same run, never forced, so that it resumes from
        the checkpoint just saved."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, cfg, runs_dir, Rerun())


# SLURM job states (sacct) in which a job ended without finishing its run through no fault
# of the run: recorded as interrupted, so that the same command resumes them.
INTERRUPTED_STATES = ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")
RUNNING_STATES = ("RUNNING", "COMPLETING")
STATE_POLL_S = 2.0  # how often the queue is asked for the jobs' states
RANKS_GRACE_S = 30.0  # how long the other ranks of a run have to end after its rank 0


# What a rank's collective raises when another rank has gone (its connection closed, reset or
# broken; NCCL's communicator aborted): the consequence of that rank's failure, not a cause.
PEER_GONE = ("Connection closed", "Connection reset", "Broken pipe", "communicator was aborted")


def peer_gone(error: str) -> bool:
    return any(words in error for words in PEER_GONE)


class SubmissionRefused(UsageError):
    """The cluster refused the submission (a partition, account or limit it does not have)."""


def submitit_parameters(settings: dict[str, Any]) -> dict[str, Any]:
    """The launcher config as submitit's AutoExecutor parameters."""
    params = {
        "timeout_min": settings["time_min"],
        "cpus_per_task": settings["cpus_per_task"],
        "gpus_per_node": settings["gpus_per_node"],
        "tasks_per_node": 1,
        "nodes": 1,
        "name": "normbench",
    }
    if settings["name"] == "slurm":
        params.update(
            mem_gb=settings["mem_gb"],
            slurm_partition=settings["partition"],
            slurm_array_parallelism=settings["array_parallelism"],
            slurm_additional_parameters=settings["additional"],
            slurm_setup=settings["setup"],
            slurm_signal_delay_s=settings["signal_delay_s"],
        )
    return {k: v for k, v in params.items() if v is not None}


def job_shape(settings: dict[str, Any], devices: int) -> dict[str, int]:
    """The job of a run of ``devices`` ranks: that many tasks on its one node, one per rank,
    and ``launcher.gpus_per_node`` GPUs for each rank (rank k uses GPU k)."""
    return {"tasks_per_node": devices, "gpus_per_node": settings["gpus_per_node"] * devices}


class SubmititLauncher:
    """submitit's executor: one SLURM array job, or (``submitit_local``) the same submission
    path run on this machine, ``array_parallelism`` runs at a time."""

    def __init__(self, settings: dict[str, Any], runs_dir: Path, rerun: Rerun, folder: Path):
        # Absolute: a job may start in another directory (sbatch --chdir, another node's home).
        self.runs_dir, self.folder = Path(runs_dir).resolve(), Path(folder).resolve()
        self.settings, self.rerun = settings, rerun
        self.cluster = "slurm" if settings["name"] == "slurm" else "local"

    def parallelism(self, n_jobs: int) -> int:
        return max(1, min(self.settings["array_parallelism"], n_jobs))

    def close(self) -> None:
        """Nothing to end: each job is its own process, which ends with its run."""

    def executor(self):
        import submitit

        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.folder.chmod(0o700)  # submitit's pickles: readable and writable by us alone
        options = {}
        if self.cluster == "slurm":
            options = {
                "slurm_python": self.settings["python"],
                "slurm_max_num_timeout": self.settings["timeout_requeues"],
            }
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster, **options)
        executor.update_parameters(**submitit_parameters(self.settings))
        return executor

    def launch(self, jobs: list[Job], view: View) -> None:
        executor = self.executor()
        threads = self.settings["cpus_per_task"]
        cfgs = {job.run_id: {**job.cfg, "threads": job.cfg["threads"] or threads} for job in jobs}
        # SLURM throttles an array itself; the local executor would start everything at once.
        window = len(jobs) if self.cluster == "slurm" else self.parallelism(len(jobs))
        pending, active = deque(jobs), {}
        running: set[str] = set()  # what the view was last told runs (the rest waits)
        leader_ended: dict[str, float] = {}  # a run of N ranks: when its rank 0 was seen done
        next_poll = 0.0
        try:
            while pending or active:
                batch = [pending.popleft() for _ in range(min(len(pending), window - len(active)))]
                if batch:
                    for job, handle in zip(batch, self.submit(executor, batch, cfgs), strict=True):
                        active[job.run_id] = (job, handle)
                        view.queued(job.run_id)
                if self.cluster == "slurm" and time.monotonic() >= next_poll and active:
                    next(iter(active.values()))[1].watcher.update()  # one sacct for all jobs
                    next_poll = time.monotonic() + STATE_POLL_S
                for rid, (job, handle) in list(active.items()):
                    if handle.done():
                        del active[rid]
                        running.discard(rid)
                        self.collect(job, handle, view)
                    elif self.outlived(rid, handle, leader_ended):
                        handle.cancel(check=False)  # ranks left behind by their run's end
                    elif (self.state(handle) in RUNNING_STATES) != (rid in running):
                        running ^= {rid}  # started, or requeued and waiting again
                        (view.started if rid in running else view.queued)(rid)
                time.sleep(0.2)
        except KeyboardInterrupt:
            self.cancel(active, view)
            raise

    def outlived(self, rid: str, handle, leader_ended: dict[str, float]) -> bool:
        """Whether a run of N ranks has other tasks still running ``RANKS_GRACE_S`` seconds
        after its rank 0 returned (its run ended: a rank that hangs, or waits at a collective
        for a peer that will not come, would hold the job to its time limit)."""
        if handle.num_tasks == 1 or not handle.task(0).paths.result_pickle.exists():
            return False
        seen = leader_ended.setdefault(rid, time.monotonic())
        if time.monotonic() - seen <= RANKS_GRACE_S:
            return False
        leader_ended[rid] = math.inf  # cancelled once: never again
        return True

    def submit(self, executor, batch: list[Job], cfgs: dict[str, dict]) -> list:
        """Submit a batch as one array per number of ranks (a run of ``train.devices=N`` is one
        job of N tasks on one node, one task per rank); the handles in the batch's order. A
        refusal becomes one line naming the cluster's reason."""
        import submitit

        handles = {}
        try:
            for devices in sorted({job.cfg["train"]["devices"] for job in batch}):
                group = [job for job in batch if job.cfg["train"]["devices"] == devices]
                executor.update_parameters(**job_shape(self.settings, devices))
                with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr
                    submitted = executor.map_array(
                        RunJob(),
                        [cfgs[job.run_id] for job in group],
                        [str(self.runs_dir)] * len(group),
                        [self.rerun] * len(group),
                    )
                handles.update(zip([job.run_id for job in group], submitted, strict=True))
            return [handles[job.run_id] for job in batch]
        except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            reasons = [line for line in lines if "error" in line.lower()] or lines or [repr(err)]
            raise SubmissionRefused(
                f"--launcher {self.settings['name']}: the cluster refused the submission: "
                f"{reasons[-1]}"
            ) from None

    def state(self, handle) -> str:
        """The job's scheduler state as last polled (no new query)."""
        if self.cluster != "slurm":
            return handle.state
        return handle.watcher.get_state(handle.job_id, mode="cache")

    def collect(self, job: Job, handle, view: View) -> None:
        """How the run ended, from its job's result (rank 0's task's, for a run of N ranks).
        The files its ranks met in go with it (a task killed before it closed one leaves it)."""
        for meeting in self.folder.glob(f"{handle.job_id}.*.rendezvous"):
            meeting.unlink(missing_ok=True)
        if handle.paths.result_pickle.exists() or self.state(handle) == "COMPLETED":
            try:
                result = handle.task(0).result()
            except Exception as exc:  # the job crashed outside the run (killed, out of memory)
                status, error = self.crash_reason(handle, exc)
            else:
                view.done(job.run_id, **self.with_rank_failure(job, handle, result))
                return
        else:
            status, error = self.lost_reason(handle)
        view.done(job.run_id, *record_lost_run(self.runs_dir, job, status, error))

    def with_rank_failure(self, job: Job, handle, result: dict) -> dict:
        """Rank 0's result, unless another rank's failure ended the run: rank 0 then saw only
        its peer's connection close (or was stopped), and the run's error becomes that rank's,
        in one line (``rank k of N: ...``), in meta.json too, as a run launched here says."""
        if handle.num_tasks == 1 or result["status"] not in ("failed", "interrupted"):
            return result
        if result["status"] == "failed" and not peer_gone(result["error"] or ""):
            return result  # rank 0 failed first: the others' errors follow from it
        cause = self.rank_failure(handle)
        if cause is None:
            return result
        run = RunDir(self.runs_dir, job.run_id)
        meta = run.read_meta()
        if meta is not None:
            run.write_meta({**meta, "status": "failed", "error": cause})
        return {**result, "status": "failed", "error": cause}

    def rank_failure(self, handle) -> str | None:
        """The first failure, in one line, among the tasks other than rank 0 that is not a
        peer's connection closing: an error they raised, or their end without a result."""
        for rank in range(1, handle.num_tasks):
            task = handle.task(rank)
            if not task.paths.result_pickle.exists():
                return f"rank {rank} of {handle.num_tasks}: ended without a result (killed?)"
            error = task.exception()
            if error is None:
                continue
            line = self.crash_reason(task, error)[1]
            if not peer_gone(line):
                return f"rank {rank} of {handle.num_tasks}: {line}"
        return None

    def lost_reason(self, handle) -> tuple[str, str]:
        """A job that ended without a result: interrupted when the scheduler ended it
        (cancelled, time limit, preempted, node lost), failed otherwise."""
        state = self.state(handle) or "UNKNOWN"  # e.g. "CANCELLED by 0"
        if state.split()[0] in (*INTERRUPTED_STATES, "INTERRUPTED"):  # the last: local jobs
            return "interrupted", f"job {handle.job_id} {state.lower()}"
        log = handle.paths.stderr
        return "failed", f"job {handle.job_id} ended {state} without a result; see {log}"

    def crash_reason(self, handle, exc: Exception) -> tuple[str, str]:
        """The error line of a crashed job's traceback, not submitit's log-path footer; a
        time-limit warning that came before the run started and could not requeue the job
        is an interruption."""
        lines = [line for line in str(exc).splitlines() if line.strip()]
        trace = [line for line in lines if not line.startswith(("  ", "---", "You can check"))]
        error = f"{trace[-1].strip() if trace else repr(exc)} (log: {handle.paths.stderr})"
        return ("interrupted" if "Job not requeued because" in error else "failed"), error

    def cancel(self, active: dict, view: View) -> None:
        """Ctrl-C or SIGTERM: cancel every job still queued or running (one scancel per array);
        a running run saves a checkpoint and records itself interrupted."""
        if self.cluster == "slurm":
            arrays = sorted({handle.job_id.split("_")[0] for _, handle in active.values()})
            if arrays:
                subprocess.run(["scancel", *arrays], check=False, timeout=30)
        else:
            for _, handle in active.values():
                handle.cancel(check=False)
        for job, _ in active.values():
            view.done(job.run_id, *record_lost_run(self.runs_dir, job, "interrupted", None))
