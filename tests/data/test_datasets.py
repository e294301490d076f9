"""Data sets: real generators, deterministic splits, a cache, and a token task with exact labels."""

from __future__ import annotations

import math
import platform
import subprocess
import sys

import numpy as np
import pytest

from normbench.data.base import FILE_SEPARATOR, PAD
from normbench.data.datasets import input_shape, load, split_sizes
from normbench.data.generated import will_generate
from normbench.data.pysource import (
    NOT_SOURCE,
    Corpus,
    corpus,
    file_split,
    pysource_streams,
    unigram_bits,
)

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
    first, second = load(cfg), load(cfg)
    sizes = split_sizes(cfg)
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
    assert first.train.x.shape[1:] == input_shape(cfg)
    assert set(np.unique(first.train.y)) == set(range(first.num_classes))


def test_generated_data_is_cached_on_disk(data_cache):
    cfg = {**MNIST1D, "num_samples": 700}
    before = set(data_cache.iterdir())
    load(cfg)
    (new,) = set(data_cache.iterdir()) - before
    assert new.name.startswith("mnist1d-") and new.suffix == ".npz"
    load({**cfg, "val_fraction": 0.2})  # the split is not part of the cache key
    assert set(data_cache.iterdir()) - before == {new}


def test_a_first_load_is_announced_as_generating_and_a_cached_one_is_not(data_cache):
    cfg = {**MNIST1D, "num_samples": 800}
    assert will_generate(cfg)
    load(cfg)
    assert not will_generate(cfg) and not will_generate({**cfg, "val_fraction": 0.3})
    assert not will_generate({"name": "pysource"})  # read from disk, never generated


def test_signals_and_images_are_standardised_with_training_statistics():
    for cfg in (MNIST1D, DIGITS):
        train = load(cfg).train.x
        assert abs(train.mean()) < 1e-4 and abs(train.std() - 1) < 1e-3
        assert train.dtype == np.float32


def test_token_labels_count_the_repeats_of_the_query_among_the_real_tokens():
    dataset = load(TOKENS)
    for split in (dataset.train, dataset.test):
        lengths = split.mask.sum(1)
        assert lengths.min() >= TOKENS["min_len"] and lengths.max() <= TOKENS["max_len"]
        assert (split.x[~split.mask] == PAD).all() and (split.x[split.mask] != PAD).all()
        repeats = (split.x[:, 1:] == split.x[:, :1]).sum(1)
        np.testing.assert_array_equal(repeats, split.y)
    counts = np.bincount(dataset.train.y)
    assert counts.min() > 0.8 * counts.max()  # balanced classes


# --------------------------------------------------------------------------------- pysource
PYSOURCE = {
    "name": "pysource",
    "context": 32,
    "eval_windows": 16,
    "val_fraction": 0.05,
    "test_fraction": 0.05,
    "corpus": None,
}


def test_the_corpus_is_the_standard_library_source_without_packages_and_tests():
    library = corpus()
    assert {"os.py", "json/__init__.py", "asyncio/tasks.py"} <= set(library.files)
    assert len(library.files) > 300 and sum(map(len, library.contents)) > 3_000_000
    for path in library.files:
        assert path.endswith(".py") and not set(path.split("/")[:-1]) & NOT_SOURCE, path


def test_corpus_identity_is_the_python_version_and_a_hash_of_paths_and_contents():
    library = corpus()
    assert library.identity.startswith(f"python{platform.python_version()}-")
    # another process of the same Python computes the same identity
    code = "from normbench.data.pysource import corpus; print(corpus().identity)"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert fresh.stdout.strip() == library.identity, fresh.stderr
    edited = (library.contents[0] + b"#",) + library.contents[1:]
    renamed = ("renamed.py",) + library.files[1:]
    assert Corpus(library.files, edited).identity != library.identity
    assert Corpus(renamed, library.contents).identity != library.identity


def test_a_file_split_depends_on_its_path_alone():
    files = corpus().files
    splits = [file_split(path, 0.05, 0.05) for path in files]
    assert splits == [file_split(path, 0.05, 0.05) for path in files]
    counts = {name: splits.count(name) for name in ("train", "val", "test")}
    assert counts["val"] > 10 and counts["test"] > 10 and counts["train"] > 0.8 * len(files)
    # a larger validation fraction takes files from train only: test stays as it is
    wider = [file_split(path, 0.2, 0.05) for path in files]
    for before, after in zip(splits, wider, strict=True):
        assert (before == "test") == (after == "test")
        assert before != "val" or after == "val"


def test_pysource_streams_hold_every_file_once_between_separators():
    streams = pysource_streams(0.05, 0.05)
    library = corpus()
    assert (
        sum(len(s) for s in streams.values())
        == sum(map(len, library.contents)) + len(library.files) - 3
    )  # one separator between consecutive files of each split
    separators = sum(int((s == FILE_SEPARATOR).sum()) for s in streams.values())
    assert separators == len(library.files) - 3  # the byte occurs nowhere in the source


def test_evaluation_windows_are_fixed_and_shifted_by_one_byte():
    first, second = load(PYSOURCE), load({**PYSOURCE, "val_fraction": 0.05})
    for split in ("val", "test"):
        windows = getattr(first, split)
        assert windows.x.shape == windows.y.shape == (16, 32)
        np.testing.assert_array_equal(windows.x[:, 1:], windows.y[:, :-1])
        np.testing.assert_array_equal(windows.x, getattr(second, split).x)
    assert first.next_byte and first.num_classes == first.vocab_size == 256
    assert len(first.train) == len(first.train.bytes) // 32
    assert split_sizes(PYSOURCE) == {"train": len(first.train), "val": 16, "test": 16}


def test_loading_another_interpreters_corpus_is_refused():
    with pytest.raises(ValueError, match="not this interpreter's standard library"):
        load({**PYSOURCE, "corpus": "python2.7-000000000000"})


def test_unigram_bits_per_byte():
    # add-one smoothing over 256 bytes: p(0) = p(1) = 3 / 260
    assert unigram_bits(np.array([0, 0, 1, 1]), np.array([0, 1])) == pytest.approx(
        -math.log2(3 / 260)
    )
    streams = pysource_streams(0.05, 0.05)
    chance = unigram_bits(streams["train"], streams["val"])
    assert 4.0 < chance < 5.2  # the "about 4.5 bits per byte"
