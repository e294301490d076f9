"""Property-based fuzzing (hypothesis) of the override parser and the store readers: random
overrides and random or corrupted run files never produce a traceback, a hang (pytest-timeout and
bounded reads) or a write outside the runs directory.

How many cases ran and what they found is in docs/security.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import limited, make_run
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from normbench import api
from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.experiment.schema import SCHEMA
from normbench.report import plots
from normbench.report.sections import build
from normbench.report.tidy import to_json
from normbench.store.catalog import load_runs, select_runs

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
    # no per-case deadline: a loaded CI machine makes any wall-clock bound flaky (a hang still
    # fails: pytest-timeout, and every read is bounded by the trusted reader)
    deadline=None,
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


TUNE_VALUES = st.one_of(
    st.sampled_from(
        [
            "train.lr=1e-3,3e-3",
            "train.lr=tag(log,interval(1e-4,1e-1))",
            "train.lr=interval(1,0)",
            "train.lr=glob(*)",
            "train.lr=abc",
            "train.lr=1e-3",
            "train.lrr=1,2",
            "placement=pre,post",
            "threads=1,2",
            "norm.alpha_init=0.5,1.0",
            "train.lr=range(0,5000)",
            "seed=1,2",
            "=",
            "",
        ]
    ),
    st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
)
TUNE_OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("--tune-trials"), st.integers(-3, 10**7).map(str)),
        st.tuples(st.just("--tune-seeds"), st.sampled_from(["0", "1", "3", "101", "9" * 25])),
        st.tuples(st.just("--eta"), st.sampled_from(["1", "2", "3", "-1"])),
        st.tuples(st.just("--max-seeds"), st.sampled_from(["0", "1", "3", "101", "9" * 12])),
        st.tuples(st.just("--reference"), st.sampled_from(["norm=layernorm", "nope=1", "x"])),
        st.tuples(st.just("--until-decided"), st.just("--no-tune-extend")),
    ),
    max_size=3,
)


@FUZZ
@given(st.lists(TUNE_VALUES, min_size=1, max_size=2), TUNE_OPTIONS)
def test_random_tuned_sweeps_never_crash_a_dry_run(tmp_path_factory, tunes, options):
    """The tuned path's bounds and keys: every combination plans or is one line, exit 2,
    and writes nothing (the audit's tracebacks: a huge --tune-seeds, --max-seeds, glob())."""
    runs = tmp_path_factory.mktemp("runs")
    grid = ["model=cnn", "model.width=8", "norm=layernorm,dyt", "seed=0,1"]
    args = [*grid, *(a for t in tunes for a in ("--tune", t)), *(o for p in options for o in p)]
    result = runner.invoke(app, ["sweep", *args, "--dry-run", "--runs-dir", str(runs)])
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    if result.exit_code == 2:
        assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), (args, result.exception)
    assert not (runs / "sweeps").exists()


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


@settings(FUZZ, max_examples=80)  # every command's property below covers report as well
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


# ------------------------------------------------------- every command, every input file
@pytest.fixture(scope="module")
def armoury(tmp_path_factory):
    """Everything a command reads, written once as normbench writes it: a store of four runs
    (one with diagnostics, one failed), its index, a sweep record, a sweep preset and an npz
    data file. Each case damages a copy."""
    root = tmp_path_factory.mktemp("armoury")
    runs = root / "runs"
    for norm in ("batchnorm", "layernorm"):
        make_run(runs, [f"norm={norm}", "seed=0"], acc=0.8)
    make_run(runs, ["norm=batchnorm", "seed=1"], acc=0.85)
    make_run(runs, ["norm=layernorm", "seed=1"], status="failed", acc=None, error="boom")
    ids = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))
    units = [
        {"step": step, "unit": unit, "depth": unit, "sublayer": "convblock", "grad_norm": 0.1}
        | {k: 1.0 for k in ("in_mean", "in_std", "out_mean", "out_std")}
        | {"train_mode_val_acc": 0.5, "eval_mode_val_acc": 0.4}
        | {f"sn_{a}_{b}": float("nan") for a in ("mean", "var") for b in ("in", "ln", "bn")}
        for step in (0, 30)
        for unit in range(2)
    ]
    pd.DataFrame(units).to_parquet(runs / ids[0] / "diagnostics.parquet")
    load_runs(runs)
    (runs / "sweeps").mkdir()
    record = {"name": "s", "runs": [{"run_id": rid} for rid in ids]}
    (runs / "sweeps" / "s-20260101-000000-abc.json").write_text(json.dumps(record))
    (root / "grid.yaml").write_text("version: 1\nparams:\n  model: cnn\n  seed: 0,1\n")
    rng = np.random.default_rng(0)
    np.savez(
        root / "data.npz",
        x_train=rng.normal(size=(80, 1, 8)).astype(np.float32),
        y_train=np.arange(80) % 2,
    )
    (root / "outside").mkdir()
    (root / "outside" / "secret.txt").write_text("untouched")
    return root, ids


