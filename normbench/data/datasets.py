"""The data sets by name: what a config's ``data`` section describes, its shape and split
sizes before loading, and the data set itself.

Splits depend only on the data config, never on the run's seed, so every run of a study sees
the same train / val / test samples. Arrays are numpy here; normbench.training moves them to
the device. Three are classification tasks made by code (normbench.data.generated); pysource
is next-byte prediction (normbench.data.pysource); a user's own arrays come from an .npz file
or a data plugin (normbench.data.arrays). The fetched sets (cifar10, tinystories, a user's from
the hub) are read from the cache after its checks (normbench.data.hubload).
"""

from __future__ import annotations

import numpy as np

from normbench.data.arrays import load_user, user_arrays, user_split_sizes
from normbench.data.base import (
    BYTES,
    DIGITS_SIDE,
    MNIST1D_LENGTH,
    SPLIT_SEED,
    Dataset,
    Description,
    Split,
)
from normbench.data.generated import GENERATED, cached
from normbench.data.hubcache import HUB_DATA
from normbench.data.hubload import hub_description, hub_split_sizes, load_hub
from normbench.data.pysource import load_pysource, pysource_streams


def user_data(data: dict) -> bool:
    """Arrays the user brings: data=arrays, or a data plugin."""
    return data["name"] == "arrays" or "_target_" in data


def describe(data: dict) -> Description:
    """Input shape, classes and vocabulary without loading the data; for a user's arrays,
    after reading (or making) and checking them (a UsageError when they are not usable)."""
    if user_data(data):
        arrays = user_arrays(data)
        user_split_sizes(data, arrays)  # refuses an empty split
        return Description(
            arrays.input_shape,
            arrays.num_classes,
            arrays.vocab_size,
            arrays.kind,
            arrays.sha256,
            tuple(split for split in ("val", "test") if f"x_{split}" in arrays.arrays),
        )
    if data["name"] in HUB_DATA:
        return hub_description(data)
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
    if data["name"] in HUB_DATA:
        return hub_description(data).input_shape
    return {
        "mnist1d": lambda: (1, MNIST1D_LENGTH),
        "digits": lambda: (1, DIGITS_SIDE, DIGITS_SIDE),
        "tokens": lambda: (data.get("max_len", 0),),
        "pysource": lambda: (data.get("context", 0),),
    }[data["name"]]()


def split_sizes(data: dict) -> dict[str, int]:
    """Sizes of train / val / test without generating anything (for validation); for pysource,
    training windows in one pass and the fixed evaluation windows. ``data.train_samples`` (when
    set) is the train size: a subset of the split (``full_train_size`` is the whole split's)."""
    sizes = _full_split_sizes(data)
    if data.get("train_samples") is not None:
        sizes["train"] = data["train_samples"]
    return sizes


def full_train_size(data: dict) -> int:
    """The whole train split's size in samples (pysource: windows of ``context`` bytes), what
    ``data.train_samples`` takes a subset of."""
    return _full_split_sizes(data)["train"]


def _full_split_sizes(data: dict) -> dict[str, int]:
    if user_data(data):
        return user_split_sizes(data, user_arrays(data))
    if data["name"] in HUB_DATA:
        return hub_split_sizes(data)
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
        return load_pysource(data)
    if user_data(data):
        return load_user(data)
    if data["name"] in HUB_DATA:
        return load_hub(data)
    arrays = cached(data, GENERATED[data["name"]])
    sizes = split_sizes(data)
    n_test, n_val = sizes["test"], sizes["val"]
    # The test split is the last n_test samples (mnist1d's own test split); val is drawn
    # from the rest by a fixed permutation.
    # data.train_samples: the first samples of the train split in that permutation's order, so
    # a subset is a function of its size alone and a smaller one is inside a larger one.
    rest = np.random.default_rng(SPLIT_SEED).permutation(len(arrays["y"]) - n_test)
    train = rest[n_val:]
    indices = {
        "train": train[: sizes["train"]],
        "val": rest[:n_val],
        "test": np.arange(len(arrays["y"]) - n_test, len(arrays["y"])),
    }

    def take(idx: np.ndarray) -> Split:
        mask = arrays["mask"][idx] if "mask" in arrays else None
        return Split(arrays["x"][idx], arrays["y"][idx], mask)

    splits = {name: take(idx) for name, idx in indices.items()}
    if data["name"] != "tokens":  # standardise with training statistics only
        # the whole train split's, so that val and test are the same arrays at every subset
        whole = arrays["x"][train]
        mean, std = whole.mean(), whole.std()
        for split in splits.values():
            split.x = ((split.x - mean) / std).astype(np.float32)
    num_classes = data["num_classes"] if data["name"] == "tokens" else 10
    return Dataset(data["name"], num_classes, vocab_size=data.get("vocab_size", 0), **splits)
