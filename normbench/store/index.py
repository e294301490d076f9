"""The index of a runs directory, runs/.index.sqlite: what `report` and `runs list` need from
each run, so that a store of 100,000 runs is not read file by file at every command.

A run contributes one record: its own fields (``RUN_FIELDS``: status, seed, summary numbers,
provenance, times, tags) and its config, flattened, without the seed. Runs that differ only
in their seed share that config, so it is stored once (``configs``) and each run points at
it: the index of a sweep is a few hundred configs and one short row per run, not a copy of
every config.yaml.

A record is kept with its files' stamp, (mtime_ns, size) of config.yaml, meta.json and
metrics.parquet, and reused only while all three are unchanged; the run's own process writes
its record when the run ends (``record_run``), so that the next report reads none of its
files. The index is a cache, and an
untrusted one (it lies in the runs directory): its rows are checked when read (known status,
integer seed, finite numbers, strings where strings belong; configs of plain values), one that
fails is read again from the run's files; the database must have exactly the schema written
here, or it is rebuilt, as it is when it is missing, not a database or of another version. It
never names a path: records are matched to run directories by the directory's own name, which
must be a run id. A read-only runs directory is read with its index as it is (SQLite's
immutable mode: no lock or journal file is created), or without one.

Several processes share it (two sweeps finishing runs while a report reads): SQLite in WAL
mode, each write one short transaction, retried while another process holds the lock, and
given up without harm (the next reader brings it up to date).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import sqlite3
import stat
import struct
import time
from collections.abc import Iterable, Iterator
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
from normbench.experiment.schema import LATER_KEYS, later_option_keys
from normbench.store.rundir import (
    FINISHED,
    MAX_BYTES,
    SCALARS,
    STATUSES,
    check_config,
    check_meta,
    is_run_id,
)

FILE = ".index.sqlite"
SCHEMA_VERSION = 3  # bumped when the tables change: an index of another version is rebuilt
INDEX_LIMIT = 4 << 30  # bytes: 100,000 runs take about 60 MB
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
    "num_classes",
    "unigram_bpb",
    "val_size",
    "test_size",
    "initial_val_loss",
    "initial_val_bpb",
)
# Where a run's numbers came from: the code's fingerprint, torch, and the device it ran on.
PROVENANCE_FIELDS = ("code_hash", "torch_version", "device_used")
# What a person attached, the clock recorded, or the command line was (argv): never part of
# an experiment's config.
RECORD_FIELDS = ("started", "finished", "tags", "note", "command")
TEXT_FIELDS = ("error", *PROVENANCE_FIELDS, "started", "finished", "note")
LIST_FIELDS = ("tags", "command")  # lists of strings, stored as JSON text
# A run's own fields, in this order, then its config's keys: a row of `report` and `runs list`.
RUN_FIELDS = ("run_id", "status", "error", "seed", *SUMMARY_FIELDS, *PROVENANCE_FIELDS)
RUN_FIELDS += RECORD_FIELDS
# "mtime_ns:size" of each of RUN_FILES, "-" for a missing one, joined by spaces: one value to
# store and compare (the index reads 100,000 of them at every report).
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
    """The modification times and sizes of a run's three files (see Stamp); taken before the
    files are read, so that a file changed while it was read is read again next time."""
    out = []
    for name in RUN_FILES:
        try:
            info = os.lstat(f"{path}/{name}")
        except OSError:
            out.append("-")
        else:
            out.append(f"{info.st_mtime_ns}:{info.st_size}")
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
    for key, old in LATER_KEYS.items():  # a built-in group's run made before the key existed
        if f"{key.partition('.')[0]}._target_" not in config:
            config.setdefault(key, old)
    for key, old in later_option_keys(config).items():
        config.setdefault(key, old)
    summary = meta.get("summary") or {}
    numbers = {key: finite(summary.get(key)) for key in SUMMARY_FIELDS}
    for classes in (numbers["num_classes"], config.get("data.num_classes"), 10):
        if isinstance(classes, (int, float)) and 2 <= classes < 2**63:  # chance is 1/classes
            numbers["num_classes"] = classes  # (the summary's; a run made before it had one)
            break
    code, versions = meta.get("code") or {}, meta.get("versions") or {}
    fields = {
        "run_id": name,
        "status": meta["status"],
        "error": text(meta.get("error")),
        "seed": seed,
        "code_hash": text(code.get("source_hash")) or "unrecorded",
        "torch_version": text(versions.get("torch")),
        "device_used": text(meta.get("device")),
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


# ------------------------------------------------------------------------------ the index
SCHEMA = (
    "CREATE TABLE configs (id TEXT PRIMARY KEY, flat TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, error TEXT, seed, "
    + "summary BLOB, code_hash TEXT, torch_version TEXT, device_used TEXT, "
    + "started TEXT, finished TEXT, tags TEXT, note TEXT, command TEXT, "
    + "stamp TEXT, config_id TEXT) WITHOUT ROWID",
)
# A row's check, computed by SQLite in the same transaction that reads the row (so a crafted
# database cannot show the check one row and the reader another); that its summary numbers
# are finite or NaN is checked on the blobs read (Index.records).
_VALID = " AND ".join(
    [
        "typeof(run_id) = 'text'",
        "typeof(status) = 'text'",  # (NULL IN (...) is NULL, and NOT NULL passes a row)
        "status IN ({})".format(", ".join(f"'{s}'" for s in STATUSES)),
        "typeof(seed) = 'integer'",
        "typeof(config_id) = 'text'",
        "typeof(stamp) = 'text'",
        f"typeof(summary) = 'blob' AND length(summary) = {PACKED.size}",
        *(f"typeof({name}) IN ('text', 'null')" for name in (*TEXT_FIELDS, *LIST_FIELDS)),
    ]
)
BUSY_RETRIES = 5


class Index:
    """An open runs/.index.sqlite (see the module's docstring)."""

    def __init__(self, connection: sqlite3.Connection, writable: bool):
        self.connection = connection
        self.writable = writable

    @classmethod
    def open(
        cls, runs_dir: Path, busy_timeout: float = 10.0, rebuild: bool = False
    ) -> Index | None:
        """The runs directory's index, created when missing and rebuilt when it is not a
        database of this version (or when asked: one found corrupt past its first page);
        None when it cannot have one (read-only without one, a symlink or other non-file in
        its place, locked past the timeout)."""
        path = runs_dir / FILE
        writable = os.access(runs_dir, os.W_OK)
        if not _plain_files(path) or (not writable and not path.exists()):
            return None
        if rebuild and not (writable and _remove(path)):
            return None
        index = cls._connect(path, writable, busy_timeout)
        if index == "rebuild" and writable and _remove(path):
            index = cls._connect(path, writable, busy_timeout)
        return index if isinstance(index, Index) else None

    @classmethod
    def _connect(cls, path: Path, writable: bool, busy_timeout: float) -> Index | str | None:
        """An Index with this version's schema; "rebuild" when the file is not a database,
        is corrupt or has another schema; None when it cannot be used now."""
        try:
            connection = _connect(path, writable, busy_timeout)
        except sqlite3.OperationalError:  # locked, or cannot be opened: not now
            return None
        except sqlite3.DatabaseError:  # not a database, or a corrupt one
            return "rebuild"
        if connection is None:
            return "rebuild"
        index = cls(connection, writable)
        try:
            if index._schema_ok():
                return index
            outcome = "rebuild"
        except sqlite3.OperationalError:
            outcome = None
        except sqlite3.DatabaseError:
            outcome = "rebuild"
        index.close()
        return outcome

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.connection.close()

    def _schema_ok(self) -> bool:
        """True when the database has this version's tables and nothing else (an empty one
        gets them); False for another version or any other schema."""
        version = self.connection.execute("PRAGMA user_version").fetchone()[0]
        found = self.connection.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        if version == 0 and not found and self.writable:
            with self._transaction():
                if not self.connection.execute("SELECT 1 FROM sqlite_master").fetchone():
                    for statement in SCHEMA:
                        self.connection.execute(statement)
                    self.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            version = self.connection.execute("PRAGMA user_version").fetchone()[0]
            found = self.connection.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        return version == SCHEMA_VERSION and sorted(found) == expected_schema()

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
        """BEGIN IMMEDIATE (a write; ``begin="BEGIN"``: a read) ... COMMIT; the BEGIN retried,
        with a growing pause, while another process holds the write lock past the busy
        timeout (sqlite3.OperationalError after BUSY_RETRIES tries)."""
        for attempt in range(BUSY_RETRIES):
            try:
                self.connection.execute(begin)
                break
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or attempt == BUSY_RETRIES - 1:
                    raise
                time.sleep(0.05 * 2**attempt)
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def records(self) -> tuple[Records, set[str]]:
        """Every row that passes its checks, with the configs its rows point at (a row that
        fails them is left out: its run is read again from its files); and the run ids of
        every row, so that rows of runs no longer there can be dropped. One read transaction:
        what the checks saw is what is read."""
        with self._transaction("BEGIN"):
            failed = self.connection.execute(f"SELECT run_id FROM runs WHERE NOT ({_VALID})")
            failed = {name for (name,) in failed}
            rows = self.connection.execute(f"SELECT {', '.join(COLUMNS)} FROM runs").fetchall()
            stored = self.connection.execute("SELECT id, flat FROM configs").fetchall()
        ids = {row[0] for row in rows}
        tags_at = ROW_FIELDS.index("tags")
        not_lists = _not_lists({row[tags_at] for row in rows})
        failed |= {row[0] for row in rows if row[tags_at] in not_lists} if not_lists else set()
        failed |= _infinite([row for row in rows if row[0] not in failed])
        runs = {row[0]: row for row in rows if row[0] not in failed}
        wanted = {record[CONFIG] for record in runs.values()}
        configs = {key: _config(flat) for key, flat in stored if key in wanted}
        configs = {key: config for key, config in configs.items() if config is not None}
        if not wanted <= configs.keys():
            runs = {name: r for name, r in runs.items() if r[CONFIG] in configs}
        return Records(runs, configs), ids

    def update(self, records: Records, removed: Iterable[str] = ()) -> None:
        """Write ``records`` (and their configs), drop the rows of ``removed`` runs, in one
        transaction. sqlite3.Error when the database is locked past every retry, read-only or
        corrupt."""
        used = {record[CONFIG] for record in records.runs.values()}
        configs = [
            (key, json.dumps(config, allow_nan=False))
            for key, config in records.configs.items()
            if key in used
        ]
        runs = list(records.runs.values())
        removed = [(name,) for name in removed]
        marks = ", ".join("?" * len(COLUMNS))
        with self._transaction():
            self.connection.executemany("INSERT OR REPLACE INTO configs VALUES (?, ?)", configs)
            self.connection.executemany(f"INSERT OR REPLACE INTO runs VALUES ({marks})", runs)
            if removed:
                self.connection.executemany("DELETE FROM runs WHERE run_id = ?", removed)
                self.connection.execute(
                    "DELETE FROM configs WHERE id NOT IN (SELECT config_id FROM runs)"
                )


def _infinite(rows: list[Record]) -> set[str]:
    """The run ids of rows (each with a blob of PACKED's size) holding an infinite summary
    number: what no run writes (``finite`` makes it NaN), so a tampered row."""
    import numpy as np  # here, not at the top: store.scan forks before numpy starts threads

    numbers = np.frombuffer(b"".join(row[SUMMARY] for row in rows), "<f8")
    rows_at = np.flatnonzero(np.isinf(numbers.reshape(len(rows), len(SUMMARY_FIELDS))).any(axis=1))
    return {rows[i][0] for i in rows_at}


def expected_schema() -> list[tuple]:
    """sqlite_master as SCHEMA writes it (what SQLite stores of each statement)."""
    memory = sqlite3.connect(":memory:")
    try:
        for statement in SCHEMA:
            memory.execute(statement)
        return sorted(memory.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
    finally:
        memory.close()


def _plain_files(path: Path) -> bool:
    """Whether the index and SQLite's files beside it are each absent or a regular file with
    one link (never a symlink, FIFO or device that SQLite would follow or block on)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            info = os.lstat(f"{path}{suffix}")
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > INDEX_LIMIT:
            return False
    return True


def _connect(path: Path, writable: bool, busy_timeout: float) -> sqlite3.Connection | None:
    """A connection to ``path``, or None when SQLite opened another file than ``path``
    itself (a symlink planted after the check): nothing has been read or written then.
    Read-only directories are read as immutable (no lock or WAL file is created)."""
    uri = f"file:{_quoted(path)}" + ("" if writable else "?mode=ro&immutable=1")
    connection = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    opened = connection.execute("PRAGMA database_list").fetchone()[2]
    if opened and os.path.realpath(path.parent) != os.path.dirname(opened):
        connection.close()
        return None
    if opened and os.path.basename(opened) != FILE:
        connection.close()
        return None
    connection.execute("PRAGMA trusted_schema = OFF")  # no function runs from the schema
    connection.execute("PRAGMA cell_size_check = ON")  # corrupt pages are errors, not reads
    if writable:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")  # a cache: speed over durability
    return connection


def _quoted(path: Path) -> str:
    from urllib.parse import quote

    return quote(str(path.absolute()))


def _remove(path: Path) -> bool:
    """Delete a corrupt index and SQLite's files beside it (regular files: checked); False
    when that fails."""
    try:
        for suffix in ("-wal", "-shm", "-journal", ""):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    except OSError:
        return False
    return True


def as_list(stored: Any) -> list[str] | None:
    """A stored list of strings (tags, a command line); None when the text is not such a
    list, or JSON null. Short texts are decoded once per distinct text (the runs of a sweep
    share theirs: the list is then shared too, and only read)."""
    if not isinstance(stored, str):
        return None
    return _as_list_cached(stored) if len(stored) <= 4096 else _as_list(stored)


def _as_list(stored: str) -> list[str] | None:
    try:
        return strings(parse_json(stored, "index"))
    except StoreError:
        return None


_as_list_cached = functools.lru_cache(maxsize=4096)(_as_list)


def _not_lists(texts: set) -> set:
    """The stored texts that are not a JSON list of strings (tags must be one)."""
    return {text for text in texts if as_list(text) is None}


def _config(flat: Any) -> dict | None:
    """A stored config, or None when it is not a flat object of plain values."""
    if not isinstance(flat, str):
        return None
    try:
        config = parse_json(flat, "index")
    except StoreError:
        return None
    if not isinstance(config, dict) or any(key in RUN_FIELDS for key in config):
        return None
    for value in config.values():
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, SCALARS) or (
                isinstance(item, float) and not math.isfinite(item)
            ):
                return None
    return config


def record_run(runs_dir: Path, name: str) -> None:
    """Bring one run's row up to date (after its meta.json was written for the last time), so
    that the next report need not read it: a few milliseconds. Never fails the caller: an
    index that is busy for more than a second, read-only or unusable is left to the next
    report to update."""
    if not is_run_id(name):
        return
    files = stamp(runs_dir / name)
    try:
        record, config = read_run(runs_dir, name, files)
    except (OSError, StoreError):
        return
    index = Index.open(runs_dir, busy_timeout=1.0)
    if index is None:
        return
    try:
        index.update(Records({name: record}, {record[CONFIG]: config}))
    except sqlite3.Error:
        pass
    finally:
        index.close()
