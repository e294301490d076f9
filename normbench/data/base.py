"""What every data set is made of: splits of arrays (or a byte stream), their description, and
the constants that fix them (the split seed, the padding id, the byte alphabet).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPLIT_SEED = 20_201_116  # fixed: splits must not move with the run's seed
MNIST1D_LENGTH = 40
DIGITS_SIDE = 8
PAD = 0  # token id of padding in data=tokens
# next-byte prediction: a causal model, metrics per byte (tinystories and hub_text: fetched text)
NEXT_BYTE_DATA = ("pysource", "tinystories", "hub_text")
BYTES = 256  # the alphabet of data=pysource
FILE_SEPARATOR = 0x1C  # ASCII's File Separator, between the files of a split's stream


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
    augment: str = "none"  # images: what the training loop does to each batch (data.augment)

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
