"""Managing a runs directory: list, show, compare and clean runs.

Reads through normbench.store.catalog (the index keeps ``runs list`` fast over 100,000 runs)
and the trusted reader. A run named on the command line must be a run id or the start of one
(a-z 0-9 _ . -: never a path or a pattern). ``clean`` trusts neither the index nor a name for a
path: it deletes only a directory named by a run id, directly inside the runs directory, that
is not a symlink, while holding the run's lock (never a run being trained).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.core.errors import StoreError, UsageError
from normbench.core.keys import shown
from normbench.core.text import plain
from normbench.experiment.schema import EXECUTION_KEYS, OBSERVATION_KEYS
from normbench.store.catalog import NOT_CONFIG, Selection
from normbench.store.rundir import STATUSES, RunDir, is_run_id

# The choices that say what a run is, in the order `runs list` shows them.
HEADLINE = (
    "model.name",
    "norm.name",
    "placement.name",
    "precision.name",
    "data.name",
    "batch_size",
    "seed",
)
PREFIX = re.compile(r"[a-z0-9_.-]{1,200}")  # what the start of a run id may hold


def parse_statuses(text: str | None) -> list[str] | None:
    """``failed,interrupted`` -> a list, each checked against the statuses a run can have."""
    if text is None:
        return None
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    valid = (*STATUSES, "abandoned")
    bad = [s for s in wanted if s not in valid]
    if bad or not wanted:
        raise UsageError(f"--status {text}: valid: {', '.join(valid)} (comma-separated)")
    return wanted


def narrow(selection: Selection, statuses: list[str] | None) -> pd.DataFrame:
    runs = selection.runs
    return runs[runs["status"].isin(statuses)] if statuses else runs


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """'3 min', '5 h', '2 d' since an ISO time; '-' when unknown."""
    try:
        then = datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return "-"
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = ((now or datetime.now(timezone.utc)) - then).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(0, seconds):.0f} s"


LISTED = ("run id", "status", "choices", "result", "age", "tags")  # `runs list`'s columns


def list_rows(runs: pd.DataFrame, last: int | None = None) -> tuple[list[tuple[str, ...]], str]:
    """One row for each of the ``last`` newest runs (None: every run), newest first (LISTED):
    id, status, the headline choices that differ between the runs, result, age, tags; and the
    choices they all share, as one line. Which choices differ is decided over every run, not
    only those shown; rows are laid out for the shown ones alone (a store lists 100,000)."""
    present = [key for key in HEADLINE if key in runs]
    ordered = runs["started"].sort_values(ascending=False, na_position="last").index
    if last is not None:
        ordered = ordered[:last]
    shown_values = {key: _shown(runs[key]) for key in present}
    shared = [key for key in present if shown_values[key].nunique() == 1]
    varying = [key for key in present if key not in shared]
    newest = runs.loc[ordered]
    now, ages = datetime.now(timezone.utc), {}
    for when in set(newest["finished"].fillna(newest["started"])):
        ages[when] = age(when, now)
    choices = _choices([shown_values[key][ordered] for key in varying], varying, len(newest))
    telling = _telling_apart(newest, choices)
    if telling:  # the keys that tell apart runs of the same headline choices, after them
        more = [_shown_present(newest[key]) for key in telling]
        extra = _choices(more, telling, len(newest))
        choices = [f"{a} {b}".strip() for a, b in zip(choices, extra, strict=True)]
    columns = (
        newest["run_id"].tolist(),
        newest["status"].tolist(),
        choices,
        [
            _result(bpb, acc)
            for bpb, acc in zip(newest["final_val_bpb"], newest["final_val_acc"], strict=True)
        ],
        [ages[when] for when in newest["finished"].fillna(newest["started"])],
        [",".join(tags) if isinstance(tags, list) else "" for tags in newest["tags"]],
    )
    rows = list(zip(*columns, strict=True))
    first = [[shown_values[key].iloc[0]] for key in shared]
    return rows, (_choices(first, shared, 1)[0] if len(runs) else "")


def _telling_apart(runs: pd.DataFrame, choices: list[str]) -> list[str]:
    """The other config keys that differ between runs listed with the same headline choices
    (``model.width``, ``train.max_steps``): without them two different runs read the same.
    Only the runs that share their choices are looked at, as integer codes (100,000 runs
    that differ in train.lr take a fraction of a second)."""
    codes, _ = pd.factorize(pd.Series(choices, dtype=object))
    twins = pd.Series(codes).duplicated(keep=False).to_numpy()
    if not twins.any():
        return []
    subset = runs[twins]
    skip = {*HEADLINE, *NOT_CONFIG, *EXECUTION_KEYS, *OBSERVATION_KEYS}
    keys = [key for key in subset.columns if "." in key and key not in skip]  # config sections
    keys = [key for key in keys if _varies(subset[key].to_numpy())]  # one pass each, in C
    if not keys:
        return []
    table = pd.DataFrame({key: _codes(subset[key]) for key in keys})
    differing = table.groupby(codes[twins]).nunique().max() > 1
    return [key for key in keys if differing[key]]


def _codes(values: pd.Series):
    """Integer codes of a column's values, None and NaN one value each (a list, unhashable,
    by its text)."""
    try:
        return pd.factorize(values, use_na_sentinel=False)[0]
    except TypeError:
        return pd.factorize(values.map(str), use_na_sentinel=False)[0]


def _varies(values) -> bool:
    """Whether an object column holds more than one value (NaN counts as differing: the
    closer look that follows tells)."""
    if len(values) < 2:
        return False
    first = np.empty((), dtype=object)
    first[()] = values[0]  # a 0-d array: a list value is compared whole, not broadcast
    return bool((values != first).any())


def _shown(values: pd.Series) -> pd.Series:
    """``str`` of each value: a column of strings as it is, of integers converted at once,
    else once per distinct value and type (a column of 100,000 runs holds a handful)."""
    kind = pd.api.types.infer_dtype(values, skipna=False)
    if kind == "string":
        return values
    if kind == "integer":
        return values.astype(str)
    seen: dict[tuple, str] = {}
    shown = []
    for value in values:
        key = (type(value), value) if isinstance(value, (str, int, float, type(None))) else None
        text = seen.get(key) if key is not None else None
        if text is None:
            text = str(value)
            if key is not None:
                seen[key] = text
        shown.append(text)
    return pd.Series(shown, index=values.index, dtype=object)


def _result(bpb: float, acc: float) -> str:
    for value, name in ((bpb, "bpb"), (acc, "acc")):
        if isinstance(value, float) and not math.isnan(value):
            return f"{name} {value:.4f}"
    return "-"


def _choices(values: list, keys: list[str], count: int) -> list[str]:
    """``norm=batchnorm seed=1`` for each of ``count`` runs, from each key's column of shown
    values (no keys: empty strings)."""
    if not keys:
        return [""] * count
    names = [key.removesuffix(".name") for key in keys]
    return [
        " ".join(
            f"{name}={value}" for name, value in zip(names, row, strict=True) if value is not None
        )
        for row in zip(*values, strict=True)
    ]


def _shown_present(values: pd.Series) -> pd.Series:
    """``_shown``, with None where a run's config has no such key (NaN in the frame: the key
    of another norm, ``norm.alpha_init`` of DyT beside a LayerNorm run): not a choice of that
    run, so not listed as ``=nan``."""
    absent = values.map(lambda value: isinstance(value, float) and value != value)
    return _shown(values).where(~absent.astype(bool), None)


def resolve(runs_dir: Path, name: str) -> RunDir:
    """A run by its id or an unambiguous start of it (a prefix, never a pattern or a path)."""
    if not PREFIX.fullmatch(name) or name.startswith("."):
        raise UsageError(
            f"run {shown(plain(name))}: a run id or the start of one (a-z 0-9 _ . -), as "
            "`runs list` shows it"
        )
    if is_run_id(name) and _is_run_directory(runs_dir, name):
        return RunDir(runs_dir, name)
    try:
        with os.scandir(runs_dir) as entries:
            matches = sorted(
                entry.name
                for entry in entries
                if entry.name.startswith(name)
                and is_run_id(entry.name)
                and entry.is_dir(follow_symlinks=False)
            )
    except OSError as err:
        raise UsageError(f"runs directory {runs_dir}: {err.strerror}") from None
    if len(matches) == 1:
        return RunDir(runs_dir, matches[0])
    if not matches:
        raise UsageError(f"run {name}: no such run in {runs_dir}; see normbench runs list")
    listed = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
    raise UsageError(f"run {name}: {len(matches)} runs start so; give more of the id: {listed}")


def _is_run_directory(runs_dir: Path, name: str) -> bool:
    """Whether runs_dir/name is a directory itself (not a symlink to one)."""
    try:
        return stat.S_ISDIR(os.lstat(runs_dir / name).st_mode)
    except OSError:
        return False


def read_config(run: RunDir) -> dict:
    """A run's config, flattened, through the trusted reader (UsageError naming the file)."""
    try:
        return run.read_config()
    except (OSError, StoreError) as err:
        raise UsageError(f"run {run.run_id}: {_reason(err)}") from None


