"""The signals around a data-parallel run's launch (normbench.training.launch): a Ctrl-C to a
sweep's whole process group once printed 'OSError: Signal 15 ignored due to race condition'
from a rank, and the launcher's 'Received 2 death signal' from the sweep's worker."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from normbench.training.launch import (
    SIGNALS_TO_HANDLE,
    launcher_quiet,
    launcher_signals,
    stop_once,
)


def test_a_rank_stopped_twice_at_once_stops_once_without_a_traceback(monkeypatch):
    """A rank's two stops at once, made deterministic: SIGINT (the terminal's Ctrl-C) and
    SIGTERM (the launcher stopping its ranks) both arrive while blocked, so that both are
    pending before Python runs a handler; Python runs SIGINT's first, which replaces
    SIGTERM's handler. With SIG_IGN there, Python reports SIGTERM as 'ignored due to race
    condition' (an unraisable OSError, printed with a traceback)."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    stops = {signal.SIGINT, signal.SIGTERM}
    before = {s: signal.getsignal(s) for s in stops}
    interrupted = 0
    try:
        for s in stops:
            signal.signal(s, stop_once)
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        # to this thread, which blocks them: os.kill's signal to the process would go to
        # another thread that does not (torch's), and its handler run at once
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            for _ in range(1000):  # the handlers run between bytecodes
                pass
        except KeyboardInterrupt:
            interrupted += 1
        for _ in range(1000):
            pass
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        for s, handler in before.items():
            signal.signal(s, handler)
    assert interrupted == 1
    assert [str(u.exc_value) for u in unraisable] == []


def test_the_launcher_leaves_alone_the_signals_its_process_ignores(monkeypatch):
    """A sweep's worker ignores SIGINT (its parent stops it with SIGTERM): the launcher must
    not take the Ctrl-C too."""
    monkeypatch.delenv(SIGNALS_TO_HANDLE, raising=False)
    handlers = {
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGINT: signal.SIG_IGN,
        signal.SIGHUP: signal.SIG_DFL,
        signal.SIGQUIT: signal.SIG_DFL,
    }
    with launcher_signals(handlers):
        assert os.environ[SIGNALS_TO_HANDLE] == "SIGTERM,SIGHUP,SIGQUIT"
    assert SIGNALS_TO_HANDLE not in os.environ


def test_every_launcher_logger_is_quiet_while_it_runs():
    """Each of torch's launcher modules sets its own logger's level (WARNING), which the
    parent's level would not override."""
    agent = logging.getLogger("torch.distributed.elastic.agent.server.api")
    before = agent.level
    with launcher_quiet():
        assert not agent.isEnabledFor(logging.WARNING)
    assert agent.level == before
