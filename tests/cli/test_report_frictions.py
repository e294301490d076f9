"""A newcomer's slips at `normbench report` (issue 62): a sweep's name where the runs directory
goes is named as one, with the command meant; a misspelt filter gets one short line with the
key it meant, not the fifty keys of a run."""

from __future__ import annotations

import json

from helpers import make_run, one_line
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


def test_a_sweep_name_given_as_the_runs_directory_is_named_as_a_sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./smoke here: smoke is a preset's name
    out = runner.invoke(app, ["report", "smoke"])
    one_line(out, "smoke is a sweep's name: normbench report --sweep smoke")
    assert "train something first" not in out.output
    runs = tmp_path / "mine"
    make_run(runs, ["norm=layernorm", "seed=0"])
    (runs / "sweeps").mkdir()
    record = {"name": "lad", "started": "2026-01-01T00:00:00", "runs": []}
    (runs / "sweeps" / "lad-20260101-000000-abc123.json").write_text(json.dumps(record))
    out = runner.invoke(app, ["report", "lad", "--runs-dir", str(runs)])
    one_line(out, f"lad is a sweep's name: normbench report --sweep lad --runs-dir {runs}")
    out = runner.invoke(app, ["report", "nothere"])  # neither: as before
    one_line(out, "runs directory nothere does not exist; train something first")


def test_a_misspelt_filter_is_one_short_line_with_the_key_meant(tmp_path):
    runs = tmp_path / "runs"
    for norm in ("layernorm", "rmsnorm"):
        make_run(runs, [f"norm={norm}", "seed=0"])
    for option in (["nrom=layernorm"], ["--by", "nrom"]):
        out = runner.invoke(app, ["report", str(runs), *option])
        one_line(out, "no key 'nrom' in these runs (did you mean norm?)", "valid: norm (vary here)")
        assert len(out.output) < 200, (len(out.output), out.output)