def _reason(err: OSError | StoreError) -> str:
    if isinstance(err, StoreError):
        return str(err)
    return f"{Path(err.filename or '').name or 'a file'}: {err.strerror}"


def diff(a: RunDir, b: RunDir) -> list[tuple[str, str, str]]:
    """(key, value in A, value in B) for every config key that differs, and for the code,
    torch, device and fetched data set's fingerprint that made each run."""
    flat_a, flat_b = read_config(a), read_config(b)
    rows = [
        (key, json.dumps(flat_a.get(key, "(absent)")), json.dumps(flat_b.get(key, "(absent)")))
        for key in sorted(set(flat_a) | set(flat_b))
        if flat_a.get(key, "(absent)") != flat_b.get(key, "(absent)")
    ]
    meta_a, meta_b = a.read_meta() or {}, b.read_meta() or {}
    for name, pick in (
        ("(code)", lambda m: (m.get("code") or {}).get("source_hash")),
        ("(torch)", lambda m: (m.get("versions") or {}).get("torch")),
        ("(device)", lambda m: m.get("device")),
        ("(data)", lambda m: (m.get("data") or {}).get("fingerprint")),  # a fetched set's
    ):
        if pick(meta_a) != pick(meta_b):
            rows.append((name, str(pick(meta_a)), str(pick(meta_b))))
    return rows


