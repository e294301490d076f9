"""The report's formats: JSON and CSV carry every column, CSV is safe to open, markdown is
well formed, the terminal's tables fit 80 and 100 columns and lose no word."""

from __future__ import annotations

import json
import re
from io import StringIO

import pandas as pd
import pytest
from helpers import make_run, user_norm_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report.base import ACCURACY, BITS_PER_BYTE
from normbench.report.markdown import markdown
from normbench.report.sections import build
from normbench.report.text import bounded_ci
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
def test_a_wide_report_fits_the_terminal_one_line_a_row(tmp_path, columns):
    """Three grouping keys, long names and a params column: at 80 and at 100 columns every
    row of every table is one line (the difference and its interval never wrap), columns that
    do not fit give way (reason, params, target, test) and the caption says which, and every
    caption wraps at the terminal's width instead of being cropped."""
    runs = tmp_path / "runs"
    for norm, ws, params in (("instancenorm", "false", 1234), ("switchnorm", "true", 1290)):
        for ghost in (2, 32):
            for seed in range(3):
                overrides = [f"norm={norm}", f"model.weight_std={ws}", f"norm.ghost_batch={ghost}"]
                overrides.append("placement=res_post")  # where WS applies (a norm follows)
                make_run(
                    runs, [*overrides, f"seed={seed}"], acc=0.9 + 0.01 * seed, parameters=params
                )
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns
    verdicts = r"\b(reference|equivalent|worse|inconclusive|sensitive|insensitive)\b"
    rows = [line for line in lines if line.startswith((" instancenorm", " switchnorm"))]
    assert len(rows) == 3 + 2 and all(re.search(verdicts, row) for row in rows), rows
    assert all(re.search(r"[+-]0\.\d{3} ±0\.\d{3}", row) for row in rows[1:3]), rows
    following = [lines[lines.index(row) + 1] for row in rows]
    assert not any(line.strip() and not line.startswith(" ") for line in following[:-1])
    assert not any(re.match(r" {10,}\S", line) for line in following)  # nothing wrapped
    text = " ".join(" ".join(lines).split())
    for words in (
        "d/f: diverged/failed runs",
        "both Holm-adjusted over the rows; alpha 0.05.",
        "Intervals are per comparison, not adjusted; the verdicts are Holm-adjusted",
    ):
        assert words in text, words
    if columns == 100:  # the reason column gives way first (issue 50, item 13)
        assert "to 0.85 d/f" in text and "Left out at this width: reason (" in text
        assert "params: trainable parameters (a difference may come from capacity)" in text
    else:  # then params, before target and test
        assert "Left out at this width: reason, params, to 0.85 (" in text
        assert "to 0.85:" not in text and "params:" not in text and " test " in text


@pytest.mark.parametrize("columns", [80, 100])
def test_the_tutorials_report_reads_at_80_and_100_columns(tmp_path, columns):
    """docs/your-own-norm.md's comparison (PowerNorm's long name beside shipped norms, ghost
    batches 2 and 32): one line a row, no cut number, no cut verdict."""
    runs = tmp_path / "runs"
    for seed in range(3):
        for norm, ghost, acc in (
            ("batchnorm", 2, 0.9),
            ("batchnorm", 32, 0.95),
            ("rmsnorm", 32, 0.8),
        ):
            make_run(
                runs,
                [f"norm={norm}", f"norm.ghost_batch={ghost}", f"seed={seed}"],
                acc=acc + seed / 50,
            )
        user_norm_run(runs, 2.0, seed, 0.7 + seed / 100)
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns and "…" not in result.output
    rows = [line for line in lines if line.startswith((" batchnorm", " rmsnorm", " mynorms"))]
    assert len(rows) == 4 + 3  # convergence and batch sensitivity, one line each
    assert all(
        re.search(r"\b(reference|inconclusive|worse|sensitive|insensitive)\b", r) for r in rows
    )
    assert "mynorms:PowerNorm(p=2)" in result.output and "_target_" not in result.output


