"""Property-based fuzzing (hypothesis) of the override parser and the store readers: random
overrides and random or corrupted run files never produce a traceback, a hang (a deadline per
case) or a write outside the runs directory.

How many cases ran and what they found is in docs/security.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

import pytest
from helpers import make_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.experiment.schema import SCHEMA
from normbench.report.render import to_json
from normbench.report.tables import build
from normbench.store.catalog import load_runs

runner = CliRunner()
KEYS = [*SCHEMA, "model", "norm", "placement", "data", "precision", "model.width", "nrom"]
VALUES = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-1",
            "0",
            "1e309",
            "null",
            "true",
            "[1,2]",
            "{a:1}",
            "'x'",
            "range(3)",
            "1,2",
            "interval(0,1)",
            "${oc.env:HOME}",
            "choice(a,b)",
            "glob(*)",
            "9" * 400,
        ]
    ),
    st.text(max_size=30),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)
OVERRIDE = st.one_of(
    st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.text(max_size=40),
    st.sampled_from(["+x=1", "~seed", "seed", "=", "a.b.c=1", "hydra.run.dir=/tmp"]),
)
FUZZ = settings(
    max_examples=150,
    deadline=5000,  # milliseconds per case: a hang fails the test
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@FUZZ
@given(st.lists(OVERRIDE, max_size=4))
def test_random_overrides_give_a_config_or_one_line_error(tmp_path_factory, overrides):
    runs = tmp_path_factory.mktemp("runs")
    result = runner.invoke(app, ["run", *overrides, "--cfg", "--runs-dir", str(runs)])
    assert result.exit_code in (0, 2), (overrides, result.output, result.exception)
    if result.exit_code == 2:
        assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), (overrides, result.exception)
    assert list(runs.iterdir()) == []


@FUZZ
@given(st.lists(OVERRIDE, max_size=3))
def test_random_sweep_overrides_never_crash_a_dry_run(tmp_path_factory, overrides):
    runs = tmp_path_factory.mktemp("runs")
    result = runner.invoke(
        app,
        [
            "sweep",
            "model=cnn",
            *overrides,
            "--dry-run",
            "--max-runs",
            "50",
            "--runs-dir",
            str(runs),
        ],
    )
    assert result.exit_code in (0, 2), (overrides, result.output, result.exception)
    assert not (runs / "sweeps").exists()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A small store written once; each case corrupts a copy."""
    root = tmp_path_factory.mktemp("pristine")
    runs = root / "runs"
    for seed in range(2):
        for norm in ("batchnorm", "layernorm"):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=0.8 + seed / 10)
    load_runs(runs)  # the index too
    (runs / "sweeps").mkdir()
    record = {"name": "s", "runs": [{"run_id": p.name} for p in runs.iterdir() if "-s" in p.name]}
    (runs / "sweeps" / "s-20260101-000000-abc.json").write_text(json.dumps(record))
    return runs


CORRUPTION = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    ).map(lambda value: json.dumps(value).encode()),
    st.sampled_from(
        [
            b"",
            b"{",
            b"[" * 20000,
            b"a: &a [*a]",
            b"status: complete",
            b'{"status": "complete"}',
            b'{"status": "complete", "summary": {"final_val_acc": "x"}}',
            b"PAR1" + b"\0" * 50,
        ]
    ),
)
TARGETS = ["meta.json", "config.yaml", "metrics.parquet", ".index.sqlite", "sweep record"]


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(TARGETS), st.integers(0, 3), CORRUPTION), max_size=3),
    st.booleans(),
)
def test_corrupted_run_files_never_crash_hang_or_write_outside(
    pristine, tmp_path_factory, damage, special
):
    root = tmp_path_factory.mktemp("case")
    runs = root / "runs"
    shutil.copytree(pristine, runs, symlinks=True)
    outside = root / "outside.txt"
    outside.write_text("untouched")
    run_ids = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))
    for target, which, payload in damage:
        if target == ".index.sqlite":
            path = runs / ".index.sqlite"
        elif target == "sweep record":
            path = next((runs / "sweeps").iterdir())
        else:
            path = runs / run_ids[which] / target
        path.write_bytes(payload)
    if special:  # a FIFO and a symlink pointing outside
        os.unlink(runs / run_ids[0] / "meta.json")
        os.mkfifo(runs / run_ids[0] / "meta.json")
        (runs / run_ids[1] / "metrics.parquet").unlink()
        (runs / run_ids[1] / "metrics.parquet").symlink_to(outside)
    before_outside = outside.read_text()
    with contextlib.suppress(UsageError):  # "no runs match": right when everything is corrupt
        json.loads(to_json(build(load_runs(runs)), None))
    result = runner.invoke(
        app, ["report", str(runs), "--sweep", "s", "--format", "csv", "--table", "convergence"]
    )
    assert result.exit_code in (0, 2), (damage, result.output, result.exception)
    assert outside.read_text() == before_outside
    assert {p.name for p in root.iterdir()} == {"runs", "outside.txt"}
