"""End to end: a tiny width ladder trained with the CLI (3 widths x 2 norms x 2 seeds of
the causal LM, 4 steps each), then ``report --scaling model.width --format json``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from normbench.cli import app
from tests.helpers import scaling_report
from tests.report.test_scaling_section import ROW_KEYS

runner = CliRunner()


@pytest.mark.slow
def test_a_trained_width_ladder_reports_its_scaling_section(tmp_path):
    runs = tmp_path / "runs"
    trained = runner.invoke(
        app,
        [
            "sweep",
            "model=transformer",
            "data=pysource",
            "model.width=8,12,16",
            "norm=layernorm,rmsnorm",
            "seed=0,1",
            "train.max_steps=4",
            "train.warmup_steps=1",
            "train.eval_every=4",
            "data.eval_windows=8",
            "threads=1",
            "--runs-dir",
            str(runs),
            "--yes",
        ],
    )
    assert trained.exit_code == 0, trained.output
    payload = scaling_report(runs)
    rows = {row["group"]: row for row in payload["scaling"]}
    assert set(rows) == {"norm=layernorm", "norm=rmsnorm"}
    for row in rows.values():
        assert set(row) >= ROW_KEYS
        assert row["reference"] == "norm=layernorm"
        assert row["loss"] == "final_val_bpb" and row["rungs"] == 3
    assert rows["norm=rmsnorm"]["trend"] in ("shrinking", "growing", "constant", "inconclusive")
    assert len(payload["scaling_rungs"]) == 2 * (3 + 2)
