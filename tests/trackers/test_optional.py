"""The trackers are an optional extra: without them, what needs one says in one line what to
install, exits 2 and writes nothing; and what does not need one never imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import make_run, tiny
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()
INSTALL = "pip install 'normbench[tracking]'"


def one_line_exit_2(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normbench: error: "), result.output
    return lines[0]


def test_log_tensorboard_without_tensorboard_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    result = runner.invoke(app, ["run", *tiny("log.tensorboard=board")])
    line = one_line_exit_2(result)
    assert f"log.tensorboard={tmp_path / 'board'} needs tensorboard" in line and INSTALL in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("to", "destination", "absent"),
    [("tensorboard", "board", "tensorboard"), ("mlflow", "sqlite:///m.db", "sqlalchemy")],
)
@pytest.mark.tracking
def test_export_without_its_tracker_writes_nothing(tmp_path, monkeypatch, to, destination, absent):
    """One module of the extra missing, the rest installed: the line names that one."""
    for present in {"tensorboard": ["tensorboard"], "mlflow": ["mlflow", "sqlalchemy"]}[to]:
        if present != absent:
            pytest.importorskip(present, reason="the tracking extra")
    make_run(tmp_path / "runs", ["norm=batchnorm"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, absent, None)
    line = one_line_exit_2(runner.invoke(app, ["runs", "export", "--to", to, destination]))
    assert f"--to {to} needs {absent}, which is not installed: {INSTALL}" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


@pytest.mark.tracking
def test_export_refuses_an_unknown_tracker_and_an_empty_selection(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=batchnorm"])
    line = one_line_exit_2(runner.invoke(app, ["runs", "export", "--to", "wandb", "x", str(runs)]))
    assert line.endswith("--to wandb: valid: tensorboard, mlflow")
    pytest.importorskip("tensorboard", reason="the tracking extra")  # else that is the refusal
    result = runner.invoke(app, ["runs", "export", "--to", "tensorboard", "x", str(runs), "seed=7"])
    assert "no runs match" in one_line_exit_2(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_the_dataframe_api_report_and_export_help_import_neither_torch_nor_a_tracker(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=batchnorm"])
    make_run(runs, ["norm=groupnorm"])
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        "import normbench.api as nb\n"
        f"nb.runs({str(runs)!r}); nb.metrics({str(runs)!r}); nb.report({str(runs)!r})\n"
        f"for args in (['report', {str(runs)!r}], ['runs', 'export', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "loaded = {'torch', 'tensorboard', 'mlflow'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
