"""A run's record, the row the report and `runs list` read of it, and how it is read from
the run's own files.

A run contributes one record: its own fields (``RUN_FIELDS``: status, seed, summary numbers,
provenance, times, tags) and its config, flattened, without the seed (runs that differ only
in their seed share it: normbench.store.index stores it once). A record is kept with its
files' stamp, (mtime_ns, size) of config.yaml, meta.json and metrics.parquet, taken before
they are read: the index reuses a record only while the stamp is unchanged. The files are
read through the trusted reader (normbench.core.files), by worker processes when there are
thousands (a first report of a large store).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normbench.core.errors import StoreError
from normbench.core.files import (
    check_parquet_ends,
    open_directory,
    parse_json,
    parse_yaml,
    read_bytes,
)
from normbench.core.text import plain
from normbench.store import upgrade
from normbench.store.rundir import FINISHED, MAX_BYTES, check_config, check_meta

RUN_FILES = ("config.yaml", "meta.json", "metrics.parquet")
SUMMARY_FIELDS = (
    "final_val_acc",
    "best_val_acc",
    "final_val_loss",
    "final_val_bpb",
    "test_acc",
    "test_loss",
    "test_bpb",
    "steps",
    "steps_to_target",
    "time_to_target_s",
    "train_loss_auc",
    "train_s",
    "wall_s",
    "parameters",
    "parameters_non_embedding",
    "num_classes",
    "unigram_bpb",
    "val_size",
    "test_size",
    "initial_val_loss",
    "initial_val_bpb",
    # what the steps cost (normbench.training.cost; null in runs made before it)
    "matmul_flops_per_step",
    "saved_bytes_per_step",
    "peak_memory_bytes",
    "step_s_median",
    "step_s_iqr",
    "timed_steps",
    "examples_per_s",
    "tokens_per_s",
    "load_start",
    "load_end",
    "cpu_count",
    "allreduce_share_median",  # a data-parallel run's on a CPU (null for one process)
)
# Where a run's numbers came from: the code's fingerprint, torch, the device it ran on, the
# machine (its host name: step times compare only within one) and, for a set fetched from the
# hub, the data's fingerprint (normbench.data.hubcache; null for the data made offline).
PROVENANCE_FIELDS = ("code_hash", "torch_version", "device_used", "host", "data_fingerprint")
# What a person attached, the clock recorded, or the command line was (argv): never part of
# an experiment's config.
RECORD_FIELDS = ("started", "finished", "tags", "note", "command")
TEXT_FIELDS = ("error", *PROVENANCE_FIELDS, "started", "finished", "note")
LIST_FIELDS = ("tags", "command")  # lists of strings, stored as JSON text
# A run's own fields, in this order, then its config's keys: a row of `report` and `runs list`.
RUN_FIELDS = ("run_id", "status", "error", "seed", *SUMMARY_FIELDS, *PROVENANCE_FIELDS)
RUN_FIELDS += RECORD_FIELDS
# "mtime_ns:size:ctime_ns:inode" of each of RUN_FILES, "-" for a missing one, joined by spaces:
# one value to store and compare (the index reads 100,000 of them at every report). The mtime
# and size alone miss an edit of equal size whose mtime is set back (os.utime, touch -d, a
# copy with cp -p); the ctime cannot be set back, and a file replaced by a rename has another
# inode.
Stamp = str


# A run's record is its row as the index stores it: the RUN_FIELDS values, with the summary
# numbers packed as one value (SUMMARY) and the lists, tags and command, as JSON text
# (``as_list`` reads them); then its files' stamp and its config's id.
ROW_FIELDS = ("run_id", "status", "error", "seed", "summary", *PROVENANCE_FIELDS, *RECORD_FIELDS)
COLUMNS = (*ROW_FIELDS, "stamp", "config_id")
SUMMARY, STAMP, CONFIG = ROW_FIELDS.index("summary"), len(ROW_FIELDS), len(ROW_FIELDS) + 1
Record = tuple
# The summary numbers as one little-endian float64 each, NaN for "no number": SQLite hands
# back 100,000 such blobs in a fraction of the time it takes for 2,000,000 numbers, and numpy
# reads them as one array (catalog.as_frame).
PACKED = struct.Struct(f"<{len(SUMMARY_FIELDS)}d")


def packed(numbers: dict[str, int | float | None]) -> bytes:
    """A run's summary numbers (SUMMARY_FIELDS, each finite or None) as the index keeps them."""
    return PACKED.pack(*(math.nan if numbers[k] is None else numbers[k] for k in SUMMARY_FIELDS))


@dataclass
class Records:
    """Runs read from their files or from the index: records by run id, configs by id, and a
    warning for every run that could not be read."""

    runs: dict[str, Record] = field(default_factory=dict)
    configs: dict[str, dict] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add(self, more: Records) -> None:
        self.runs.update(more.runs)
        self.configs.update(more.configs)
        self.warnings.extend(more.warnings)


# --------------------------------------------------------------------------- run files
def stamp(path: Path | str) -> Stamp:
    """The modification and change times, sizes and inodes of a run's three files (see
    Stamp); taken before the files are read, so that a file changed while it was read is read
    again next time."""
    out = []
    for name in RUN_FILES:
        try:
            info = os.lstat(f"{path}/{name}")
        except OSError:
            out.append("-")
        else:
            out.append(f"{info.st_mtime_ns}:{info.st_size}:{info.st_ctime_ns}:{info.st_ino}")
    return " ".join(out)


def has_meta(files: Stamp) -> bool:
    return files.split(" ")[1] != "-"


