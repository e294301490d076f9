"""The data sets, generated or read offline, split deterministically, cached.

Splits depend only on the data config, never on the run's seed, so every run of a study sees
the same train / val / test samples. Arrays are numpy here; train.py moves them to the device.
Three are classification tasks (one label per sample); ``pysource`` is next-byte prediction
on the running interpreter's standard library, for a causal language model. A user's own
classification data come as arrays: from an .npz file (``data=arrays data.path=FILE``) or
from a data plugin (a callable returning the same arrays); they are checked before any run.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import platform
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

from normbench.config import UsageError

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


@dataclass(frozen=True)
class Description:
    """What a model needs to know of a data set before it is loaded."""

    input_shape: tuple[int, ...]  # per sample: (C, L), (C, H, W) or (T,)
    num_classes: int  # classes, or the alphabet of a next-byte task
    vocab_size: int  # token ids 1..vocab_size (0 is padding); bytes: 256; else 0
    kind: str  # signals | images | tokens | bytes
    sha256: str | None = None  # a user's arrays: their content hash
    given: tuple[str, ...] = ()  # a user's arrays: the splits (val, test) they hold themselves


def user_data(data: dict) -> bool:
    """Arrays the user brings: data=arrays, or a data plugin."""
    return data["name"] == "arrays" or "_target_" in data


def describe(data: dict) -> Description:
    """Input shape, classes and vocabulary without loading the data; for a user's arrays,
    after reading (or making) and checking them (a UsageError when they are not usable)."""
    if user_data(data):
        arrays = user_arrays(data)
        _user_split_sizes(data, arrays)  # refuses an empty split
        return Description(
            arrays.input_shape,
            arrays.num_classes,
            arrays.vocab_size,
            arrays.kind,
            arrays.sha256,
            tuple(split for split in ("val", "test") if f"x_{split}" in arrays.arrays),
        )
    shape = input_shape(data)
    return {
        "mnist1d": lambda: Description(shape, 10, 0, "signals"),
        "digits": lambda: Description(shape, 10, 0, "images"),
        "tokens": lambda: Description(shape, data["num_classes"], data["vocab_size"], "tokens"),
        "pysource": lambda: Description(shape, BYTES, BYTES, "bytes"),
    }[data["name"]]()


def input_shape(data: dict) -> tuple[int, ...]:
    """Per-sample input shape: (C, L) signals, (C, H, W) images, (T,) tokens (max length)."""
    if user_data(data):
        return user_arrays(data).input_shape
    return {
        "mnist1d": lambda: (1, MNIST1D_LENGTH),
        "digits": lambda: (1, DIGITS_SIDE, DIGITS_SIDE),
        "tokens": lambda: (data.get("max_len", 0),),
        "pysource": lambda: (data.get("context", 0),),
    }[data["name"]]()


def split_sizes(data: dict) -> dict[str, int]:
    """Sizes of train / val / test without generating anything (for validation); for pysource,
    training windows in one pass and the fixed evaluation windows."""
    if user_data(data):
        return _user_split_sizes(data, user_arrays(data))
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
    if user_data(data):
        return _load_user(data)
    arrays = _cached(data, GENERATED[data["name"]])
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


def will_generate(data: dict) -> bool:
    """Whether load(data) makes the data set rather than reading the cache: seconds of work
    on a first run, which the caller shows on screen."""
    return data["name"] in GENERATED and not _cache_path(data).exists()


def _cache_path(data: dict) -> Path:
    """Where a generated data set is cached: by a hash of its config (splits excluded)."""
    params = {k: v for k, v in sorted(data.items()) if not k.endswith("_fraction")}
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"{data['name']}-{digest}.npz"


def _cached(data: dict, make) -> dict[str, np.ndarray]:
    """Arrays from make(data), stored under the cache dir by a hash of the data config."""
    path = _cache_path(data)
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


# The data sets made by code and cached: the makers by data name.
GENERATED = {"mnist1d": _make_mnist1d, "digits": _load_digits, "tokens": _make_tokens}


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


# ------------------------------------------------------------------------- a user's arrays
ARRAY_NAMES = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")
MAX_CLASSES = 1 << 16  # a label beyond this is a mistake, not a class (a logits row per class)


@dataclass(frozen=True)
class UserArrays:
    """A user's arrays, checked: x as float32 (signals, images) or int64 token ids, y int64."""

    arrays: dict[str, np.ndarray]
    sha256: str
    kind: str  # signals | images | tokens
    input_shape: tuple[int, ...]
    num_classes: int
    vocab_size: int


