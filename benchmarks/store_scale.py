"""The run store at scale: `report` and `runs list` over N run directories, and the index
update after one run (issue 24's targets at 100,000 runs on 2 cores: report <= 60 s and
<= 1 GB on first use, <= 5 s with a fresh index; runs list <= 5 s with a fresh index; an index
update after one run <= 50 ms).

The report groups the runs by what varies: 500 groups (norm x batch x lr) of N / 500 seeds;
``--by norm.name`` makes it 10 groups, which leaves the cost of reading the store.

Synthesises N realistic run directories with normbench's own writers (RunDir's meta and
metrics writers, the atomic writer for config.yaml, dumped by PyYAML's C dumper rather than
OmegaConf's, which takes 8 ms a file; 10 norms x 5 batch sizes x 10 learning rates x seeds,
60 logged steps a run, a few runs failed, diverged, interrupted or left running by a dead
process, a lock file each), then
measures each command in a child process of its own: wall time, and peak memory from
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` taken in a fresh parent per measurement
(the largest single process: the command itself, or one of the two processes it starts to
read the files of a store met for the first time).

With ``--baseline CHECKOUT`` (an older checkout of normbench), the fresh-index commands run
with that checkout first on PYTHONPATH too, alternating with this one's, each in a working
directory outside both (``python -m`` would import the normbench of its working directory),
over a hard-linked copy of the store with its own index (DIR/runs-N-baseline: an index of
another schema version would be rebuilt at every command); ``--fresh-only`` skips the
first use (the store keeps the index a previous invocation built).

Run: python benchmarks/store_scale.py --runs 100000 [--dir DIR] [--repeats 1]
     [--baseline /path/to/main] [--fresh-only]
(DIR keeps the synthesised store between invocations: generating 100,000 runs takes minutes.)
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from normbench.experiment.compose import compose
from normbench.store import index
from normbench.store.rundir import RunDir, atomic_write, run_id

NORMS = (
    "batchnorm",
    "layernorm",
    "groupnorm",
    "rmsnorm",
    "instancenorm",
    "switchnorm",
    "scalenorm",
    "dyt",
    "adaln",
    "none",
)
BATCHES = (8, 16, 32, 64, 128)
LRS = (1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 3e-2, 5e-2, 1e-1, 2e-1)
STATUS_WEIGHTS = {"complete": 0.94, "diverged": 0.02, "failed": 0.02, "interrupted": 0.01}
ROWS = 60  # logged steps per run: 600 steps, log_every 10


def grid(count: int) -> list[tuple[int, str, int, float, int]]:
    """(number, norm, batch size, learning rate, seed) for ``count`` runs, seeds the slowest
    axis."""
    cells = list(itertools.product(NORMS, BATCHES, LRS))
    return [(i, *cells[i % len(cells)], i // len(cells)) for i in range(count)]


def write_run(
    runs: Path, base: dict, number: int, batch: int, lr: float, seed: int, metrics: dict
) -> None:
    """One run directory as a finished (or failed, ...) training leaves it, and its lock file
    (every run that was trained has one). The metrics file is written by normbench's writer
    once per cell (norm, batch, lr) and copied for the cell's other seeds (``metrics``: bytes
    by cell): readers check its two magic numbers, and writing 100,000 parquet files took
    most of an hour on this VM."""
    rng = np.random.default_rng(number)
    cfg = copy.deepcopy(base)
    cfg.update(batch_size=batch, seed=seed)
    cfg["train"]["lr"] = lr
    run = RunDir(runs, run_id(cfg))
    run.path.mkdir()
    (runs / ".locks" / f"{run.run_id}.lock").touch()
    # the config as YAML (PyYAML's C dumper: OmegaConf's pure-Python one takes 8 ms a file)
    atomic_write(run.config_path, yaml.dump(cfg, Dumper=yaml.CSafeDumper, sort_keys=False))
    draw = rng.random()
    status = "running" if draw > 0.99 else "complete"
    for name, weight in STATUS_WEIGHTS.items():
        if draw < weight:
            status = name
            break
        draw -= weight
    acc = float(rng.uniform(0.6, 0.95))
    summary = {
        "steps": 600,
        "steps_to_target": int(rng.integers(1, 6)) * 100,
        "time_to_target_s": 2.0,
        "num_classes": 10,
        "train_s": 5.0,
        "steps_per_s": 120.0,
        "epochs": 1.2,
        "final_val_loss": float(rng.uniform(0.2, 1.0)),
        "final_val_acc": acc,
        "final_val_bpb": None,
        "unigram_bpb": None,
        "best_val_acc": acc + 0.01,
        "train_loss_auc": float(rng.uniform(0.1, 1)),
        "parameters": 12_345,
        "test_loss": float(rng.uniform(0.2, 1.0)),
        "test_acc": acc - 0.01,
        "test_bpb": None,
        "wall_s": 6.0,
    }
    finished = status != "running"
    meta = {
        "run_id": run.run_id,
        "status": status,
        "started": "2026-11-30T10:00:00+00:00",
        "first_step": "2026-11-30T10:00:01+00:00",
        "finished": "2026-11-30T10:00:06+00:00" if finished else None,
        "error": "RuntimeError: out of memory" if status == "failed" else None,
        "device": "cpu",
        "threads": 1,
        "host": "node-17",
        "command": ["/venv/bin/normbench", "sweep", "batch_sensitivity", "--jobs", "2"],
        "code": {"version": "0.9.0", "commit": "0" * 40, "dirty": False, "source_hash": "f" * 16},
        "versions": {"normbench": "0.9.0", "torch": "2.13.0", "python": "3.11", "numpy": "2.1"},
        "summary": summary if status in ("complete", "diverged") else {"steps": 120},
        "resumed_from": [],
        "tags": [],
    }
    if status == "failed":
        meta["traceback"] = "Traceback (most recent call last):\n" + "  frame\n" * 20
    run.write_meta(meta)
    cell = (cfg["norm"]["name"], batch, lr)
    if cell in metrics:
        run.metrics_path.write_bytes(metrics[cell])
        return
    steps = np.arange(1, ROWS + 1) * 10
    loss = 2.0 * np.exp(-steps / 300) + rng.uniform(0, 0.05, ROWS)
    run.write_metrics(
        [
            {
                "step": int(step),
                "epoch": float(step * batch / 5000),
                "samples": int(step * batch),
                "elapsed_s": float(step / 100),
                "lr": lr,
                "train_loss": float(value),
                "train_acc": float(1 - value / 2),
                "val_loss": float(value) if step % 100 == 0 else float("nan"),
                "val_acc": float(acc * (1 - np.exp(-step / 200))) if step % 100 == 0 else None,
                "grad_norm": 1.0,
            }
            for step, value in zip(steps, loss, strict=True)
        ]
    )
    metrics[cell] = run.metrics_path.read_bytes()


def _write_share(runs: Path, share: list[tuple[int, str, int, float, int]]) -> None:
    """Write these runs, without fsync (normbench's atomic writer syncs every file: 8 ms each
    here; a synthesised store needs no durability)."""
    from unittest import mock

    bases = {norm: compose(["model=cnn", f"norm={norm}", "data=mnist1d"]) for norm in NORMS}
    metrics: dict[tuple, bytes] = {}
    with mock.patch.object(os, "fsync", lambda fd: None):
        for number, norm, batch, lr, seed in share:
            write_run(runs, bases[norm], number, batch, lr, seed, metrics)


def synthesise(runs: Path, count: int, workers: int = 2) -> None:
    """``count`` run directories in ``runs``, written by ``workers`` processes."""
    (runs / ".locks").mkdir(parents=True, exist_ok=True)
    cells = grid(count)
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_write_share, [runs] * workers, [cells[i::workers] for i in range(workers)]))


HERE = Path(__file__).resolve().parents[1]


def measure(command: list[str], checkout: Path = HERE) -> dict:
    """Wall time and peak RSS of ``command``, run by a fresh Python parent (so that
    RUSAGE_CHILDREN holds this command alone) with ``checkout``'s normbench; its output is
    thrown away."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "start = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "wall = time.perf_counter() - start\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(done.returncode, wall, peak, repr(done.stderr[-300:]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *command],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "PYTHONPATH": str(checkout)},
    ).stdout
    code, wall, peak, stderr = out.split(" ", 3)
    if code != "0":
        raise SystemExit(f"{' '.join(command)} exited {code}: {stderr}")
    return {"wall_s": float(wall), "peak_mb": int(peak) / 1024}


