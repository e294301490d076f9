"""What many tests build: tiny configs (a few steps on a slice of real data) and run
directories with chosen numbers, written as normbench writes them."""

from __future__ import annotations

import contextlib
import functools
import io
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import yaml

from normbench.data.hubcache import SHIPPED, HubSource, set_dir
from normbench.data.hubfetch import install
from normbench.experiment.compose import compose
from normbench.store.provenance import source_hash
from normbench.store.rundir import RunDir, run_id

# A few steps on a small slice of real data: enough to exercise every code path quickly.
TINY = [
    "train.max_steps=6",
    "train.eval_every=3",
    "train.log_every=2",
    "train.warmup_steps=2",
    "model.width=16",
    "model.depth=2",
    "norm.groups=4",
    "threads=1",
]
TINY_DATA = {
    "mnist1d": ["data=mnist1d", "data.num_samples=600"],
    "digits": ["data=digits"],
    "tokens": ["data=tokens", "data.num_samples=400", "data.max_len=12"],
    "pysource": ["data=pysource", "data.context=16", "data.eval_windows=8"],
}


def tiny(*overrides: str, data: str = "mnist1d") -> list[str]:
    """TINY settings plus the given overrides, each key once (the command line refuses a key
    given twice): an override replaces the TINY setting of its key."""
    heads = [] if "model=cnn" in overrides else ["model.heads=2"]  # a transformer-only key
    given = {override.split("=", 1)[0] for override in overrides}
    base = ["device=cpu", *TINY_DATA[data], *TINY, *heads]
    return [*(o for o in base if o.split("=", 1)[0] not in given), *overrides]


def make_run(
    runs,
    overrides,
    status="complete",
    acc=0.9,
    test_acc=None,
    steps_to_target=None,
    auc=0.5,
    code=None,
    error=None,
    losses=(2.0, 1.0, 0.5),
    parameters=1234,
    summary_extra=None,
    host=None,
):
    """A run directory as normbench writes it, with chosen numbers (``summary_extra``: more
    summary fields, or ones to replace; ``host``: the machine's name, recorded when given)."""
    cfg = compose(["model=cnn", *overrides])
    run = RunDir(runs, run_id(cfg))
    run.write_config(cfg)
    summary = {
        "final_val_acc": acc,
        "best_val_acc": acc,
        "test_acc": acc if test_acc is None else test_acc,
        "steps": 30,
        "steps_to_target": steps_to_target,
        "time_to_target_s": None if steps_to_target is None else steps_to_target / 100,
        "train_loss_auc": auc,
        "num_classes": 10,
        "parameters": parameters,
        **(summary_extra or {}),
    }
    meta = {
        "run_id": run.run_id,
        "status": status,
        "summary": summary,
        "error": error,
        "code": {"source_hash": code or source_hash()},
        "versions": {"torch": "2.13.0"},
        "device": "cpu",
        "command": ["/venv/bin/normbench", "run", "model=cnn", *overrides],
        **({"host": host} if host is not None else {}),
    }
    run.write_meta(meta)
    rows = [
        {
            "step": 10 * (i + 1),
            "samples": 10 * (i + 1) * cfg["batch_size"],
            "epoch": 10 * (i + 1) * cfg["batch_size"] / 1000,
            "elapsed_s": (i + 1) * 0.5,
            "train_loss": loss,
            "val_acc": None if acc is None else acc - 0.1 * (2 - i),
        }
        for i, loss in enumerate(losses)
    ]
    run.write_metrics(rows)
    return run.run_id


def user_norm_run(runs, p: float, seed: int, acc: float) -> None:
    """A run of docs/your-own-norm.md's PowerNorm, as its config reads (written without
    importing the norm: the report never does)."""
    rid = make_run(runs, ["norm=layernorm", f"seed={seed}", f"train.lr={p / 1000}"], acc=acc)
    config = yaml.safe_load((runs / rid / "config.yaml").read_text())
    config["norm"].update(
        name="mynorms:PowerNorm",
        _target_="mynorms:PowerNorm",
        p=p,
        fp32_stats=None,
        mask_padding=None,
    )
    config["train"]["lr"] = 0.003
    (runs / rid / "config.yaml").write_text(yaml.safe_dump(config))


# A sweep's runs in a second or two: the CNN at width 8, one unit, 8 steps.
QUICK = [
    "model=cnn",
    "model.width=8",
    "model.depth=1",
    "norm.groups=4",
    "data.num_samples=500",
    "train.max_steps=8",
    "train.eval_every=4",
    "train.log_every=2",
    "device=cpu",
]


def run_dirs(runs: Path) -> set[str]:
    return {p.name for p in runs.iterdir() if not p.name.startswith(".") and p.name != "sweeps"}


def metas(runs: Path) -> dict[str, dict]:
    return {name: RunDir(runs, name).read_meta() for name in run_dirs(runs)}


@contextlib.contextmanager
def limited(seconds: float, memory: int = 2 << 30) -> Iterator[None]:
    """Run a block under a wall-clock limit (TimeoutError from a timer signal, which also ends
    a blocking open or read) and an address-space limit ``memory`` bytes above what this
    process maps now (MemoryError past it): a hang or a blow-up fails the test instead of
    stopping the suite."""

    def expired(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    cap = mapped + memory if hard == resource.RLIM_INFINITY else min(hard, mapped + memory)
    previous = signal.signal(signal.SIGALRM, expired)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def invoke(*args: str, seconds: float = 60, memory: int = 2 << 30, columns: int = 100):
    """A CLI command in this process under a time and memory limit (``limited``), at
    ``columns`` columns (100 unless told); never a traceback."""
    from typer.testing import CliRunner

    from normbench.cli import app

    with limited(seconds, memory):
        result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert not isinstance(result.exception, (TimeoutError, MemoryError)), result.exception
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    return result


def one_line(result, *words: str) -> None:
    """A refusal: exit 2, one error line (warnings aside) holding every one of ``words``."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("normbench: error: "), result.output
    for word in words:
        assert word in result.output, (word, result.output)


def scaling_report(runs, key: str = "model.width", reference: str = "norm=layernorm") -> dict:
    """`report RUNS --scaling KEY --reference REF --format json`, parsed (exit 0 asserted)."""
    import json

    from typer.testing import CliRunner

    from normbench.cli import app

    args = ["report", str(runs), "--scaling", key, "--reference", reference, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------- fetched data sets
# Small data sets in the hub's own on-disk format, made here rather than committed: CIFAR-10's
# parquet (an ``img`` column of the hub's Image feature, PNG bytes, and an int64 ``label``) and
# TinyStories' (a ``text`` column), installed into the cache through normbench's own decoding,
# manifest and checks (normbench.data.hubfetch.install), as a fetch would after its download.
def cifar_parquet(path: Path, samples: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_cifar_parquet(samples, seed))


@functools.cache
def _cifar_parquet(samples: int, seed: int) -> bytes:
    """``samples`` 32x32 RGB images as PNG bytes, with labels 0..9 (each class a colour, plus
    noise, so that a model can learn something in a few steps)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
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
    """``documents`` short stories of a few dozen words, as TinyStories' ``text`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
