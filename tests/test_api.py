"""normbench.api's runs as DataFrames: runs, metrics, report (the same tables and verdicts as
`normbench report --format json`, option for option) and learning_curves."""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest
from helpers import make_run
from typer.main import get_command
from typer.testing import CliRunner

import normbench.api as api
from normbench.cli import app
from normbench.store.rundir import RunDir

runner = CliRunner()
NORMS = ("batchnorm", "groupnorm")
BATCHES = (8, 32)
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """12 runs: two norms at two batch sizes, three seeds each; GroupNorm at batch 8 is worse.
    Seed 0's runs are tagged ``kept``; sweep ``quick`` ran the batchnorm runs."""
    runs = tmp_path_factory.mktemp("api") / "runs"
    quick = []
    for norm in NORMS:
        for batch in BATCHES:
            for seed in SEEDS:
                drop = 0.08 if (norm, batch) == ("groupnorm", 8) else 0.0
                rid = make_run(
                    runs,
                    [f"norm={norm}", f"batch_size={batch}", f"seed={seed}"],
                    acc=0.9 - drop + 0.004 * seed,
                    losses=(2.0, 1.0 + 0.1 * seed, 0.5 + drop),
                )
                if seed == 0:
                    run = RunDir(runs, rid)
                    run.write_meta({**run.read_meta(), "tags": ["kept"]})
                if norm == "batchnorm":
                    quick.append({"run_id": rid})
    (runs / "sweeps").mkdir()
    record = {"runs": quick, "started": "2026-01-01T00:00:00+00:00", "looks": 1}
    (runs / "sweeps" / "quick-20260101-000000.json").write_text(json.dumps(record))
    return runs


# ------------------------------------------------------------------------------------- runs
def test_runs_is_one_row_per_run_with_the_keys_that_vary_and_the_results(store):
    table = api.runs(store)
    assert len(table) == 12 and table["run_id"].is_unique
    assert list(table.columns[:5]) == ["run_id", "status", "norm.name", "batch_size", "seed"]
    for column in ("final_val_acc", "test_acc", "wall_s", "code_hash", "tags"):
        assert column in table.columns
    assert "model.name" not in table.columns  # the same for every run
    assert table["seed"].dtype == "int64" and table["batch_size"].dtype == "int64"
    assert set(table["status"]) == {"complete"}
    kept = table[table["tags"].map(lambda tags: tags == ["kept"])]
    assert set(kept["seed"]) == {0} and len(kept) == 4


def test_runs_take_the_command_lines_filters_sweeps_and_tags(store, monkeypatch):
    assert set(api.runs(store, "norm=groupnorm", "batch_size=8")["seed"]) == set(SEEDS)
    assert len(api.runs(store, sweep="quick")) == 6
    assert len(api.runs(store, tag="kept")) == 4
    monkeypatch.chdir(store.parent)  # a first argument with `=` is a filter of ./runs
    assert len(api.runs("norm=batchnorm,groupnorm", "seed=1")) == 4


def test_a_bad_filter_raises_the_command_lines_one_line(store):
    with pytest.raises(api.UsageError) as raised:
        api.runs(store, "nrm=batchnorm")
    cli = runner.invoke(app, ["runs", "list", str(store), "nrm=batchnorm"])
    assert cli.exit_code == 2
    assert cli.output.strip() == f"normbench: error: {raised.value}"
    with pytest.raises(api.UsageError, match="does not exist"):
        api.metrics(store.parent / "nowhere")


# ---------------------------------------------------------------------------------- metrics
def test_metrics_are_long_one_row_per_run_and_logged_step(store):
    long = api.metrics(store, "norm=groupnorm")
    assert list(long.columns[:4]) == ["run_id", "batch_size", "seed", "step"]
    assert len(long) == 6 * 3
    for rid, rows in long.groupby("run_id"):
        stored = pd.read_parquet(store / rid / "metrics.parquet")
        assert rows["step"].tolist() == stored["step"].tolist()
        assert rows["train_loss"].tolist() == stored["train_loss"].tolist()


