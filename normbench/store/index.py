"""The index of a runs directory, runs/.index.sqlite: what `report` and `runs list` need from
each run, so that a store of 100,000 runs is not read file by file at every command.

Each run's record (normbench.store.reading: its own fields and its config, flattened, without
the seed) is one row. Runs that differ only in their seed share that config, so it is stored
once (``configs``) and each run points at it: the index of a sweep is a few hundred configs
and one short row per run, not a copy of every config.yaml.

A record is kept with its files' stamp and reused only while it is unchanged; the run's own
process writes
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
import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from normbench.core.errors import StoreError
from normbench.core.files import parse_json
from normbench.store.reading import (
    COLUMNS,
    CONFIG,
    LIST_FIELDS,
    PACKED,
    ROW_FIELDS,
    RUN_FIELDS,
    SUMMARY,
    SUMMARY_FIELDS,
    TEXT_FIELDS,
    Record,
    Records,
    read_run,
    stamp,
    strings,
)
from normbench.store.rundir import SCALARS, STATUSES, is_run_id

FILE = ".index.sqlite"
# Bumped when the tables change, or what a row means: an index of another version is rebuilt
# (4: stamps with ctime and inode, and configs read with the keys their optimizer ignores null;
# 5: the summary holds parameters_non_embedding; 6: and what the steps cost; 7: the host and
# its CPU count; 8: the data's fingerprint; 9: a data-parallel run's all-reduce share)
SCHEMA_VERSION = 9
INDEX_LIMIT = 4 << 30  # bytes: 100,000 runs take about 60 MB


# ------------------------------------------------------------------------------ the index
SCHEMA = (
    "CREATE TABLE configs (id TEXT PRIMARY KEY, flat TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, error TEXT, seed, "
    + "summary BLOB, code_hash TEXT, torch_version TEXT, device_used TEXT, host TEXT, "
    + "data_fingerprint TEXT, "
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
