"""SIGTERM as Ctrl-C: what `normbench run`, `sweep` and `findings` do before training, so that
a scheduler's kill or a preemption stops them the way Ctrl-C does (recorded, not lost)."""

from __future__ import annotations

import signal


def interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's kill, a preemption) ends a run like Ctrl-C: recorded, not lost.
    SIGINT is Ctrl-C again whatever the shell did with it (a script's background job starts
    with SIGINT ignored, and Python then leaves it ignored)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
