"""End to end (issue 62): a tiny width ladder at a fixed train.max_steps trained with the CLI,
then the report its closing line names: that line keeps the reference (the group the ladder
lists first), and the report has a section, so a verdict table, per rung, titled by it."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_a_ladder_closing_line_keeps_its_reference_and_its_report_judges_each_rung(tmp_path):
    runs = tmp_path / "runs"
    sweep = [
        "sweep",
        "--name",
        "lad",
        "--ladder",
        "model.width=4,6,8",
        "model=cnn",
        "model.depth=1",
        "data=mnist1d",
        "data.num_samples=400",
        "norm=layernorm,batchnorm",  # LayerNorm listed first, BatchNorm first by name
        "seed=0",
        "train.max_steps=2",
        "train.eval_every=2",
        "threads=1",
        "--runs-dir",
        str(runs),
        "--yes",
    ]
    trained = runner.invoke(app, sweep)
    assert trained.exit_code == 0, trained.output
    (line,) = [line for line in trained.output.splitlines() if line.startswith("results: ")]
    assert (
        line
        == f"results: normbench report --sweep lad --runs-dir {runs} --reference norm=layernorm"
    )
    command = shlex.split(line.removeprefix("results: normbench "))
    reported = runner.invoke(app, [*command, "--format", "json"])
    assert reported.exit_code == 0, reported.output
    payload = json.loads(reported.stdout)
    assert [s["setting"] for s in payload["sections"]] == [
        {"model.width": width} for width in (4, 6, 8)
    ]
    references = [row for row in payload["convergence"] if row["verdict"] == "reference"]
    assert [(r["model.width"], r["norm.name"]) for r in references] == [
        (4, "layernorm"),
        (6, "layernorm"),
        (8, "layernorm"),
    ]
    text = runner.invoke(app, ["report", "--sweep", "lad", "--runs-dir", str(runs)]).output
    assert "== model.width=4 ==" in text and "== train.max_steps" not in text
