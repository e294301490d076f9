"""The data sets, generated or read offline, split deterministically, cached.

Splits depend only on the data config, never on the run's seed, so every run of a study sees
the same train / val / test samples. Arrays are numpy here; train.py moves them to the device.
Three are classification tasks (one label per sample); ``pysource`` is next-byte prediction
on the running interpreter's standard library, for a causal language model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

SPLIT_SEED = 20_201_116  # fixed: splits must not move with the run's seed
MNIST1D_LENGTH = 40
DIGITS_SIDE = 8
PAD = 0  # token id of padding in data=tokens
NEXT_BYTE_DATA = ("pysource",)  # next-byte prediction: a causal model, metrics per byte
BYTES = 256  # the alphabet of data=pysource
FILE_SEPARATOR = 0x1C  # ASCII's File Separator, between the files of a split's stream
# Directories of the standard library that are not its own source: installed packages, the
# test suites, and pydoc's generated topic texts (0.75 MB of English in one file).
NOT_SOURCE = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "pydoc_data", "__pycache__"}
)


@dataclass
class Split:
    x: np.ndarray  # float32 (N, C, *S) for signals and images; int64 (N, T) for tokens
    y: np.ndarray  # int64 (N,)
    mask: np.ndarray | None = None  # bool (N, T), True = real token; None: no padding

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Stream:
    """A split of a byte corpus as one stream, its files joined by FILE_SEPARATOR; training
    draws windows of ``context`` bytes from it at random positions."""

    bytes: np.ndarray  # uint8 (L,)
    context: int

    def __len__(self) -> int:
        """Windows in one pass over the stream: an epoch sees every byte about once."""
        return len(self.bytes) // self.context


@dataclass
class Dataset:
    name: str
    num_classes: int  # classes, or the alphabet of a next-byte task
    train: Split | Stream
    val: Split
    test: Split
    vocab_size: int = 0  # tokens: ids 1..vocab_size, 0 is padding; pysource: bytes 0..255

    @property
    def next_byte(self) -> bool:
        """Next-byte prediction: y holds the byte after each of x's, metrics are per byte."""
        return self.name in NEXT_BYTE_DATA


