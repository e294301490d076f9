"""What a sweep record says is checked before it is believed (issue 62, M6): a record whose
runs are all absent names them, and a ``started`` that is no timestamp, or lies after the file
was written, never makes a record the sweep's newest."""

from __future__ import annotations

import json
import os

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


@pytest.fixture
def runs(tmp_path):
    """Two runs of LayerNorm, and a record of sweep s that lists them."""
    runs = tmp_path / "runs"
    ids = [make_run(runs, ["norm=layernorm", f"seed={seed}"]) for seed in range(2)]
    (runs / "sweeps").mkdir()
    record = {"name": "s", "started": "2026-01-01T00:00:00", "runs": [{"run_id": i} for i in ids]}
    (runs / "sweeps" / "s-20260101-000000-aaa111.json").write_text(json.dumps(record))
    return runs


def test_a_record_whose_runs_are_all_absent_names_them(runs):
    (path,) = (runs / "sweeps").glob("*.json")
    absent = ["cnn-layernorm-pre-fp32-b32-s7-00000001", "cnn-layernorm-pre-fp32-b32-s8-00000002"]
    path.write_text(json.dumps({"name": "s", "runs": [{"run_id": r} for r in absent]}))
    result = runner.invoke(app, ["report", "--sweep", "s", "--runs-dir", str(runs)])
    assert result.exit_code == 2, result.output
    warning, error = result.output.strip().splitlines()
    assert warning == f"warning: 2 runs of the sweep have no results yet ({', '.join(absent)})"
    assert error.startswith("normbench: error: no readable runs among those selected")
    assert "skipped" not in error and "name each run" not in error


@pytest.mark.parametrize("started", ["9999", "9999-12-31T00:00:00", 20990101, None])
def test_a_record_started_at_no_trusted_time_never_hides_the_newest(runs, started):
    """A later-written record whose ``started`` is no timestamp (or after the file was written)
    and lists no runs: the real record, written before it, is still the sweep's newest."""
    (real,) = (runs / "sweeps").glob("*.json")
    fake = runs / "sweeps" / "s-20991231-000000-bbb222.json"
    fake.write_text(json.dumps({"name": "s", "started": started, "runs": []}))
    os.utime(real, (1_770_000_000, 1_770_000_000))  # written in 2026-02, before the fake
    result = runner.invoke(app, ["report", "--sweep", "s", "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("2 runs (2 complete)"), result.output
