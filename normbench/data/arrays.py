"""A user's own classification data: an .npz file (``data=arrays data.path=FILE``) or a data
plugin (a callable returning the same arrays), checked before any run and hashed into its id.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_npz
from normbench.core.registry import resolve, signature_keys
from normbench.data.base import PAD, SPLIT_SEED, Dataset, Split

ARRAY_NAMES = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")
FILE_LIMIT = 4 << 30  # an .npz file, and what its arrays may expand to
EXPANDED_LIMIT = 16 << 30
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
    """An .npz file's arrays (cached by path, size and modification time), read through the
    trusted reader: a regular file, bounded, its members arrays only, never unpickled."""
    if not path.endswith(".npz"):
        raise UsageError(f"{where}: not an .npz file (numpy.savez writes one)")
    try:
        arrays, raw = read_npz(Path(path), FILE_LIMIT, EXPANDED_LIMIT)
    except StoreError as err:
        raise UsageError(f"{where}: {str(err).removeprefix(path + ': ')}") from None
    except OSError as err:
        raise UsageError(f"{where}: cannot read it ({err.strerror})") from None
    return check_arrays(arrays, hashlib.sha256(raw).hexdigest()[:16], where)


@functools.cache
def _plugin_arrays(data_json: str, where: str) -> UserArrays:
    """What a data plugin returns for its keys (cached per process), checked and hashed."""
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


def user_split_sizes(data: dict, arrays: UserArrays) -> dict[str, int]:
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


def load_user(data: dict) -> Dataset:
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
