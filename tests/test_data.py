"""Data sets: real generators, deterministic splits, a cache, and a token task with exact labels."""

from __future__ import annotations

import numpy as np
import pytest

from normbench import data

MNIST1D = {"name": "mnist1d", "num_samples": 600, "val_fraction": 0.1}
DIGITS = {"name": "digits", "test_fraction": 0.2, "val_fraction": 0.1}
TOKENS = {
    "name": "tokens",
    "num_samples": 400,
    "min_len": 6,
    "max_len": 12,
    "vocab_size": 8,
    "num_classes": 4,
    "test_fraction": 0.2,
    "val_fraction": 0.1,
}


@pytest.mark.parametrize("cfg", [MNIST1D, DIGITS, TOKENS], ids=lambda c: c["name"])
def test_splits_are_deterministic_disjoint_and_sized_as_predicted(cfg):
    first, second = data.load(cfg), data.load(cfg)
    sizes = data.split_sizes(cfg)
    for split in ("train", "val", "test"):
        a, b = getattr(first, split), getattr(second, split)
        assert len(a) == sizes[split]
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.y, b.y)
    rows = {
        split: {getattr(first, split).x[i].tobytes() for i in range(len(getattr(first, split)))}
        for split in ("train", "val", "test")
    }
    assert not rows["train"] & rows["test"] and not rows["val"] & rows["test"]
    assert first.train.x.shape[1:] == data.input_shape(cfg)
    assert set(np.unique(first.train.y)) == set(range(first.num_classes))


def test_generated_data_is_cached_on_disk(data_cache):
    cfg = {**MNIST1D, "num_samples": 700}
    before = set(data_cache.iterdir())
    data.load(cfg)
    (new,) = set(data_cache.iterdir()) - before
    assert new.name.startswith("mnist1d-") and new.suffix == ".npz"
    data.load({**cfg, "val_fraction": 0.2})  # the split is not part of the cache key
    assert set(data_cache.iterdir()) - before == {new}


def test_signals_and_images_are_standardised_with_training_statistics():
    for cfg in (MNIST1D, DIGITS):
        train = data.load(cfg).train.x
        assert abs(train.mean()) < 1e-4 and abs(train.std() - 1) < 1e-3
        assert train.dtype == np.float32


def test_token_labels_count_the_repeats_of_the_query_among_the_real_tokens():
    dataset = data.load(TOKENS)
    for split in (dataset.train, dataset.test):
        lengths = split.mask.sum(1)
        assert lengths.min() >= TOKENS["min_len"] and lengths.max() <= TOKENS["max_len"]
        assert (split.x[~split.mask] == data.PAD).all() and (split.x[split.mask] != data.PAD).all()
        repeats = (split.x[:, 1:] == split.x[:, :1]).sum(1)
        np.testing.assert_array_equal(repeats, split.y)
    counts = np.bincount(dataset.train.y)
    assert counts.min() > 0.8 * counts.max()  # balanced classes
