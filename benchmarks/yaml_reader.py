"""The YAML reader (issue 33, item 3): normbench.core.files.parse_yaml now (PyYAML's C loader:
libyaml composes the nodes, capping nesting at 1,000 levels; the nodes are checked for an
alias, a merge key, an explicit tag and nesting past MAX_DEPTH before anything is built)
against the reader it replaced (the C parser's events built into values by normbench's own
code), loaded from git (``--baseline``, a commit) into this process. Both read a store's top-
level entries once per distinct entry text (a cache they share the design of). Both read the
same N config.yaml texts of a run store (or N configs composed here), alternately, several
rounds; the median of each is shown, and the ratio.

Run: python benchmarks/yaml_reader.py [--runs-dir DIR] [--count 100000] [--rounds 3]
     [--baseline 72cbd30]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from normbench.core import files

HERE = Path(__file__).resolve().parents[1]


def baseline_reader(commit: str):
    """core/files.py at ``commit``, imported as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(HERE), "show", f"{commit}:normbench/core/files.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "files_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("files_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["files_baseline"] = module
    spec.loader.exec_module(module)
    return module


def store_texts(runs_dir: Path, count: int) -> list[bytes]:
    names = sorted(p.name for p in runs_dir.iterdir() if p.name.startswith("cnn-"))[:count]
    return [(runs_dir / name / "config.yaml").read_bytes() for name in names]


def composed_texts(count: int) -> list[bytes]:
    """``count`` configs as normbench writes them (OmegaConf's YAML), seeds the slowest axis."""
    from omegaconf import OmegaConf

    from normbench.experiment.compose import compose

    cells = list(
        itertools.product(
            ("batchnorm", "layernorm", "groupnorm", "rmsnorm", "switchnorm"),
            (8, 16, 32, 64),
            (1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
        )
    )
    bases = {norm: compose(["model=cnn", f"norm={norm}"]) for norm, _, _ in cells}
    texts = []
    for i in range(count):
        norm, batch, lr = cells[i % len(cells)]
        cfg = {**bases[norm], "batch_size": batch, "seed": i // len(cells)}
        cfg["train"] = {**cfg["train"], "lr": lr}
        texts.append(OmegaConf.to_yaml(OmegaConf.create(cfg)).encode())
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, help="read the configs of this store")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="72cbd30", help="the commit of the old reader")
    args = parser.parse_args()
    texts = store_texts(args.runs_dir, args.count) if args.runs_dir else composed_texts(args.count)
    old = baseline_reader(args.baseline)
    for text in texts[:2000]:  # the same values
        assert files.parse_yaml(text, "f") == old.parse_yaml(text, "f")
    readers = {"before (events)": old.parse_yaml, "now (C loader)": files.parse_yaml}
    took: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(args.rounds):
        for name, read in readers.items():
            start = time.perf_counter()
            for text in texts:
                read(text, "f")
            took[name].append(time.perf_counter() - start)
    before = statistics.median(took["before (events)"])
    print(f"{len(texts)} configs, median of {args.rounds} rounds")
    for name, values in took.items():
        median = statistics.median(values)
        print(
            f"{name:<18}{median:>8.2f} s{median / len(texts) * 1e3:>9.3f} ms each"
            f"{median / before:>8.2f}x"
        )
    start = time.perf_counter()  # uncached: every config read whole, as an odd one is
    for text in texts[:1000]:
        old._yaml_value(text.decode())
    whole_before = time.perf_counter() - start
    start = time.perf_counter()
    for text in texts[:1000]:
        files._yaml_value(text.decode())
    whole_now = time.perf_counter() - start
    print(
        f"one document read whole (no entry cache), 1,000 configs: before {whole_before:.2f} s,"
        f" now {whole_now:.2f} s ({whole_now / whole_before:.2f}x)"
    )


if __name__ == "__main__":
    main()
