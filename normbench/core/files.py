"""The trusted reader: every file normbench reads from a runs directory, a sweep preset, a
config directory or a data path is opened here, and nowhere else (a test greps for it).

Such files are untrusted input (docs/security.md): a runs directory is shared on a cluster or
unpacked from a colleague's tarball, a preset is downloaded. So a file is read only when

- no symlink is followed: not the file itself, nor any directory between ``root`` (when the
  caller names one: the runs directory) and the file;
- it is a regular file: never a FIFO or a device, which could block forever or never end;
- its size is bounded, and so is what it expands to: the decompressed bytes and row count of
  a parquet file, the members of an npz archive;
- YAML has no aliases (a few hundred bytes of nested aliases expand to gigabytes; an anchor
  that no alias uses is read), no merge keys and no explicit tags;
- JSON and YAML nest at most MAX_DEPTH levels.

Whatever fails is a ``StoreError``: one line naming the path and what is wrong. Checking the
values against a schema (finite numbers, known types, run ids) is the caller's: it knows the
schema.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import re
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


def _walk(path: Path, root: Path) -> tuple[int, str]:
    """A descriptor of the directory holding ``path`` and the file's name in it, never through
    a symlink: every directory between ``root`` and the file is opened relative to its
    parent's descriptor with O_NOFOLLOW, so a directory swapped for a link between a check and
    the open is still refused."""
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
    except BaseException:
        os.close(directory)
        raise
    return directory, parts[-1]


def _open_fd(path: Path | str, root: Path | None, dir_fd: int | None) -> int:
    """A descriptor for ``path`` (a name inside ``dir_fd`` when given), never through a
    symlink: the last component is opened with O_NOFOLLOW, and with ``root`` every directory
    between root and the file too."""
    if dir_fd is not None:
        return os.open(path, _open_flags(), dir_fd=dir_fd)
    if root is None:
        return os.open(path, _open_flags())
    directory, name = _walk(Path(path), root)
    try:
        return os.open(name, _open_flags(), dir_fd=directory)
    finally:
        os.close(directory)


def _refusal(path: object, err: OSError) -> StoreError:
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        return StoreError(f"{path}: a symlink (normbench never reads through one)")
    return StoreError(f"{path}: cannot open it ({err.strerror})")


@contextlib.contextmanager
def open_directory(path: Path, root: Path | None = None) -> Iterator[int]:
    """A descriptor of the directory ``path`` (a run directory), never through a symlink (with
    ``root``, no directory between root and ``path`` is one either): its files are then read by
    name with ``dir_fd``, one open each. FileNotFoundError when it is missing; StoreError for a
    symlink or anything that is not a directory."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if root is None:
            fd = os.open(path, flags)
        else:
            parent, name = _walk(Path(path), root)
            try:
                fd = os.open(name, flags, dir_fd=parent)
            finally:
                os.close(parent)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refusal(path, err) from None
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_regular(
    path: Path | str, limit: int, root: Path | None = None, dir_fd: int | None = None
) -> Iterator[BinaryIO]:
    """A regular file of at most ``limit`` bytes, opened for reading (``path`` names it inside
    the directory ``dir_fd`` when that is given). FileNotFoundError when it is missing;
    StoreError for a symlink, a FIFO or device, a file over the limit."""
    try:
        fd = _open_fd(path, root, dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refusal(path, err) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise StoreError(f"{path} is larger than {limit} bytes")
        yield handle


def read_bytes(
    path: Path | str, limit: int, root: Path | None = None, dir_fd: int | None = None
) -> bytes:
    """A regular file's bytes (see ``open_regular``), never more than ``limit``."""
    with open_regular(path, limit, root, dir_fd) as handle:
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


def depth(value: Any, level: int = 0) -> int:
    """Nesting depth of dicts and lists: 0 for a scalar, 1 for a flat list. Stops descending
    past MAX_DEPTH (so a recursion never goes deeper than that)."""
    if isinstance(value, dict):
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return level
    if level > MAX_DEPTH:
        return level
    deepest = level
    for child in children:
        if isinstance(child, (dict, list)):
            deepest = max(deepest, depth(child, level + 1))
        elif deepest == level:
            deepest = level + 1
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
    """Safe YAML without aliases, merge keys or explicit tags, MAX_DEPTH levels deep, as
    PyYAML's safe loader reads it otherwise: PyYAML's C loader composes the document (libyaml
    caps nesting at 1,000 levels, and an alias is the same node met again, never a copy), and
    the nodes are checked before any value is built (``_check``), so an alias bomb costs its
    own few hundred bytes. (An anchor that no alias uses expands to nothing; it is read.)

    Reading the configs of 100,000 runs is the first report's main cost, and they differ in a
    few lines: a document that is a plain top-level mapping (every line at column 0 a
    ``key:``) is read entry by entry, each entry's text parsed once per process."""
    import yaml

    try:
        if isinstance(text, bytes):
            text = text.decode()
        value = _by_entries(text)
        return _yaml_value(text) if value is None else value
    except (yaml.YAMLError, RecursionError, UnicodeDecodeError, ValueError) as err:
        raise StoreError(f"{where}: not valid YAML ({type(err).__name__})") from None
    except _Refused as refused:
        raise StoreError(f"{where}: {refused}") from None


def _by_entries(text: str) -> dict | None:
    """A top-level mapping read entry by entry; None when ``text`` is not one, or when an
    entry does not read as a mapping of its own (the whole text then decides)."""
    import yaml

    entries = _top_level_entries(text)
    if entries is None:
        return None
    merged: dict = {}
    for entry in entries:
        try:
            value = _entry_value(entry)
        except (yaml.YAMLError, ValueError, _Refused):
            return None
        if type(value) is not dict:
            return None
        merged.update(_copied(value))
    return merged


class _Refused(Exception):
    """What the YAML reader refuses (an alias, a tag, a merge key, nesting past MAX_DEPTH)."""


_COLUMN_0 = re.compile(r"^[^ \n]", re.MULTILINE)  # a line that starts at column 0
_KEY_LINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:(?: |\r?\n|\r?$)")


def _top_level_entries(text: str) -> list[str] | None:
    """A top-level block mapping's entries, each as a document of its own (``seed: 0\n``,
    ``train:`` with its indented lines); None unless every line at column 0 is a plain
    ``key:`` (a comment, a directive, a flow collection, a scalar continued at column 0 or
    an anchor makes the document be read whole)."""
    if "&" in text:  # an anchor is the whole document's (PyYAML refuses one given twice)
        return None
    starts = [match.start() for match in _COLUMN_0.finditer(text)]
    if not starts or text[: starts[0]].strip():
        return None
    if not all(_KEY_LINE.match(text, start) for start in starts):
        return None
    ends = [*starts[1:], len(text)]
    return [text[start:end] for start, end in zip(starts, ends, strict=True)]


def _entry_value(entry: str) -> Any:
    return _entry_cached(entry) if len(entry) <= 4096 else _yaml_value(entry)


@functools.lru_cache(maxsize=2048)
def _entry_cached(entry: str) -> Any:
    """An entry's value, shared between calls: callers get a copy (``_copied``)."""
    return _yaml_value(entry)


def _copied(value: dict | list) -> dict | list:
    """A copy of a cached value's containers (its scalars are immutable, shared)."""
    items = value.items() if type(value) is dict else enumerate(value)
    copy = {} if type(value) is dict else [None] * len(value)
    for key, item in items:
        copy[key] = _copied(item) if type(item) in (dict, list) else item
    return copy


def _yaml_value(text: str) -> Any:
    """The one document of ``text`` (None for an empty stream); _Refused for what the reader
    does not accept."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.composer.ComposerError as err:
            if "single document" in str(err.context):
                raise _Refused("more than one YAML document") from None
            raise
        if node is None:
            return None
        _check(loader, node, 0, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check(loader: Any, node: Any, level: int, seen: set[int]) -> None:
    """Refuse an alias (a node met twice), a merge key, an explicit tag (one that is not the
    tag the value resolves to by itself: ``!!python/object``, ``!!binary``, ``!custom``) and
    nesting past MAX_DEPTH."""
    import yaml

    if id(node) in seen:
        raise _Refused("YAML aliases are not allowed here")
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        plain = node.style in (None, "")
        if node.tag != loader.resolve(yaml.ScalarNode, node.value, (plain, not plain)):
            raise _Refused(f"YAML tags ({str(node.tag)[:40]}) are not allowed here")
        return
    if level >= MAX_DEPTH:
        raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
    if node.tag != loader.resolve(type(node), None, (True, False)):
        raise _Refused(f"YAML tags ({str(node.tag)[:40]}) are not allowed here")
    pairs = node.value if isinstance(node, yaml.MappingNode) else ((None, v) for v in node.value)
    for key, value in pairs:
        if key is not None:
            if key.tag == "tag:yaml.org,2002:merge":
                raise _Refused("YAML merge keys (<<) are not allowed here")
            _check(loader, key, level + 1, seen)
        _check(loader, value, level + 1, seen)


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


def check_parquet_ends(
    path: Path | str, limit: int, root: Path | None = None, dir_fd: int | None = None
) -> None:
    """StoreError unless ``path`` is a regular file of at most ``limit`` bytes that starts and
    ends with parquet's magic bytes: a complete file (a truncated one has lost its footer),
    checked with two 4-byte reads, for listing thousands of runs. ``parquet_rows`` reads the
    footer (ten times slower), ``read_parquet`` the data."""
    with open_regular(path, limit, root, dir_fd) as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        if size < 12 or os.pread(fd, 4, 0) != b"PAR1" or os.pread(fd, 4, size - 4) != b"PAR1":
            raise StoreError(f"{path}: not a complete parquet file (truncated?)")


def read_parquet(
    path: Path,
    limit: int,
    max_rows: int,
    *,
    numeric: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    columns: list[str] | None = None,
    root: Path | None = None,
):
    """A parquet file as a pandas DataFrame, read only when its footer promises at most
    ``max_rows`` rows and at most ``limit`` uncompressed bytes (a 10 MB file can hold 200
    million compressed rows), and read a row group at a time, so that what it expands to is
    checked as it grows. ``required``: columns it must have (another kind of file in its place
    is refused by name); ``numeric``: columns that must hold numbers where present (a string
    column is refused here, not met later as a TypeError); ``columns``: the ones to read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = read_bytes(path, limit, root)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(raw))
        metadata = parquet.metadata
        if metadata.num_rows > max_rows:
            raise StoreError(f"{path}: {metadata.num_rows} rows, more than {max_rows}")
        groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
        if sum(group.total_byte_size for group in groups) > limit:
            raise StoreError(f"{path}: expands to more than {limit} bytes")
        schema = parquet.schema_arrow
        missing = [name for name in required if name not in schema.names]
        if missing:
            raise StoreError(f"{path}: no {', '.join(missing)} column (not the file expected)")
        for name in numeric:
            if name in schema.names:
                kind = schema.field(name).type
                if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                    raise StoreError(f"{path}: column {name} holds {kind}, not numbers")
        wanted = None if columns is None else [c for c in columns if c in schema.names]
        pieces, rows, expanded = [], 0, 0
        for i in range(metadata.num_row_groups):
            piece = parquet.read_row_group(i, columns=wanted)
            rows, expanded = rows + piece.num_rows, expanded + piece.nbytes
            if rows > max_rows:
                raise StoreError(f"{path}: more than {max_rows} rows")
            if expanded > limit:  # a footer's sizes are the writer's word, and encoded
                raise StoreError(f"{path}: expands to more than {limit} bytes")
            pieces.append(piece)
        table = pa.concat_tables(pieces) if pieces else schema.empty_table()
        if wanted is not None:
            table = table.select(wanted)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise StoreError(f"{path}: not a readable parquet file ({type(err).__name__})") from None
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
