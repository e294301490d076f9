"""TensorBoard event files, exported from the store and written live while training, read
back with TensorBoard's own reader and compared with metrics.parquet."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from helpers import make_run, tiny
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import StoreError
from normbench.experiment.compose import compose
from normbench.store.rundir import RunDir, run_id
from normbench.trackers.runs import tracked_run
from normbench.training.run import run_experiment

pytest.importorskip("tensorboard", reason="the tracking extra: pip install 'normbench[tracking]'")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import metadata  # noqa: E402

pytestmark = pytest.mark.tracking
runner = CliRunner()


def read_back(directory: Path) -> EventAccumulator:
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def assert_scalars_are_the_metrics(events: EventAccumulator, metrics: pd.DataFrame) -> None:
    """Every metric column a scalar series with the steps at which it is logged (not NaN)
    and its values (TensorBoard stores float32)."""
    logged = [c for c in metrics.columns if c != "step" and metrics[c].notna().any()]
    assert sorted(events.Tags()["scalars"]) == sorted(logged)
    for column in logged:
        expected = metrics.dropna(subset=[column])
        scalars = events.Scalars(column)
        assert [s.step for s in scalars] == expected["step"].tolist(), column
        for scalar, value in zip(scalars, expected[column], strict=True):
            assert math.isclose(scalar.value, value, rel_tol=1e-6, abs_tol=1e-9), column


def hparams(events: EventAccumulator):
    content = events.PluginTagToContent("hparams")[metadata.SESSION_START_INFO_TAG]
    return metadata.parse_session_start_info_plugin_data(content)


def test_export_writes_a_directory_per_run_with_scalars_hparams_and_tags(tmp_path):
    runs, board = tmp_path / "runs", tmp_path / "board"
    tagged = make_run(runs, ["norm=batchnorm"], losses=(2.0, 1.25, 0.625, 0.5))
    other = make_run(runs, ["norm=groupnorm"])
    meta = RunDir(runs, tagged).read_meta()
    RunDir(runs, tagged).write_meta({**meta, "tags": ["baseline", "v2"]})
    command = ["runs", "export", "--to", "tensorboard", str(board), str(runs)]
    for _ in range(2):  # exporting again replaces the event file: no step twice
        result = runner.invoke(app, command)
        assert result.exit_code == 0, result.output
    assert f"wrote {board / tagged}" in result.output
    assert "exported 2 run(s) to tensorboard" in result.output
    assert sorted(p.name for p in board.iterdir()) == sorted([tagged, other])
    for rid in (tagged, other):
        assert len(list((board / rid).glob("events.out.tfevents.*"))) == 1
        events = read_back(board / rid)
        assert_scalars_are_the_metrics(events, pd.read_parquet(runs / rid / "metrics.parquet"))
        info = hparams(events)
        assert info.group_name == rid
        assert info.hparams["norm.name"].string_value == rid.split("-")[1]
        assert info.hparams["batch_size"].number_value == 32
        assert info.hparams["norm.ghost_batch"].string_value == "null"
    (text,) = read_back(board / tagged).Tensors("tags")
    assert text.tensor_proto.string_val == [b"baseline, v2"]
    assert "tags" not in read_back(board / other).Tags()["tensors"]


def test_log_tensorboard_writes_the_same_while_training_and_keeps_the_run_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compose(tiny("model=cnn", "log.tensorboard=board"))
    assert cfg["log"]["tensorboard"] == str(tmp_path / "board")  # absolute: a job's cwd differs
    assert run_id(cfg) == run_id(compose(tiny("model=cnn")))
    outcome = run_experiment(cfg, tmp_path / "runs", progress=False)
    assert outcome.status == "complete"
    metrics = pd.read_parquet(outcome.path / "metrics.parquet")
    assert metrics["val_acc"].isna().any()  # validation only at evaluations
    events = read_back(tmp_path / "board" / outcome.run_id)
    assert_scalars_are_the_metrics(events, metrics)
    assert hparams(events).hparams["model.name"].string_value == "cnn"


@pytest.mark.parametrize("name", ["../victim", "/tmp/victim", ".locks", "a/b"])
def test_a_run_id_that_is_not_a_directory_name_is_refused(tmp_path, name):
    with pytest.raises(StoreError, match="not the name of a run directory"):
        tracked_run({"run_id": name, "status": "complete"}, tmp_path)


@pytest.mark.parametrize("where", ["{tmp}/file", "/dev/null", "{tmp}/link", "{tmp}/file/sub"])
def test_an_unusable_log_tensorboard_is_refused_before_the_run(tmp_path, where):
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to("/dev/null")
    runs = tmp_path / "runs"
    setting = f"log.tensorboard={where.format(tmp=tmp_path)}"
    for command in (["run", *tiny(setting)], ["sweep", *tiny(setting, "seed=0,1"), "--dry-run"]):
        result = runner.invoke(app, [*command, "--runs-dir", str(runs)])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert result.output.startswith("normbench: error: log.tensorboard=")
        assert "is not a directory" in result.output
    assert not runs.exists()


@pytest.mark.parametrize(
    ("destination", "words"),
    [
        ("", "--to tensorboard '': name a directory"),
        ("{runs}", "inside the runs directory"),
        ("{runs}/board", "inside the runs directory"),
        ("{tmp}/file", "is not a directory"),
        ("{tmp}/file/board", "is not a directory"),
    ],
)
def test_an_odd_export_destination_is_one_line(tmp_path, destination, words):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    (tmp_path / "file").write_text("")
    before = sorted(p.name for p in runs.iterdir())
    target = destination.format(runs=runs, tmp=tmp_path)
    result = runner.invoke(app, ["runs", "export", "--to", "tensorboard", target, str(runs)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert words in result.output
    assert sorted(p.name for p in runs.iterdir()) == before


def test_an_in_memory_mlflow_store_is_refused(tmp_path):
    pytest.importorskip("mlflow", reason="the tracking extra")
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    result = runner.invoke(app, ["runs", "export", "--to", "mlflow", "sqlite://", str(runs)])
    assert result.exit_code == 2 and "an in-memory database keeps nothing" in result.output
