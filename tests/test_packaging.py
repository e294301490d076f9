"""The wheel: built without a warning, it holds conf/, and `normbench list` works
from it installed outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_builds_quietly_and_works_outside_the_checkout(tmp_path):
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    output = built.stdout + built.stderr
    assert "warning" not in output.replace("WARNING: Location", "").lower(), output
    (wheel,) = tmp_path.glob("normbench-*.whl")
    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    assert (target / "normbench" / "conf" / "sweep" / "batch_sensitivity.yaml").is_file()
    registered = target / "normbench" / "studies" / "registered"  # the findings' claims
    assert (registered / "xiong-warmup.yaml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "100"}
    listed = subprocess.run(
        [sys.executable, "-m", "normbench", "list"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr
    assert "batch_sensitivity" in listed.stdout and "layernorm" in listed.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import normbench; print(normbench.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert where.stdout.startswith(str(target))  # the wheel's copy, not the checkout's
