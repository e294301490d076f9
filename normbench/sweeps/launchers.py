"""Where a sweep's runs execute: local worker processes, or submitit (SLURM or local).

Every launcher calls ``run_experiment`` for each job and reports to a view with ``queued``
(waiting in a cluster's queue), ``started`` and ``done``; the run store does the rest (locks,
statuses, skipping what is complete).

On SLURM a run survives its time limit and preemption: submitit's signal (USR2,
``launcher.signal_delay_s`` before the end) makes the run save a checkpoint at the next step
boundary, and the job is requeued and resumes from it. A run that cannot be requeued, was
cancelled, or lost its node ends ``interrupted`` (never ``failed``); the same command again
resumes it.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import signal
import socket
import stat
import subprocess
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol

from normbench.core.errors import UsageError
from normbench.core.keys import Key
from normbench.experiment.options import conf_dir
from normbench.store.rundir import FINISHED, Rerun, RunDir
from normbench.sweeps.grid import Job

LAUNCHERS = ("local", "slurm", "submitit_local")


class View(Protocol):
    def queued(self, rid: str) -> None: ...

    def started(self, rid: str) -> None: ...

    def done(
        self, rid: str, status: str, error: str | None = None, summary=None, skipped=False
    ) -> None: ...


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# What each launcher setting accepts (additional and setup are checked by their own rules).
SETTINGS: dict[str, Key] = {
    "jobs": Key(int, minimum=1, nullable=True),
    "partition": Key(str, nullable=True),
    "time_min": Key(int, minimum=1),
    "gpus_per_node": Key(int, minimum=0),
    "cpus_per_task": Key(int, minimum=1),
    "mem_gb": Key(float, minimum=0.0),
    "array_parallelism": Key(int, minimum=1),
    "signal_delay_s": Key(int, minimum=0),
    "timeout_requeues": Key(int, minimum=0),
    "python": Key(str, nullable=True),
}


def launcher_settings(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/launcher/NAME.yaml with ``launcher.KEY=VALUE`` overrides, checked key by key."""
    from omegaconf import OmegaConf

    from normbench.experiment.compose import parse_overrides

    if name not in LAUNCHERS:
        raise UsageError(f"--launcher {name}: unknown launcher; valid: {', '.join(LAUNCHERS)}")
    settings = OmegaConf.to_container(OmegaConf.load(conf_dir() / "launcher" / f"{name}.yaml"))
    for override in parse_overrides(overrides):
        key = override.key_or_group.removeprefix("launcher.")
        if key not in settings or key == "name":
            valid = ", ".join(f"launcher.{k}" for k in settings if k != "name")
            raise UsageError(
                f"launcher.{key} is not a setting of --launcher {name}; valid: {valid}"
            )
        settings[key] = override.value()
    check_settings(settings)
    return settings


def check_settings(settings: dict[str, Any]) -> None:
    """Every setting's type and range, and the signal delay against the time limit."""
    for key, value in settings.items():
        if key in SETTINGS:
            try:
                settings[key] = SETTINGS[key].check(value)
            except ValueError:
                raise UsageError(
                    f"launcher.{key}={value!r} is not valid; valid: {SETTINGS[key].describe()}"
                ) from None
    if not isinstance(settings.get("additional", {}), dict):
        raise UsageError(
            f"launcher.additional={settings['additional']!r} is not valid; valid: a mapping of "
            "sbatch options, e.g. {account: myproj, qos: high}"
        )
    setup = settings.get("setup", [])
    if not isinstance(setup, list) or not all(isinstance(line, str) for line in setup):
        raise UsageError(
            f"launcher.setup={setup!r} is not valid; valid: a list of shell lines, "
            "e.g. [module load cuda]"
        )
    if "signal_delay_s" in settings and settings["signal_delay_s"] >= settings["time_min"] * 60:
        raise UsageError(
            f"launcher.signal_delay_s={settings['signal_delay_s']} is not shorter than "
            f"launcher.time_min={settings['time_min']} ({settings['time_min'] * 60} s): the "
            "time-limit warning would come before the run starts; valid: "
            f"0..{settings['time_min'] * 60 - 1}"
        )


