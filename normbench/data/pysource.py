"""data=pysource: next-byte prediction on the running interpreter's standard library, for a
causal language model. Files go to train / val / test by a hash of their path, never by seed.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

from normbench.data.base import BYTES, FILE_SEPARATOR, Dataset, Split, Stream

# Directories of the standard library that are not its own source: installed packages, the
# test suites, and pydoc's generated topic texts (0.75 MB of English in one file).
NOT_SOURCE = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "pydoc_data", "__pycache__"}
)


@dataclass(frozen=True)
class Corpus:
    """The .py files of the running interpreter's standard library, read as bytes."""

    files: tuple[str, ...]  # paths relative to the library's root, POSIX separators, sorted
    contents: tuple[bytes, ...]

    @functools.cached_property
    def identity(self) -> str:
        """``python3.11.7-1a2b3c4d5e6f``: the Python version and a hash of every file's path and
        contents. Part of a pysource run's config, so another Python never reuses its runs."""
        digest = hashlib.sha256()
        for path, content in zip(self.files, self.contents, strict=True):
            digest.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
        return f"python{platform.python_version()}-{digest.hexdigest()[:12]}"


@functools.cache
def corpus() -> Corpus:
    """Read once per process (about 12 MB in 0.1 s once the files are in the page cache)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if d not in NOT_SOURCE]
        here = PurePath(directory).relative_to(root)
        files += [(here / name).as_posix() for name in names if name.endswith(".py")]
    files.sort()
    return Corpus(tuple(files), tuple((root / path).read_bytes() for path in files))


def file_split(path: str, val_fraction: float, test_fraction: float) -> str:
    """train, val or test, from a hash of the file's relative path alone: adding a file (a
    newer Python) moves no other file, and no seed or other setting moves any."""
    position = int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "big") / 2**64
    if position < test_fraction:
        return "test"
    return "val" if position < test_fraction + val_fraction else "train"


@functools.cache
def pysource_streams(val_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Each split's files, in path order, joined into one uint8 stream by FILE_SEPARATOR."""
    parts: dict[str, list[bytes]] = {"train": [], "val": [], "test": []}
    source = corpus()
    for path, content in zip(source.files, source.contents, strict=True):
        parts[file_split(path, val_fraction, test_fraction)].append(content)
    return {
        name: np.frombuffer(bytearray(bytes([FILE_SEPARATOR]).join(contents)), dtype=np.uint8)
        for name, contents in parts.items()
    }


def fixed_windows(stream: np.ndarray, context: int, count: int) -> Split:
    """``count`` windows evenly spaced over the stream: x a window, y the same shifted by one
    byte. The same windows for every run and seed."""
    starts = np.linspace(0, len(stream) - context - 1, count).astype(np.int64)
    rows = starts[:, None] + np.arange(context)
    return Split(stream[rows].astype(np.int64), stream[rows + 1].astype(np.int64))


@functools.cache
def train_subset(val_fraction: float, test_fraction: float, size: int) -> np.ndarray:
    """The first ``size`` bytes of the train files in a fixed pseudo-random order (a hash of
    each path, salted apart from ``file_split``'s), joined by FILE_SEPARATOR: a subset of the
    train split that is a function of ``size`` alone, with a smaller one always a prefix of a
    larger one (nested), and spread over the library rather than its first directories."""
    source = corpus()
    train = [
        (hashlib.sha256(b"normbench-subset\0" + path.encode()).digest(), content)
        for path, content in zip(source.files, source.contents, strict=True)
        if file_split(path, val_fraction, test_fraction) == "train"
    ]
    joined = bytes([FILE_SEPARATOR]).join(content for _, content in sorted(train))
    return np.frombuffer(bytearray(joined[:size]), dtype=np.uint8)


def load_pysource(data: dict) -> Dataset:
    identity = corpus().identity
    if data.get("corpus") not in (None, identity):
        raise ValueError(
            f"data.corpus={data['corpus']} is not this interpreter's standard library ({identity})"
        )
    streams = pysource_streams(data["val_fraction"], data["test_fraction"])
    context, count = data["context"], data["eval_windows"]
    train = streams["train"]
    if data.get("train_samples") is not None:  # the unique data a data ladder varies
        # windows of `context` bytes, each with the byte after it: the last window's target
        size = data["train_samples"] * context + 1
        train = train_subset(data["val_fraction"], data["test_fraction"], size)
    return Dataset(
        "pysource",
        BYTES,
        Stream(train, context),
        fixed_windows(streams["val"], context, count),
        fixed_windows(streams["test"], context, count),
        vocab_size=BYTES,
    )


def unigram_bits(train: np.ndarray, evaluated: np.ndarray) -> float:
    """Bits per byte of ``evaluated`` under the byte frequencies of ``train`` (add-one
    smoothed): what a model that ignores context scores, the chance level of next-byte
    prediction."""
    counts = np.bincount(train, minlength=BYTES) + 1.0
    log_p = np.log2(counts / counts.sum())
    return float(-log_p[evaluated].mean()) if len(evaluated) else math.nan
