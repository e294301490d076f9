"""The data sets fetched from the Hugging Face hub, as they lie in the cache: where, the
manifest that lists their files, the checks every run makes of them, and their fingerprint.

A fetched set lives in ``cache_dir()/hub/NAME/``:

- ``files/``: the hub's files as downloaded (parquet), at the pinned revision;
- ``decoded.npz``: what training reads, decoded from them once at fetch time (images as uint8,
  text as byte streams), never per step;
- ``manifest.json``: the source (repo, revision, files per split, columns), every file's
  size and sha256 (the fetched ones and decoded.npz), the decoded splits' sizes, and when.

Nothing here touches the network: ``normbench.data.hubfetch`` fetches. Every run checks the
set it reads against its manifest (sizes, then sha256), and a missing, truncated or altered
file is refused in one line naming the command that fetches it again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import open_regular, parse_json, read_bytes
from normbench.data.base import cache_dir

MANIFEST = "manifest.json"
DECODED = "decoded.npz"
MANIFEST_LIMIT = 1 << 20
FILE_LIMIT = 64 << 30  # a fetched file; what is read into memory is bounded by its loader
COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a pinned revision: a full commit SHA, never a branch
SET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class HubSource:
    """Where a data set comes from: a dataset repository on the hub at a pinned commit, the
    files (repo paths, or glob patterns) of each of its splits, and the columns to read.

    images: ``train`` and ``test`` files, an image column (the hub's Image feature: PNG or
    JPEG bytes) and an integer label column; validation is carved from train.
    text: ``train`` files and held-out files (``heldout``: the hub's validation split, or none,
    when the held-out documents are carved from train) and a text column."""

    repo: str
    revision: str
    kind: str  # images | text
    splits: dict[str, tuple[str, ...]]  # split -> repo paths or glob patterns
    columns: dict[str, str]  # images: image, label; text: text
    sha256: dict[str, str] = field(default_factory=dict)  # repo path -> known checksum

    def describe(self) -> str:
        return f"{self.repo}@{self.revision}"


# The shipped sets. Their revisions are the commits public code pins these repositories at
# (found offline in other projects that load them: uoft-cs/cifar10 at 0b2714987f... by several
# projects' load_dataset(..., revision=...), roneneldan/TinyStories at f54c09fd23... by many);
# they were not fetched from this machine, which reaches no hub. A checksum listed here is one
# those projects recorded; the others are the hub's own LFS checksums, read at fetch time.
SHIPPED: dict[str, HubSource] = {
    "cifar10": HubSource(
        repo="uoft-cs/cifar10",
        revision="0b2714987fa478483af9968de7c934580d0bb9a2",
        kind="images",
        splits={
            "train": ("plain_text/train-00000-of-00001.parquet",),
            "test": ("plain_text/test-00000-of-00001.parquet",),
        },
        columns={"image": "img", "label": "label"},
    ),
    "tinystories": HubSource(
        repo="roneneldan/TinyStories",
        revision="f54c09fd23315a6f9c86f9dc80f725de7d8f9c64",
        kind="text",
        splits={  # the first of the four train shards (about 0.5 GB of text) is plenty here
            "train": ("data/train-00000-of-00004-2d5a1467fff1081b.parquet",),
            "heldout": ("data/validation-00000-of-00001-869c898b519ad725.parquet",),
        },
        columns={"text": "text"},
        sha256={
            "data/validation-00000-of-00001-869c898b519ad725.parquet": (
                "33406a6206554cfc279c29c11f4df51528af487aa1a602b075566fc83c49dcab"
            )
        },
    ),
}
# The data options that read a fetched set: the shipped ones by their own name, a user's
# through data=hub_images / data=hub_text with data.set=NAME.
USER_OPTIONS = {"hub_images": "images", "hub_text": "text"}
HUB_DATA = (*SHIPPED, *USER_OPTIONS)


def set_name(data: dict) -> str:
    """The cached set a data config reads: a shipped set's own name, else data.set."""
    return data["name"] if data["name"] in SHIPPED else str(data.get("set"))


def fetch_command(name: str) -> str:
    if name in SHIPPED:
        return f"normbench data fetch {name}"
    return f"normbench data fetch {name} --repo OWNER/NAME --revision SHA ... (docs/data.md)"


def set_dir(name: str) -> Path:
    return cache_dir() / "hub" / name


@dataclass(frozen=True)
class Manifest:
    """A cached set's manifest.json: its source, its files (path relative to the set's
    directory -> size and sha256), the decoded splits' sizes and shape, and when it came."""

    name: str
    source: dict  # HubSource as a dict
    files: dict[str, dict]  # "files/<repo path>" or "decoded.npz" -> {"size", "sha256"}
    decoded: dict  # kind, split sizes (samples or bytes), input_shape, num_classes
    fetched_at: str

    @property
    def fingerprint(self) -> str:
        """sha256 over the fetched files' paths and checksums (16 hex digits): the data's
        identity. decoded.npz is left out: it is made from them by normbench's code, which
        the runs' source hash covers."""
        return fingerprint(self.files)

    @property
    def size(self) -> int:
        return sum(entry["size"] for entry in self.files.values())


