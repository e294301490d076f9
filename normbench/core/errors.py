"""The two errors a command turns into one line on stderr and exit code 2.

At the bottom of the import graph: every role raises them, and only the command line (and
``normbench.api``, which re-raises them as they are) turns them into messages.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: reported as one line, exit code 2, nothing written."""


class StoreError(UsageError):
    """A file of a runs directory (or a preset, or a data file) that normbench will not read or
    write through: one line naming the path and what is wrong with it."""
