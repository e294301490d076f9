"""The run directories of a runs directory and their files' stamps: what a report or `runs
list` compares with the index before it trusts a row.

At 100,000 runs the scan is 300,000 ``lstat`` calls (about 1.5 s on a 2-core VM), and the
index's read (SQLite building 100,000 rows) and importing pandas take as long again. A thread
cannot overlap them (the GIL: measured 1.4x slower than one after the other), so a command
that will read the store starts the scan in a forked child first (``Scan.start``) and
collects it when it needs it (``Scan.result``). No pandas or numpy here: the fork happens
before they start their threads.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from pathlib import Path

from normbench.core.text import plain
from normbench.store.reading import Stamp, die_with_parent, has_meta, stamp
from normbench.store.rundir import is_run_id

Found = tuple[dict[str, Stamp], list[str]]


def scan(runs_dir: Path) -> Found:
    """The run directories directly in ``runs_dir`` (real directories named by a run id, with
    a meta.json) and their files' stamps; a warning for every other directory or link."""
    found, warnings = {}, []
    with os.scandir(runs_dir) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(".") or name == "sweeps":
                continue
            if entry.is_symlink():
                why = "a symlink (normbench reads run directories only)"
            elif not entry.is_dir(follow_symlinks=False):
                continue
            elif not is_run_id(name):
                why = (
                    "not a run id (MODEL-NORM-PLACEMENT-PRECISION-bBATCH-sSEED-HASH, as "
                    "normbench names a run's directory)"
                )
            else:
                files = stamp(entry.path)
                if has_meta(files):
                    found[name] = files
                    continue
                why = "no meta.json (a half-written run?)"
            warnings.append(f"skipped {plain(name)}: {why}")
    return found, warnings


def one_thread() -> bool:
    """Whether this process runs a single thread (Linux lists them in /proc/self/task). A
    fork copies only the calling thread: a lock another thread held (pyarrow's pool, which
    importing pandas starts) would stay held in the child, so only such a process forks."""
    try:
        return hasattr(os, "fork") and len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc (macOS, Windows): never fork
        return False


# Blocked while the child is made: a Ctrl-C then would run the parent's handlers in the child.
SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Scan:
    """``scan(runs_dir)``, running in a child process from ``start`` until ``result``; run
    here, at ``result``, when the process cannot fork safely (other threads, SIGCHLD ignored
    so that no child can be waited for, no fork or no pipe to be had) or the child fails in
    any way: the same answer, or the same error, as a scan here."""

    def __init__(self, runs_dir: Path, child: int | None = None, pipe: int | None = None):
        self.runs_dir, self._child, self._pipe = runs_dir, child, pipe

    @classmethod
    def start(cls, runs_dir: Path) -> Scan:
        if not one_thread() or signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
            return cls(runs_dir)
        parent = os.getpid()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            read_end, write_end = os.pipe()
            try:
                child = os.fork()
            except OSError:  # no process to be had (a limit, memory): scan here
                os.close(read_end)
                os.close(write_end)
                return cls(runs_dir)
            if child == 0:
                _child(runs_dir, parent, read_end, write_end)  # never returns
            os.close(write_end)
            return cls(runs_dir, child, read_end)
        except OSError:  # no pipe to be had (out of descriptors): scan here
            return cls(runs_dir)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    @property
    def in_child(self) -> bool:
        """Whether the scan runs in a child process (until ``result``): the caller's own work
        meanwhile costs it nothing."""
        return self._child is not None

    def result(self) -> Found:
        if self._child is None:
            return scan(self.runs_dir)
        pipe_end, self._pipe = self._pipe, None
        with open(pipe_end, "rb") as pipe:
            data = pipe.read()
        child, self._child = self._child, None
        try:
            _, status = os.waitpid(child, 0)
        except ChildProcessError:  # reaped by someone else: its answer cannot be trusted
            return scan(self.runs_dir)
        if os.waitstatus_to_exitcode(status) == 0:
            return pickle.loads(data)  # our own child's bytes, never a file's
        return scan(self.runs_dir)

    def close(self) -> None:
        """Stop and reap a child whose result nobody will read (an error came first)."""
        pipe_end, self._pipe = getattr(self, "_pipe", None), None
        child, self._child = getattr(self, "_child", None), None
        if pipe_end is not None:
            os.close(pipe_end)
        if child is not None:
            with contextlib.suppress(ChildProcessError, ProcessLookupError):
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)

    def __del__(self) -> None:
        self.close()


def _child(runs_dir: Path, parent: int, read_end: int, write_end: int) -> None:
    """The forked child: scan, send the answer down the pipe, and leave by ``os._exit``,
    never through the parent's code (its exit handlers, its buffered output). It ends with
    its parent (reading.die_with_parent) and holds none of the parent's terminal or pipes."""
    code = 1
    try:
        for number in SIGNALS:
            signal.signal(number, signal.SIG_DFL)  # Ctrl-C ends it quietly
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        os.close(read_end)
        nowhere = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(nowhere, stream)
        die_with_parent(parent)
        data = pickle.dumps(scan(runs_dir), protocol=pickle.HIGHEST_PROTOCOL)
        with open(write_end, "wb") as pipe:
            pipe.write(data)
        code = 0
    finally:
        os._exit(code)