def user_arrays(data: dict) -> UserArrays:
    """The arrays of data=arrays (its .npz file) or of a data plugin (what it returns), read
    once per process and checked. With ``data.sha256`` set (a resolved config), they must
    still hash to it: a file that changed after the run was configured is refused."""
    if "_target_" in data:
        where = f"data={data['name']}"
        keys = {key: value for key, value in data.items() if key != "sha256"}
        found = _plugin_arrays(json.dumps(keys, sort_keys=True), where)
    else:
        where = f"data.path={data['path']}"
        path = Path(data["path"])
        try:
            info = path.stat()
        except OSError as err:
            raise UsageError(f"{where}: cannot read it ({err.strerror})") from None
        found = _file_arrays(str(path), info.st_size, info.st_mtime_ns, where)
    if data.get("sha256") not in (None, found.sha256):
        raise UsageError(
            f"{where}: the arrays changed since this run was configured (sha256 "
            f"{found.sha256}, the run's config says {data['sha256']})"
        )
    return found


@functools.cache
def _file_arrays(path: str, size: int, modified_ns: int, where: str) -> UserArrays:
    """An .npz file's arrays (cached by path, size and modification time), never unpickled."""
    if not path.endswith(".npz"):
        raise UsageError(f"{where}: not an .npz file (numpy.savez writes one)")
    raw = Path(path).read_bytes()
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        raise UsageError(f"{where}: not an .npz file (numpy.savez writes one)")
    arrays = {}
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
            for name in archive.files:
                arrays[name] = archive[name]
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise UsageError(f"{where}: not an .npz file ({type(err).__name__})") from None
    except ValueError:  # an object array: loading it would unpickle
        raise UsageError(
            f"{where}: array {name!r} holds Python objects; normbench loads numbers only "
            "(never with allow_pickle)"
        ) from None
    return check_arrays(arrays, hashlib.sha256(raw).hexdigest()[:16], where)


@functools.cache
def _plugin_arrays(data_json: str, where: str) -> UserArrays:
    """What a data plugin returns for its keys (cached per process), checked and hashed."""
    from normbench.registry import resolve, signature_keys

    data = json.loads(data_json)
    make = resolve(data["_target_"], where)
    keys = signature_keys(make, (), where)
    made = make(**{key: data[key] for key in keys if key in data})
    if not isinstance(made, dict):
        raise UsageError(
            f"{where}: returned {type(made).__name__}, not a dict of arrays "
            f"({', '.join(ARRAY_NAMES)})"
        )
    arrays = {name: np.asarray(value) for name, value in made.items()}
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return check_arrays(arrays, digest.hexdigest()[:16], where)


def check_arrays(arrays: dict[str, np.ndarray], sha256: str, where: str) -> UserArrays:
    """The arrays as normbench trains on them, or a UsageError naming what is wrong: names,
    ranks, dtypes, lengths, label range, NaN/inf, shapes that disagree between splits."""

    def refuse(message: str) -> UsageError:
        return UsageError(f"{where}: {message}")

    unknown = sorted(set(arrays) - set(ARRAY_NAMES))
    if unknown:
        raise refuse(f"unexpected array {unknown[0]!r}; valid: {', '.join(ARRAY_NAMES)}")
    splits = [s for s in ("train", "val", "test") if f"x_{s}" in arrays or f"y_{s}" in arrays]
    if "train" not in splits:
        raise refuse("no x_train and y_train (arrays: " + (", ".join(arrays) or "none") + ")")
    checked: dict[str, np.ndarray] = {}
    for split in splits:
        if f"x_{split}" not in arrays or f"y_{split}" not in arrays:
            raise refuse(f"x_{split} and y_{split} come together; one of them is missing")
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        checked[f"x_{split}"] = _check_x(x, f"x_{split}", refuse)
        checked[f"y_{split}"] = _check_y(y, f"y_{split}", refuse)
        if len(x) != len(y):
            raise refuse(f"x_{split} has {len(x)} samples but y_{split} has {len(y)}")
    first = checked["x_train"]
    for split in splits[1:]:
        x = checked[f"x_{split}"]
        if x.shape[1:] != first.shape[1:] or x.dtype != first.dtype:
            raise refuse(
                f"x_{split} has samples of shape {x.shape[1:]} ({x.dtype}) but x_train "
                f"{first.shape[1:]} ({first.dtype}); every split must agree"
            )
    ys = [checked[f"y_{split}"] for split in splits]
    num_classes = int(max(y.max() for y in ys)) + 1
    if num_classes < 2:
        raise refuse("every label is 0; classification needs at least 2 classes")
    kind = {2: "tokens", 3: "signals", 4: "images"}[first.ndim]
    vocab_size = 0
    if kind == "tokens":
        vocab_size = int(max(checked[f"x_{split}"].max() for split in splits))
        if vocab_size == 0:
            raise refuse("x_train holds only padding (token id 0)")
    return UserArrays(checked, sha256, kind, first.shape[1:], num_classes, vocab_size)