def fingerprint(files: dict[str, dict]) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in files if p.startswith("files/")):
        digest.update(f"{path}\0{files[path]['sha256']}\n".encode())
    return digest.hexdigest()[:16]


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """manifest.json, written atomically: a reader sees the old one or the new one."""
    text = json.dumps(asdict(manifest), indent=2, sort_keys=True) + "\n"
    with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".json", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, directory / MANIFEST)


def read_manifest(name: str) -> Manifest | None:
    """A cached set's manifest; None when there is none (never fetched). A manifest that is
    not one is refused (StoreError)."""
    path = set_dir(name) / MANIFEST
    try:
        raw = read_bytes(path, MANIFEST_LIMIT)
    except FileNotFoundError:
        return None
    found = parse_json(raw, path)
    keys = ("name", "source", "files", "decoded", "fetched_at")
    if not isinstance(found, dict) or any(key not in found for key in keys):
        raise StoreError(f"{path}: not a normbench data manifest")
    files = found["files"]
    if not isinstance(files, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("size"), int) and isinstance(e.get("sha256"), str)
        for e in files.values()
    ):
        raise StoreError(f"{path}: its files are not a list of sizes and checksums")
    return Manifest(**{key: found[key] for key in keys})


def sha256_of(path: Path) -> str:
    """A file's sha256, read through the trusted reader in 16 MB pieces."""
    digest = hashlib.sha256()
    with open_regular(path, FILE_LIMIT) as handle:
        while piece := handle.read(16 << 20):
            digest.update(piece)
    return digest.hexdigest()


def checked(name: str) -> Manifest:
    """The set's manifest once every file it lists is there, of its size and checksum; else a
    UsageError naming the file, what is wrong, and the command that fetches the set again.
    A file is hashed once per process while its size, times and inode stay the same."""
    where = f"data={name}"
    try:
        manifest = read_manifest(name)
    except StoreError as err:
        raise UsageError(f"{where}: {err}; fetch it again: {fetch_command(name)}") from None
    if manifest is None:
        raise UsageError(
            f"{where} is not in the data cache ({set_dir(name)}); fetch it once, with "
            f"network: {fetch_command(name)}"
        )
    again = f"fetch it again: {fetch_command(name)} --force"
    for relative, entry in sorted(manifest.files.items()):
        path = set_dir(name) / relative
        try:
            info = os.stat(path)
        except OSError:
            raise UsageError(f"{where}: the cached {relative} is missing; {again}") from None
        if info.st_size != entry["size"]:
            raise UsageError(
                f"{where}: the cached {relative} has {info.st_size} bytes, its manifest says "
                f"{entry['size']} (truncated or replaced); {again}"
            )
        stamp = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        try:
            found = _hash_once(str(path), stamp)
        except StoreError as err:
            raise UsageError(f"{where}: {err}; {again}") from None
        if found != entry["sha256"]:
            raise UsageError(
                f"{where}: the cached {relative} fails its checksum (sha256 {found[:16]}..., "
                f"its manifest says {entry['sha256'][:16]}...); {again}"
            )
    return manifest


@functools.cache
def _hash_once(path: str, stamp: tuple[int, ...]) -> str:
    return sha256_of(Path(path))


def size_problem(manifest: Manifest) -> str | None:
    """The first file of a cached set that is missing or not of its manifest's size (None when
    every one is): what ``normbench data list`` can say without hashing gigabytes."""
    for relative, entry in sorted(manifest.files.items()):
        try:
            size = os.stat(set_dir(manifest.name) / relative).st_size
        except OSError:
            return f"{relative} missing"
        if size != entry["size"]:
            return f"{relative} truncated or replaced"
    return None


def cached_sets() -> list[Manifest]:
    """Every set in the cache with a readable manifest, by name (``normbench data list``)."""
    root = cache_dir() / "hub"
    if not root.is_dir():
        return []
    found = []
    for directory in sorted(root.iterdir()):
        try:
            manifest = read_manifest(directory.name)
        except StoreError:
            continue
        if manifest is not None:
            found.append(manifest)
    return found


def provenance(data: dict) -> dict:
    """What a run's meta.json records of a fetched set (``data``: fingerprint, source, when
    fetched); nothing for the data sets made offline, whose meta.json stays as it was."""
    if data["name"] not in HUB_DATA:
        return {}
    manifest = checked(set_name(data))
    source = manifest.source
    return {
        "data": {
            "set": manifest.name,
            "fingerprint": manifest.fingerprint,
            "source": f"{source['repo']}@{source['revision']}",
            "fetched_at": manifest.fetched_at,
        }
    }
