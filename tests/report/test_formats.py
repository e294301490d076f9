"""The report's formats: JSON and CSV carry every column, CSV is safe to open, markdown is
well formed, the terminal's tables fit 80 and 100 columns and lose no word."""

from __future__ import annotations

import json
import re
from io import StringIO

import pandas as pd
import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report.markdown import markdown
from normbench.report.sections import build
from normbench.report.tidy import to_csv, to_json
from normbench.store.catalog import load_runs

runner = CliRunner()


def test_json_and_csv_carry_every_verdict_column(study):
    report = build(load_runs(study))
    payload = json.loads(to_json(report, None))
    row = payload["convergence"][1]
    for column in (
        "verdict",
        "diff_vs_best",
        "diff_ci_low",
        "diff_ci_high",
        "p_worse_adj",
        "p_equivalent_adj",
        "values",
        "test_acc_mean",
        "val_acc_mean",
        "val_acc_ci95",
    ):
        assert column in row
    assert isinstance(row["values"], list) and isinstance(row["n"], int)
    batch = payload["batch_sensitivity"][0]
    for column in ("drop", "drop_ci_low", "drop_ci_high", "verdict", "b2_mean", "b32_mean"):
        assert column in batch
    assert payload["method"]["alpha"] == 0.05 and payload["method"]["margin"] == 0.01
    frame = pd.read_csv(StringIO(to_csv(pd.DataFrame(payload["convergence"]))))
    assert "values" not in frame and {"verdict", "p_equivalent_adj"} <= set(frame)


def test_csv_with_several_tables_writes_one_file_each(study, tmp_path):
    result = runner.invoke(app, ["report", str(study), "--format", "csv"])
    assert result.exit_code == 2 and "pick one with --table" in result.output
    out = tmp_path / "out" / "tables.csv"
    result = runner.invoke(app, ["report", str(study), "--format", "csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in out.parent.iterdir())
    assert written == ["tables-batch_sensitivity.csv", "tables-convergence.csv"]
    result = runner.invoke(
        app, ["report", str(study), "--format", "csv", "--table", "batch_sensitivity"]
    )
    assert pd.read_csv(StringIO(result.stdout))["verdict"].tolist()


def test_csv_cells_cannot_become_formulas():
    frame = pd.DataFrame({"norm.name": ["=HYPERLINK(1)", "+1", "layernorm"], "x": [1.0, -2.0, 3.0]})
    text = to_csv(frame)
    assert "'=HYPERLINK(1)" in text and "'+1" in text and ",-2.0" in text


def test_markdown_tables_are_well_formed(study):
    text = markdown(build(load_runs(study)), None)
    blocks = [b for b in text.split("### ") if b.startswith(("Convergence", "Batch"))]
    assert len(blocks) == 2
    rows = [line for line in blocks[0].splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3
    separators = [len(re.findall(r"(?<!\\)\|", line)) for line in rows]  # "\|" is a cell's
    assert separators == [separators[0]] * len(rows) and separators[0] > 3


def test_cli_report_rich_output_and_plots(study, tmp_path):
    result = runner.invoke(
        app, ["report", str(study), "--plots", str(tmp_path / "img")], env={"COLUMNS": "100"}
    )
    assert result.exit_code == 0, result.output
    assert "Holm-adjusted over every pair of groups" in result.output
    assert "Batch sensitivity" in result.output
    # every line fits, but a written file's path, printed whole so that it can be copied
    lines = [line for line in result.output.splitlines() if not line.startswith("wrote ")]
    assert max(len(line) for line in lines) <= 100
    import matplotlib.image

    for name in ("learning_curves.png", "batch_sensitivity.png"):
        path = tmp_path / "img" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
        assert matplotlib.image.imread(path).std() > 0  # not a blank image


@pytest.mark.parametrize("columns", [80, 100])
def test_a_wide_report_fits_the_terminal_and_loses_no_word(tmp_path, columns):
    """Three grouping keys, long names and a params column: the table fits 80 columns (its
    intervals wrap under their numbers) and 100 (one line a row), and every caption wraps at
    the terminal's width instead of being cropped."""
    runs = tmp_path / "runs"
    for norm, ws, params in (("instancenorm", "false", 1234), ("switchnorm", "true", 1290)):
        for ghost in (2, 32):
            for seed in range(3):
                overrides = [f"norm={norm}", f"model.weight_std={ws}", f"norm.ghost_batch={ghost}"]
                make_run(
                    runs, [*overrides, f"seed={seed}"], acc=0.9 + 0.01 * seed, parameters=params
                )
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "params" in result.output and "d/f" in result.output
    verdicts = r"\b(reference|equivalent|worse|inconclusive|sensitive|insensitive)\b"
    rows = [line for line in lines if line.startswith((" instancenorm", " switchnorm"))]
    assert len(rows) == 3 + 2 and all(re.search(verdicts, row) for row in rows), rows
    text = " ".join(" ".join(lines).split())
    for words in (
        "params: trainable parameters (a difference may come from capacity)",
        "d/f: diverged/failed runs.",
        "both Holm-adjusted over the rows; alpha 0.05.",
        "target d/f",
    ):
        assert words in text, words
