"""The fetched data sets, offline: fixtures in the hub's format go through the same decoding,
manifest, checks and loaders as a fetched set; a damaged cache is refused in one line naming
the fetch command; a fetch without network fails in one line."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from helpers import install_fixture, invoke, one_line

from normbench.core.errors import UsageError
from normbench.data.base import FILE_SEPARATOR
from normbench.data.datasets import describe, load, split_sizes
from normbench.data.hubcache import DECODED, SHIPPED, HubSource, checked, set_dir
from normbench.data.hubfetch import heldout_half
from normbench.data.hubsource import source_for
from normbench.training.augment import PAD, augment, crop

CIFAR = {"name": "cifar10", "val_fraction": 0.1, "augment": "crop_flip", "train_samples": None}
STORIES = {"name": "tinystories", "context": 16, "eval_windows": 8, "train_samples": None}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A data cache of this test's own: the fixtures are installed, and damaged, in it."""
    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cifar10_fixture_loads_as_standardised_images_with_val_carved_from_train(cache):
    install_fixture("cifar10")
    data = load(CIFAR)
    assert describe(CIFAR).input_shape == (3, 32, 32) == data.train.x.shape[1:]
    assert split_sizes(CIFAR) == {"train": 270, "val": 30, "test": 100}
    assert (len(data.train), len(data.val), len(data.test)) == (270, 30, 100)
    assert data.train.x.dtype == np.float32 and data.augment == "crop_flip"
    # per channel, with the train split's statistics
    assert np.allclose(data.train.x.mean(axis=(0, 2, 3)), 0, atol=1e-4)
    assert np.allclose(data.train.x.std(axis=(0, 2, 3)), 1, atol=1e-3)
    again = load(CIFAR)  # the carve is fixed: never the run's seed
    assert np.array_equal(again.val.x, data.val.x) and np.array_equal(again.val.y, data.val.y)
    subset = load({**CIFAR, "train_samples": 50})
    assert np.array_equal(subset.train.x, data.train.x[:50])


def test_the_manifest_lists_every_file_with_size_and_sha256_and_the_source(cache):
    directory = install_fixture("cifar10")
    manifest = checked("cifar10")
    assert manifest.source["revision"] == SHIPPED["cifar10"].revision
    assert set(manifest.files) == {
        "files/plain_text/train-00000-of-00001.parquet",
        "files/plain_text/test-00000-of-00001.parquet",
        DECODED,
    }
    for relative, entry in manifest.files.items():
        assert entry["size"] == (directory / relative).stat().st_size
        assert len(entry["sha256"]) == 64
    assert len(manifest.fingerprint) == 16 and manifest.fetched_at


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "missing"])
@pytest.mark.parametrize("relative", ["files/plain_text/train-00000-of-00001.parquet", DECODED])
def test_a_damaged_set_is_refused_naming_the_file_and_the_fetch_command(cache, damage, relative):
    path = install_fixture("cifar10") / relative
    raw = path.read_bytes()
    if damage == "corrupted":  # same size, one byte changed: only the checksum sees it
        path.write_bytes(raw[:100] + bytes([raw[100] ^ 0xFF]) + raw[101:])
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    else:
        path.unlink()
    with pytest.raises(UsageError) as refused:
        load(CIFAR)
    message = str(refused.value)
    assert relative in message and "normbench data fetch cifar10 --force" in message
    words = {"corrupted": "fails its checksum", "truncated": "truncated", "missing": "missing"}
    assert words[damage] in message and "\n" not in message


def test_a_set_never_fetched_is_refused_naming_the_fetch_command(cache):
    with pytest.raises(UsageError, match="normbench data fetch cifar10$"):
        load(CIFAR)


def test_a_run_on_a_damaged_set_is_refused_before_anything_is_written(cache, tmp_path):
    path = install_fixture("cifar10") / DECODED
    path.write_bytes(path.read_bytes()[:-10])
    runs = tmp_path / "runs"
    result = invoke("run", "data=cifar10", "model=cnn", "--runs-dir", str(runs))
    one_line(result, "data=cifar10", "truncated", "normbench data fetch cifar10 --force")
    assert not runs.exists()


def test_a_fetch_without_network_fails_in_one_line_and_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # loopback's discard port: closed
    result = invoke("data", "fetch", "cifar10")
    one_line(result, "cannot fetch uoft-cs/cifar10@0b2714987fa4 on http://127.0.0.1:9")
    assert not (cache / "hub" / "cifar10").exists()