def test_markdown_tables_and_captions_are_the_terminals(study):
    """Markdown shows the terminal's columns, every one, under the terminal's captions (it
    had every frame column, 25 of them: CSV and JSON keep those; issue 50, item 13)."""
    text = markdown(build(load_runs(study)), None)
    captions = [b for b in text.split("\n\n") if b.startswith(("Verdicts on", "Batch sens"))]
    assert len(captions) == 2
    assert "Δ best: difference to the best" in captions[0] and "d/f: diverged" in captions[0]
    assert "| n | val acc | test | Δ best | verdict | to 0.85 | d/f | reason |" in text
    assert "diff\\_vs\\_best" not in text and "p\\_worse\\_adj" not in text


def test_an_accuracy_interval_is_shown_inside_0_and_1():
    assert bounded_ci(0.627, 0.559, ACCURACY) == ("0.627 [0.068, 1.000]", True)
    assert bounded_ci(0.05, 0.1, ACCURACY) == ("0.050 [0.000, 0.150]", True)
    assert bounded_ci(0.5, 0.1, ACCURACY) == ("0.500 ±0.100", False)
    assert bounded_ci(0.5, 0.9, BITS_PER_BYTE) == ("0.500 ±0.900", False)  # no upper bound


@pytest.fixture
def mixed(tmp_path):
    """A store of two data sets (their options differ), a batch contrast by ghost batches, a
    norm that ignores them (the same runs in each column) and a lone run."""
    runs = tmp_path / "runs"
    for seed in range(3):
        for norm in ("batchnorm", "layernorm"):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=0.8 + 0.01 * seed)
        for norm, ghost, acc in (
            ("batchnorm", 2, 0.8),
            ("batchnorm", 32, 0.9),
            ("groupnorm", 2, 0.9),
        ):
            at = [f"norm={norm}", f"norm.ghost_batch={ghost}", f"seed={seed}", "data=digits"]
            make_run(runs, at, acc=acc + 0.01 * seed)
    make_run(runs, ["norm=rmsnorm", "seed=5", "data=digits", "placement=post"], acc=0.7)
    return runs


def test_a_mixed_store_reads_in_one_pass_and_the_formats_agree(mixed):
    """Issue 50, items 12 and 13: section headers name only the keys their runs have; a
    legend is printed once; notes come before the tables; a lone run has no verdict; piped
    lines carry no trailing spaces; the terminal's table shows each verdict's reason where it
    fits and drops params before test where it does not; the batch table says "same runs";
    markdown has the terminal's columns, and ``p < alpha`` as written."""
    wide = runner.invoke(app, ["report", str(mixed)], env={"COLUMNS": "120"})
    assert wide.exit_code == 0, wide.output
    headers = [line for line in wide.output.splitlines() if line.startswith("== ")]
    assert headers and not any("=-" in line for line in headers), headers
    assert wide.output.count("Verdicts on validation acc") == 1
    assert wide.output.count("legend: as under the same table above") == 1
    assert not any(line.endswith(" ") for line in wide.output.splitlines())
    lone = next(line for line in wide.output.splitlines() if line.startswith(" rmsnorm"))
    assert "- (one run)" in lone and "inconclusive" not in lone  # its convergence row
    assert re.search(r"verdict +to 0\.85 +d/f +reason", wide.output)
    assert "paired, 3 seeds" in wide.output and "same runs" in wide.output
    narrow = runner.invoke(app, ["report", str(mixed)], env={"COLUMNS": "80"})
    assert "Left out at this width: reason, to 0.85" in narrow.output  # params: none to drop
    assert re.search(r" n +val acc +test ", narrow.output)  # test stays
    assert re.search(r"groupnorm +pre +0\.910 +0\.910 +same runs +insensitive", narrow.output)
    md = runner.invoke(app, ["report", str(mixed), "--format", "markdown"]).output
    assert "| norm | placement | ghost | n | val acc | test | Δ best | verdict |" in md
    assert "p < alpha" in md and "&lt;" not in md and "p\\_worse\\_adj" not in md
