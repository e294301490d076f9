"""Sweep records are untrusted: a design normbench never writes is refused in one line, a
record is read in linear time, and `--sweep ''` names no sweep."""

from __future__ import annotations

import json

import pytest
from helpers import limited, make_run
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


@pytest.fixture
def store(tmp_path):
    runs = tmp_path / "runs"
    ids = [
        make_run(runs, [f"norm={norm}", f"seed={s}"])
        for norm in ("layernorm", "rmsnorm")
        for s in range(2)
    ]
    (runs / "sweeps").mkdir()
    return runs, ids


def write_record(runs, ids, name="s", **fields) -> None:
    record = {
        "name": name,
        "started": "2026-01-01T00:00:00+00:00",
        "runs": [{"run_id": i} for i in ids],
    }
    (runs / "sweeps" / f"{name}-20260101-000000-abc.json").write_text(
        json.dumps({**record, **fields})
    )


@pytest.mark.parametrize(
    "design",
    [
        {"looks": 10**30},
        {"looks": True},
        {"until_decided": {"fractions": [0.5, 0.25, 1.0], "looks_taken": 2}},  # decreasing
        {"until_decided": {"fractions": [-0.5, 1.0], "looks_taken": 2}},
        {"until_decided": {"fractions": [0.5, 1.5], "looks_taken": 2}},
        {"until_decided": {"fractions": [0.5, 1.0], "looks_taken": 3}},
        {"until_decided": {"fractions": [], "looks_taken": 1}},
        {"until_decided": "x"},
    ],
)
def test_a_hostile_sequential_design_is_refused_in_one_line(store, design):
    runs, ids = store
    write_record(runs, ids, **design)
    for fmt in ("rich", "json"):
        result = runner.invoke(app, ["report", str(runs), "--sweep", "s", "--format", fmt])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "--sweep s: its record's until-decided design is not one normbench writes" in (
            result.output
        )


def test_the_design_normbench_writes_is_read(store):
    runs, ids = store
    write_record(runs, ids, until_decided={"fractions": [0.5, 0.75, 1.0], "looks_taken": 2})
    result = runner.invoke(app, ["report", str(runs), "--sweep", "s", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["method"]["looks"] == 3


def test_two_large_records_are_read_in_linear_time(store):
    """60,000 entries each (a quadratic read took minutes): within 30 s under a 2 GB limit."""
    runs, ids = store
    absent = [f"cnn-layernorm-pre-fp32-b32-s{i}-0000000{i % 10}" for i in range(60_000)]
    write_record(runs, [*ids, *absent], name="a")
    write_record(runs, [*absent, *ids], name="b")
    with limited(30):
        result = runner.invoke(app, ["report", str(runs), "--sweep", "a,b", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "60000 runs of the sweep have no results yet" in result.stderr


def test_an_empty_sweep_name_is_refused_not_everything(store):
    runs, _ = store
    result = runner.invoke(app, ["report", str(runs), "--sweep", ""])
    assert result.exit_code == 2 and "--sweep '': a sweep name is 1 to 64" in result.output


@pytest.mark.parametrize(
    ("fields", "alpha_text", "level"),
    [
        ({"looks": 4}, "alpha 0.05 split over 4 looks (0.0125 each)", 0.0125),
        (  # normbench 0.3 named no spending: O'Brien-Fleming type
            {"until_decided": {"fractions": [0.5, 1.0], "looks_taken": 1}},
            "alpha 0.05 spent over 2 looks (O'Brien-Fleming type (Lan-DeMets)), 0.005575 at look 1",
            0.005574,
        ),
    ],
)
def test_an_older_record_is_upgraded_as_it_is_read(store, fields, alpha_text, level):
    """The store upgrades an earlier version's design to the current format; the report then
    computes the levels that sweep ran with (even split; O'Brien-Fleming type)."""
    runs, ids = store
    write_record(runs, ids, **fields)
    result = runner.invoke(app, ["report", str(runs), "--sweep", "s", "--format", "json"])
    assert result.exit_code == 0, result.output
    method = json.loads(result.stdout)["method"]
    assert method["alpha_this_look"] == pytest.approx(level, rel=1e-3)
    result = runner.invoke(app, ["report", str(runs), "--sweep", "s", "--format", "markdown"])
    assert alpha_text in result.stdout


def test_a_record_written_and_updated_reads_back_in_the_current_format(tmp_path):
    from datetime import datetime

    from normbench.store import sweep_record

    runs = [{"run_id": "cnn-layernorm-pre-fp32-b32-s0-0000abcd", "overrides": ["seed=0"]}]
    path = sweep_record.write(
        "s", 2, ["seed"], runs, tmp_path, "local", datetime(2026, 1, 1), command=["normbench"]
    )
    assert sweep_record.read(path)["finished"] is None
    design = {"fractions": [0.5, 1.0], "looks_taken": 2, "spending": "x"}
    sweep_record.update(path, {"complete": 1}, runs, until_decided=design)
    record = sweep_record.read(path)
    assert record["finished"] and record["counts"] == {"complete": 1}
    assert sweep_record.sequential_design(record) == {
        "fractions": (0.5, 1.0),
        "look": 2,
        "spending": "x",
    }
    assert sweep_record.sweep_name(path.stem) == "s"
