"""Small data sets in the hub's own on-disk format, made here rather than committed: CIFAR-10's
parquet (an ``img`` column of the hub's Image feature, PNG bytes, and an int64 ``label``) and
TinyStories' (a ``text`` column), installed into the cache through normbench's own decoding,
manifest and checks (normbench.data.hubfetch.install), as a fetch would after its download."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from normbench.data.hubcache import SHIPPED, HubSource, set_dir
from normbench.data.hubfetch import install


def cifar_parquet(path: Path, samples: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_cifar_parquet(samples, seed))


@functools.cache
def _cifar_parquet(samples: int, seed: int) -> bytes:
    """``samples`` 32x32 RGB images as PNG bytes, with labels 0..9 (each class a colour, plus
    noise, so that a model can learn something in a few steps)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    labels = np.arange(samples) % 10
    colours = np.random.default_rng(0).integers(0, 256, size=(10, 3))
    cells = []
    for label in labels:
        pixels = colours[label] + rng.integers(-40, 41, size=(32, 32, 3))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        cells.append({"bytes": buffer.getvalue(), "path": None})
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {"img": pa.array(cells, type=image_type), "label": pa.array(labels, pa.int64())}
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def text_parquet(path: Path, documents: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "home", "happy"]
    texts = [" ".join(rng.choice(words, size=rng.integers(20, 60))) + "." for _ in range(documents)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path)


def install_fixture(name: str, source: HubSource | None = None, scale: int = 1) -> Path:
    """``name`` (cifar10, tinystories, or a user's set of ``source``) written as the hub lays
    out its files under the set's cache directory, then installed; the set's directory."""
    source = source or SHIPPED[name]
    directory = set_dir(name)
    files = {}
    for split, paths in source.splits.items():
        files[split] = []
        for index, repo_path in enumerate(paths):
            local = directory / "files" / repo_path
            seed = 100 * ("train", "test", "heldout").index(split) + index
            if source.kind == "images":
                cifar_parquet(local, (300 if split == "train" else 100) * scale, seed)
            else:
                text_parquet(local, (400 if split == "train" else 80) * scale, seed)
            files[split].append((repo_path, local))
    install(name, source, files, directory)
    return directory
