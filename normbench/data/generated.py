"""The data sets made by code and cached: MNIST-1D (the mnist1d package's own generator,
never its download path), scikit-learn's digits, and the padded token task.

Splits depend only on the data config, never on the run's seed. A made data set is cached
under cache_dir() by a hash of its config; a cached file is read back through the trusted
reader (normbench.core.files).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from normbench.core.files import read_npz
from normbench.data.base import PAD, SPLIT_SEED, cache_dir

CACHE_LIMIT = 4 << 30  # a cached data set, and what it expands to


def will_generate(data: dict) -> bool:
    """Whether load(data) makes the data set rather than reading the cache: seconds of work
    on a first run, which the caller shows on screen."""
    return data["name"] in GENERATED and not _cache_path(data).exists()


def _cache_path(data: dict) -> Path:
    """Where a generated data set is cached: by a hash of its config (splits excluded)."""
    params = {k: v for k, v in sorted(data.items()) if not k.endswith("_fraction")}
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"{data['name']}-{digest}.npz"


def cached(data: dict, make) -> dict[str, np.ndarray]:
    """Arrays from make(data), stored under the cache dir by a hash of the data config."""
    path = _cache_path(data)
    if path.exists():
        return read_npz(path, CACHE_LIMIT, CACHE_LIMIT)[0]
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
