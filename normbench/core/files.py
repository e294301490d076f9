"""The trusted reader: every file normbench reads from a runs directory, a sweep preset, a
config directory or a data path is opened here, and nowhere else (a test greps for it).

Such files are untrusted input (docs/security.md): a runs directory is shared on a cluster or
unpacked from a colleague's tarball, a preset is downloaded. So a file is read only when

- no symlink is followed: not the file itself, nor any directory between ``root`` (when the
  caller names one: the runs directory) and the file;
- it is a regular file: never a FIFO or a device, which could block forever or never end;
- its size is bounded, and so is what it expands to: the decompressed bytes and row count of
  a parquet file, the members of an npz archive;
- YAML has no aliases (a few hundred bytes of nested aliases expand to gigabytes) and no
  explicit tags;
- JSON and YAML nest at most MAX_DEPTH levels.

Whatever fails is a ``StoreError``: one line naming the path and what is wrong. Checking the
values against a schema (finite numbers, known types, run ids) is the caller's: it knows the
schema.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from normbench.core.errors import StoreError

MAX_DEPTH = 8  # nesting of JSON and YAML documents; normbench writes at most 3
YAML_LIMIT = 1 << 20  # a config, a preset, a config directory's option


def _open_flags() -> int:
    return os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_fd(path: Path, root: Path | None) -> int:
    """A descriptor for ``path``, never through a symlink: the last component is opened with
    O_NOFOLLOW, and with ``root`` every directory between root and the file too (each opened
    relative to its parent's descriptor, so a directory swapped for a link between a check and
    the open is still refused)."""
    if root is None:
        return os.open(path, _open_flags())
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        raise StoreError(f"{path} is outside {root}") from None
    if not parts or any(part in ("..", ".") for part in parts):
        raise StoreError(f"{path}: not a file inside {root}")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            inner = os.open(part, flags, dir_fd=directory)
            os.close(directory)
            directory = inner
        return os.open(parts[-1], _open_flags(), dir_fd=directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def open_regular(path: Path, limit: int, root: Path | None = None) -> Iterator[BinaryIO]:
    """A regular file of at most ``limit`` bytes, opened for reading. FileNotFoundError when it
    is missing; StoreError for a symlink, a FIFO or device, a file over the limit."""
    try:
        fd = _open_fd(Path(path), root)
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StoreError(f"{path}: a symlink (normbench never reads through one)") from None
        raise StoreError(f"{path}: cannot open it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise StoreError(f"{path} is larger than {limit} bytes")
        yield handle


def read_bytes(path: Path, limit: int, root: Path | None = None) -> bytes:
    """A regular file's bytes (see ``open_regular``), never more than ``limit``."""
    with open_regular(path, limit, root) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while we read it
        raise StoreError(f"{path} is larger than {limit} bytes")
    return data


def read_text(path: Path, limit: int, root: Path | None = None) -> str:
    """A regular file as UTF-8 text (StoreError when it is not)."""
    try:
        return read_bytes(path, limit, root).decode()
    except UnicodeDecodeError:
        raise StoreError(f"{path}: not UTF-8 text") from None


def depth(value: Any) -> int:
    """Nesting depth of dicts and lists (iterative: never a RecursionError); stops counting
    past MAX_DEPTH."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_json(text: bytes | str, where: object) -> Any:
    """JSON of at most MAX_DEPTH levels; ``where`` names the file in the error."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise StoreError(f"{where}: not valid JSON ({type(err).__name__})") from None
    if depth(value) > MAX_DEPTH:
        raise StoreError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    return value


def read_json(path: Path, limit: int, root: Path | None = None) -> Any:
    return parse_json(read_bytes(path, limit, root), path)


