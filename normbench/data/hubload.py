"""The fetched data sets as normbench trains on them: the shipped ones (data=cifar10,
data=tinystories) and a user's (data=hub_images, data=hub_text with data.set=NAME), all read
from the cache only, after its checks (normbench.data.hubcache).

Images: the hub's train and test splits; validation is carved from train by a fixed
permutation (never the run's seed), and inputs are standardised per channel with the train
split's statistics. Augmentation (data.augment) is applied per batch by the training loop.
Text: next-byte prediction as data=pysource has it: training draws random windows from the
train stream, validation and test use fixed windows of their streams.
"""

from __future__ import annotations

import numpy as np

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_npz
from normbench.data.base import BYTES, SPLIT_SEED, Dataset, Description, Split, Stream
from normbench.data.hubcache import (
    DECODED,
    SHIPPED,
    USER_OPTIONS,
    Manifest,
    checked,
    set_dir,
    set_name,
)
from normbench.data.pysource import fixed_windows

DECODED_LIMIT = 32 << 30  # what decoded.npz's arrays may expand to (its bytes: the manifest's size)
CIFAR10_SHAPE = (3, 32, 32)
AUGMENTATIONS = ("crop_flip", "flip", "none")  # data.augment


def kind_of(data: dict) -> str:
    """images or text, from the option alone (no cache read)."""
    if data["name"] in SHIPPED:
        return SHIPPED[data["name"]].kind
    return USER_OPTIONS[data["name"]]


def manifest_of(data: dict) -> Manifest:
    """The set's manifest, after every check; the set must be of the option's kind."""
    manifest = checked(set_name(data))
    kind = manifest.decoded.get("kind")
    if kind != kind_of(data):
        option = {v: k for k, v in USER_OPTIONS.items()}.get(kind, kind)
        raise UsageError(
            f"data.set={set_name(data)} holds {kind}, not {kind_of(data)}; valid: "
            f"data={option} data.set={set_name(data)}"
        )
    return manifest


def hub_description(data: dict) -> Description:
    """What the model needs to know; cifar10 and the text sets without reading the cache."""
    if kind_of(data) == "text":
        return Description((data.get("context", 0),), BYTES, BYTES, "bytes")
    if data["name"] == "cifar10":
        return Description(CIFAR10_SHAPE, 10, 0, "images")
    manifest = manifest_of(data)
    shape = tuple(manifest.decoded["input_shape"])
    return Description(shape, manifest.decoded["num_classes"], 0, "images")


def hub_split_sizes(data: dict) -> dict[str, int]:
    """Whole splits' sizes in samples (text: windows of data.context bytes to train on, and the
    fixed evaluation windows), from the manifest."""
    sizes = manifest_of(data).decoded["sizes"]
    if kind_of(data) == "text":
        train = sizes["train"] // data["context"]
        return {"train": train, "val": data["eval_windows"], "test": data["eval_windows"]}
    n_val = int(round(sizes["train"] * data["val_fraction"]))
    return {"train": sizes["train"] - n_val, "val": n_val, "test": sizes["test"]}


def _decoded(data: dict) -> dict[str, np.ndarray]:
    manifest = manifest_of(data)  # checked: decoded.npz is the file the manifest lists
    path = set_dir(set_name(data)) / DECODED
    try:
        return read_npz(path, manifest.files[DECODED]["size"], DECODED_LIMIT)[0]
    except StoreError as err:
        raise UsageError(f"data={data['name']}: {err}") from None


def load_hub(data: dict) -> Dataset:
    """A fetched set as a Dataset, read from the cache (checked first)."""
    arrays = _decoded(data)
    if kind_of(data) == "text":
        context, count = data["context"], data["eval_windows"]
        train = arrays["train"]
        if data.get("train_samples") is not None:  # a data ladder: the first bytes of train
            train = train[: data["train_samples"] * context + 1]
        return Dataset(
            data["name"],
            BYTES,
            Stream(train, context),
            fixed_windows(arrays["val"], context, count),
            fixed_windows(arrays["test"], context, count),
            vocab_size=BYTES,
        )
    sizes = hub_split_sizes(data)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(arrays["y_train"]))
    val, train = order[: sizes["val"]], order[sizes["val"] :]
    subset = train[: data["train_samples"]] if data.get("train_samples") else train
    x, y = arrays["x_train"], arrays["y_train"]
    # per channel, with the whole train split's statistics (val and test alike at any subset)
    mean = np.empty(x.shape[1], dtype=np.float32)
    std = np.empty(x.shape[1], dtype=np.float32)
    for channel in range(x.shape[1]):
        values = x[train, channel].astype(np.float32)
        mean[channel], std[channel] = values.mean(dtype=np.float64), values.std(dtype=np.float64)
    std[std == 0] = 1.0

    def standardised(images: np.ndarray) -> np.ndarray:
        return (images.astype(np.float32) - mean[:, None, None]) / std[:, None, None]

    num_classes = hub_description(data).num_classes
    return Dataset(
        data["name"],
        num_classes,
        Split(standardised(x[subset]), y[subset]),
        Split(standardised(x[val]), y[val]),
        Split(standardised(arrays["x_test"]), arrays["y_test"]),
        augment=data.get("augment") or "none",
    )