def cache_dir() -> Path:
    """$NORMBENCH_CACHE, else $XDG_CACHE_HOME/normbench, else ~/.cache/normbench."""
    if "NORMBENCH_CACHE" in os.environ:
        return Path(os.environ["NORMBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "normbench"


def input_shape(data: dict) -> tuple[int, ...]:
    """Per-sample input shape: (C, L) signals, (C, H, W) images, (T,) tokens (max length)."""
    return {
        "mnist1d": lambda: (1, MNIST1D_LENGTH),
        "digits": lambda: (1, DIGITS_SIDE, DIGITS_SIDE),
        "tokens": lambda: (data.get("max_len", 0),),
        "pysource": lambda: (data.get("context", 0),),
    }[data["name"]]()


def split_sizes(data: dict) -> dict[str, int]:
    """Sizes of train / val / test without generating anything (for validation); for pysource,
    training windows in one pass and the fixed evaluation windows."""
    if data["name"] == "pysource":
        train = len(pysource_streams(data["val_fraction"], data["test_fraction"])["train"])
        return {
            "train": train // data["context"],
            "val": data["eval_windows"],
            "test": data["eval_windows"],
        }
    if data["name"] == "mnist1d":
        total = data["num_samples"] // 10 * 10  # mnist1d makes num_samples // 10 per class
        test = total - int(total * 0.8)  # its own 80/20 split
    else:
        total = 1797 if data["name"] == "digits" else data["num_samples"]
        test = int(round(total * data["test_fraction"]))
    val = int(round((total - test) * data["val_fraction"]))
    return {"train": total - test - val, "val": val, "test": test}


def load(data: dict) -> Dataset:
    """The data set a config names, from the cache when it was made before."""
    if data["name"] == "pysource":
        return _load_pysource(data)
    arrays = _cached(
        data,
        {"mnist1d": _make_mnist1d, "digits": _load_digits, "tokens": _make_tokens}[data["name"]],
    )
    sizes = split_sizes(data)
    n_test, n_val = sizes["test"], sizes["val"]
    # The test split is the last n_test samples (mnist1d's own test split); val is drawn
    # from the rest by a fixed permutation.
    rest = np.random.default_rng(SPLIT_SEED).permutation(len(arrays["y"]) - n_test)
    indices = {
        "train": rest[n_val:],
        "val": rest[:n_val],
        "test": np.arange(len(arrays["y"]) - n_test, len(arrays["y"])),
    }

    def take(idx: np.ndarray) -> Split:
        mask = arrays["mask"][idx] if "mask" in arrays else None
        return Split(arrays["x"][idx], arrays["y"][idx], mask)

    splits = {name: take(idx) for name, idx in indices.items()}
    if data["name"] != "tokens":  # standardise with training statistics only
        mean, std = splits["train"].x.mean(), splits["train"].x.std()
        for split in splits.values():
            split.x = ((split.x - mean) / std).astype(np.float32)
    num_classes = data["num_classes"] if data["name"] == "tokens" else 10
    return Dataset(data["name"], num_classes, vocab_size=data.get("vocab_size", 0), **splits)


def _cached(data: dict, make) -> dict[str, np.ndarray]:
    """Arrays from make(data), stored under the cache dir by a hash of the data config."""
    params = {k: v for k, v in sorted(data.items()) if not k.endswith("_fraction")}
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / f"{data['name']}-{digest}.npz"
    if path.exists():
        with np.load(path) as stored:
            return dict(stored)
    arrays = make(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
        np.savez(tmp, **arrays)
    os.replace(tmp.name, path)  # atomic: a concurrent reader never sees half a file
    return arrays


def _make_mnist1d(data: dict) -> dict[str, np.ndarray]:
    """MNIST-1D through the package's own generator (never its download path)."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = data["num_samples"]
    made = make_dataset(args)
    x = np.concatenate([made["x"], made["x_test"]]).astype(np.float32)[:, None, :]
    y = np.concatenate([made["y"], made["y_test"]]).astype(np.int64)
    return {"x": x, "y": y}


def _load_digits(data: dict) -> dict[str, np.ndarray]:
    """scikit-learn's digits, shuffled once with the split seed (the file is ordered)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(digits.target))
    x = digits.images[order].astype(np.float32)[:, None, :, :]
    return {"x": x, "y": digits.target[order].astype(np.int64)}


def _make_tokens(data: dict) -> dict[str, np.ndarray]:
    """Variable-length sequences: a query token, then tokens of which exactly `label` equal it.

    Classes are balanced and the label is exact, so accuracy measures the model, not the data.
    A model must compare each position with the first one (attention) and count over the real
    tokens only: statistics polluted by padding shift with the sequence length.
    """
    rng = np.random.default_rng(SPLIT_SEED + 1)
    n, vocab, classes = data["num_samples"], data["vocab_size"], data["num_classes"]
    lengths = rng.integers(data["min_len"], data["max_len"] + 1, size=n)
    labels = rng.integers(0, classes, size=n)
    x = np.full((n, data["max_len"]), PAD, dtype=np.int64)
    for i, (length, label) in enumerate(zip(lengths, labels, strict=True)):
        query = rng.integers(1, vocab + 1)
        others = rng.integers(1, vocab, size=length - 1)
        others += others >= query  # any token but the query
        others[rng.choice(length - 1, size=label, replace=False)] = query
        x[i, 0], x[i, 1:length] = query, others
    return {"x": x, "y": labels.astype(np.int64), "mask": x != PAD}


# --------------------------------------------------------------------------------- pysource
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


def _load_pysource(data: dict) -> Dataset:
    identity = corpus().identity
    if data.get("corpus") not in (None, identity):
        raise ValueError(
            f"data.corpus={data['corpus']} is not this interpreter's standard library ({identity})"
        )
    streams = pysource_streams(data["val_fraction"], data["test_fraction"])
    context, count = data["context"], data["eval_windows"]
    return Dataset(
        "pysource",
        BYTES,
        Stream(streams["train"], context),
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
