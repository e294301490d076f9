"""The run store: atomic files and the metrics schema."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from normbench.store.rundir import METRIC_COLUMNS, RunDir, atomic_write


def test_atomic_write_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "meta.json"
    atomic_write(target, "first")
    atomic_write(target, b"second")
    assert target.read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "meta.json"
    atomic_write(target, "complete")
    with pytest.raises(TypeError):
        atomic_write(target, 12345)  # not bytes: fails after the temporary file is open
    assert target.read_text() == "complete"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_metrics_round_trip_with_every_column(tmp_path):
    run = RunDir(tmp_path, "r")
    run.path.mkdir()
    rows = [
        {
            "step": 10,
            "epoch": 0.1,
            "samples": 320,
            "elapsed_s": 1.0,
            "lr": 1e-3,
            "train_loss": 2.0,
            "train_acc": 0.2,
            "val_loss": math.nan,
            "val_acc": math.nan,
            "grad_norm": 1.5,
        }
    ]
    run.write_metrics(rows)
    frame = pd.read_parquet(run.metrics_path)
    assert list(frame.columns) == list(METRIC_COLUMNS)
    assert frame["step"].dtype == "int64" and frame.loc[0, "train_loss"] == 2.0


def test_unreadable_meta_reads_as_missing(tmp_path):
    run = RunDir(tmp_path, "r")
    run.path.mkdir()
    (run.path / "meta.json").write_text("{half")
    assert run.read_meta() is None and run.status() is None