def raise_interrupt(signum, frame) -> None:
    """SIGTERM (scancel, preemption, the sweep stopping) ends a run as Ctrl-C does."""
    raise KeyboardInterrupt


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

    def __call__(self, cfg: dict, runs_dir: str, rerun: Rerun) -> dict[str, Any]:
        import submitit

        from normbench.training import checkpoint
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

    def checkpoint(self, cfg: dict, runs_dir: str, rerun: Rerun):
        """What the requeued job runs: the same run, never forced, so that it resumes from
        the checkpoint just saved."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, cfg, runs_dir, Rerun())


# ------------------------------------------------------------------------ local workers
@dataclass
class Worker:
    process: mp.process.BaseProcess
    conn: Connection  # the parent's end of the worker's own pipe: jobs out, events back
    ready: bool = False  # torch imported: it waits for a job
    job: Job | None = None


def worker_loop(index: int, conn: Connection, runs_dir: str, rerun: Rerun, threads: int) -> None:
    """A worker process: import torch once, then train run after run until told to stop.

    Each worker talks to the parent over a pipe of its own, never a queue shared with the
    others: a worker killed mid-message (kill -9, the out-of-memory killer) breaks its own
    pipe only, where a shared queue's lock could be left held and hang every other worker.
    The parent stops workers with SIGTERM (the run is recorded interrupted); SIGINT is
    ignored here, so a Ctrl-C that the terminal sends to the whole process group reaches the
    run through the parent, which knows what each worker holds."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch

        from normbench.training.run import run_experiment

        torch.set_num_threads(threads)
        if torch.cuda.device_count() > 1:  # several GPUs: one worker each, round-robin
            torch.cuda.set_device(index % torch.cuda.device_count())
        conn.send(("ready", None))
        while True:
            if not conn.poll(1.0):
                if os.getppid() != parent:  # the sweep died: do not train orphaned runs
                    return
                continue
            job = conn.recv()
            if job is None:
                return
            conn.send(("started", job.run_id))
            try:
                outcome = run_experiment(job.cfg, runs_dir, rerun, progress=False)
                result = (outcome.status, outcome.error, outcome.summary, outcome.skipped)
            except Exception as exc:  # before training, e.g. a device this worker cannot see
                error = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
                with contextlib.suppress(OSError):  # a full disk: the error says so, unrecorded
                    record_failure_before_training(job.cfg, runs_dir, error, traceback.format_exc())
                result = ("failed", error, {}, False)
            conn.send(("done", result))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # stopped, or the parent is gone
        return


STOP_GRACE = 4.0  # seconds a stopped worker has to record its run before it is killed