RUN_FILES = ["{run}/meta.json", "{run}/config.yaml", "{run}/metrics.parquet"]
STORE_FILES = [*RUN_FILES, "{runs}/.index.sqlite", "{runs}/.locks/{run_id}.lock"]
# Each command, and the files it reads (a case damages these, or any other, files).
COMMANDS = [
    (["runs", "list", "{runs}"], STORE_FILES),
    (["runs", "list", "{runs}", "--status", "failed,abandoned"], STORE_FILES),
    (["runs", "show", "{run}", "--runs-dir", "{runs}"], RUN_FILES),
    (["runs", "show", "cnn-batchnorm-pre-fp32-b32-s0", "--runs-dir", "{runs}"], RUN_FILES),
    (["runs", "diff", "{run}", "{other}", "--runs-dir", "{runs}"], RUN_FILES),
    (["runs", "clean", "{runs}", "--yes"], STORE_FILES),
    (["report", "{runs}", "--html", "{out}/report.html"], STORE_FILES),
    (["report", "{runs}", "--diagnostics", "--format", "json"], ["{run}/diagnostics.parquet"]),
    (["report", "{runs}", "--format", "markdown"], STORE_FILES),
    (
        ["report", "{runs}", "--format", "json", "--sweep", "s"],
        ["{runs}/sweeps/s-20260101-000000-abc.json"],
    ),
    (["report", "{runs}", "--format", "csv", "--table", "convergence"], STORE_FILES),
    (["sweep", "{root}/grid.yaml", "--dry-run", "--runs-dir", "{runs}"], ["{root}/grid.yaml"]),
    (
        ["run", "data=arrays", "data.path={root}/data.npz", "--cfg", "--runs-dir", "{runs}"],
        ["{root}/data.npz"],
    ),
]
FILES = sorted({name for _, names in COMMANDS for name in names})
DAMAGE = st.one_of(
    CORRUPTION.map(lambda payload: ("bytes", payload)),
    st.integers(0, 400).map(lambda keep: ("truncate", keep)),
    st.sampled_from(
        [
            ("fifo", None),
            ("symlink", "{root}/outside/secret.txt"),
            ("symlink", "/dev/zero"),
            ("symlink", "{root}/outside"),
            ("bytes", b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"),
            ("bytes", b'{"status": "complete", "summary": {"parameters": 1e999}}'),
            ("bytes", b"params: {seed: !!python/object/apply:os.system [echo]}\n"),
            ("strings", None),  # a parquet file of string columns
        ]
    ),
)


def damage(path, kind: str, payload, root) -> None:
    """Replace ``path`` by ``kind`` of damage (its directory made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "truncate" and path.is_file():
        path.write_bytes(path.read_bytes()[:payload])
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(payload.format(root=root))
    elif kind == "strings":
        pd.DataFrame({"step": ["1", "2"], "train_loss": ["a", "b"]}).to_parquet(path)
    else:
        path.write_bytes(payload if kind == "bytes" else b"")


def snapshot(root) -> dict:
    """Every file and link under ``root`` but the runs directory and the output folder."""
    seen = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in ("runs", "out"):
            continue
        if path.is_symlink():
            seen[str(relative)] = ("link", os.readlink(path))
        elif path.is_file():
            seen[str(relative)] = ("file", path.read_bytes())
        else:
            seen[str(relative)] = ("other", path.stat().st_mode)
    return seen


@pytest.mark.parametrize(("command", "reads"), COMMANDS, ids=lambda c: " ".join(c[:3])[:30])
@settings(
    max_examples=8,  # a case per command and kind of damage, or so: 13 commands, ~20 s in all
    deadline=None,  # limited() below bounds each case instead, and also ends a blocking read
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(data=st.data())
def test_every_command_on_damaged_files_answers_without_a_traceback(
    armoury, tmp_path_factory, monkeypatch, command, reads, data
):
    """Random, truncated, FIFO, symlinked and hostile files under every command that reads a
    runs directory, a preset or a data file: each case within 30 s and 2 GB more memory (8 GB
    when it imports torch), exit 0 or 2 (one line), no traceback, and nothing outside the runs
    directory changed."""
    target = st.one_of(st.sampled_from(reads), st.sampled_from(FILES))
    damages = data.draw(st.lists(st.tuples(target, st.integers(0, 3), DAMAGE), max_size=3))
    pristine, ids = armoury
    root = tmp_path_factory.mktemp("case")
    shutil.copytree(pristine, root, symlinks=True, dirs_exist_ok=True)
    (root / "out").mkdir()
    runs = root / "runs"
    for target, which, (kind, payload) in damages:
        run = runs / ids[which]
        path = target.format(run=run, runs=runs, root=root, run_id=ids[which])
        damage(Path(path), kind, payload, root)
    before = snapshot(root)
    fields = {"runs": runs, "root": root, "out": root / "out", "run": ids[0], "other": ids[1]}
    arguments = [part.format(**fields) for part in command]
    monkeypatch.setattr(plots, "to_png", lambda fig: b"\x89PNG\r\n\x1a\n")  # drawn, not encoded
    with limited(30, 8 << 30 if command[0] == "run" else 2 << 30):
        result = runner.invoke(app, arguments, env={"COLUMNS": "100"})
    event(f"{' '.join(command[:2])}: exit {result.exit_code}")  # --hypothesis-show-statistics
    shown = (arguments, damages, result.output[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        *shown,
        repr(result.exception),
    )
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, shown
    if result.exit_code == 2:
        errors = [line for line in result.output.splitlines() if line.startswith("normbench:")]
        assert len(errors) == 1, shown
    assert snapshot(root) == before, shown
    assert {p.name for p in root.iterdir()} == {*before_names(before), "runs", "out"}, shown


def before_names(seen: dict) -> set[str]:
    return {Path(name).parts[0] for name in seen}


# ------------------------------------------------- hostile metrics columns, every exporter
NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e30, -1e30, 2.0**63, 2.0**53 + 1, -1.0, 0.5]),
)
HOSTILE_METRICS = st.fixed_dictionaries(
    {"train_loss": st.lists(NUMBER, min_size=1, max_size=4)},
    optional={"step": st.lists(NUMBER, min_size=1, max_size=4), "lr": st.just([1e30])},
).map(lambda columns: pd.DataFrame({k: pd.Series(v, dtype=float) for k, v in columns.items()}))
HOSTILE_FRAMES = [
    pd.DataFrame({"train_loss": [1.0, 0.5]}),  # no step column
    pd.DataFrame({"step": [np.nan, 10.0], "train_loss": [1.0, 0.5]}),
    pd.DataFrame({"step": [1e30, 10.0], "train_loss": [1.0, np.inf]}),
    pd.DataFrame({"step": [-5.0, 2.5, 20.0], "train_loss": [1.0, 0.5, 1e30]}),
]


def hostile_store(runs: Path, frames: list[pd.DataFrame]) -> list[str]:
    """A run of good metrics and one run per frame, its metrics.parquet that frame."""
    ids = [make_run(runs, ["norm=layernorm"])]
    for seed, frame in enumerate(frames):
        ids.append(make_run(runs, ["norm=rmsnorm", f"seed={seed}"]))
        frame.to_parquet(runs / ids[-1] / "metrics.parquet")
    return ids


def assert_exported_all(result, count: int) -> None:
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.stdout.splitlines()[-1].startswith(f"exported {count} run(s)"), result.output


@pytest.mark.tracking
@settings(FUZZ, max_examples=15)
@given(HOSTILE_METRICS)
def test_tensorboard_export_of_hostile_metrics_columns_skips_rows_and_goes_on(
    tmp_path_factory, frame
):
    pytest.importorskip("tensorboard", reason="the tracking extra")
    root = tmp_path_factory.mktemp("hostile")
    hostile_store(root / "runs", [frame])
    result = runner.invoke(
        app, ["runs", "export", "--to", "tensorboard", str(root / "tb"), str(root / "runs")]
    )
    assert_exported_all(result, 2)


@pytest.mark.tracking
def test_every_exporter_takes_the_hostile_metrics_columns_it_is_given(tmp_path):
    """No step column, NaN steps, a step of 1e30, negative and fractional steps: each run is
    exported without those rows, a warning naming it, and the export goes on."""
    for module in ("tensorboard", "mlflow", "sqlalchemy", "alembic"):
        pytest.importorskip(module, reason="the tracking extra")
    runs = tmp_path / "runs"
    ids = hostile_store(runs, HOSTILE_FRAMES)
    for to, destination in (
        ("tensorboard", str(tmp_path / "tb")),
        ("mlflow", f"sqlite:///{tmp_path / 'm.db'}"),
    ):
        result = runner.invoke(app, ["runs", "export", "--to", to, destination, str(runs)])
        assert_exported_all(result, len(ids))
        assert f"warning: {ids[1]}: no step column" in result.stderr
        for run in ids[2:]:
            assert f"warning: {run}: " in result.stderr and "not exported" in result.stderr


# ----------------------------------------------------------------- ranges in filters
@pytest.fixture(scope="module")
def seeds_store(tmp_path_factory):
    runs = tmp_path_factory.mktemp("seeds") / "runs"
    for seed in (0, 1, 2, 5, 4294967295):
        make_run(runs, ["norm=layernorm", f"seed={seed}", "train.lr=0.3"])
    return runs


@settings(FUZZ, max_examples=60)
@given(st.integers(-3, 8), st.integers(-3, 8), st.integers(-3, 3).filter(bool))
def test_a_range_filter_selects_what_listing_the_range_would(seeds_store, start, stop, step):
    """A range is tested by membership, never listed: the same runs as Python's range."""
    expected = {s for s in (0, 1, 2, 5, 4294967295) if s in range(start, stop, step)}
    selection = select_runs(seeds_store, [f"seed=range({start},{stop},{step})"])[0]
    assert set(selection.runs["seed"]) == expected


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{runs}", "{filter}", "--format", "json"],
        ["runs", "list", "{runs}", "{filter}"],
        ["runs", "export", "--to", "tensorboard", "{out}", "{runs}", "{filter}"],
    ],
)
@pytest.mark.tracking
def test_a_huge_range_filter_is_never_expanded(seeds_store, tmp_path, command):
    """`seed=range(0,10000000000)`: listed it would be gigabytes and minutes; by membership
    it is instant, within 30 s and 1 GB."""
    if command[1] == "export":
        pytest.importorskip("tensorboard", reason="the tracking extra")
    fields = {"runs": seeds_store, "filter": "seed=range(0,10000000000)", "out": tmp_path / "tb"}
    with limited(30, 1 << 30):
        result = runner.invoke(app, [part.format(**fields) for part in command])
    assert result.exit_code == 0, (result.output, result.exception)
    with limited(30, 1 << 30):
        assert (
            len(api.runs(seeds_store, "seed=range(0,10000000000)", "train.lr=range(0.1,1,0.2)"))
            == 5
        )


