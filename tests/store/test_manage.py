"""normbench runs list|show|diff|clean, --tag/--note, --version."""

from __future__ import annotations

import json

import pytest
from helpers import make_run, tiny
from typer.testing import CliRunner

from normbench import __version__
from normbench.cli import app
from normbench.store.rundir import RunDir

runner = CliRunner()


@pytest.fixture
def store(tmp_path):
    runs = tmp_path / "runs"
    ids = {
        "bn0": make_run(runs, ["norm=batchnorm", "seed=0"], acc=0.91),
        "bn1": make_run(runs, ["norm=batchnorm", "seed=1"], status="failed", acc=None, error="x"),
        "ln0": make_run(runs, ["norm=layernorm", "seed=0"], status="interrupted", acc=0.5),
        "ln1": make_run(runs, ["norm=layernorm", "seed=1", "train.lr=0.01"], acc=0.88),
    }
    return runs, ids


def test_runs_list_filters_by_status_and_override(store):
    runs, ids = store
    result = runner.invoke(app, ["runs", "list", str(runs)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert all(rid in result.output for rid in ids.values()) and "acc 0.9100" in result.output
    assert "4 run(s)" in result.output and "all with model=cnn" in result.output
    failed = runner.invoke(app, ["runs", "list", str(runs), "--status", "failed"])
    assert ids["bn1"] in failed.output and ids["bn0"] not in failed.output
    layer = runner.invoke(app, ["runs", "list", str(runs), "norm=layernorm"])
    assert "2 run(s)" in layer.output
    bad = runner.invoke(app, ["runs", "list", str(runs), "--status", "done"])
    assert bad.exit_code == 2 and "--status done: valid: running, complete" in bad.output


def test_runs_list_shows_the_newest_runs_and_says_how_many_it_left_out(store):
    runs, ids = store
    for hour, name in enumerate(("bn0", "bn1", "ln0", "ln1")):  # ln1 the newest
        run = RunDir(runs, ids[name])
        run.write_meta({**run.read_meta(), "started": f"2026-11-30T1{hour}:00:00+00:00"})
    two = runner.invoke(app, ["runs", "list", str(runs), "--last", "2"], env={"COLUMNS": "120"})
    assert two.exit_code == 0, two.output
    lines = two.output.splitlines()
    assert ids["ln1"] in lines[1] and ids["ln0"] in lines[2]
    assert ids["bn0"] not in two.output and ids["bn1"] not in two.output
    assert "norm=layernorm" in lines[1]  # the choices that differ are those of every run
    assert "4 run(s)" in two.output and "all with model=cnn" in two.output
    assert "all with model=cnn norm" not in two.output
    assert "showing the newest 2, 2 left out: --all lists every run" in two.output
    every = runner.invoke(app, ["runs", "list", str(runs), "--all", "--last", "1"])
    assert all(rid in every.output for rid in ids.values()) and "left out" not in every.output
    default = runner.invoke(app, ["runs", "list", str(runs)])
    assert all(rid in default.output for rid in ids.values()) and "left out" not in default.output
    bad = runner.invoke(app, ["runs", "list", str(runs), "--last", "0"])
    assert bad.exit_code == 2 and "--last 0: valid: an integer >= 1" in bad.output


def test_runs_show_and_prefixes(store):
    runs, ids = store
    result = runner.invoke(app, ["runs", "show", ids["bn1"][:-3], "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert "norm:" in result.output and '"status": "failed"' in result.output
    ambiguous = runner.invoke(app, ["runs", "show", "cnn-", "--runs-dir", str(runs)])
    assert ambiguous.exit_code == 2 and "4 runs start so" in ambiguous.output
    missing = runner.invoke(app, ["runs", "show", "nope", "--runs-dir", str(runs)])
    assert missing.exit_code == 2 and "no such run" in missing.output


def test_runs_diff_names_the_keys_that_differ(store):
    runs, ids = store
    result = runner.invoke(app, ["runs", "diff", ids["ln0"], ids["ln1"], "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    lines = [line.split()[0] for line in result.output.splitlines()[1:] if line.strip()]
    assert lines == ["seed", "train.lr"]
    same = runner.invoke(app, ["runs", "diff", ids["ln0"], ids["ln0"], "--runs-dir", str(runs)])
    assert "have the same config" in same.output


def test_runs_clean_asks_and_deletes_only_what_was_named(store):
    runs, ids = store
    dry = runner.invoke(app, ["runs", "clean", str(runs), "--dry-run"])
    assert "would delete" in dry.output and (runs / ids["bn1"]).is_dir()
    refused = runner.invoke(app, ["runs", "clean", str(runs)], input="n\n")
    assert refused.exit_code == 1 and (runs / ids["bn1"]).is_dir()
    done = runner.invoke(app, ["runs", "clean", str(runs), "--status", "failed", "--yes"])
    assert done.exit_code == 0 and "deleted 1 run(s)" in done.output
    assert not (runs / ids["bn1"]).exists() and (runs / ids["ln0"]).is_dir()
    rest = runner.invoke(app, ["runs", "clean", str(runs)], input="y\n")
    assert rest.exit_code == 0 and not (runs / ids["ln0"]).exists()
    assert (runs / ids["bn0"]).is_dir() and (runs / ids["ln1"]).is_dir()


def test_clean_never_follows_a_symlinked_run(store, tmp_path):
    runs, ids = store
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "meta.json").write_text(json.dumps({"status": "failed"}))
    (outside / "config.yaml").write_text((runs / ids["bn0"] / "config.yaml").read_text())
    (runs / "linked-run").symlink_to(outside)
    runner.invoke(app, ["runs", "clean", str(runs), "--yes"])
    assert (outside / "meta.json").exists()


@pytest.mark.slow
def test_tags_and_notes_live_in_meta_not_in_the_run_id(tmp_path):
    runs = tmp_path / "runs"
    first = runner.invoke(
        app,
        ["run", *tiny(), "--runs-dir", str(runs), "-q", "--tag", "pilot", "--note", "first try"],
    )
    assert first.exit_code == 0, first.output
    (rid,) = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    again = runner.invoke(app, ["run", *tiny(), "--runs-dir", str(runs), "-q", "--tag", "v2"])
    assert "skipped" in again.output
    meta = RunDir(runs, rid).read_meta()
    assert meta["tags"] == ["pilot", "v2"] and meta["note"] == "first try"
    listed = runner.invoke(app, ["runs", "list", str(runs), "--tag", "v2"])
    assert rid in listed.output
    report = runner.invoke(app, ["report", str(runs), "--tag", "nope"])
    assert report.exit_code == 2 and "no runs match" in report.output
    bad = runner.invoke(app, ["run", *tiny(), "--runs-dir", str(runs), "--tag", "a b"])
    assert bad.exit_code == 2 and "--tag 'a b'" in bad.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"normbench {__version__}"
