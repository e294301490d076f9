"""``normbench data fetch``: the one place normbench touches the network. A set's files are
downloaded at its pinned commit by ``huggingface_hub`` (never a hand-written downloader),
checked against the checksums the hub (or normbench) has for them, decoded once into what
training reads, and put into the cache with their manifest (normbench.data.hubcache).

``install`` is the half after the download: it takes files already on disk, so that the tests
put small files of the hub's format through the same decoding, manifest and checks.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from io import BytesIO
from pathlib import Path

import numpy as np

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_parquet
from normbench.data.base import FILE_SEPARATOR
from normbench.data.hubcache import (
    COMMIT,
    DECODED,
    HubSource,
    Manifest,
    checked,
    set_dir,
    sha256_of,
    write_manifest,
)

EXPANSION = 4  # a fetched parquet file may expand in memory to this many times its size
MAX_ROWS = 50_000_000
HELDOUT_CARVED = 0.01  # text without held-out files: this share of train's documents (by hash)


def fetch(name: str, source: HubSource, force: bool = False) -> tuple[Manifest, bool]:
    """Download ``source`` into the cache as ``name`` unless it is there, whole and from the
    same source; the manifest, and whether anything was downloaded. A hub that cannot be
    reached, or refuses, is a UsageError of one line."""
    if not COMMIT.match(source.revision):
        raise UsageError(
            f"--revision {source.revision}: a pinned revision is a full commit SHA (40 hex "
            "digits), never a branch or a tag, which move"
        )
    if not force:
        try:
            manifest = checked(name)
        except UsageError:
            manifest = None
        as_stored = json.loads(json.dumps(asdict(source)))  # tuples as the manifest's lists
        if manifest is not None and manifest.source == as_stored:
            return manifest, False
    root = set_dir(name).parent
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".staging-{name}-"))
    try:
        files = download(source, staging / "files")
        manifest = install(name, source, files, staging)
        replace(staging, set_dir(name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest, True


def download(source: HubSource, destination: Path) -> dict[str, list[tuple[str, Path]]]:
    """Each split's files, downloaded at the pinned revision and checked: split -> (repo path,
    local path). A file's sha256 must be the one normbench lists or, else, the hub's LFS
    checksum; a file the hub has no checksum for is refused (nothing would check it)."""
    from huggingface_hub import HfApi, constants, hf_hub_download

    # read now, not when huggingface_hub was imported: HF_ENDPOINT names a mirror (or, in the
    # tests, a loopback address)
    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    api = HfApi(endpoint=endpoint)
    where = f"{source.repo}@{source.revision[:12]} on {endpoint}"
    try:
        listed = None
        if any(any(c in p for c in "*?[") for paths in source.splits.values() for p in paths):
            listed = api.list_repo_files(source.repo, revision=source.revision, repo_type="dataset")
        wanted = {split: _matched(paths, listed, split) for split, paths in source.splits.items()}
        every = sorted({path for paths in wanted.values() for path in paths})
        infos = api.get_paths_info(
            source.repo, every, revision=source.revision, repo_type="dataset"
        )
        expected = {
            info.path: source.sha256.get(info.path) or (info.lfs.sha256 if info.lfs else None)
            for info in infos
        }
        local = {}
        for path in every:
            if path not in expected:
                raise UsageError(f"{where} has no file {path}")
            local[path] = Path(
                hf_hub_download(
                    source.repo,
                    path,
                    repo_type="dataset",
                    revision=source.revision,
                    local_dir=destination,
                    endpoint=endpoint,
                )
            )
    except UsageError:
        raise
    except Exception as err:  # the hub's client: any failure to reach or read the hub
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise UsageError(
            f"cannot fetch {where}: {type(err).__name__}: {first} (no network, or the hub "
            "refused; nothing was written to the cache)"
        ) from None
    shutil.rmtree(destination / ".cache", ignore_errors=True)  # the client's own bookkeeping
    for path in every:
        if expected[path] is None:
            raise UsageError(f"{where}: {path} has no checksum on the hub; nothing checks it")
        found = sha256_of(local[path])
        if found != expected[path]:
            raise UsageError(
                f"{where}: {path} downloaded with sha256 {found[:16]}..., expected "
                f"{expected[path][:16]}...; nothing was written to the cache"
            )
    return {split: [(path, local[path]) for path in paths] for split, paths in wanted.items()}


def _matched(patterns: tuple[str, ...], listed: list[str] | None, split: str) -> list[str]:
    """The repo paths a split's patterns name (a plain path names itself)."""
    found: list[str] = []
    for pattern in patterns:
        if listed is None or not any(c in pattern for c in "*?["):
            found.append(pattern)
            continue
        matches = sorted(p for p in listed if fnmatch.fnmatchcase(p, pattern))
        if not matches:
            raise UsageError(f"the {split} pattern {pattern!r} names no file of the repository")
        found += matches
    return sorted(set(found))