def test_fetch_refuses_a_moving_revision_and_options_on_a_shipped_set():
    with pytest.raises(UsageError, match="full commit SHA"):
        source_for("mine", repo="me/set", revision="main", train=("a",), text_column="text")
    with pytest.raises(UsageError, match="shipped set"):
        source_for("cifar10", repo="me/set")
    with pytest.raises(UsageError, match="--train"):
        source_for("mine", repo="me/set", revision="a" * 40)
    with pytest.raises(UsageError, match="a path inside the repository"):
        source_for("mine", repo="me/set", revision="a" * 40, train=("../x",), text_column="t")
    with pytest.raises(UsageError, match="columns of one kind"):
        source_for("mine", repo="me/set", revision="a" * 40, train=("a",), image_column="img")


def test_tinystories_fixture_is_next_byte_text_with_val_and_test_from_the_heldout_file(cache):
    install_fixture("tinystories")
    data = load(STORIES)
    assert data.next_byte and data.vocab_size == 256
    assert data.train.context == 16 and data.val.x.shape == data.test.x.shape == (8, 16)
    assert np.array_equal(data.val.y[:, :-1], data.val.x[:, 1:])  # targets: the next byte
    assert FILE_SEPARATOR in data.train.bytes
    assert split_sizes(STORIES)["train"] == len(data.train.bytes) // 16
    # a held-out document's split is a function of its bytes alone
    assert {heldout_half(b"story %d" % i) for i in range(40)} == {"val", "test"}


def test_your_own_image_set_is_read_through_the_same_door_with_its_fingerprint_in_the_config(
    cache,
):
    from normbench.experiment.compose import compose

    source = HubSource(
        "someone/pictures",
        "b" * 40,
        "images",
        {"train": ("data/train.parquet",), "test": ("data/test.parquet",)},
        {"image": "img", "label": "label"},
    )
    install_fixture("pictures", source)
    cfg = compose(["data=hub_images", "data.set=pictures", "model=cnn"])
    assert cfg["data"]["fingerprint"] == checked("pictures").fingerprint
    with pytest.raises(UsageError, match="data=hub_text needs data.set"):
        compose(["data=hub_text"])
    with pytest.raises(UsageError, match="data.set=../x is not a data set name"):
        compose(["data=hub_images", "data.set=../x"])
    with pytest.raises(UsageError, match="holds images, not text; valid: data=hub_images"):
        compose(["data=hub_text", "data.set=pictures"])


def test_cifar10_composes_for_the_cnn_and_the_resnet_and_text_refuses_them(cache):
    from normbench.experiment.compose import compose
    from normbench.store.rundir import run_id

    install_fixture("cifar10")
    for model in ("cnn", "resnet"):
        cfg = compose([f"model={model}", "data=cifar10", "norm=batchnorm"])
        assert "fingerprint" not in cfg["data"]  # a shipped set's is in meta.json
        assert run_id(cfg)
    install_fixture("tinystories")
    with pytest.raises(UsageError, match="cannot take data=tinystories"):
        compose(["model=cnn", "data=tinystories"])


def test_crop_flip_moves_each_image_by_at_most_the_padding_and_is_drawn_from_its_generator():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    same = crop(x, torch.full((2, 2), PAD))
    assert torch.equal(same, x)  # the offset of the padding itself: the image unmoved
    shifted = crop(x, torch.tensor([[PAD + 1, PAD], [PAD, PAD]]))
    assert torch.equal(shifted[0, :, :-1], x[0, :, 1:])  # one row up
    first = augment(x, "crop_flip", torch.Generator().manual_seed(1), batch_size=2)
    second = augment(x, "crop_flip", torch.Generator().manual_seed(1), batch_size=2)
    assert torch.equal(first, second) and first.shape == x.shape
    flipped = augment(x, "flip", torch.Generator().manual_seed(0), batch_size=2)
    for image, out in zip(x, flipped, strict=True):
        assert torch.equal(out, image) or torch.equal(out, image.flip(2))
    assert augment(x, "none", torch.Generator(), batch_size=2) is x


