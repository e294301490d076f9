"""The three data sets, generated or loaded offline, split deterministically, cached on disk.

Splits depend only on the data config, never on the run's seed, so every run of a study sees
the same train / val / test samples. Arrays are numpy here; train.py moves them to the device.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPLIT_SEED = 20_201_116  # fixed: splits must not move with the run's seed
MNIST1D_LENGTH = 40
DIGITS_SIDE = 8
PAD = 0  # token id of padding in data=tokens


@dataclass
class Split:
    x: np.ndarray  # float32 (N, C, *S) for signals and images; int64 (N, T) for tokens
    y: np.ndarray  # int64 (N,)
    mask: np.ndarray | None = None  # bool (N, T), True = real token; None: no padding

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Dataset:
    name: str
    num_classes: int
    train: Split
    val: Split
    test: Split
    vocab_size: int = 0  # tokens only: ids 1..vocab_size, 0 is padding


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
    }[data["name"]]()


def split_sizes(data: dict) -> dict[str, int]:
    """Sizes of train / val / test without generating anything (for validation)."""
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
