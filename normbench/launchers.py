"""Where a sweep's runs execute: local worker processes, or submitit (SLURM or local).

Every launcher calls ``run_experiment`` for each job and reports to a view with ``started``
and ``done``; the run store does the rest (locks, statuses, skipping what is complete).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from normbench.config import UsageError, conf_dir
from normbench.store import Rerun, RunDir
from normbench.sweep import Job

LAUNCHERS = ("local", "slurm", "submitit_local")


class View(Protocol):
    def started(self, rid: str) -> None: ...

    def done(
        self, rid: str, status: str, error: str | None = None, summary=None, skipped=False
    ) -> None: ...


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def launcher_settings(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/launcher/NAME.yaml with ``launcher.KEY=VALUE`` overrides, checked key by key."""
    from omegaconf import OmegaConf

    from normbench.config import parse_overrides

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
    return settings


def raise_interrupt(signum, frame) -> None:
    """SIGTERM (scancel, preemption, the sweep stopping) ends a run as Ctrl-C does."""
    raise KeyboardInterrupt


def run_one(cfg: dict, runs_dir: str, rerun: Rerun) -> dict[str, Any]:
    """Run one job in this process; the function submitit ships to a cluster node."""
    from normbench.train import run_experiment

    signal.signal(signal.SIGTERM, raise_interrupt)
    outcome = run_experiment(cfg, runs_dir, rerun, progress=False)
    return {
        "status": outcome.status,
        "error": outcome.error,
        "summary": outcome.summary,
        "skipped": outcome.skipped,
    }


# ------------------------------------------------------------------------ local workers
@dataclass
class Worker:
    process: mp.process.BaseProcess
    inbox: Any
    job: Job | None = None