def test_data_list_shows_each_cached_set_with_its_size_and_fingerprint(cache):
    result = invoke("data", "list")
    assert result.exit_code == 0 and "no data set in the cache" in result.output
    install_fixture("cifar10")
    result = invoke("data", "list")
    fingerprint = checked("cifar10").fingerprint
    assert result.exit_code == 0, result.output
    assert "cifar10" in result.output and fingerprint in result.output
    assert f"uoft-cs/cifar10@{SHIPPED['cifar10'].revision}" in result.output
    assert " MB, " in result.output and "all files there" in result.output
    (set_dir("cifar10") / DECODED).unlink()
    assert f"{DECODED} missing" in invoke("data", "list").output
    assert set_dir("cifar10").is_dir()


def test_runs_on_two_fingerprints_of_one_set_are_marked_in_the_report_never_pooled_silently(
    cache, tmp_path
):
    import json

    from helpers import make_run

    install_fixture("cifar10")
    runs, ids = tmp_path / "runs", []
    for seed, fingerprint in ((0, "aaaaaaaaaaaaaaaa"), (1, "bbbbbbbbbbbbbbbb")):
        rid = make_run(runs, ["data=cifar10", f"seed={seed}"], acc=0.5)
        ids.append(rid)
        meta_path = runs / rid / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["data"] = {"set": "cifar10", "fingerprint": fingerprint}
        meta_path.write_text(json.dumps(meta))
    result = invoke("report", str(runs))
    assert result.exit_code == 0, result.output
    assert "(data mixed)" in result.output
    diff = invoke("runs", "diff", ids[0], ids[1], "--runs-dir", str(runs))
    assert "(data)" in diff.output and "aaaaaaaaaaaaaaaa" in diff.output, diff.output


@pytest.mark.slow
def test_a_few_steps_on_the_cifar10_fixture_record_its_fingerprint_and_read_only_the_cache(
    cache, tmp_path, monkeypatch
):
    import json

    install_fixture("cifar10")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a run never asks the hub for anything
    runs = tmp_path / "runs"
    args = ["model=cnn", "norm=groupnorm", "data=cifar10", "device=cpu", "threads=1"]
    args += ["train.max_steps=5", "train.eval_every=5", "model.width=8", "model.depth=2"]
    result = invoke("run", *args, "--runs-dir", str(runs), "--quiet", seconds=120)
    assert result.exit_code == 0, result.output
    (meta_path,) = runs.glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["status"] == "complete"
    assert meta["data"]["fingerprint"] == checked("cifar10").fingerprint
    assert meta["data"]["source"] == f"uoft-cs/cifar10@{SHIPPED['cifar10'].revision}"


@pytest.mark.slow
def test_a_few_steps_of_the_language_model_on_the_tinystories_fixture(cache, tmp_path):
    import json

    install_fixture("tinystories")
    runs = tmp_path / "runs"
    args = ["model=transformer", "data=tinystories", "data.context=16", "data.eval_windows=8"]
    args += ["device=cpu", "threads=1", "train.max_steps=5", "train.eval_every=5"]
    args += ["model.width=16", "model.depth=1", "model.heads=2"]
    result = invoke("run", *args, "--runs-dir", str(runs), "--quiet", seconds=120)
    assert result.exit_code == 0, result.output
    (meta_path,) = runs.glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["status"] == "complete" and meta["summary"]["final_val_bpb"] > 0
    assert meta["data"]["fingerprint"] == checked("tinystories").fingerprint


def test_the_cifar10_batch_preset_crosses_the_norms_with_per_device_batches_2_to_128(cache):
    from normbench.sweeps.grid import expand

    install_fixture("cifar10")
    sweep = expand("batch_cifar10", [])
    assert sweep.combinations == 105 and len(sweep.jobs) == 51  # as its header says
    ghost: dict[tuple, set] = {}
    for job in sweep.jobs:
        key = (job.cfg["norm"]["name"], job.cfg["model"]["weight_std"])
        ghost.setdefault(key, set()).add(job.cfg["norm"]["ghost_batch"])
    assert ghost[("batchnorm", False)] == ghost[("batchnorm", True)] == {2, 4, 8, 16, 32, 64, 128}
    assert ghost[("groupnorm", True)] == ghost[("layernorm", False)] == {None}
    assert {job.cfg["data"]["name"] for job in sweep.jobs} == {"cifar10"}
    assert {job.cfg["batch_size"] for job in sweep.jobs} == {128}


def test_a_set_cached_intact_from_the_same_source_is_not_fetched_again(cache):
    from normbench.data.hubfetch import fetch

    install_fixture("cifar10")
    manifest, fetched = fetch("cifar10", SHIPPED["cifar10"])  # no network needed, none used
    assert not fetched and manifest.fingerprint == checked("cifar10").fingerprint


