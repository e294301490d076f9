"""`runs list` at 80 and 100 columns: every line fits, no choice is cut in two, and runs that
differ only outside the headline choices (model.width, train.max_steps) read apart."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from normbench.cli import app
from normbench.cli.runs import _wrap, columns
from tests.helpers import make_run

runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("store") / "runs"
    make_run(runs, ["norm=instancenorm", "seed=0", "model.width=8"])
    make_run(runs, ["norm=instancenorm", "seed=0", "model.width=16"])
    make_run(runs, ["norm=groupnorm", "seed=1", "train.max_steps=40"])
    return runs


@pytest.mark.parametrize("width", [80, 100])
def test_runs_list_fits_and_keeps_every_choice_whole(runs, width):
    result = runner.invoke(app, ["runs", "list", str(runs)], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= width for line in lines), lines
    words = result.output.split()
    for choice in ("norm=instancenorm", "norm=groupnorm", "model.width=8", "model.width=16"):
        assert choice in words
    assert "tags" not in lines[0]  # no run has one: no empty column


def test_runs_differing_outside_the_headline_read_apart(runs):
    result = runner.invoke(app, ["runs", "list", str(runs)], env={"COLUMNS": "200"})
    rows = [line for line in result.output.splitlines() if "instancenorm" in line]
    assert len(rows) == 2 and len({line.split("  ")[2] for line in rows}) == 2, rows
    assert any("model.width=16" in row for row in rows)


def test_a_column_too_narrow_for_its_words_moves_below_the_row():
    rows = [["a" * 30, "norm=instancenorm seed=0", "x"]]
    lines = columns(["id", "choices", "r"], rows, 40, wrap=("choices",), below="choices")
    assert lines == [
        "id" + " " * 30 + "r",
        "  choices",
        "a" * 30 + "  x",
        "  norm=instancenorm seed=0",
    ]
    assert _wrap("norm=instancenorm seed=0", 10) == ["norm=instancenorm", "seed=0"]