def clean_candidates(runs_dir: Path, runs: pd.DataFrame) -> tuple[list[RunDir], list[str]]:
    """The selected runs that can be deleted (see ``deletable``), and a warning for each that
    cannot."""
    out, warnings = [], []
    for rid in runs["run_id"]:
        run = RunDir(runs_dir, rid) if is_run_id(rid) else None
        why = "not a run id" if run is None else deletable(run)
        if why is None:
            out.append(run)
        else:
            warnings.append(f"kept {plain(str(rid))[:120]}: {why}")
    return out, warnings


def half_written(runs_dir: Path) -> list[RunDir]:
    """Run directories without a meta.json (a disk that filled up, a kill between mkdir and
    the first write): nothing a report can show, so `runs clean` deletes them with the
    failed runs; ``delete`` checks them again under their lock (a run starting now holds it)."""
    try:
        names = sorted(entry.name for entry in os.scandir(runs_dir) if is_run_id(entry.name))
    except OSError:
        return []
    return [
        RunDir(runs_dir, name)
        for name in names
        if _is_run_directory(runs_dir, name) and not os.path.lexists(runs_dir / name / "meta.json")
    ]


def deletable(run: RunDir) -> str | None:
    """Why ``run`` cannot be deleted now, or None: its name must be a run id (so its directory
    is directly inside the runs directory), the directory one itself (never a symlink), and
    its lock free and not a symlink."""
    if not is_run_id(run.run_id):
        return "not a run id"
    if not _is_run_directory(run.path.parent, run.run_id):
        return "not a directory of its own (a symlink?)"
    # read-only (`--dry-run` creates no lock file); ``delete`` takes the lock to check again
    for path in (run.lock_path.parent, run.lock_path):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break
        except OSError as err:
            return f"{path}: cannot open the lock ({err.strerror})"
        wanted = stat.S_ISDIR if path == run.lock_path.parent else stat.S_ISREG
        if not wanted(mode):
            return f"{path}: cannot open the lock (a symlink or not a regular file)"
    return None if run.lock_is_free() else "being trained (its lock is held)"


def delete(run: RunDir) -> str | None:
    """Remove a run's directory and its lock file, checked again (``deletable``) while
    holding the lock; returns why it was kept, or None once deleted."""
    if not is_run_id(run.run_id):
        return "not a run id"
    try:
        with run.lock(wait=False) as free:
            if not free:
                return "being trained (its lock is held)"
            if not _is_run_directory(run.path.parent, run.run_id):
                return "not a directory of its own (a symlink?)"
            shutil.rmtree(run.path)  # never follows a symlink inside it
            run.lock_path.unlink(missing_ok=True)
    except StoreError as err:
        return plain(str(err))
    except OSError as err:
        return f"cannot delete it ({err.strerror})"
    return None
