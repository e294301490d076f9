"""Which code made a result: the package version, the git commit (and whether the checkout had
uncommitted changes), and a hash of the source files that compute results.

A run records this fingerprint in meta.json (``code``). A finished run whose ``source_hash``
differs from the installed code's is *stale*: it was computed by other code, so averaging it
with fresh runs would mix two experiments. ``run`` and ``sweep`` say so and ``--rerun-stale``
trains such runs again; ``report`` marks groups that mix fingerprints. A plugin's code computes
results too: the source files of the modules a config's ``_target_``s live in are hashed with
normbench's, so that editing your norm makes the runs it trained stale.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import subprocess
from pathlib import Path

from normbench import __version__

PACKAGE = Path(__file__).resolve().parents[1]  # normbench/
# The modules whose code decides a run's numbers. The CLI, the report and the store do not;
# the config's meaning is in the resolved config, which the run id already hashes.
RESULT_MODULES = (
    "data/arrays.py",
    "data/base.py",
    "data/datasets.py",
    "data/generated.py",
    "data/hubfetch.py",  # decodes a fetched set once: what every run of it reads
    "data/hubload.py",
    "data/pysource.py",
    "layers/attention.py",
    "layers/elementwise.py",
    "layers/models.py",
    "layers/norm_base.py",
    "layers/norms.py",
    "layers/resnet.py",
    "layers/sdd.py",
    "layers/single_gain.py",
    "layers/sync_batchnorm.py",
    "layers/weight_std.py",
    "training/augment.py",
    "training/batches.py",
    "training/checkpoint.py",
    "training/optimizers.py",
    "training/trainer.py",
)


@functools.cache
def source_hash(plugins: tuple[str, ...] = ()) -> str:
    """sha256 over the result modules' bytes and those of the ``plugins``' modules (import
    paths, ``pkg.module:Object``), 16 hex digits."""
    digest = hashlib.sha256()
    for name in RESULT_MODULES:
        digest.update(name.encode() + b"\0" + (PACKAGE / name).read_bytes() + b"\0")
    for target in plugins:
        module = target.partition(":")[0]
        digest.update(module.encode() + b"\0" + _module_source(module) + b"\0")
    return digest.hexdigest()[:16]


def plugin_targets(cfg: dict | None) -> tuple[str, ...]:
    """The import paths of a config's plugins (norm, model, data), sorted."""
    if cfg is None:
        return ()
    return tuple(
        sorted({s["_target_"] for s in cfg.values() if isinstance(s, dict) and "_target_" in s})
    )


def _module_source(module: str) -> bytes:
    """A module's source file; nothing when it has none that can be read."""
    try:
        origin = importlib.util.find_spec(module).origin
        return Path(origin).read_bytes()
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return b""


def fingerprint(cfg: dict | None = None) -> dict[str, str | bool | None]:
    """{version, commit, dirty, source_hash}; commit and dirty are None outside a checkout;
    the source hash covers the plugins ``cfg`` uses."""
    return {**_repository(), "source_hash": source_hash(plugin_targets(cfg))}


@functools.cache
def _repository() -> dict[str, str | bool | None]:
    commit, dirty = _git("rev-parse", "HEAD"), None
    if commit is not None:
        changes = _git("status", "--porcelain", "--", str(PACKAGE))
        dirty = bool(changes) if changes is not None else None
    return {"version": __version__, "commit": commit, "dirty": dirty}


def is_stale(meta: dict, cfg: dict | None = None) -> bool:
    """A finished run made by other code (or by a normbench too old to record its code);
    ``cfg``, the run's config, names the plugins whose code counts too."""
    code = meta.get("code")
    expected = source_hash(plugin_targets(cfg))
    return not isinstance(code, dict) or code.get("source_hash") != expected


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE), *args], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
