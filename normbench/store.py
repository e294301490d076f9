"""The run store: runs/<run_id>/{config.yaml, meta.json, metrics.parquet}.

A run id is readable and content-addressed: the same resolved experiment always maps to the
same id, so a repeated command (or a resumed sweep) finds what is already done. Every file is
written to a temporary name and renamed into place, so a killed process never leaves a
half-written file that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from normbench.config import experiment

STATUSES = ("running", "complete", "diverged", "failed", "interrupted")
FINISHED = ("complete", "diverged")  # results: not run again unless forced
METRIC_COLUMNS = (
    "step",
    "epoch",
    "samples",
    "elapsed_s",
    "lr",
    "train_loss",
    "train_acc",
    "val_loss",
    "val_acc",
    "grad_norm",
)


def run_id(cfg: dict) -> str:
    """``transformer-layernorm-pre-fp32-b32-s0-1a2b3c4d``: the headline choices, then a hash of
    the whole resolved config except execution settings (device, threads, checkpoints)."""
    digest = hashlib.sha256(json.dumps(experiment(cfg), sort_keys=True).encode()).hexdigest()[:8]
    return (
        f"{cfg['model']['name']}-{cfg['norm']['name']}-{cfg['placement']['name']}-"
        f"{cfg['precision']['name']}-b{cfg['batch_size']}-s{cfg['seed']}-{digest}"
    )


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    """One run's directory and the three files in it."""

    def __init__(self, runs_dir: Path | str, run_id: str):
        self.run_id = run_id
        self.path = Path(runs_dir) / run_id

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.parquet"

    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[bool]:
        """Hold the run's lock while training it, so two processes never train the same run at
        once. An flock: the kernel drops it when its holder dies, even by kill -9, so a crashed
        process never blocks the run forever. Yields False when ``wait`` is off and the lock is
        held elsewhere."""
        lock_dir = self.path.parent / ".locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{self.run_id}.lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read_meta(self) -> dict[str, Any] | None:
        """The run's meta.json, or None when there is none (or it cannot be read)."""
        try:
            return json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None

    def status(self) -> str | None:
        meta = self.read_meta()
        return meta.get("status") if meta else None

    def write_config(self, cfg: dict) -> None:
        from omegaconf import OmegaConf

        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(cfg)))

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.meta_path, json.dumps(meta, indent=2, default=str) + "\n")

    def write_metrics(self, rows: list[dict[str, float]]) -> None:
        """All rows so far, as one parquet file (rewritten whole: runs log hundreds of rows)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {name: [row.get(name) for row in rows] for name in METRIC_COLUMNS}
        types = {"step": pa.int64(), "samples": pa.int64()}
        table = pa.table(
            {
                name: pa.array(values, type=types.get(name, pa.float64()))
                for name, values in columns.items()
            }
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write(self.metrics_path, sink.getvalue().to_pybytes())