def parse_yaml(text: bytes | str, where: object) -> Any:
    """Safe YAML without aliases or explicit tags, at most MAX_DEPTH levels deep. The events
    are checked before anything is built, so an alias bomb costs its own few hundred bytes."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise StoreError(f"{where}: YAML aliases are not allowed here")
            tag = getattr(event, "tag", None)
            implicit = getattr(event, "implicit", True)
            explicit = implicit is False or (isinstance(implicit, tuple) and not any(implicit))
            if tag is not None and explicit:
                raise StoreError(f"{where}: YAML tags ({str(tag)[:40]}) are not allowed here")
        value = yaml.load(text, Loader=loader)
    except (yaml.YAMLError, RecursionError, UnicodeDecodeError, ValueError) as err:
        raise StoreError(f"{where}: not valid YAML ({type(err).__name__})") from None
    if depth(value) > MAX_DEPTH:
        raise StoreError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    return value


def read_yaml(path: Path, limit: int = YAML_LIMIT, root: Path | None = None) -> Any:
    return parse_yaml(read_bytes(path, limit, root), path)


def parquet_rows(path: Path, limit: int, root: Path | None = None) -> tuple[int, list[str]]:
    """A parquet file's row count and column names, from its footer only."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_regular(path, limit, root) as handle:
        try:
            metadata = pq.ParquetFile(handle).metadata
        except (pa.ArrowException, OSError, ValueError) as err:
            raise StoreError(f"{path}: not a parquet file ({type(err).__name__})") from None
        return metadata.num_rows, list(metadata.schema.names)


def read_parquet(
    path: Path,
    limit: int,
    max_rows: int,
    numeric: tuple[str, ...] = (),
    columns: list[str] | None = None,
    root: Path | None = None,
):
    """A parquet file as a pandas DataFrame, read only when its footer promises at most
    ``max_rows`` rows and at most ``limit`` uncompressed bytes (a 10 MB file can hold 200
    million compressed rows). ``numeric``: columns that must be numbers where present (a
    string column in a metrics file is refused, not met later as a TypeError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = read_bytes(path, limit, root)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(raw))
        metadata = parquet.metadata
        if metadata.num_rows > max_rows:
            raise StoreError(f"{path}: {metadata.num_rows} rows, more than {max_rows}")
        expanded = sum(
            metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)
        )
        if expanded > limit:
            raise StoreError(f"{path}: expands to {expanded} bytes, more than {limit}")
        schema = parquet.schema_arrow
        for name in numeric:
            if name in schema.names:
                kind = schema.field(name).type
                if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                    raise StoreError(f"{path}: column {name} holds {kind}, not numbers")
        wanted = None if columns is None else [c for c in columns if c in schema.names]
        table = parquet.read(columns=wanted)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise StoreError(f"{path}: not a readable parquet file ({type(err).__name__})") from None
    if table.num_rows > max_rows:
        raise StoreError(f"{path}: more than {max_rows} rows")
    return table.to_pandas()


def read_npz(path: Path, limit: int, expanded_limit: int) -> tuple[dict, bytes]:
    """The arrays of an .npz file (numpy.savez), never unpickled, and the file's bytes (its
    content hash is the caller's). Every member must be an .npy array; the members may expand
    to ``expanded_limit`` bytes in all."""
    import numpy as np

    raw = read_bytes(path, limit)
    buffer = io.BytesIO(raw)
    if not zipfile.is_zipfile(buffer):
        raise StoreError(f"{path}: not an .npz file (numpy.savez writes one)")
    try:
        with zipfile.ZipFile(buffer) as archive:
            members = archive.infolist()
        for member in members:
            if not member.filename.endswith(".npy"):
                raise StoreError(
                    f"{path}: member {member.filename[:40]!r} is not an array (.npy); an npz "
                    "file holds arrays only"
                )
        if sum(member.file_size for member in members) > expanded_limit:
            raise StoreError(f"{path}: its arrays expand to more than {expanded_limit} bytes")
        arrays, name = {}, None
        with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
            for name in archive.files:
                arrays[name] = archive[name]
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as err:
        raise StoreError(f"{path}: not an .npz file ({type(err).__name__})") from None
    except ValueError:  # an object array: loading it would unpickle
        raise StoreError(
            f"{path}: array {str(name)[:40]!r} holds Python objects; normbench loads numbers "
            "only (never with allow_pickle)"
        ) from None
    return arrays, raw