def test_a_run_without_metrics_has_no_rows_and_a_refused_file_is_a_warning(tmp_path):
    runs = tmp_path / "runs"
    done = make_run(runs, ["norm=batchnorm"])
    running = make_run(runs, ["norm=groupnorm"], status="running")
    (runs / running / "metrics.parquet").unlink()
    assert set(api.metrics(runs)["run_id"]) == {done}
    (runs / running / "metrics.parquet").symlink_to(runs / done / "metrics.parquet")
    with pytest.warns(UserWarning, match=f"skipped {running}: .*symlink"):
        assert set(api.metrics(runs)["run_id"]) == {done}


def test_diagnostics_are_long_one_row_per_run_step_and_unit(tmp_path):
    """A diagnosed run's every step and unit, as stored; a run trained without diagnostics
    has no rows, and a refused file is a warning."""
    from helpers import tiny

    from normbench.experiment.compose import compose
    from normbench.store.rundir import DIAGNOSTICS_COLUMNS
    from normbench.training.run import run_experiment

    runs = tmp_path / "runs"
    diagnosed = run_experiment(compose(tiny("diagnostics=true")), runs, progress=False)
    plain = run_experiment(compose(tiny("placement=post")), runs, progress=False)
    long = api.diagnostics(runs)
    assert list(long.columns) == ["run_id", "placement.name", "seed", *DIAGNOSTICS_COLUMNS]
    assert set(long["run_id"]) == {diagnosed.path.name} and len(long) == 3 * 4  # steps x units
    stored = pd.read_parquet(diagnosed.path / "diagnostics.parquet")
    for column in ("step", "unit", "resid_kurtosis", "sublayer_max_abs", "attn_sink"):
        assert long[column].tolist() == pytest.approx(stored[column].tolist(), nan_ok=True)
    (plain.path / "diagnostics.parquet").symlink_to(diagnosed.path / "diagnostics.parquet")
    with pytest.warns(UserWarning, match=f"skipped {plain.path.name}: .*symlink"):
        assert len(api.diagnostics(runs)) == 3 * 4


# ----------------------------------------------------------------------------------- report
# A value for each of report()'s options; those of `--reference KEY=VALUE` and `--across KEY`
# are here for when report() has them. Every option needs one (test below).
SAMPLES = {
    "sweep": "quick",
    "tag": "kept",
    "alpha": 0.1,
    "margin": 0.05,
    "reference_batch": 8,
    "diverged": "exclude",
    "by": "norm.name",
    "best_over": "batch_size",
    "diagnostics": True,  # no run has diagnostics: both refuse it, in the same words
    "table": "batch_sensitivity",
    "reference": "norm=groupnorm",
    "across": "data",
    "profile": "time",  # alone it is refused by both, in the same words
    "scaling": "model.width",  # refused by both in the same words where it has < 3 values
    "target": 0.5,  # val_acc, reached by some runs, not all
}
# Flags that change how a report is shown, not what it holds.
DISPLAY_FLAGS = {"--format", "--out", "--plots", "--html", "--x", "--runs-dir", "--help"}
NOT_TABLES = {"sections", "method", "statuses", "warnings", "best_over", "scaling_method"}