# ------------------------------------------- diverged and all-chance sections, every output
OUTCOME = st.sampled_from(["diverged", "chance", "below", "learned", "failed"])


def outcome_run(runs: Path, overrides: list[str], outcome: str) -> None:
    """A run of the store whose result is ``outcome``: diverged at its first step (NaN loss),
    exactly at chance (0.1), below it, clear of it, or failed."""
    if outcome == "diverged":
        make_run(runs, overrides, status="diverged", acc=None, losses=(float("nan"),))
    elif outcome == "failed":
        make_run(runs, overrides, status="failed", acc=None, error="boom")
    else:
        make_run(runs, overrides, acc={"chance": 0.1, "below": 0.05, "learned": 0.8}[outcome])


@settings(FUZZ, max_examples=12)
@given(st.lists(OUTCOME, min_size=8, max_size=8))
def test_every_output_of_sections_that_diverged_or_sit_at_chance(tmp_path_factory, outcomes):
    """Two workloads x two norms x two seeds, each run's outcome drawn: every format and
    `--across data` answer (exit 0, or one line when nothing is usable), no traceback and no
    numpy warning."""
    runs = tmp_path_factory.mktemp("outcomes") / "runs"
    cells = [
        (d, n, s) for d in ("mnist1d", "digits") for n in ("layernorm", "rmsnorm") for s in (0, 1)
    ]
    for (data, norm, seed), outcome in zip(cells, outcomes, strict=True):
        outcome_run(runs, [f"data={data}", f"norm={norm}", f"seed={seed}"], outcome)
    for arguments in (
        [],
        ["--format", "json"],
        ["--format", "csv"],
        ["--format", "markdown"],
        ["--across", "data"],
        ["--across", "data", "--format", "json"],
    ):
        result = runner.invoke(app, ["report", str(runs), *arguments], env={"COLUMNS": "120"})
        shown = (outcomes, arguments, result.output[-1500:])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            *shown,
            repr(result.exception),
        )
        assert result.exit_code in (0, 2) and "Traceback" not in result.output, shown
        assert "RuntimeWarning" not in result.output, shown
        if result.exit_code == 2:
            assert result.output.count("normbench: error:") == 1, shown


