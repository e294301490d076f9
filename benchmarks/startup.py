"""Start-up: `normbench --help` and `normbench list` (target <= 0.3 s, no torch import), and
a one-step `normbench run` with the data cache warm against `python -c "import torch"`
(target: at most 1.0 s more). The one-step run includes its set-up, one training step, one
evaluation and writing the run directory.

Run: python benchmarks/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

# The floor of any PyTorch training script: torch's optimizers import torch._dynamo on their
# first step (about 1 s here), which `import torch` alone does not pay.
FIRST_STEP = (
    "import torch; w = torch.zeros(4, requires_grad=True); "
    "o = torch.optim.AdamW([w]); w.sum().backward(); o.step()"
)


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    normbench = [sys.executable, "-m", "normbench"]
    one_step = ["run", "-q", "train.max_steps=1", "device=cpu", "--force"]
    with tempfile.TemporaryDirectory() as runs:
        wall([*normbench, *one_step, "--runs-dir", runs])  # warm the data cache
        rows = {
            "normbench --help": [*normbench, "--help"],
            "normbench list": [*normbench, "list"],
            'python -c "import torch"': [sys.executable, "-c", "import torch"],
            "plain PyTorch first AdamW step": [sys.executable, "-c", FIRST_STEP],
            "normbench run (1 step, warm cache)": [*normbench, *one_step, "--runs-dir", runs],
        }
        times = {
            name: statistics.median(wall(cmd) for _ in range(args.repeats))
            for name, cmd in rows.items()
        }
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
    print(f"wall seconds, median of {args.repeats}")
    print(f"{'command':<40}{'seconds':>9}{'target':>22}")
    print(f"{'normbench --help':<40}{times['normbench --help']:>9.2f}{'<= 0.30':>22}")
    print(f"{'normbench list':<40}{times['normbench list']:>9.2f}{'<= 0.30':>22}")
    print(f"{'  imports torch?':<40}{imported:>9}{'False':>22}")
    torch_s = times['python -c "import torch"']
    run_s = times["normbench run (1 step, warm cache)"]
    first_s = times["plain PyTorch first AdamW step"]
    print(f"{'python -c import torch':<40}{torch_s:>9.2f}")
    print(f"{'plain PyTorch: import + first AdamW step':<40}{first_s:>9.2f}")
    print(f"{'normbench run, 1 step':<40}{run_s:>9.2f}")
    print(f"{'  more than importing torch':<40}{run_s - torch_s:>9.2f}{'<= 1.00':>22}")
    print(f"{'  more than plain first step':<40}{run_s - first_s:>9.2f}")


if __name__ == "__main__":
    main()