def cli_report(runs, filters: tuple[str, ...], options: dict) -> dict | str:
    """`normbench report ... --format json` for report()'s options: its payload, or its error
    line."""
    argv = ["report", str(runs), *filters, "--format", "json"]
    for name, value in options.items():
        flag = api.REPORT_OPTIONS[name].flag
        text = ",".join(value) if isinstance(value, list) else str(value)
        argv += [flag] if value is True else [flag, text]
    result = runner.invoke(app, argv)
    if result.exit_code == 2:
        return result.output.strip().removeprefix("normbench: error: ")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def api_report(runs, filters: tuple[str, ...], options: dict) -> dict | str:
    """report() with the same arguments, its tables as JSON records, or its error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tables = api.report(runs, *filters, **options)
    except api.UsageError as err:
        return str(err)
    return {name: json.loads(frame.to_json(orient="records")) for name, frame in tables.items()}


CASES = [((), {})] + [((), {name: SAMPLES.get(name)}) for name in api.REPORT_OPTIONS]
CASES += [(("batch_size=32",), {"by": ["norm.name"], "alpha": 0.2}), (("nrm=x",), {})]


@pytest.mark.parametrize(
    ("filters", "options"),
    CASES,
    ids=[" ".join([*f, *(f"{k}={v}" for k, v in o.items())]) or "defaults" for f, o in CASES],
)
def test_report_agrees_with_the_command_lines_json(store, filters, options):
    assert None not in options.values(), f"add a sample value for {options} to SAMPLES"
    cli = cli_report(store, filters, options)
    ours = api_report(store, filters, options)
    if isinstance(cli, str) or isinstance(ours, str):
        assert ours == cli  # the same refusal, in the same words
        return
    assert set(ours) == set(cli) - NOT_TABLES | {"sections"}
    for name, records in ours.items():
        assert records == cli[name], name


def test_every_flag_that_changes_a_report_is_an_option_of_report():
    command = get_command(app).commands["report"]
    flags = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
    options = {option.flag for option in api.REPORT_OPTIONS.values()}
    assert flags - DISPLAY_FLAGS == options, "a flag of `normbench report` that report() lacks"


def test_report_target_sets_the_cost_tables_target_as_the_flag_does(tmp_path):
    """report(target=...) is --target: the cost table's time and FLOPs to that value (a store
    with timed runs, where the cost table is shown); a non-finite one is refused."""
    from tests.report.test_cost_target import store as timed_store

    timed_store(tmp_path)
    options = {"reference": "norm=layernorm", "target": 0.8}
    ours = api_report(tmp_path, (), options)
    assert ours["cost"] == cli_report(tmp_path, (), options)["cost"]
    default = api_report(tmp_path, (), {"reference": "norm=layernorm"})
    assert [row["time_to_target_s"] for row in ours["cost"]] != [
        row["time_to_target_s"] for row in default["cost"]
    ]
    with pytest.raises(api.UsageError, match="report option target=nan: valid: a finite"):
        api.report(tmp_path, target=float("nan"))


def test_report_refuses_an_unknown_option_naming_the_valid_ones(store):
    with pytest.raises(api.UsageError, match="report option alfa: .*valid: sweep, tag, alpha"):
        api.report(store, alfa=0.1)


def test_report_returns_the_verdicts_and_the_sections(store):
    tables = api.report(store, margin=0.02)
    assert {"convergence", "batch_sensitivity", "sections"} <= set(tables)
    batch = tables["batch_sensitivity"].set_index("norm.name")
    assert batch.loc["groupnorm", "verdict"] == "sensitive"
    assert batch.loc["batchnorm", "verdict"] == "insensitive"
    assert tables["sections"].loc[0, "grouped_by"] == ["norm.name", "batch_size"]


def test_learning_curves_are_the_reports_figures(store):
    (figure,) = api.learning_curves(store, x="samples", by="norm.name")
    loss, _ = figure.axes
    assert loss.get_xlabel() == "training samples seen"
    assert {line.get_label().split(" (")[0] for line in loss.get_lines()} >= {
        "norm=batchnorm",
        "norm=groupnorm",
    }
    with pytest.raises(api.UsageError, match="--x hours: valid: steps"):
        api.learning_curves(store, x="hours")


def test_a_config_key_named_like_a_metric_column_does_not_overwrite_it(tmp_path):
    """A config whose top-level key is `step` or `val_acc` (a plugin's): api.metrics() keeps
    the logged values and names the config's `config.step`."""
    from normbench.store.rundir import RunDir

    runs = tmp_path / "runs"
    for seed in range(2):
        run = RunDir(runs, make_run(runs, ["norm=layernorm", f"seed={seed}"]))
        cfg = run.read_config()
        nested: dict = {}
        for dotted, value in {**cfg, "step": 100 + seed, "val_acc": -1.0 - seed}.items():
            *parents, leaf = dotted.split(".")
            node = nested
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        run.write_config(nested)
    frame = api.metrics(runs)
    assert frame["step"].tolist() == [10, 20, 30, 10, 20, 30]
    assert frame["val_acc"].max() < 1 and frame["val_acc"].min() > 0
    assert sorted(set(frame["config.step"])) == [100, 101]


def test_report_refuses_grouping_by_a_runs_own_field_as_the_command_line_does(tmp_path):
    from normbench.core.errors import UsageError

    with pytest.raises(UsageError, match="--by run_id: not a config key"):
        api.report(tmp_path, by="run_id")
