"""A full disk, for real: a 1 MiB tmpfs mounted for the test (as root; skipped elsewhere),
filled to the last byte. `run` says "no space left on device" in one line naming the run,
`run --force` keeps the finished result, `runs clean` removes the half-written directory."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.store.rundir import RunDir

runner = CliRunner()
TINY = ["model=cnn", "model.width=8", "model.depth=1", "train.max_steps=4", "threads=1"]


@pytest.fixture
def disk(tmp_path):
    """A mounted 1 MiB tmpfs, and a function that fills what is left of it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")

    def fill() -> None:
        with open(mount / "filler", "ab", buffering=0) as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 4096)

    yield mount, fill
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_naming_the_run_and_clean_removes_what_it_left(disk):
    mount, fill = disk
    runs = mount / "runs"
    kept = make_run(runs, ["model.width=8", "model.depth=1", "train.max_steps=4", "threads=1"])
    fill()
    forced = runner.invoke(app, ["run", *TINY, "--force", "--runs-dir", str(runs)])
    assert forced.exit_code == 2 and forced.output.count("\n") == 1, forced.output
    assert f"normbench: error: {kept}: no space left on device" in forced.output
    assert RunDir(runs, kept).read_meta()["status"] == "complete" and RunDir(runs, kept).intact()
    assert list((runs / ".staging").iterdir()) == []

    new = runner.invoke(app, ["run", *TINY, "seed=1", "--runs-dir", str(runs)])
    assert new.exit_code == 2 and new.output.count("\n") == 1, new.output
    assert "-s1-" in new.output and "no space left on device" in new.output
    (half,) = [p.name for p in runs.iterdir() if "-s1-" in p.name]  # no meta.json in it

    dry = runner.invoke(app, ["runs", "clean", str(runs), "--dry-run"])
    assert f"would delete {half}" in dry.output and kept not in dry.output
    cleaned = runner.invoke(app, ["runs", "clean", str(runs), "--yes"])
    assert cleaned.exit_code == 0 and "deleted 1 run(s)" in cleaned.output, cleaned.output
    assert not (runs / half).exists() and (runs / kept).is_dir()


def test_a_sweep_on_a_full_disk_is_one_line_before_any_run(disk):
    mount, fill = disk
    fill()
    result = runner.invoke(app, ["sweep", *TINY, "seed=0,1", "--runs-dir", str(mount / "runs")])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "cannot write the sweep record in" in result.output
    assert "No space left on device" in result.output


def test_report_html_on_a_full_disk_names_the_file_and_keeps_the_old_page(disk, tmp_path):
    mount, fill = disk
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    page = mount / "report.html"
    page.write_text("the previous report")
    fill()
    result = runner.invoke(app, ["report", str(runs), "--html", str(page)])
    assert result.exit_code == 2, result.output
    assert f"normbench: error: cannot write {page}: No space left on device" in result.output
    assert page.read_text() == "the previous report"


@pytest.mark.tracking
def test_a_tensorboard_export_onto_a_full_disk_is_one_line(disk, tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra")
    mount, fill = disk
    runs = tmp_path / "runs"
    for seed in range(2):
        make_run(runs, ["norm=layernorm", f"seed={seed}"])
    fill()
    result = runner.invoke(
        app, ["runs", "export", "--to", "tensorboard", str(mount / "tb"), str(runs)]
    )
    assert result.exit_code == 2, result.output
    assert "no space left on device (0 run(s) exported" in result.output
    assert "Traceback" not in result.output and "Exception in thread" not in result.output
