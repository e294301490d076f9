"""Which code made a result: the package version, the git commit (and whether the checkout had
uncommitted changes), and a hash of the source files that compute results.

A run records this fingerprint in meta.json (``code``). A finished run whose ``source_hash``
differs from the installed code's is *stale*: it was computed by other code, so averaging it
with fresh runs would mix two experiments. ``run`` and ``sweep`` say so and ``--rerun-stale``
trains such runs again; ``report`` marks groups that mix fingerprints.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from normbench import __version__

PACKAGE = Path(__file__).resolve().parent
# The modules whose code decides a run's numbers. The CLI, the report and the store do not;
# the config's meaning is in the resolved config, which the run id already hashes.
RESULT_MODULES = ("data.py", "models.py", "norms.py", "train.py")


@functools.cache
def source_hash() -> str:
    """sha256 over the result modules' bytes, 16 hex digits."""
    digest = hashlib.sha256()
    for name in RESULT_MODULES:
        digest.update(name.encode() + b"\0" + (PACKAGE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def fingerprint() -> dict[str, str | bool | None]:
    """{version, commit, dirty, source_hash}; commit and dirty are None outside a checkout."""
    commit, dirty = _git("rev-parse", "HEAD"), None
    if commit is not None:
        changes = _git("status", "--porcelain", "--", str(PACKAGE))
        dirty = bool(changes) if changes is not None else None
    return {"version": __version__, "commit": commit, "dirty": dirty, "source_hash": source_hash()}


def is_stale(meta: dict) -> bool:
    """A finished run made by other code (or by a normbench too old to record its code)."""
    code = meta.get("code")
    return not isinstance(code, dict) or code.get("source_hash") != source_hash()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE), *args], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
