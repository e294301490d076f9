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

import os
import pickle
import signal
from pathlib import Path

from normbench.core.text import plain
from normbench.store.index import Stamp, has_meta, stamp
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


class Scan:
    """``scan(runs_dir)``, running in a child process from ``start`` until ``result``; run
    here, at ``result``, when the process cannot fork safely or the child fails in any way
    (the same answer, or the same error, as a scan here)."""

    def __init__(self, runs_dir: Path, child: int | None = None, pipe: int | None = None):
        self.runs_dir, self._child, self._pipe = runs_dir, child, pipe

    @classmethod
    def start(cls, runs_dir: Path) -> Scan:
        if not one_thread():
            return cls(runs_dir)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the child: scan, send, and leave without running the parent's exit
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: no second traceback
                os.close(read_end)
                data = pickle.dumps(scan(runs_dir), protocol=pickle.HIGHEST_PROTOCOL)
                with open(write_end, "wb") as pipe:
                    pipe.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(runs_dir, child, read_end)

    def result(self) -> Found:
        if self._child is None:
            return scan(self.runs_dir)
        pipe_end, self._pipe = self._pipe, None
        with open(pipe_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self._child, 0)
        self._child = None
        if os.waitstatus_to_exitcode(status) == 0:
            return pickle.loads(data)  # our own child's bytes, never a file's
        return scan(self.runs_dir)

    def close(self) -> None:
        """Stop and reap a child whose result nobody will read (an error came first)."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self._child is not None:
            os.kill(self._child, signal.SIGKILL)
            os.waitpid(self._child, 0)
            self._child = None

    def __del__(self) -> None:
        self.close()