def install(
    name: str, source: HubSource, files: dict[str, list[tuple[str, Path]]], directory: Path
) -> Manifest:
    """Decode the files (under ``directory/files/``, as the repo lays them out) into
    ``directory/decoded.npz`` and write the manifest beside them."""
    if source.kind == "images":
        arrays, decoded = decode_images(source, files)
    else:
        arrays, decoded = decode_text(source, files)
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".npz", delete=False) as tmp:
        np.savez(tmp, **arrays)
    os.replace(tmp.name, directory / DECODED)
    listed = {}
    for paths in files.values():
        for repo_path, local in paths:
            listed[f"files/{repo_path}"] = _entry(local)
    listed[DECODED] = _entry(directory / DECODED)
    manifest = Manifest(
        name=name,
        source=asdict(source),
        files=listed,
        decoded=decoded,
        fetched_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    write_manifest(directory, manifest)
    return manifest


def _entry(path: Path) -> dict:
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


def _column(path: Path, column: str, source: HubSource):
    """One column of a fetched parquet file, through the bounded reader."""
    try:
        # bounded by the file's own size (what it expands to: text about doubles)
        limit = EXPANSION * path.stat().st_size + (64 << 20)
        frame = read_parquet(path, limit, MAX_ROWS, required=(column,), columns=[column])
    except StoreError as err:
        raise UsageError(f"{source.repo}: {err}") from None
    return frame[column]


def decode_images(source: HubSource, files: dict) -> tuple[dict[str, np.ndarray], dict]:
    """Each split's images as uint8 (N, C, H, W) and labels as int64: PNG or JPEG bytes
    decoded by Pillow, once. Every image must have the first one's size; grey images stay one
    channel, any other mode becomes RGB."""
    from PIL import Image

    missing = [split for split in ("train", "test") if split not in files]
    if missing:
        raise UsageError(f"{source.repo}: an image set needs train and test files; no {missing[0]}")
    arrays: dict[str, np.ndarray] = {}
    shape = None
    mode = None
    for split in ("train", "test"):
        images, labels = [], []
        for _, path in files[split]:
            for cell in _column(path, source.columns["image"], source):
                raw = cell["bytes"] if isinstance(cell, dict) else cell
                with Image.open(BytesIO(raw)) as image:
                    if mode is None:
                        mode = "L" if image.mode in ("1", "L", "I", "I;16") else "RGB"
                    pixels = np.asarray(image.convert(mode), dtype=np.uint8)
                pixels = pixels[:, :, None] if pixels.ndim == 2 else pixels
                if shape is None:
                    shape = pixels.shape
                if pixels.shape != shape:
                    raise UsageError(
                        f"{source.repo}: images of shape {pixels.shape} and {shape} in one set;"
                        " every image must have the same size"
                    )
                images.append(pixels.transpose(2, 0, 1))
            labels.append(np.asarray(_column(path, source.columns["label"], source)))
        arrays[f"x_{split}"] = np.stack(images)
        label = np.concatenate(labels)
        if not np.issubdtype(label.dtype, np.integer) or label.min() < 0:
            raise UsageError(
                f"{source.repo}: the label column {source.columns['label']!r} must hold "
                "integer classes 0, 1, ...; it holds " + str(label.dtype)
            )
        arrays[f"y_{split}"] = label.astype(np.int64)
    classes = int(max(arrays["y_train"].max(), arrays["y_test"].max())) + 1
    decoded = {
        "kind": "images",
        "input_shape": list(arrays["x_train"].shape[1:]),
        "num_classes": classes,
        "sizes": {split: len(arrays[f"y_{split}"]) for split in ("train", "test")},
    }
    return arrays, decoded


def heldout_half(document: bytes) -> str:
    """val or test for a held-out document, by a hash of its bytes: never by a seed."""
    return "test" if hashlib.sha256(document).digest()[0] < 128 else "val"


def decode_text(source: HubSource, files: dict) -> tuple[dict[str, np.ndarray], dict]:
    """Each split as one uint8 stream of UTF-8 bytes, its documents joined by FILE_SEPARATOR.
    The held-out files' documents go to val or test by a hash of each; without held-out files,
    HELDOUT_CARVED of train's documents (by a hash) are held out first."""
    if "train" not in files:
        raise UsageError(f"{source.repo}: a text set needs train files")
    documents: dict[str, list[bytes]] = {"train": [], "val": [], "test": []}
    carve = "heldout" not in files
    for split, paths in files.items():
        for _, path in paths:
            for text in _column(path, source.columns["text"], source):
                document = str(text).encode("utf-8")
                digest = hashlib.sha256(b"normbench-heldout\0" + document).digest()
                position = int.from_bytes(digest[:8], "big") / 2**64
                held = split == "heldout" or (carve and position < HELDOUT_CARVED)
                documents[heldout_half(document) if held else "train"].append(document)
    separator = bytes([FILE_SEPARATOR])
    arrays = {
        split: np.frombuffer(bytearray(separator.join(docs)), dtype=np.uint8)
        for split, docs in documents.items()
    }
    for split, stream in arrays.items():
        if len(stream) < 2:
            raise UsageError(f"{source.repo}: the {split} split holds no text")
    decoded = {"kind": "text", "sizes": {split: len(stream) for split, stream in arrays.items()}}
    return arrays, decoded


def replace(staging: Path, target: Path) -> None:
    """Put the staged set in the target's place; an old one is moved aside first and then
    removed, so that a reader never sees half of a set."""
    keep = {"files", DECODED, "manifest.json"}
    for extra in staging.iterdir():
        if extra.name not in keep:
            shutil.rmtree(extra, ignore_errors=True) if extra.is_dir() else extra.unlink()
    old = None
    if target.exists():
        old = target.with_name(f".old-{target.name}-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