def read_run(runs_dir: Path, name: str, files: Stamp) -> tuple[Record, dict]:
    """One run read from its files, through the trusted reader: its record and its config
    (flattened, seed aside). StoreError or OSError, naming the file, when the run's files are
    not what normbench writes (a finished run needs a complete metrics file)."""
    path = f"{runs_dir}/{name}"  # for messages: a Path per file costs more than reading it
    with open_directory(runs_dir / name, runs_dir) as directory:
        raw = read_bytes("meta.json", MAX_BYTES["meta.json"], dir_fd=directory)
        meta = check_meta(f"{path}/meta.json", parse_json(raw, f"{path}/meta.json"))
        if meta.get("run_id", name) != name:
            raise StoreError(
                f"{path}/meta.json: it belongs to another run ({plain(str(meta['run_id']))[:80]})"
            )
        raw = read_bytes("config.yaml", MAX_BYTES["config.yaml"], dir_fd=directory)
        config = check_config(f"{path}/config.yaml", parse_yaml(raw, f"{path}/config.yaml"))
        if meta["status"] in FINISHED:
            check_parquet_ends("metrics.parquet", MAX_BYTES["metrics.parquet"], dir_fd=directory)
    seed = config.pop("seed")
    clash = [key for key in config if key in RUN_FIELDS]
    if clash:
        raise StoreError(f"{path}/config.yaml: {clash[0]} is a run's field, not a config key")
    summary = meta.get("summary") or {}
    numbers = {key: finite(summary.get(key)) for key in SUMMARY_FIELDS}
    upgrade.upgrade_run(config, numbers)
    code, versions = meta.get("code") or {}, meta.get("versions") or {}
    fields = {
        "run_id": name,
        "status": meta["status"],
        "error": text(meta.get("error")),
        "seed": seed,
        "code_hash": text(code.get("source_hash")) or "unrecorded",
        "torch_version": text(versions.get("torch")),
        "device_used": text(meta.get("device")),
        "host": text(meta.get("host")),
        "data_fingerprint": text((meta.get("data") or {}).get("fingerprint")),
        "started": text(meta.get("started")),
        "finished": text(meta.get("finished")),
        "tags": json.dumps(strings(meta.get("tags") or [])),
        "note": text(meta.get("note")),
        "command": json.dumps(strings(meta.get("command"))),
    }
    fields["summary"] = packed(numbers)
    return (*(fields[key] for key in ROW_FIELDS), files, config_id(config)), config


def finite(value: Any) -> int | float | None:
    """A summary number as the index keeps it: NaN and infinity (a diverged run's loss, a
    tampered count) are None, "no number", and so is an integer past 64 bits."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return None
    return value


def text(value: Any) -> str | None:
    """A text field (an error, a time, a note); anything else (a number, an object where text
    belongs) as its JSON, so a reader always gets a string or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, default=str)[:1000]
    return value.encode("utf-8", "replace").decode()  # lone surrogates from JSON escapes


def strings(value: Any) -> list[str] | None:
    """A command line (argv) as a list of strings, or None when it is anything else."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return [item.encode("utf-8", "replace").decode() for item in value]
    return None


def config_id(config: dict) -> str:
    """The id of a flattened config: a hash of its canonical JSON."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def read_runs(runs_dir: Path, wanted: list[tuple[str, Stamp]]) -> Records:
    """The runs ``wanted`` (name, stamp) read from their files; a warning naming the run and
    the file for each one that cannot be read."""
    out = Records()
    for name, files in wanted:
        try:
            record, config = read_run(runs_dir, name, files)
        except (OSError, StoreError) as err:
            out.warnings.append(f"skipped {name}: {plain(unreadable(err))}")
            continue
        out.runs[name] = record
        out.configs.setdefault(record[CONFIG], config)
    return out


PARALLEL_FROM = 2000  # runs to read before two processes pay for starting a second one
CHUNK = 500


def read_many(runs_dir: Path, wanted: list[tuple[str, Stamp]]) -> Records:
    """``read_runs``, spread over the machine's cores (at most 4 processes) when there are
    thousands to read: the first report of a large store reads three files a run. Read in
    this process when worker processes cannot start (a program read from stdin cannot be
    re-imported by them)."""
    workers = min(4, os.cpu_count() or 1)
    if len(wanted) < PARALLEL_FROM or workers < 2:
        return read_runs(runs_dir, wanted)
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    chunks = [wanted[i : i + CHUNK] for i in range(0, len(wanted), CHUNK)]
    out = Records()
    # spawn: a fresh interpreter, nothing forked from a process that may hold threads
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
        ) as pool:
            for part in pool.map(read_runs, [runs_dir] * len(chunks), chunks):
                out.add(part)
    except (BrokenProcessPool, OSError):
        return read_runs(runs_dir, wanted)
    return out


def die_with_parent(parent: int) -> None:
    """A reading worker's first act: end when the process that started it ends. Killed, a
    parent leaves its workers waiting on a queue nobody writes to (reparented, forever):
    Linux's parent-death signal ends them at once, and a thread that sees the parent change
    ends them anywhere else; SIGTERM gets its default action back."""
    import signal
    import threading

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # died already, before the signal was asked for
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def unreadable(err: Exception) -> str:
    """Why a run could not be read, naming the file: ``metrics.parquet is missing``."""
    if isinstance(err, StoreError):
        return str(err)
    if isinstance(err, FileNotFoundError) and err.filename:
        return f"{Path(err.filename).name} is missing"
    where = f"{Path(err.filename).name}: " if getattr(err, "filename", None) else ""
    return f"{where}{getattr(err, 'strerror', None) or err}"
