"""Start-up: `normbench --help` and `normbench list` (target <= 0.3 s, no torch import), and
the time from typing `normbench run` to the end of its first training step, data cache warm,
against `python -c "import torch"` (target: at most 1.0 s more). The run records when its
first step ended (meta.json's first_step); the whole one-step run (one evaluation, the test
pass, the files) is shown too.

Run: python benchmarks/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

# The floor of any PyTorch training script: building a torch.optim optimizer imports
# torch._dynamo (about 1 s here), which `import torch` alone does not pay. The script prints
# when its first step ended, as normbench's meta.json records it.
FIRST_STEP = (
    "import time, torch; w = torch.zeros(4, requires_grad=True); "
    "o = torch.optim.AdamW([w]); w.sum().backward(); o.step(); print(time.time())"
)


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def to_first_step(command: list[str], runs: Path | None = None) -> float:
    """Seconds from launch to the end of the first step: printed by the plain script, read
    from meta.json's first_step for a normbench run into ``runs``."""
    start = time.time()
    printed = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if runs is None:
        return float(printed) - start
    (meta,) = runs.glob("*/meta.json")
    first_step = datetime.fromisoformat(json.loads(meta.read_text())["first_step"])
    return first_step.timestamp() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    normbench = [sys.executable, "-m", "normbench"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        one_step = [*normbench, "run", "-q", "train.max_steps=1", "device=cpu", "--force"]
        one_step += ["--runs-dir", str(runs)]
        wall(one_step)  # warm the data cache
        commands = {
            "help": [*normbench, "--help"],
            "list": [*normbench, "list"],
            "torch": [sys.executable, "-c", "import torch"],
            "run": one_step,
        }
        samples: dict[str, list[float]] = {name: [] for name in [*commands, "plain", "first"]}
        for _ in range(args.repeats):  # interleaved, so a busy moment hits every row alike
            for name, command in commands.items():
                samples[name].append(wall(command))
            samples["plain"].append(to_first_step([sys.executable, "-c", FIRST_STEP]))
            samples["first"].append(to_first_step(one_step, runs))
    times = {name: statistics.median(values) for name, values in samples.items()}
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from normbench.cli import app; from typer.testing "
            "import CliRunner; CliRunner().invoke(app, ['list']); print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    first = times["first"]
    rows = [
        ("normbench --help", f"{times['help']:.2f}", "<= 0.30"),
        ("normbench list", f"{times['list']:.2f}", "<= 0.30"),
        ("  imports torch?", imported, "False"),
        ('python -c "import torch"', f"{times['torch']:.2f}", ""),
        ("plain PyTorch: to the end of step 1", f"{times['plain']:.2f}", ""),
        ("normbench run: to the end of step 1", f"{first:.2f}", ""),
        ("  more than importing torch", f"{first - times['torch']:.2f}", "<= 1.00"),
        ("  more than plain PyTorch's first step", f"{first - times['plain']:.2f}", ""),
        ("normbench run, 1 step, whole", f"{times['run']:.2f}", ""),
    ]
    print(f"wall seconds, median of {args.repeats}")
    print(f"{'command':<42}{'seconds':>9}{'target':>10}")
    for name, value, target in rows:
        print(f"{name:<42}{value:>9}{target:>10}")


if __name__ == "__main__":
    main()