class LocalLauncher:
    """A pool of worker processes on this machine, fed one job at a time.

    The parent assigns each job, so it always knows which run a worker holds: a worker that
    dies (out of memory, kill -9) has its run recorded as failed and is replaced. The pool
    outlives a launch (a sweep run until decided launches once a round, ``normbench
    findings`` once a study): a worker imports torch once; ``close`` ends the pool.
    """

    def __init__(self, jobs: int | None, runs_dir: Path, rerun: Rerun):
        self.jobs = jobs or cores()
        self.runs_dir, self.rerun = runs_dir, rerun
        self.threads = max(1, cores() // self.jobs)
        self.context = mp.get_context("spawn")  # fresh interpreters: no state from a thread
        self.workers: dict[int, Worker] = {}
        self.next_index = 0

    def __enter__(self) -> LocalLauncher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def parallelism(self, n_jobs: int) -> int:
        return max(1, min(self.jobs, n_jobs))

    def start_worker(self) -> None:
        conn, child = self.context.Pipe()
        args = (self.next_index, child, str(self.runs_dir), self.rerun, self.threads)
        process = self.context.Process(target=worker_loop, args=args, daemon=True)
        process.start()
        child.close()  # the worker's end lives in the worker: its death reads as EOF here
        self.workers[self.next_index] = Worker(process, conn)
        self.next_index += 1

    def launch(self, jobs: list[Job], view: View) -> None:
        pending = deque(jobs)
        if not pending:
            return
        self.replace_dead_workers(pending, view)  # died while idle since the last launch
        try:
            for _ in range(self.parallelism(len(jobs)) - len(self.workers)):
                self.start_worker()
            for worker in self.workers.values():  # idle since the last launch
                if worker.ready and pending:
                    self.assign(worker, pending.popleft())
            while pending or any(w.job is not None or not w.ready for w in self.workers.values()):
                by_conn = {worker.conn: index for index, worker in self.workers.items()}
                heard = wait(list(by_conn), timeout=0.2)
                if not heard:
                    self.replace_dead_workers(pending, view)
                    continue
                for conn in heard:
                    self.hear(by_conn[conn], pending, view)
        except BaseException:  # Ctrl-C, SIGTERM, or a fault: no worker is left training
            self.stop(view)
            raise

    def hear(self, index: int, pending: deque, view: View) -> None:
        """One event from worker ``index``: it is ready, started its run, or finished it (then
        it takes the next job); a pipe that ends means the worker died."""
        worker = self.workers[index]
        try:
            kind, payload = worker.conn.recv()
        except (EOFError, OSError):
            self.lose_worker(index, pending, view)
            return
        if kind == "started":
            view.started(payload)
            return
        if kind == "done":
            view.done(worker.job.run_id, *payload)
            worker.job = None
        worker.ready = True
        if pending:
            self.assign(worker, pending.popleft())

    def assign(self, worker: Worker, job: Job) -> None:
        worker.job = job
        worker.conn.send(job)

    def replace_dead_workers(self, pending: deque, view: View) -> None:
        for index, worker in list(self.workers.items()):
            if not worker.process.is_alive():
                self.lose_worker(index, pending, view)

    def lose_worker(self, index: int, pending: deque, view: View) -> None:
        """A worker died: the run it held is recorded failed, and a new worker takes its place
        while jobs are waiting."""
        worker = self.workers.pop(index)
        worker.process.join(timeout=STOP_GRACE)
        if worker.process.is_alive():  # its pipe broke but it lives on: end it
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
        if worker.job is not None:
            error = f"worker process died (exit code {worker.process.exitcode})"
            status, error = record_lost_run(self.runs_dir, worker.job, "failed", error)
            view.done(worker.job.run_id, status, error)
        if pending:
            self.start_worker()

    def close(self) -> None:
        """Every idle worker is told to stop and exits."""
        for worker in self.workers.values():
            with contextlib.suppress(OSError):  # BrokenPipeError: it is gone already
                worker.conn.send(None)
        for worker in self.workers.values():
            worker.process.join(timeout=STOP_GRACE)
            if worker.process.is_alive():
                worker.process.kill()
            worker.conn.close()
        self.workers.clear()

    def stop(self, view: View) -> None:
        """Ctrl-C or SIGTERM to the sweep: every worker gets SIGTERM, marks its run
        interrupted and exits; one still alive after STOP_GRACE seconds is killed and its run
        recorded interrupted by the parent (the sweep ends within 5 s)."""
        for worker in self.workers.values():
            if worker.process.is_alive():
                os.kill(worker.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for worker in self.workers.values():
            worker.process.join(timeout=max(0.1, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
            if worker.job is not None:
                view.done(
                    worker.job.run_id,
                    *record_lost_run(self.runs_dir, worker.job, "interrupted", None),
                )
        self.workers.clear()


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


# ------------------------------------------------------------------------------ submitit
# SLURM job states (sacct) in which a job ended without finishing its run through no fault
# of the run: recorded as interrupted, so that the same command resumes them.
INTERRUPTED_STATES = ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")
RUNNING_STATES = ("RUNNING", "COMPLETING")
STATE_POLL_S = 2.0  # how often the queue is asked for the jobs' states


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
                    elif (self.state(handle) in RUNNING_STATES) != (rid in running):
                        running ^= {rid}  # started, or requeued and waiting again
                        (view.started if rid in running else view.queued)(rid)
                time.sleep(0.2)
        except KeyboardInterrupt:
            self.cancel(active, view)
            raise

    def submit(self, executor, batch: list[Job], cfgs: dict[str, dict]) -> list:
        """Submit a batch as one array; a refusal becomes one line naming the cluster's reason."""
        import submitit

        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr
                return executor.map_array(
                    RunJob(),
                    [cfgs[job.run_id] for job in batch],
                    [str(self.runs_dir)] * len(batch),
                    [self.rerun] * len(batch),
                )
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
        if handle.paths.result_pickle.exists() or self.state(handle) == "COMPLETED":
            try:
                view.done(job.run_id, **handle.result())
                return
            except Exception as exc:  # the job crashed outside the run (killed, out of memory)
                status, error = self.crash_reason(handle, exc)
        else:
            status, error = self.lost_reason(handle)
        view.done(job.run_id, *record_lost_run(self.runs_dir, job, status, error))

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


def check_private(runs_dir: Path) -> None:
    """The submitit launchers unpickle what they find under runs/sweeps/*.submitit: refuse a
    runs directory (or its sweeps folder) that other users can write to, where one of them
    could replace a pickle and run code as you (docs/security.md)."""
    for path in (runs_dir, runs_dir / "sweeps"):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            who = "others" if mode & stat.S_IWOTH else "its group"
            raise UsageError(
                f"{path} is writable by {who}: the slurm and submitit_local launchers unpickle "
                "files there, which anyone who can write to it could replace (docs/security.md); "
                f"chmod go-w {path}, or use --launcher local"
            )


def make_launcher(
    name: str,
    settings: dict[str, Any],
    jobs: int | None,
    runs_dir: Path,
    rerun: Rerun,
    folder: Path,
):
    if name == "local":
        return LocalLauncher(jobs or settings.get("jobs"), runs_dir, rerun)
    return SubmititLauncher(settings, runs_dir, rerun, folder)
