"""The local launcher: a pool of worker processes on this machine, each importing torch once
and training run after run, fed one job at a time by the parent.

Apart from the submitit launcher (cluster) because it shares nothing with it but the view it
reports to and the records of a lost run (jobs): its own processes, pipes and signals.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from normbench.core.errors import UsageError
from normbench.store.rundir import Rerun
from normbench.sweeps.grid import Job
from normbench.sweeps.jobs import View, record_failure_before_training, record_lost_run


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def ranks(job: Job) -> int:
    """The worker slots a run takes: one per rank (``train.devices``), each rank a process."""
    return job.cfg["train"].get("devices", 1)


def check_slots(jobs: list[Job], slots: int) -> None:
    """A run of more ranks than the sweep has worker slots could never start: refused in one
    line before anything starts, naming ``--jobs``."""
    widest = max(map(ranks, jobs), default=1)
    if widest > slots:
        raise UsageError(
            f"train.devices={widest}: a run of {widest} ranks takes {widest} worker slots and "
            f"this sweep has {slots} (--jobs {slots}); valid: train.devices at most {slots}, "
            f"or --jobs {widest} or more"
        )


def take_fitting(pending: deque[Job], free: int) -> Job | None:
    """The first waiting job whose ranks fit in ``free`` slots, taken out of ``pending``; None
    when none fits. A wide run waits for slots while narrower ones behind it start: the
    slots are never idle while some job fits them."""
    for position, job in enumerate(pending):
        if ranks(job) <= free:
            del pending[position]
            return job
    return None


def raise_interrupt(signum, frame) -> None:
    """SIGTERM (scancel, preemption, the sweep stopping) ends a run as Ctrl-C does."""
    raise KeyboardInterrupt


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
    # A daemonic process may not start processes, and a run of N ranks starts N. The flag is
    # cleared in this process only: the parent still ends the worker at its exit as a daemon.
    mp.current_process().daemon = False
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
    dies (out of memory, kill -9) has its run recorded as failed and is replaced. ``jobs`` is
    the number of worker slots: a run of N ranks (``train.devices=N``) takes N of them, so
    that no more than ``jobs`` ranks ever train at once (``peak_ranks`` keeps the most there
    were). The pool
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
        self.peak_ranks = 0  # the most ranks that trained at once: never more than self.jobs

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
        check_slots(jobs, self.jobs)
        self.replace_dead_workers(pending, view)  # died while idle since the last launch
        try:
            for _ in range(self.parallelism(len(jobs)) - len(self.workers)):
                self.start_worker()
            self.fill(pending)  # the workers idle since the last launch
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
        self.fill(pending)

    def busy_ranks(self) -> int:
        """The slots taken: the ranks of the runs the workers hold."""
        return sum(ranks(worker.job) for worker in self.workers.values() if worker.job)

    def fill(self, pending: deque[Job]) -> None:
        """Every idle worker takes a waiting job while one fits in the slots left free."""
        for worker in self.workers.values():
            if worker.ready and worker.job is None:
                job = take_fitting(pending, self.jobs - self.busy_ranks())
                if job is None:
                    return
                self.assign(worker, job)

    def assign(self, worker: Worker, job: Job) -> None:
        worker.job = job
        self.peak_ranks = max(self.peak_ranks, self.busy_ranks())
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
