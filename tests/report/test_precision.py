"""The precision table: each lower precision against fp32."""

from __future__ import annotations

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report.base import Method
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


def test_precision_table_contrasts_each_precision_with_fp32(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(3):
        make_run(runs, ["precision=fp32", f"seed={seed}"], acc=0.900 + seed / 1000)
        make_run(runs, ["precision=bf16", f"seed={seed}"], acc=0.899 + seed / 1000)
        make_run(runs, ["precision=fp16", f"seed={seed}"], acc=0.700 + seed / 1000)
    make_run(runs, ["precision=fp16", "seed=3"], status="diverged", acc=0.5)
    (section,) = build(load_runs(runs)).sections
    row = section.tables["precision"].iloc[0]
    assert row["bf16_delta"] == pytest.approx(-0.001)
    assert row["bf16_verdict"] == "equivalent"
    assert row["fp16_mean"] == pytest.approx((0.700 + 0.701 + 0.702 + 0.1) / 4)  # at chance
    assert row["fp16_diverged"] == 1 and row["fp16_n"] == 4
    # paired on the three seeds both precisions have: fp16 is 0.2 lower at each
    assert row["fp16_verdict"] == "worse"
    (section,) = build(load_runs(runs), method=Method(diverged="exclude")).sections
    row = section.tables["precision"].iloc[0]
    assert row["fp16_verdict"] == "worse"
    assert row["fp16_delta_ci_low"] <= row["fp16_delta"] <= row["fp16_delta_ci_high"] < 0
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": "120"})
    assert "equivalent" in result.output and "worse" in result.output