def test_a_resumed_data_order_augments_as_an_uninterrupted_one():
    from normbench.training.batches import DataOrder, batches

    train = {"x": torch.randn(40, 3, 8, 8), "y": torch.arange(40), "mask": None}
    order = DataOrder(40, 8, seed=3, device=torch.device("cpu"), augment="crop_flip")
    stream = batches(train, None, order)
    next(stream), next(stream)
    state = order.state_dict()
    expected = [next(stream)[0] for _ in range(4)]  # across the epoch's end too
    resumed = DataOrder(40, 8, seed=3, device=torch.device("cpu"), augment="crop_flip")
    resumed.load_state_dict(state)
    again = batches(train, None, resumed)
    assert all(torch.equal(next(again)[0], x) for x in expected)


class FakeHub:
    """A dataset repository served over HTTP on loopback as the hub's API serves one (the
    paths-info metadata with each file's LFS sha256, and resolve/ for the bytes), for the
    real huggingface_hub client to fetch from: this machine reaches no hub."""

    def __init__(self, files: dict[str, bytes], checksums: dict[str, str]):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, unquote

        revision = SHIPPED["cifar10"].revision

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # /api/datasets/OWNER/NAME/paths-info/REVISION
                length = int(self.headers["Content-Length"])
                asked = parse_qs(self.rfile.read(length).decode())["paths"]
                body = json.dumps(
                    [
                        {
                            "type": "file",
                            "path": path,
                            "size": len(files[path]),
                            "oid": "0" * 40,
                            "lfs": {
                                "oid": checksums[path],
                                "size": len(files[path]),
                                "pointerSize": 134,
                            },
                        }
                        for path in asked
                        if path in files
                    ]
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self) -> bytes | None:
                prefix = f"/datasets/uoft-cs/cifar10/resolve/{revision}/"
                path = unquote(self.path.split("?")[0])
                return files.get(path.removeprefix(prefix)) if path.startswith(prefix) else None

            def _headers(self, raw: bytes) -> None:
                self.send_response(200)
                self.send_header("X-Repo-Commit", revision)
                self.send_header("ETag", f'"{hashlib.sha256(raw).hexdigest()}"')
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()

            def do_HEAD(self):
                raw = self._file()
                if raw is None:
                    self.send_error(404)
                    return
                self._headers(raw)

            def do_GET(self):
                raw = self._file()
                if raw is None:
                    self.send_error(404)
                    return
                self._headers(raw)
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fetch_from(hub: FakeHub, cache, monkeypatch):
    """``normbench data fetch cifar10`` from the fake hub into ``cache``."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("NORMBENCH_CACHE", str(cache))
    return invoke("data", "fetch", "cifar10")


@pytest.mark.slow
def test_fetch_downloads_checks_the_hub_checksums_and_installs_or_refuses(tmp_path, monkeypatch):
    """The real client against a loopback copy of the hub: the files are downloaded at the
    pinned commit, checked against their LFS sha256, decoded and listed in the manifest; a
    file that does not match its checksum is refused in one line, the cache left untouched."""
    from helpers import cifar_parquet

    source = tmp_path / "source"
    files = {}
    for path, samples in zip(SHIPPED["cifar10"].splits.values(), (120, 40), strict=True):
        cifar_parquet(source / path[0], samples, seed=samples)
        files[path[0]] = (source / path[0]).read_bytes()
    checksums = {path: hashlib.sha256(raw).hexdigest() for path, raw in files.items()}
    hub = FakeHub(files, checksums)
    try:
        done = fetch_from(hub, tmp_path / "cache", monkeypatch)
        assert done.exit_code == 0, done.output
        assert "cifar10 fetched uoft-cs/cifar10@" in done.output
        damaged = dict(checksums, **{next(iter(files)): "f" * 64})
        hub.close()
        hub = FakeHub(files, damaged)
        refused = fetch_from(hub, tmp_path / "other", monkeypatch)
    finally:
        hub.close()
    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "cache"))
    manifest = checked("cifar10")
    assert manifest.decoded["sizes"] == {"train": 120, "test": 40}
    assert manifest.files[f"files/{next(iter(files))}"]["sha256"] == checksums[next(iter(files))]
    one_line(refused, "expected ffffffffffffffff", "nothing was written to the cache")
    assert not (tmp_path / "other" / "hub" / "cifar10").exists()