def test_figures_of_sections_that_diverged_or_sit_at_chance(tmp_path):
    """One workload every run diverged in, one every run sits at chance in: the figures and
    the page are drawn (the PNGs really encoded)."""
    runs = tmp_path / "runs"
    for data, outcome in (("mnist1d", "diverged"), ("digits", "chance")):
        for norm in ("layernorm", "rmsnorm"):
            outcome_run(runs, [f"data={data}", f"norm={norm}"], outcome)
    page, figures = tmp_path / "r.html", tmp_path / "img"
    result = runner.invoke(app, ["report", str(runs), "--plots", str(figures), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert page.is_file() and len(list(figures.glob("*.png"))) >= 4


# --------------------------------------- unwritable and odd destinations, every writing option
WRITERS = {
    "report --out": ["report", "{runs}", "--format", "csv", "--out", "{dest}"],
    "report --html": ["report", "{runs}", "--html", "{dest}"],
    "report --plots": ["report", "{runs}", "--plots", "{dest}"],
    "runs export": ["runs", "export", "--to", "tensorboard", "{dest}", "{runs}"],
    "run log.tensorboard": [
        "run",
        "model=cnn",
        "log.tensorboard={dest}",
        "--cfg",
        "--runs-dir",
        "{runs}",
    ],
    "sweep log.tensorboard": [
        "sweep",
        "model=cnn",
        "seed=0,1",
        "log.tensorboard={dest}",
        "--dry-run",
        "--runs-dir",
        "{runs}",
    ],
    "findings --out": ["findings", "--smoke", "--out", "{dest}", "--runs-dir", "{root}/fruns"],
}
ODD = ["", "/dev/null", "{root}/to-null", "{root}/file/inside", "{runs}", "{root}/dir"]


@pytest.mark.tracking
@pytest.mark.parametrize("destination", ODD)
@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_writing_option_refuses_an_odd_destination_in_one_line(tmp_path, writer, destination):
    """A directory, '', /dev/null (or a link to it), a path through a file, the runs
    directory: each option that writes says in one line why it cannot, before any work, and
    writes nothing (a directory is a fine destination for --plots and for log.tensorboard)."""
    if "tensorboard" in writer or "export" in writer:
        pytest.importorskip("tensorboard", reason="the tracking extra")
    root = tmp_path
    runs = root / "runs"
    make_run(runs, ["norm=layernorm"])
    (root / "file").write_text("")
    (root / "to-null").symlink_to("/dev/null")
    (root / "dir").mkdir()
    # an existing directory is a fine place for figures, event files (outside the runs)
    # an existing directory is a fine place for figures and event files (outside the runs)
    folder_ok = {"report --plots", "run log.tensorboard", "sweep log.tensorboard", "runs export"}
    dest = destination.format(root=root, runs=runs)
    fields = {"runs": runs, "root": root, "dest": dest}
    before = snapshot(root)
    result = runner.invoke(app, [part.format(**fields) for part in WRITERS[writer]])
    shown = (writer, dest, result.output[-1500:], repr(result.exception))
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert "Traceback" not in result.output, shown
    fine = destination == "{root}/dir" or (destination == "{runs}" and "export" not in writer)
    if writer in folder_ok and fine:
        assert result.exit_code == 0, shown
        return
    assert result.exit_code == 2 and result.output.count("normbench: error:") == 1, shown
    assert snapshot(root) == before and not (root / "fruns").exists(), shown
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


# ------------------------------------------------------------ sweep records, hostile designs
DESIGN_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-2, max_value=2), max_size=6
    ),
)
DESIGN = st.one_of(
    st.fixed_dictionaries({"looks": DESIGN_VALUE}),
    st.fixed_dictionaries(
        {
            "until_decided": st.one_of(
                DESIGN_VALUE,
                st.fixed_dictionaries({"fractions": DESIGN_VALUE, "looks_taken": DESIGN_VALUE}),
            )
        }
    ),
)