def worker_loop(index: int, inbox, events, runs_dir: str, rerun: Rerun, threads: int) -> None:
    """A worker process: import torch once, then train run after run until told to stop."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        import torch

        from normbench.train import run_experiment

        torch.set_num_threads(threads)
        if torch.cuda.device_count() > 1:  # several GPUs: one worker each, round-robin
            torch.cuda.set_device(index % torch.cuda.device_count())
        events.put(("ready", index, None))
        while True:
            try:
                job = inbox.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the sweep died: do not train orphaned runs
                    return
                continue
            if job is None:
                return
            events.put(("started", index, job.run_id))
            try:
                outcome = run_experiment(job.cfg, runs_dir, rerun, progress=False)
                result = (outcome.status, outcome.error, outcome.summary, outcome.skipped)
            except UsageError as err:  # e.g. a device this worker cannot see
                result = ("failed", str(err), {}, False)
            events.put(("done", index, result))
    except KeyboardInterrupt:
        return


class LocalLauncher:
    """A pool of worker processes on this machine, fed one job at a time.

    The parent assigns each job, so it always knows which run a worker holds: a worker that
    dies (out of memory, kill -9) has its run recorded as failed and is replaced.
    """

    def __init__(self, jobs: int | None, runs_dir: Path, rerun: Rerun):
        self.jobs = jobs or cores()
        self.runs_dir, self.rerun = runs_dir, rerun
        self.threads = max(1, cores() // self.jobs)

    def parallelism(self, n_jobs: int) -> int:
        return max(1, min(self.jobs, n_jobs))

    def launch(self, jobs: list[Job], view: View) -> None:
        context = mp.get_context("spawn")  # fresh interpreters: no state forked from a thread
        events = context.Queue()
        pending = deque(jobs)
        workers: dict[int, Worker] = {}
        next_index = 0

        def start_worker() -> None:
            nonlocal next_index
            inbox = context.Queue()
            args = (next_index, inbox, events, str(self.runs_dir), self.rerun, self.threads)
            process = context.Process(target=worker_loop, args=args, daemon=True)
            process.start()
            workers[next_index] = Worker(process, inbox)
            next_index += 1

        for _ in range(self.parallelism(len(jobs))):
            start_worker()
        try:
            while workers:
                try:
                    kind, index, payload = events.get(timeout=0.2)
                except queue.Empty:
                    self.replace_dead_workers(workers, pending, view, start_worker)
                    continue
                worker = workers.get(index)
                if worker is None:  # already replaced: its run was accounted for
                    continue
                if kind == "started":
                    view.started(payload)
                    continue
                if kind == "done":
                    view.done(worker.job.run_id, *payload)
                    worker.job = None
                worker.job = pending.popleft() if pending else None
                worker.inbox.put(worker.job)
                if worker.job is None:
                    worker.process.join()
                    del workers[index]
        except KeyboardInterrupt:
            self.stop(workers, view)
            raise

    def replace_dead_workers(self, workers, pending, view: View, start_worker) -> None:
        for index, worker in list(workers.items()):
            if worker.process.is_alive():
                continue
            del workers[index]
            if worker.job is not None:
                error = f"worker process died (exit code {worker.process.exitcode})"
                status, error = record_lost_run(self.runs_dir, worker.job, "failed", error)
                view.done(worker.job.run_id, status, error)
            if pending:
                start_worker()

    def stop(self, workers: dict[int, Worker], view: View) -> None:
        """Ctrl-C: every worker gets SIGINT, marks its run interrupted and exits."""
        for worker in workers.values():
            if worker.process.is_alive():
                os.kill(worker.process.pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        for worker in workers.values():
            worker.process.join(timeout=max(0.1, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
            if worker.job is not None:
                view.done(
                    worker.job.run_id,
                    *record_lost_run(self.runs_dir, worker.job, "interrupted", None),
                )


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
        run.write_meta(meta)
    return status, error


# ------------------------------------------------------------------------------ submitit
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
        )
    return {k: v for k, v in params.items() if v is not None}


class SubmititLauncher:
    """submitit's executor: one SLURM array job, or (``submitit_local``) the same submission
    path run on this machine, ``array_parallelism`` runs at a time."""

    def __init__(self, settings: dict[str, Any], runs_dir: Path, rerun: Rerun, folder: Path):
        self.settings, self.runs_dir, self.rerun, self.folder = settings, runs_dir, rerun, folder
        self.cluster = "slurm" if settings["name"] == "slurm" else "local"

    def parallelism(self, n_jobs: int) -> int:
        return max(1, min(self.settings["array_parallelism"], n_jobs))

    def executor(self):
        import submitit

        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        executor.update_parameters(**submitit_parameters(self.settings))
        return executor

    def launch(self, jobs: list[Job], view: View) -> None:
        executor = self.executor()
        threads = self.settings["cpus_per_task"]
        cfgs = {job.run_id: {**job.cfg, "threads": job.cfg["threads"] or threads} for job in jobs}
        # SLURM throttles an array itself; the local executor would start everything at once.
        window = len(jobs) if self.cluster == "slurm" else self.parallelism(len(jobs))
        pending, active = deque(jobs), {}
        try:
            while pending or active:
                batch = [pending.popleft() for _ in range(min(len(pending), window - len(active)))]
                if batch:
                    submitted = executor.map_array(
                        run_one,
                        [cfgs[job.run_id] for job in batch],
                        [str(self.runs_dir)] * len(batch),
                        [self.rerun] * len(batch),
                    )
                    for job, handle in zip(batch, submitted, strict=True):
                        active[job.run_id] = (job, handle)
                        view.started(job.run_id)
                for rid, (job, handle) in list(active.items()):
                    if handle.done():
                        del active[rid]
                        self.collect(job, handle, view)
                time.sleep(0.2)
        except KeyboardInterrupt:
            for job, handle in active.values():
                handle.cancel(check=False)
                view.done(job.run_id, *record_lost_run(self.runs_dir, job, "interrupted", None))
            raise

    def collect(self, job: Job, handle, view: View) -> None:
        try:
            result = handle.result()
        except Exception as exc:  # the job itself crashed (node failure, timeout, cancel)
            error = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            view.done(job.run_id, *record_lost_run(self.runs_dir, job, "failed", error))
            return
        view.done(job.run_id, **result)


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
