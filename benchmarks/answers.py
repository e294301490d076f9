"""Commands that train nothing (issue 31: "about a second"), against `python -c "import torch"`:
a refused norm, a refused value, `run --cfg`, a finished run kept, a preset's `sweep --dry-run`,
and the time from launching a sweep to its first line (then it is stopped). Each is run as a
subprocess; with ``--baseline CHECKOUT`` the same command runs with that checkout's normbench
first on PYTHONPATH, interleaved with this one's, so both see the same load. The table gives
medians in seconds and each as a ratio to importing torch.

Run: python benchmarks/answers.py [--repeats 5] [--baseline /path/to/an/older/checkout]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TINY = ["model=cnn", "model.width=8", "model.depth=1", "train.max_steps=20", "threads=1"]


def commands(runs: Path) -> dict[str, list[str]]:
    """Each measured command (its arguments after `python -m normbench`)."""
    where = ["--runs-dir", str(runs)]
    return {
        "run norm=fancy (refused)": ["run", "norm=fancy", *where],
        "run model=cnn threads=0 (refused)": ["run", "model=cnn", "threads=0", *where],
        "run --cfg": ["run", "--cfg", *where],
        "run, finished run kept": ["run", "-q", *TINY, *where],
        "sweep smoke --dry-run": ["sweep", "smoke", "--dry-run", *where],
        "sweep suite --dry-run (205 runs)": ["sweep", "suite", "--dry-run", *where],
        "sweep smoke: its first line": ["sweep", "smoke", "--jobs", "1", *where],
    }


def environment(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout)}


def wall(command: list[str], env: dict[str, str], cwd: str, first_line: bool = False) -> float:
    """Seconds the command took, started in ``cwd`` (not a checkout: `python -m` would import
    the normbench of its working directory); with ``first_line``, until it printed its first
    line, after which it (a sweep that would train) is stopped with its process group."""
    start = time.perf_counter()
    if not first_line:
        subprocess.run(command, env=env, cwd=cwd, capture_output=True)
        return time.perf_counter() - start
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    process.stdout.readline()
    seconds = time.perf_counter() - start
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    args = parser.parse_args()
    versions = {"this": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    python = [sys.executable, "-m", "normbench"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        subprocess.run(  # the finished run the "kept" row finds
            [*python, "run", "-q", *TINY, "--runs-dir", str(runs)],
            env=environment(HERE),
            cwd=tmp,
            check=True,
            capture_output=True,
        )
        measured = commands(runs)
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeats):  # interleaved: a busy moment hits every row alike
            samples.setdefault(("torch", ""), []).append(
                wall([sys.executable, "-c", "import torch"], environment(HERE), tmp)
            )
            for name, arguments in measured.items():
                for version, checkout in versions.items():
                    samples.setdefault((name, version), []).append(
                        wall(
                            [*python, *arguments],
                            environment(checkout),
                            tmp,
                            "first line" in name,
                        )
                    )
    torch_s = statistics.median(samples[("torch", "")])
    print(f"wall seconds, median of {args.repeats}; ratio: / `import torch` ({torch_s:.2f} s)")
    header = "".join(f"{v + ' s':>12}{v + ' ratio':>14}" for v in versions)
    print(f"{'command':<36}{header}")
    for name in measured:
        cells = ""
        for version in versions:
            seconds = statistics.median(samples[(name, version)])
            cells += f"{seconds:>12.2f}{seconds / torch_s:>14.2f}"
        print(f"{name:<36}{cells}")


if __name__ == "__main__":
    main()