@settings(FUZZ, max_examples=40)
@given(DESIGN)
def test_a_sweep_record_with_a_hostile_design_is_one_line_or_a_sound_report(
    pristine, tmp_path_factory, design
):
    """Whatever a record says its sequential design was: exit 0 with levels a test can use
    (in (0, 1)), or one line."""
    root = tmp_path_factory.mktemp("design")
    runs = root / "runs"
    shutil.copytree(pristine, runs, symlinks=True)
    path = next((runs / "sweeps").iterdir())
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, **design}))
    with limited(30):
        result = runner.invoke(app, ["report", str(runs), "--sweep", "s", "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        design,
        repr(result.exception),
    )
    assert result.exit_code in (0, 2), (design, result.output)
    if result.exit_code == 2:
        assert result.output.count("\n") == 1, (design, result.output)
        return
    method = json.loads(result.stdout)["method"]
    assert 0 < method["alpha_this_look"] <= method["alpha"] and 0 < method["ci_level"] < 1


LADDERS = st.sampled_from(
    [
        "model.width=4,8,12",
        "model.width=4,8",
        "model.width=8,4,4",
        "model.width=8",
        "model.width=0,8,16",
        "model.width=4,8,99999999999",
        "model.width=4,,8",
        "model.width=²,8,16",
        "model.width=٨,8,16",
        "model.width=4,8,100000000",
        "model.depth=1,2,3",
        "model.depth=1,2,100000",
        "data.train_samples=50,100,200",
        "data.train_samples=1,10,10**9",
        "train.lr=1,2",
        "model.width=",
        "=",
        "",
    ]
)
LADDER_OPTIONS = st.lists(
    st.sampled_from(
        [
            ("train.tokens_per_param=2",),
            ("train.tokens_per_param=0",),
            ("train.tokens_per_param=1e308",),
            ("train.tokens_per_param=abc",),
            ("train.max_steps=5",),
            ("--ladder-transfer", "1"),
            ("--ladder-transfer", "-1"),
            ("--ladder-head-dim", "4"),
            ("--ladder-head-dim", "0"),
            ("--tune", "train.lr=1e-3,1e-2"),
            ("--tune", "model.width=4,8"),
            ("--ladder", "model.width=4,8,16"),
            ("--until-decided",),
        ]
    ),
    max_size=3,
)


@settings(FUZZ, max_examples=25)
@given(LADDERS, LADDER_OPTIONS)
def test_random_ladders_never_crash_a_dry_run(tmp_path_factory, ladder, options):
    """A ladder's axis, values, budget rule and transfer: every combination plans or is one
    line, exit 2, and writes nothing."""
    runs = tmp_path_factory.mktemp("runs")
    grid = ["model=cnn", "model.depth=1", "norm=layernorm,batchnorm", "seed=0,1"]
    args = [*grid, "--ladder", ladder, *(o for option in options for o in option)]
    result = runner.invoke(app, ["sweep", *args, "--dry-run", "--runs-dir", str(runs)])
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    if result.exit_code == 2:
        assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert not (runs / "sweeps").exists()
