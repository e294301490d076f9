"""Optional dependencies (pyproject's extras): whether one is installed, and the one line that
says how to install it.

Checked before anything is written: an export without its tracker, or ``log.tensorboard``
without TensorBoard, is bad input (one line, exit 2), never an ImportError traceback halfway
through. Looking a module up (``find_spec``) does not import it, so the check costs nothing.
"""

from __future__ import annotations

import importlib.util

TRACKING = "pip install 'normbench[tracking]'"


def missing(modules: tuple[str, ...], purpose: str) -> str | None:
    """``purpose needs tensorboard, which is not installed: pip install ...``, or None when
    every module is there."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    which = "is" if len(absent) == 1 else "are"
    return f"{purpose} needs {', '.join(absent)}, which {which} not installed: {TRACKING}"
