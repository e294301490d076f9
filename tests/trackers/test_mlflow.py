"""MLflow export against a real local tracking store (sqlite, mlflow-skinny's client), read
back with mlflow.search_runs: one MLflow run per normbench run, updated when exported again."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.store.rundir import RunDir

for module in ("mlflow", "sqlalchemy", "alembic"):
    pytest.importorskip(module, reason="the tracking extra: pip install 'normbench[tracking]'")
import mlflow  # noqa: E402

runner = CliRunner()
# mlflow's SQL store, under SQLAlchemy 2.1: not normbench's to fix
pytestmark = [
    pytest.mark.tracking,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated"),
]


def export(runs, uri, *arguments: str) -> list[str]:
    result = runner.invoke(app, ["runs", "export", "--to", "mlflow", uri, str(runs), *arguments])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def history(uri: str, mlflow_id: str, key: str) -> list[tuple[int, float]]:
    client = mlflow.tracking.MlflowClient(uri)
    return sorted((m.step, m.value) for m in client.get_metric_history(mlflow_id, key))


def test_export_logs_each_run_and_exporting_again_updates_it(tmp_path, monkeypatch):
    runs, uri = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # mlflow.search_runs reads it
    ids = {
        "complete": make_run(runs, ["norm=batchnorm", "seed=0"]),
        "diverged": make_run(runs, ["norm=batchnorm", "seed=1"], status="diverged"),
        "failed": make_run(runs, ["norm=groupnorm", "seed=0"], status="failed", error="Boom"),
        "running": make_run(runs, ["norm=groupnorm", "seed=1"], status="running"),
    }
    meta = RunDir(runs, ids["complete"]).read_meta()
    meta.update(tags=["baseline"], started="2026-01-02T03:04:05+00:00")
    RunDir(runs, ids["complete"]).write_meta(meta)

    lines = export(runs, uri, "norm=batchnorm")
    assert sorted(lines[:-1]) == sorted(f"created {ids[s]}" for s in ("complete", "diverged"))
    with RunDir(runs, ids["running"]).lock():  # a run being trained (else it is abandoned)
        lines = export(runs, uri)
    assert lines[-1] == f"exported 4 run(s) to mlflow {uri}, experiment normbench"
    assert sum(line.startswith("updated") for line in lines) == 2
    found = mlflow.search_runs(experiment_names=["normbench"])
    assert len(found) == 4
    found = found.set_index("tags.normbench.run_id")
    expected = {"complete": "FINISHED", "diverged": "FINISHED", "failed": "FAILED"}
    for status, mlflow_status in {**expected, "running": "RUNNING"}.items():
        row = found.loc[ids[status]]
        assert row["status"] == mlflow_status and row["tags.normbench.status"] == status
        assert row["params.norm.name"] == ids[status].split("-")[1]
        assert row["tags.normbench.run_dir"] == (runs / ids[status]).resolve().as_uri()
        stored = pd.read_parquet(runs / ids[status] / "metrics.parquet")
        assert history(uri, row["run_id"], "train_loss") == list(
            zip(stored["step"], stored["train_loss"], strict=True)
        )
    complete = found.loc[ids["complete"]]
    assert complete["tags.normbench.tags"] == "baseline"
    assert complete["params.norm.mask_padding"] == "true" and "params.threads" not in found
    assert complete["start_time"] == pd.Timestamp("2026-01-02T03:04:05", tz="UTC")

    # the running run logs two more steps: a third export adds them, and only them
    rows = pd.read_parquet(runs / ids["running"] / "metrics.parquet").to_dict("records")
    rows += [{**rows[-1], "step": 40, "train_loss": 0.25}, {**rows[-1], "step": 50}]
    RunDir(runs, ids["running"]).write_metrics(rows)
    # the complete run is trained afresh (--force): a new start, new numbers at the old steps
    meta.update(started="2026-02-01T00:00:00+00:00")
    RunDir(runs, ids["complete"]).write_meta(meta)
    lines = export(runs, uri)  # the running run's process has died since: abandoned
    assert f"replaced {ids['complete']}" in lines
    again = mlflow.search_runs(experiment_names=["normbench"]).set_index("tags.normbench.run_id")
    assert len(again) == 4
    running = again.loc[ids["running"], "run_id"]
    assert running == found.loc[ids["running"], "run_id"]  # the same MLflow run, updated
    assert again.loc[ids["running"], "status"] == "KILLED"
    assert [step for step, _ in history(uri, running, "train_loss")] == [10, 20, 30, 40, 50]
    assert again.loc[ids["complete"], "run_id"] != complete["run_id"]


def test_a_tracking_store_that_cannot_be_opened_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=batchnorm"])
    result = runner.invoke(app, ["runs", "export", "--to", "mlflow", "nosuch://x", str(runs)])
    assert result.exit_code == 2
    assert result.output.startswith("normbench: error: --to mlflow nosuch://x: cannot use")
    assert len(result.output.strip().splitlines()) == 1


def test_an_export_cut_short_leaves_no_half_made_mlflow_run(tmp_path, monkeypatch):
    """MLflow refuses a run's metrics, then a Ctrl-C arrives while they are logged: the MLflow
    run just created is deleted each time, not left RUNNING without tags, and exporting again
    (twice) gives one MLflow run per normbench run."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    runs, uri = tmp_path / "runs", f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for seed in range(2):
        make_run(runs, ["norm=layernorm", f"seed={seed}"])
    real = MlflowClient.log_batch
    for fault, exit_code in ((MlflowException("refused"), 1), (KeyboardInterrupt(), 130)):

        def cut_short(self, run_id, metrics=(), fault=fault, **kwargs):
            if metrics:
                raise fault
            return real(self, run_id, metrics=metrics, **kwargs)

        monkeypatch.setattr(MlflowClient, "log_batch", cut_short)
        result = runner.invoke(app, ["runs", "export", "--to", "mlflow", uri, str(runs)])
        assert result.exit_code == exit_code, result.output
        assert mlflow.search_runs(experiment_names=["normbench"]).empty
    monkeypatch.setattr(MlflowClient, "log_batch", real)
    for _ in range(2):
        export(runs, uri)
        found = mlflow.search_runs(experiment_names=["normbench"])
        assert len(found) == 2 and set(found["status"]) == {"FINISHED"}


def test_an_unreachable_tracking_server_is_one_line_within_seconds(tmp_path):
    """Nothing listens on port 9: mlflow's own retries would keep the export silent for
    minutes; the first contact gives up after one retry (a minute at most here)."""
    from helpers import limited

    runs = tmp_path / "runs"
    make_run(runs, ["norm=batchnorm"])
    with limited(60):
        result = runner.invoke(
            app, ["runs", "export", "--to", "mlflow", "http://127.0.0.1:9", str(runs)]
        )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--to mlflow http://127.0.0.1:9: cannot use this tracking store" in result.output