def _check_x(x: np.ndarray, name: str, refuse) -> np.ndarray:
    """Signals (N, C, L) and images (N, C, H, W) as float32; tokens (N, T) as int64 ids."""
    if x.ndim not in (2, 3, 4):
        raise refuse(
            f"{name} has shape {x.shape}; valid: signals (N, C, L), images (N, C, H, W) or "
            "token ids (N, T)"
        )
    if x.size == 0:
        raise refuse(f"{name} is empty (shape {x.shape})")
    integer = np.issubdtype(x.dtype, np.integer)
    if not (integer or np.issubdtype(x.dtype, np.floating)):
        raise refuse(f"{name} has dtype {x.dtype}; valid: floating point, or integer")
    if x.ndim == 2:
        if not integer:
            raise refuse(
                f"{name} is 2-D {x.dtype}: 2-D arrays are token ids (N, T), integers with 0 "
                "as padding; signals are (N, C, L): add a channel axis (x[:, None, :])"
            )
        if x.min() < 0:
            raise refuse(f"{name} holds negative token ids (min {x.min()}); 0 is padding")
        return x.astype(np.int64)
    if not integer and not np.isfinite(x).all():
        raise refuse(f"{name} holds {int((~np.isfinite(x)).sum())} NaN or infinite values")
    return x.astype(np.float32)


def _check_y(y: np.ndarray, name: str, refuse) -> np.ndarray:
    if y.ndim != 1:
        raise refuse(f"{name} has shape {y.shape}; valid: one class label per sample, (N,)")
    if not np.issubdtype(y.dtype, np.integer):
        raise refuse(f"{name} has dtype {y.dtype}; valid: integer class labels 0, 1, ...")
    if len(y) and (y.min() < 0 or y.max() >= MAX_CLASSES):
        raise refuse(
            f"{name} holds labels from {y.min()} to {y.max()}; valid: 0..{MAX_CLASSES - 1}"
        )
    return y.astype(np.int64)


def _user_split_indices(data: dict, arrays: UserArrays) -> dict[str, np.ndarray | None]:
    """Which training samples go to val and test when the arrays hold no such split: a fixed
    permutation (never the run's seed), test first, then val from the rest, as the fractions
    say. None: the split is the arrays' own."""
    n = len(arrays.arrays["y_train"])
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    own = {split: f"x_{split}" in arrays.arrays for split in ("val", "test")}
    n_test = 0 if own["test"] else int(round(n * data["test_fraction"]))
    n_val = 0 if own["val"] else int(round((n - n_test) * data["val_fraction"]))
    return {
        "train": order[n_test + n_val :],
        "val": None if own["val"] else order[n_test : n_test + n_val],
        "test": None if own["test"] else order[:n_test],
    }


def _user_split_sizes(data: dict, arrays: UserArrays) -> dict[str, int]:
    sizes = {}
    for split, indices in _user_split_indices(data, arrays).items():
        sizes[split] = len(arrays.arrays[f"y_{split}"]) if indices is None else len(indices)
        if sizes[split] == 0:
            where = f"data={data['name']}" if "_target_" in data else f"data.path={data['path']}"
            if split == "train":
                problem = "no training samples are left; lower data.val_fraction, test_fraction"
            else:
                problem = (
                    f"the {split} split is empty; give x_{split}, y_{split} or raise "
                    f"data.{split}_fraction"
                )
            raise UsageError(f"{where}: {problem}")
    return sizes


def _load_user(data: dict) -> Dataset:
    """A user's arrays as a Dataset: split, float inputs standardised with the training
    split's mean and std (as the shipped data sets are), token masks from the padding."""
    arrays = user_arrays(data)
    splits = {}
    for split, indices in _user_split_indices(data, arrays).items():
        source = "train" if indices is not None else split
        x, y = arrays.arrays[f"x_{source}"], arrays.arrays[f"y_{source}"]
        if indices is not None:
            x, y = x[indices], y[indices]
        splits[split] = Split(x, y, x != PAD if arrays.kind == "tokens" else None)
    if arrays.kind != "tokens":
        mean, std = splits["train"].x.mean(), splits["train"].x.std()
        for split in splits.values():
            split.x = ((split.x - mean) / (std if std > 0 else 1.0)).astype(np.float32)
    return Dataset(data["name"], arrays.num_classes, vocab_size=arrays.vocab_size, **splits)
