"""Before a sweep starts: overrides without a preset say they are a grid of their own, a bare
`normbench sweep` shows its question and estimate and asks on a terminal, and --dry-run's
listing lines up."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from normbench.cli import app
from normbench.sweeps import grid as grids
from normbench.sweeps import live

runner = CliRunner()


def test_overrides_without_a_preset_say_how_to_add_them_to_the_default(tmp_path):
    result = runner.invoke(
        app, ["sweep", "norm=rmsnorm", "--dry-run", "--runs-dir", str(tmp_path / "runs")]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1].startswith("no preset named: the grid is these overrides alone")
    assert lines[-1].endswith("normbench sweep batch_sensitivity norm=rmsnorm")
    assert "sweep grid: 1 combination" in lines and "1 combinations" not in result.output
    assert lines[-2] == "1 run: 1 missing; 1 to run"


def test_the_dry_run_header_stands_apart_and_its_columns_line_up(tmp_path):
    result = runner.invoke(
        app,
        ["sweep", "smoke", "--dry-run", "--runs-dir", str(tmp_path / "runs")],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    title, header, *rows, blank, summary = result.output.splitlines()
    assert title == "sweep smoke: 4 combinations" and blank == ""
    assert header.split() == ["#", "norm", "batch_size", "now", "action", "run", "id"]
    starts = [m.start() for m in re.finditer(r"\S+", rows[0])]
    for row in rows:  # every cell starts where the header's does
        assert [m.start() for m in re.finditer(r"\S+", row)] == starts
    assert header.index("run id") == starts[-1]
    assert summary == "4 runs: 4 missing; 4 to run"


def test_a_bare_sweep_shows_the_question_and_estimate_and_asks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(live, "interactive", lambda: True)
    result = runner.invoke(app, ["sweep"], input="n\n")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("batch_sensitivity: Does BatchNorm fall apart")
    assert "39 runs to train, 23,400 steps; the preset measured 5 minutes on 2 cores" in (
        result.output
    )
    assert result.output.rstrip().endswith("not started; nothing written")
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_of_execution_settings_alone_is_the_default_preset_and_asks(tmp_path, monkeypatch):
    """`normbench sweep threads=1` (the README's advice on a shared machine) is the default
    preset at one thread, shown and asked first: not one default run started unasked."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(live, "interactive", lambda: True)
    result = runner.invoke(app, ["sweep", "threads=1"], input="n\n")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("batch_sensitivity: Does BatchNorm fall apart")
    assert "39 runs to train" in result.output and "no preset named" not in result.output
    assert result.output.rstrip().endswith("not started; nothing written")
    assert list(tmp_path.iterdir()) == []


def test_piped_or_with_nothing_to_train_it_does_not_ask(monkeypatch, capsys):
    from rich.console import Console

    def refuse(*args, **kwargs):
        raise AssertionError("asked")

    monkeypatch.setattr(typer, "confirm", refuse)
    sweep = grids.expand("smoke", [])
    monkeypatch.setattr(live, "interactive", lambda: False)
    assert live.confirm_start(Console(), "smoke", sweep, sweep.jobs)
    monkeypatch.setattr(live, "interactive", lambda: True)
    assert live.confirm_start(Console(), "smoke", sweep, [])
    out = capsys.readouterr().out
    assert "4 runs to train, 600 steps; no measured time in the preset's header" in out