def twin(runs: Path, checkout: Path) -> Path:
    """A hard-linked copy of the store for an older checkout, with an index of its own built
    by that checkout: two versions of the index's schema in one directory would each rebuild
    the other's at every command. Built once, next to the store (the files are links, so the
    stamps are the same)."""
    copy = runs.with_name(f"{runs.name}-baseline")
    if not copy.is_dir():
        subprocess.run(["cp", "-al", str(runs), str(copy)], check=True)
        drop_index(copy)
        measure([sys.executable, "-m", "normbench", "runs", "list", str(copy)], checkout)
    return copy


def drop_index(runs: Path) -> None:
    """The store as a first report meets it: no index."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{runs / index.FILE}{suffix}").unlink(missing_ok=True)


UPDATE_PROBE = """
import json, statistics, sys, time
from pathlib import Path
from normbench.store.rundir import RunDir
from normbench.store.index import record_run
runs = Path(sys.argv[1])
names = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))[:20]
took = []
for name in names:
    run = RunDir(runs, name)
    run.write_meta({**run.read_meta(), "note": "touched"})  # as a run's last meta write
    start = time.perf_counter()
    record_run(runs, name)
    took.append(time.perf_counter() - start)
print(json.dumps({"median_ms": statistics.median(took) * 1e3, "max_ms": max(took) * 1e3}))
"""


TARGETS = {
    "report, first use (no index)": "<= 60 s, <= 1024 MB",
    "report, fresh index": "<= 5 s",
    "report --by norm, fresh index": "(10 groups: the store's share)",
    "runs list, fresh index": "<= 5 s",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, help="keep the synthesised store here")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="an older checkout, measured alongside")
    parser.add_argument("--fresh-only", action="store_true", help="skip the first use")
    args = parser.parse_args()
    scratch = None if args.dir else tempfile.mkdtemp(prefix="store_scale-")
    runs = (args.dir or Path(scratch)) / f"runs-{args.runs}"
    try:
        present = (
            len([p for p in runs.iterdir() if p.name.startswith("cnn-")]) if runs.is_dir() else 0
        )
        if present != args.runs:
            shutil.rmtree(runs, ignore_errors=True)
            start = time.perf_counter()
            synthesise(runs, args.runs)
            print(f"synthesised {args.runs} runs in {time.perf_counter() - start:.0f} s")
        normbench = [sys.executable, "-m", "normbench"]
        print(f"{args.runs} runs; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        versions = {"": HERE} | ({" (baseline)": args.baseline.resolve()} if args.baseline else {})
        stores = {"": runs} | ({" (baseline)": twin(runs, args.baseline)} if args.baseline else {})
        names = [f"{name}{v}" for name in TARGETS for v in versions]
        measured: dict[str, list[dict]] = {name: [] for name in names}
        for _ in range(args.repeats):
            if not args.fresh_only:
                drop_index(runs)
                measured["report, first use (no index)"].append(
                    measure([*normbench, "report", str(runs)])
                )
            for name, command in (
                ("report, fresh index", ["report", "{}"]),
                ("report --by norm, fresh index", ["report", "{}", "--by", "norm.name"]),
                ("runs list, fresh index", ["runs", "list", "{}"]),
            ):
                for version, checkout in versions.items():
                    where = [part.format(stores[version]) for part in command]
                    measured[f"{name}{version}"].append(measure([*normbench, *where], checkout))
        update = subprocess.run(
            [sys.executable, "-c", UPDATE_PROBE, str(runs)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print(f"{'measure':<44}{'wall s':>10}{'peak MB':>10}  target")
        for name in names:
            if not measured[name]:
                continue
            wall = statistics.median(m["wall_s"] for m in measured[name])
            peak = max(m["peak_mb"] for m in measured[name])
            print(f"{name:<44}{wall:>10.2f}{peak:>10.0f}  {TARGETS.get(name, '')}")
        update = json.loads(update)
        print(
            f"{'index update after one run':<32}{update['median_ms'] / 1e3:>10.3f}"
            f"{'':>10}  <= 0.050 s (median of 20; max {update['max_ms'] / 1e3:.3f} s)"
        )
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
