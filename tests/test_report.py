"""normbench report: aggregation against hand-computed numbers on hand-made run stores."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from io import StringIO

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from normbench.cli import app
from normbench.config import UsageError, compose
from normbench.report import build, load_runs, render, select, welch_p
from normbench.store import RunDir, run_id

runner = CliRunner()
T_975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student's t quantiles, df = 2, 3


def make_run(
    runs,
    overrides,
    status="complete",
    acc=0.9,
    steps_to_target=None,
    best=None,
    auc=0.5,
    losses=(2.0, 1.0, 0.5),
):
    """A run directory as normbench writes it, with chosen numbers."""
    cfg = compose(["model=cnn", *overrides])
    run = RunDir(runs, run_id(cfg))
    run.write_config(cfg)
    summary = {
        "final_val_acc": acc,
        "best_val_acc": best or acc,
        "steps": 30,
        "steps_to_target": steps_to_target,
        "time_to_target_s": None if steps_to_target is None else steps_to_target / 100,
        "train_loss_auc": auc,
    }
    run.write_meta({"run_id": run.run_id, "status": status, "summary": summary, "error": None})
    rows = [
        {
            "step": 10 * (i + 1),
            "train_loss": loss,
            "val_acc": None if acc is None else acc - 0.1 * (2 - i),
        }
        for i, loss in enumerate(losses)
    ]
    run.write_metrics(rows)
    return run.run_id


@pytest.fixture
def study(tmp_path):
    """BatchNorm at ghost batch 2 and 32, GroupNorm (batch-independent), three seeds each."""
    runs = tmp_path / "runs"
    numbers = {
        ("batchnorm", 2): ([0.80, 0.82, 0.84], [None, 300, None]),
        ("batchnorm", 32): ([0.90, 0.92, 0.94], [100, 200, 300]),
        ("groupnorm", 32): ([0.91, 0.91, 0.94], [200, 200, 400]),
    }
    for (norm, ghost), (accs, targets) in numbers.items():
        for seed, (acc, target) in enumerate(zip(accs, targets, strict=True)):
            make_run(
                runs,
                [f"norm={norm}", f"norm.ghost_batch={ghost}", f"seed={seed}"],
                acc=acc,
                steps_to_target=target,
                auc=0.1 * (seed + 1),
            )
    return runs


def test_convergence_table_matches_hand_computed_numbers(study):
    report = build(load_runs(study))
    assert report.keys == ["norm.name", "norm.ghost_batch"]
    table = report.tables["convergence"].set_index(["norm.name", "norm.ghost_batch"])
    bn32 = table.loc[("batchnorm", "32")]
    assert bn32["n"] == 3 and bn32["val_acc_mean"] == pytest.approx(0.92)
    assert bn32["val_acc_ci95"] == pytest.approx(T_975[2] * 0.02 / math.sqrt(3))
    assert bn32["steps_to_target"] == 200 and bn32["reached_target"] == 3
    assert bn32["time_to_target_s"] == pytest.approx(2.0)
    assert bn32["train_loss_auc"] == pytest.approx(0.2)
    bn2 = table.loc[("batchnorm", "2")]
    assert bn2["steps_to_target"] == 300 and bn2["reached_target"] == 1
    gn = table.loc[("groupnorm", "-")]  # groupnorm ignores ghost_batch: one group
    assert gn["val_acc_mean"] == pytest.approx(0.92)
    # sorted best first; BN 32 and GN tie on the mean, BN at 2 is significantly worse
    ordered = report.tables["convergence"]
    assert (
        ordered.iloc[-1]["norm.name"] == "batchnorm" and ordered.iloc[-1]["norm.ghost_batch"] == "2"
    )
    assert ordered.iloc[0]["rank"] == "best" and ordered.iloc[1]["rank"] == "≈ best"
    assert ordered.iloc[-1]["rank"] == ""


def test_welch_test_matches_the_formula():
    a, b = np.array([0.90, 0.92, 0.94]), np.array([0.80, 0.82, 0.87])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    from scipy import stats

    assert welch_p(a, b) == pytest.approx(2 * stats.t.sf(abs(t), df))
    assert welch_p(np.array([0.5]), b) == 1.0  # one seed: no evidence either way


def test_batch_table_shows_the_drop_and_broadcasts_batch_independent_norms(study):
    table = build(load_runs(study)).tables["batch_sensitivity"].set_index("norm.name")
    bn = table.loc["batchnorm"]
    assert bn["b2_mean"] == pytest.approx(0.82) and bn["b32_mean"] == pytest.approx(0.92)
    assert bn["b2_sd"] == pytest.approx(0.02) and bn["drop"] == pytest.approx(0.10)
    assert bn["best_batch"] == 32 and bn["smallest_batch"] == 2
    assert bn["p_value"] == pytest.approx(
        welch_p(np.array([0.9, 0.92, 0.94]), np.array([0.8, 0.82, 0.84]))
    )
    assert bn["significant"]
    gn = table.loc["groupnorm"]
    assert gn["batch_independent"] and gn["b2_mean"] == gn["b32_mean"] == pytest.approx(0.92)
    assert gn["drop"] == 0 and not gn["significant"]


def test_precision_table_gives_the_change_against_fp32_and_divergences(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(2):
        make_run(runs, ["precision=fp32", f"seed={seed}"], acc=0.90)
        make_run(runs, ["precision=bf16", f"seed={seed}"], acc=0.88)
    make_run(runs, ["precision=fp16", "seed=0"], acc=0.85)
    make_run(runs, ["precision=fp16", "seed=1"], status="diverged", acc=0.10)
    table = build(load_runs(runs)).tables["precision"]
    row = table.iloc[0]
    assert row["bf16_delta"] == pytest.approx(-0.02)
    assert row["fp16_mean"] == pytest.approx((0.85 + 0.10) / 2)
    assert row["fp16_diverged"] == 1 and row["bf16_diverged"] == 0 and row["fp16_n"] == 2


def test_failed_and_interrupted_runs_are_counted_not_dropped(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    make_run(runs, ["seed=1"], status="failed", acc=None)
    make_run(runs, ["seed=2"], status="interrupted", acc=0.5)
    report = build(load_runs(runs))
    row = report.tables["convergence"].iloc[0]
    assert row["n"] == 3 and row["failed"] == 1 and row["interrupted"] == 1
    assert row["val_acc_mean"] == pytest.approx(0.9)  # only finished runs are results
    assert report.counts == {"complete": 1, "failed": 1, "interrupted": 1}


def test_best_over_keeps_each_groups_best_value(tmp_path):
    runs = tmp_path / "runs"
    for norm, accs in (("batchnorm", {0.1: 0.9, 0.01: 0.8}), ("groupnorm", {0.1: 0.7, 0.01: 0.85})):
        for lr, acc in accs.items():
            make_run(runs, [f"norm={norm}", f"train.lr={lr}"], acc=acc)
    report = build(load_runs(runs), best_over_key="train.lr")
    table = report.tables["convergence"].set_index("norm.name")
    assert table.loc["batchnorm", "train.lr"] == "0.1"
    assert table.loc["groupnorm", "train.lr"] == "0.01"
    assert table.loc["groupnorm", "val_acc_mean"] == pytest.approx(0.85)


def test_filters_select_in_override_syntax(study):
    selection = load_runs(study)
    assert len(select(selection, ["norm=groupnorm"], None).runs) == 3
    assert len(select(selection, ["norm=batchnorm,groupnorm", "seed=0"], None).runs) == 3
    assert len(select(selection, ["norm.ghost_batch=2"], None).runs) == 3
    with pytest.raises(UsageError, match="no key 'nrom'"):
        select(selection, ["nrom=batchnorm"], None)


def test_every_format_parses_back(study):
    report = build(load_runs(study))
    frame = pd.read_csv(StringIO(render(report, "csv", None)))
    assert {"norm.name", "n", "val_acc_mean", "val_acc_ci95", "steps_to_target"} <= set(frame)
    batch = pd.read_csv(StringIO(render(report, "csv", "batch_sensitivity")))
    assert {"b2_mean", "b32_mean", "drop", "p_value", "significant"} <= set(batch)
    payload = json.loads(render(report, "json", None))
    assert set(payload) >= {"convergence", "batch_sensitivity", "grouped_by", "statuses"}
    assert len(payload["convergence"]) == 3
    markdown = render(report, "markdown", None)
    tables = [block for block in markdown.split("### ") if block.strip()]
    assert len(tables) == 2
    rows = [line for line in tables[0].splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3  # header, rule, three groups
    assert all(line.count("|") == rows[0].count("|") for line in rows)


def test_cli_report_outputs_and_plots(study, tmp_path):
    result = runner.invoke(app, ["report", str(study)])
    assert result.exit_code == 0, result.output
    assert "Convergence" in result.output and "Batch-size sensitivity" in result.output
    out = tmp_path / "tables.json"
    result = runner.invoke(
        app,
        [
            "report",
            "--runs-dir",
            str(study),
            "--format",
            "json",
            "--out",
            str(out),
            "--plots",
            str(tmp_path / "img"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["convergence"]
    import matplotlib.image

    for name in ("learning_curves.png", "batch_sensitivity.png"):
        path = tmp_path / "img" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
        assert matplotlib.image.imread(path).std() > 0  # not a blank image


def test_corrupt_and_half_written_runs_are_skipped_with_a_warning(study):
    (study / "half-written").mkdir()
    corrupt = study / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "meta.json").write_text("{half")
    selection = load_runs(study)
    assert len(selection.runs) == 9
    assert any("half-written" in w for w in selection.warnings)
    assert any("corrupt-run" in w for w in selection.warnings)
    result = runner.invoke(app, ["report", str(study), "--format", "csv"])
    assert result.exit_code == 0 and "corrupt-run" in result.output


def test_missing_or_empty_runs_directory_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "does not exist" in result.output
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["report", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no runs match" in result.output
    result = runner.invoke(app, ["report", str(tmp_path / "empty"), "--sweep", "x"])
    assert result.exit_code == 2 and "no such sweep" in result.output


def test_the_index_refreshes_changed_runs(study):
    first = load_runs(study).runs.set_index("run_id")
    assert (study / ".index.json").exists()
    rid = first.index[0]
    meta = RunDir(study, rid).read_meta()
    meta["summary"]["final_val_acc"] = 0.123456
    RunDir(study, rid).write_meta(meta)
    again = load_runs(study).runs.set_index("run_id")
    assert again.loc[rid, "final_val_acc"] == pytest.approx(0.123456)


def test_report_never_imports_torch(study):
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        f"r = CliRunner().invoke(app, ['report', {str(study)!r}, '--plots', "
        f"{str(study / 'img')!r}])\nassert r.exit_code == 0, r.output\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_report_after_a_real_smoke_sweep(tmp_path):
    runs = tmp_path / "runs"
    sweep = subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", "smoke", "seed=0,1", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
    )
    assert sweep.returncode == 0, sweep.stderr
    result = runner.invoke(
        app,
        [
            "report",
            "--sweep",
            "smoke",
            "--runs-dir",
            str(runs),
            "--format",
            "json",
            "--plots",
            str(tmp_path / "img"),
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {r["norm.name"] for r in payload["convergence"]} == {"batchnorm", "groupnorm"}
    assert all(r["n"] == 2 for r in payload["convergence"])
    assert len(payload["batch_sensitivity"]) == 2  # batch_size 8 and 16 vary
    assert (tmp_path / "img" / "learning_curves.png").exists()
