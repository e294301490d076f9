"""normbench report: verdicts, sections and formats on hand-made run stores."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import fields
from io import StringIO

import numpy as np
import pandas as pd
import pytest
from helpers import make_run
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.report import stats
from normbench.report.render import markdown, to_csv, to_json
from normbench.report.tables import ACCURACY, Method, build, resolution
from normbench.store.catalog import load_runs, select
from normbench.store.rundir import RunDir

runner = CliRunner()
T_975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student's t quantiles, df = 2, 3


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
                test_acc=acc - 0.01,
                steps_to_target=target,
                auc=0.1 * (seed + 1),
            )
    return runs


def convergence(runs, **method):
    report = build(load_runs(runs), method=Method(**method))
    (section,) = report.sections
    return section.tables["convergence"], section


def test_convergence_numbers_match_hand_computations(study):
    table, section = convergence(study)
    assert section.keys == ["norm.name", "norm.ghost_batch"]
    rows = {(r["norm.name"], r["norm.ghost_batch"]): r for _, r in table.iterrows()}
    bn32 = rows[("batchnorm", 32)]
    assert bn32["n"] == 3 and bn32["val_acc_mean"] == pytest.approx(0.92)
    assert bn32["val_acc_ci95"] == pytest.approx(T_975[2] * 0.02 / math.sqrt(3))
    assert bn32["test_acc_mean"] == pytest.approx(0.91)
    assert bn32["steps_to_target"] == 200 and bn32["reached_target"] == 3
    assert bn32["time_to_target_s"] == pytest.approx(2.0)
    assert bn32["train_loss_auc"] == pytest.approx(0.2) and bn32["parameters"] == 1234
    assert rows[("batchnorm", 2)]["reached_target"] == 1
    assert rows[("groupnorm", None)]["val_acc_mean"] == pytest.approx(0.92)  # ignores ghost
    assert table.iloc[0]["verdict"] == "reference"
    assert isinstance(bn32["norm.ghost_batch"], int)  # numbers stay numbers


def test_verdicts_against_the_best_are_the_stats_modules(study):
    table, _ = convergence(study)
    step = resolution(load_runs(study).runs, ACCURACY)
    assert step == pytest.approx(1 / 1600)  # mnist1d's validation split: 1,600 samples
    groups = [dict(zip(row["seeds"], row["values"], strict=True)) for _, row in table.iterrows()]
    best, verdicts = stats.compare_with_best(groups, 0.05, 0.01, step)
    assert best == 0 and table.iloc[0]["verdict"] == "reference"
    bn2 = table[table["norm.ghost_batch"] == 2].index[0]
    d = stats.difference(groups[bn2], groups[0], step)
    assert d.paired and table.loc[bn2, "diff_vs_best"] == pytest.approx(d.diff)
    low, high = stats.interval(d, 0.05)
    assert (table.loc[bn2, "diff_ci_low"], table.loc[bn2, "diff_ci_high"]) == pytest.approx(
        (low, high)
    )
    assert table.loc[bn2, "p_worse_adj"] == pytest.approx(verdicts[bn2].p_differs)
    assert table.loc[bn2, "reason"] == "paired, 3 seeds"
    assert table.loc[bn2, "values"] == [0.8, 0.82, 0.84]


def test_every_verdict_on_a_hand_made_store(tmp_path):
    runs = tmp_path / "runs"
    groups = {
        "layernorm": [0.950, 0.951, 0.949, 0.950],  # the best
        "rmsnorm": [0.949, 0.950, 0.948, 0.949],  # equivalent within 0.01
        "batchnorm": [0.700, 0.701, 0.699, 0.700],  # worse
        "groupnorm": [0.90, 0.99, 0.85, 0.97],  # inconclusive: noisy
        "dyt": [0.99],  # one seed: inconclusive with a reason
    }
    for norm, accs in groups.items():
        for seed, acc in enumerate(accs):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc)
    table, section = convergence(runs)
    verdicts = dict(zip(table["norm.name"], table["verdict"], strict=True))
    assert verdicts == {
        "layernorm": "reference",
        "rmsnorm": "equivalent",
        "batchnorm": "worse",
        "groupnorm": "inconclusive",
        "dyt": "inconclusive",
    }
    dyt = table[table["norm.name"] == "dyt"].iloc[0]
    assert "needs 2" in dyt["reason"] and math.isnan(dyt["diff_vs_best"])
    # a stricter margin turns the equivalence inconclusive or worse, never equivalent
    strict, _ = convergence(runs, margin=0.0001)
    assert strict.set_index("norm.name").loc["rmsnorm", "verdict"] != "equivalent"


def test_diverged_runs_count_at_chance_and_can_be_excluded(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    make_run(runs, ["seed=1"], acc=0.8)
    make_run(runs, ["seed=2"], status="diverged", acc=0.85)  # last accuracy before NaN
    table, section = convergence(runs)
    row = table.iloc[0]
    assert row["val_acc_mean"] == pytest.approx((0.9 + 0.8 + 0.1) / 3)  # chance = 1/10
    assert row["diverged"] == 1 and row["results"] == 3
    assert any("counted at chance" in note for note in section.notes)
    table, section = convergence(runs, diverged="exclude")
    assert table.iloc[0]["val_acc_mean"] == pytest.approx(0.85)
    assert any("1 diverged run(s) excluded" in note for note in section.notes)


def test_failed_and_unfinished_runs_are_counted_and_named_never_averaged(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    failed = make_run(runs, ["seed=1"], status="failed", acc=None, error="RuntimeError: boom")
    interrupted = make_run(runs, ["seed=2"], status="interrupted", acc=0.5)
    report = build(load_runs(runs))
    (section,) = report.sections
    row = section.tables["convergence"].iloc[0]
    assert row["n"] == 3 and row["failed"] == 1 and row["unfinished"] == 1
    assert row["val_acc_mean"] == pytest.approx(0.9)
    notes = " ".join(section.notes)
    assert failed in notes and "RuntimeError: boom" in notes and interrupted in notes
    assert report.counts == {"complete": 1, "failed": 1, "interrupted": 1}


def test_groups_mixing_code_fingerprints_are_marked(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["seed=0"], acc=0.9)
    make_run(runs, ["seed=1"], acc=0.9, code="0123456789abcdef")  # a stale run
    table, _ = convergence(runs)
    assert table.iloc[0]["mixed"] == "code"
    result = runner.invoke(app, ["report", str(runs)])
    assert "(code mixed)" in result.output


def test_different_budgets_and_data_are_separate_sections(tmp_path):
    runs = tmp_path / "runs"
    for steps in (300, 3000):
        for norm in ("batchnorm", "layernorm"):
            for seed in range(2):
                make_run(
                    runs,
                    [f"norm={norm}", f"seed={seed}", f"train.max_steps={steps}"],
                    acc=0.8 + steps / 1e5,
                )
    report = build(load_runs(runs))
    assert [s.setting for s in report.sections] == [
        {"train.max_steps": 300},
        {"train.max_steps": 3000},
    ]
    for section in report.sections:
        assert section.keys == ["norm.name"] and len(section.tables["convergence"]) == 2
        assert section.fixed["model.name"] == "cnn" and section.fixed["data.name"] == "mnist1d"
    result = runner.invoke(app, ["report", str(runs)])
    assert result.exit_code == 0, result.output
    assert "== train.max_steps=300 ==" in result.output
    assert "fixed: model=cnn" in result.output
    # asked for explicitly, the budget is a grouping key and one table ranks across it
    report = build(load_runs(runs), by=["norm.name", "train.max_steps"])
    assert len(report.sections) == 1 and len(report.sections[0].tables["convergence"]) == 4


def test_batch_contrast_largest_against_smallest(study):
    report = build(load_runs(study))
    table = report.sections[0].tables["batch_sensitivity"].set_index("norm.name")
    bn = table.loc["batchnorm"]
    assert bn["b2_mean"] == pytest.approx(0.82) and bn["b32_mean"] == pytest.approx(0.92)
    assert bn["b2_ci95"] == pytest.approx(T_975[2] * 0.02 / math.sqrt(3))
    assert bn["drop"] == pytest.approx(0.10)
    # seed s at batch 32 against seed s at batch 2: every pair drops by exactly 0.10, which
    # is not a noise-free measurement: the spread is floored at the accuracy's resolution
    floor = resolution(load_runs(study).runs, ACCURACY) / math.sqrt(3)
    half = scipy_stats.t.ppf(0.95, 2) * floor / math.sqrt(3)
    assert (bn["drop_ci_low"], bn["drop_ci_high"]) == pytest.approx((0.10 - half, 0.10 + half))
    assert bn["reason"] == "paired, 3 seeds"
    assert bn["reference_batch"] == 32 and bn["smallest_batch"] == 2
    assert bn["verdict"] == "sensitive"
    gn = table.loc["groupnorm"]
    assert gn["same_runs"] and gn["verdict"] == "insensitive" and gn["reason"] == "same runs"


def test_batch_contrast_pairs_by_seed_and_falls_back_to_welch(tmp_path):
    runs = tmp_path / "runs"
    large, small = [0.90, 0.95, 0.85, 0.92], [0.89, 0.93, 0.85, 0.90]  # seeds far apart
    for seed, (a, b) in enumerate(zip(large, small, strict=True)):
        make_run(runs, ["norm=batchnorm", "norm.ghost_batch=32", f"seed={seed}"], acc=a)
        make_run(runs, ["norm=batchnorm", "norm.ghost_batch=2", f"seed={seed}"], acc=b)
    row = build(load_runs(runs)).sections[0].tables["batch_sensitivity"].iloc[0]
    step = resolution(load_runs(runs).runs, ACCURACY)
    a, b = dict(enumerate(large)), dict(enumerate(small))
    low, high = stats.interval(stats.difference(b, a, step), 0.05)
    assert (row["drop_ci_low"], row["drop_ci_high"]) == pytest.approx((-high, -low))
    welch = stats.difference(b, {s + 10: v for s, v in a.items()}, step)
    assert not welch.paired
    welch_width = np.subtract(*stats.interval(welch, 0.05)[::-1])
    assert row["drop_ci_high"] - row["drop_ci_low"] < welch_width / 4  # pairing removes the seed
    # a seed at one batch only: the others still pair (on the seeds both have)
    make_run(runs, ["norm=batchnorm", "norm.ghost_batch=32", "seed=9"], acc=0.9)
    row = build(load_runs(runs)).sections[0].tables["batch_sensitivity"].iloc[0]
    assert row["reason"] == "paired, 4 seeds"
    # no two seeds in common: Welch, unpaired
    other = tmp_path / "other"
    for seed in range(3):
        make_run(
            other, ["norm=batchnorm", "norm.ghost_batch=32", f"seed={seed}"], acc=0.9 + seed / 100
        )
        make_run(other, ["norm=batchnorm", "norm.ghost_batch=2", f"seed={seed + 5}"], acc=0.8)
    row = build(load_runs(other)).sections[0].tables["batch_sensitivity"].iloc[0]
    assert row["reason"] == "unpaired (Welch)"


def test_reference_batch_is_checked_against_the_grid(study):
    with pytest.raises(UsageError, match="--reference-batch 7: .*valid: 2, 32"):
        build(load_runs(study), method=Method(reference_batch=7))
    result = runner.invoke(app, ["report", str(study), "--reference-batch", "7"])
    assert result.exit_code == 2 and "valid: 2, 32" in result.output


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--margin", "-1", "--margin -1.0: valid: a positive number"),
        ("--alpha", "2", "--alpha 2.0: valid: a number strictly between 0 and 0.5"),
        ("--diverged", "drop", "--diverged drop: valid: chance, exclude"),
        ("--format", "xml", "--format xml: valid: rich, csv, markdown, json"),
        ("--table", "nope", "--table nope: valid: across, convergence"),
    ],
)
def test_bad_report_options_are_one_line_errors(study, flag, value, words):
    result = runner.invoke(
        app,
        ["report", str(study), flag, value, "--format", "json"]
        if flag != "--format"
        else ["report", str(study), flag, value],
    )
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_best_over_chooses_on_validation_and_reports_test(tmp_path):
    runs = tmp_path / "runs"
    cells = {  # (norm, lr): (validation, test)
        ("batchnorm", 0.1): (0.90, 0.70),
        ("batchnorm", 0.01): (0.80, 0.80),
        ("groupnorm", 0.1): (0.70, 0.70),
        ("groupnorm", 0.01): (0.85, 0.84),
    }
    for (norm, lr), (val, test) in cells.items():
        for seed in range(2):
            make_run(
                runs,
                [f"norm={norm}", f"train.lr={lr}", f"seed={seed}"],
                acc=val + seed / 1000,
                test_acc=test + seed / 1000,
            )
    report = build(load_runs(runs), best_over_key="train.lr")
    table = report.sections[0].tables["convergence"].set_index("norm.name")
    assert table.loc["batchnorm", "train.lr"] == pytest.approx(0.1)  # best on validation
    assert table.loc["groupnorm", "train.lr"] == pytest.approx(0.01)
    assert table.loc["batchnorm", "test_acc_mean"] == pytest.approx(0.7005)
    assert report.method.test and table.index[0] == "groupnorm"  # verdicts on test
    assert "Verdicts on test" in markdown(report, None)


def test_filters_select_in_override_syntax(study):
    selection = load_runs(study)
    assert len(select(selection, ["norm=groupnorm"], None).runs) == 3
    assert len(select(selection, ["norm=batchnorm,groupnorm", "seed=0"], None).runs) == 3
    assert len(select(selection, ["norm.ghost_batch=2"], None).runs) == 3
    with pytest.raises(UsageError, match="no key 'nrom'"):
        select(selection, ["nrom=batchnorm"], None)


def test_json_and_csv_carry_every_verdict_column(study):
    report = build(load_runs(study))
    payload = json.loads(to_json(report, None))
    row = payload["convergence"][1]
    for column in (
        "verdict",
        "diff_vs_best",
        "diff_ci_low",
        "diff_ci_high",
        "p_worse_adj",
        "p_equivalent_adj",
        "values",
        "test_acc_mean",
        "val_acc_mean",
        "val_acc_ci95",
    ):
        assert column in row
    assert isinstance(row["values"], list) and isinstance(row["n"], int)
    batch = payload["batch_sensitivity"][0]
    for column in ("drop", "drop_ci_low", "drop_ci_high", "verdict", "b2_mean", "b32_mean"):
        assert column in batch
    assert payload["method"]["alpha"] == 0.05 and payload["method"]["margin"] == 0.01
    frame = pd.read_csv(StringIO(to_csv(pd.DataFrame(payload["convergence"]))))
    assert "values" not in frame and {"verdict", "p_equivalent_adj"} <= set(frame)


def test_csv_with_several_tables_writes_one_file_each(study, tmp_path):
    result = runner.invoke(app, ["report", str(study), "--format", "csv"])
    assert result.exit_code == 2 and "pick one with --table" in result.output
    out = tmp_path / "out" / "tables.csv"
    result = runner.invoke(app, ["report", str(study), "--format", "csv", "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in out.parent.iterdir())
    assert written == ["tables-batch_sensitivity.csv", "tables-convergence.csv"]
    result = runner.invoke(
        app, ["report", str(study), "--format", "csv", "--table", "batch_sensitivity"]
    )
    assert pd.read_csv(StringIO(result.stdout))["verdict"].tolist()


def test_csv_cells_cannot_become_formulas():
    frame = pd.DataFrame({"norm.name": ["=HYPERLINK(1)", "+1", "layernorm"], "x": [1.0, -2.0, 3.0]})
    text = to_csv(frame)
    assert "'=HYPERLINK(1)" in text and "'+1" in text and ",-2.0" in text


def test_markdown_tables_are_well_formed(study):
    text = markdown(build(load_runs(study)), None)
    blocks = [b for b in text.split("### ") if b.startswith(("Convergence", "Batch"))]
    assert len(blocks) == 2
    rows = [line for line in blocks[0].splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3
    separators = [len(re.findall(r"(?<!\\)\|", line)) for line in rows]  # "\|" is a cell's
    assert separators == [separators[0]] * len(rows) and separators[0] > 3


def test_cli_report_rich_output_and_plots(study, tmp_path):
    result = runner.invoke(
        app, ["report", str(study), "--plots", str(tmp_path / "img")], env={"COLUMNS": "100"}
    )
    assert result.exit_code == 0, result.output
    assert "Holm-adjusted over every pair of groups" in result.output
    assert "Batch sensitivity" in result.output
    # every line fits, but a written file's path, printed whole so that it can be copied
    lines = [line for line in result.output.splitlines() if not line.startswith("wrote ")]
    assert max(len(line) for line in lines) <= 100
    import matplotlib.image

    for name in ("learning_curves.png", "batch_sensitivity.png"):
        path = tmp_path / "img" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
        assert matplotlib.image.imread(path).std() > 0  # not a blank image


@pytest.mark.parametrize("columns", [80, 100])
def test_a_wide_report_fits_the_terminal_and_loses_no_word(tmp_path, columns):
    """Three grouping keys, long names and a params column: the table fits 80 columns (its
    intervals wrap under their numbers) and 100 (one line a row), and every caption wraps at
    the terminal's width instead of being cropped."""
    runs = tmp_path / "runs"
    for norm, ws, params in (("instancenorm", "false", 1234), ("switchnorm", "true", 1290)):
        for ghost in (2, 32):
            for seed in range(3):
                overrides = [f"norm={norm}", f"model.weight_std={ws}", f"norm.ghost_batch={ghost}"]
                overrides.append("placement=res_post")  # where WS applies (a norm follows)
                make_run(
                    runs, [*overrides, f"seed={seed}"], acc=0.9 + 0.01 * seed, parameters=params
                )
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "params" in result.output and "d/f" in result.output
    verdicts = r"\b(reference|equivalent|worse|inconclusive|sensitive|insensitive)\b"
    rows = [line for line in lines if line.startswith((" instancenorm", " switchnorm"))]
    assert len(rows) == 3 + 2 and all(re.search(verdicts, row) for row in rows), rows
    text = " ".join(" ".join(lines).split())
    for words in (
        "params: trainable parameters (a difference may come from capacity)",
        "d/f: diverged/failed runs.",
        "both Holm-adjusted over the rows; alpha 0.05.",
        "target d/f",
    ):
        assert words in text, words


def test_corrupt_and_half_written_runs_are_skipped_with_a_warning(study):
    (study / "half-written").mkdir()
    corrupt = study / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "meta.json").write_text("{half")
    selection = load_runs(study)
    assert len(selection.runs) == 9
    assert any("half-written" in w for w in selection.warnings)
    assert any("corrupt-run" in w for w in selection.warnings)
    result = runner.invoke(app, ["report", str(study), "--format", "json"])
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
    assert (study / ".index.sqlite").exists()
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
        f"{str(study / 'img')!r}, '--html', {str(study / 'r.html')!r}])\n"
        "assert r.exit_code == 0, r.output\n"
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
    assert {r["verdict"] for r in payload["convergence"]} <= {
        "reference",
        "worse",
        "equivalent",
        "inconclusive",
    }
    assert (tmp_path / "img" / "learning_curves.png").exists()


def test_precision_table_contrasts_each_precision_with_fp32(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(3):
        make_run(runs, ["precision=fp32", f"seed={seed}"], acc=0.900 + seed / 1000)
        make_run(runs, ["precision=bf16", f"seed={seed}"], acc=0.899 + seed / 1000)
        make_run(runs, ["precision=fp16", f"seed={seed}"], acc=0.700 + seed / 1000)
    make_run(runs, ["precision=fp16", "seed=3"], status="diverged", acc=0.5)
    (section,) = build(load_runs(runs)).sections
    row = section.tables["precision"].iloc[0]
    assert row["bf16_delta"] == pytest.approx(-0.001)
    assert row["bf16_verdict"] == "equivalent"
    assert row["fp16_mean"] == pytest.approx((0.700 + 0.701 + 0.702 + 0.1) / 4)  # at chance
    assert row["fp16_diverged"] == 1 and row["fp16_n"] == 4
    # paired on the three seeds both precisions have: fp16 is 0.2 lower at each
    assert row["fp16_verdict"] == "worse"
    (section,) = build(load_runs(runs), method=Method(diverged="exclude")).sections
    row = section.tables["precision"].iloc[0]
    assert row["fp16_verdict"] == "worse"
    assert row["fp16_delta_ci_low"] <= row["fp16_delta"] <= row["fp16_delta_ci_high"] < 0
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": "120"})
    assert "equivalent" in result.output and "worse" in result.output


def test_stability_table_gives_the_largest_learning_rate_that_trains(tmp_path):
    runs = tmp_path / "runs"
    # acc per (norm, lr) and seed; chance is 0.1, so "clear of chance" means >= 0.145
    cells = {
        ("layernorm", 0.01): [0.90, 0.91],
        ("layernorm", 0.1): [0.85, 0.86],
        ("layernorm", 1.0): [0.11, 0.60],  # one seed at chance: not every seed trained
        ("none", 0.01): [0.88, 0.87],
        ("none", 0.1): [0.12, 0.13],
    }
    for (norm, lr), accs in cells.items():
        for seed, acc in enumerate(accs):
            make_run(runs, [f"norm={norm}", f"train.lr={lr}", f"seed={seed}"], acc=acc)
    make_run(runs, ["norm=none", "train.lr=1.0", "seed=0"], status="diverged", acc=0.5)
    make_run(runs, ["norm=none", "train.lr=1.0", "seed=1"], status="diverged", acc=0.5)
    (section,) = build(load_runs(runs)).sections
    table = section.tables["lr_stability"].set_index("norm.name")
    assert table.loc["layernorm", "largest_stable"] == pytest.approx(0.1)
    assert table.loc["layernorm", "metric_there"] == pytest.approx(0.855)
    assert table.loc["layernorm", "1_trained"] == "1/2"
    assert table.loc["none", "largest_stable"] == pytest.approx(0.01)
    assert table.loc["none", "1_trained"] == "0/2"
    assert table.index[0] == "layernorm"  # the most stable first
    assert section.tables["depth_stability"] is None
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": "120"})
    assert "Stability" in result.output and "largest" in result.output


def test_an_exploded_bits_per_byte_run_counts_at_chance_never_beyond():
    """A run that ended complete at 1e10 bits per byte is as useless as a diverged one: it
    counts at chance (log2 256 = 8), like a diverged run, instead of swamping the mean."""
    from normbench.report.tables import BITS_PER_BYTE, results

    part = pd.DataFrame(
        {
            "seed": [0, 1, 2],
            "status": ["complete", "complete", "diverged"],
            "final_val_bpb": [3.0, 4.5e10, float("nan")],
            "num_classes": [256, 256, 256],
        }
    )
    values = results(part, BITS_PER_BYTE.column, BITS_PER_BYTE, Method())
    assert values.tolist() == [3.0, 8.0, 8.0]


def test_a_reference_named_before_looking_gives_better_worse_and_equivalent(tmp_path):
    runs = tmp_path / "runs"
    base = [0.90, 0.93, 0.88, 0.95]
    shifts = {
        "layernorm": [0, 0, 0, 0],
        "groupnorm": [0.05, 0.052, 0.049, 0.051],  # better at every seed
        "batchnorm": [-0.05, -0.052, -0.049, -0.051],  # worse at every seed
        "rmsnorm": [0.001, -0.001, 0.0015, -0.0005],  # equivalent within 0.01
        "none": [0.06, -0.07, 0.05, -0.04],  # noisy: inconclusive
    }
    for norm, shift in shifts.items():
        for seed, (acc, delta) in enumerate(zip(base, shift, strict=True)):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=acc + delta)
    method = Method.from_options(0.05, 0.01, reference=["norm=layernorm"])
    table, _ = convergence(runs, **{f.name: getattr(method, f.name) for f in fields(Method)})
    verdicts = dict(zip(table["norm.name"], table["verdict"], strict=True))
    assert verdicts == {
        "layernorm": "reference",
        "groupnorm": "better",
        "batchnorm": "worse",
        "rmsnorm": "equivalent",
        "none": "inconclusive",
    }
    assert table.iloc[0]["norm.name"] == "layernorm" and "diff_vs_reference" in table
    better = table.set_index("norm.name").loc["groupnorm"]
    assert better["diff_vs_reference"] == pytest.approx(0.0505) and better["p_differs_adj"] < 0.05
    assert better["reason"] == "paired, 4 seeds"
    for fmt, word in (("json", '"better"'), ("markdown", "better"), ("csv", ",better,")):
        args = ["report", str(runs), "--reference", "norm=layernorm", "--format", fmt]
        result = runner.invoke(app, [*args, "--table", "convergence"])
        assert result.exit_code == 0, result.output
        assert word in result.output
    named = ["report", str(runs), "--reference", "norm=layernorm"]
    payload = json.loads(runner.invoke(app, [*named, "--format", "json"]).stdout)
    assert payload["method"]["reference"] == "norm=layernorm"
    rich = runner.invoke(app, named)
    assert "Δ ref" in rich.output and "named before looking" in rich.output


def test_a_reference_without_a_key_of_the_stratum_serves_every_value_of_it():
    """GroupNorm has no ghost batch ('-'): named as the reference, it serves BatchNorm at each
    ghost batch; an exact stratum wins over '-', and two equally good references give none."""
    from normbench.report.tables import reference_indices

    keys = ["norm.name", "norm.ghost_batch"]
    rows = [
        {"norm.name": "groupnorm", "norm.ghost_batch": None},
        {"norm.name": "batchnorm", "norm.ghost_batch": 32},
        {"norm.name": "batchnorm", "norm.ghost_batch": 2},
    ]
    assert reference_indices(rows, keys, ("norm=groupnorm",)) == [0, 0, 0]
    assert reference_indices(rows, keys, ("norm=batchnorm",)) == [None, 1, 2]
    lr = ["norm.name", "train.lr"]
    strata = [
        {"norm.name": "layernorm", "train.lr": 0.1},
        {"norm.name": "layernorm", "train.lr": 0.3},
        {"norm.name": "rmsnorm", "train.lr": 0.1},
        {"norm.name": "dyt", "train.lr": None},
    ]
    assert reference_indices(strata, lr, ("norm=layernorm",)) == [0, 1, 0, None]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("norm=fancy", "--reference norm=fancy matches no group; valid: norm=batchnorm"),
        ("seed=3", "--reference seed=3: seed does not tell the groups of this table apart"),
        ("norm=a,b", "--reference norm=a,b: one KEY=VALUE per key"),
    ],
)
def test_a_reference_that_names_no_group_is_one_line(study, given, words):
    result = runner.invoke(app, ["report", str(study), "--reference", given])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert words in result.output


def test_a_reference_per_stratum_of_the_other_keys(study):
    """--reference norm=batchnorm where the ghost batch varies too: BatchNorm at each ghost
    batch is the reference of the groups at that ghost batch; GroupNorm, which ignores the
    ghost batch, has no BatchNorm beside it and is inconclusive, saying why."""
    method = Method(reference=("norm=batchnorm",))
    table, _ = convergence(study, **{f.name: getattr(method, f.name) for f in fields(Method)})
    rows = {(r["norm.name"], r["norm.ghost_batch"]): r for _, r in table.iterrows()}
    assert rows[("batchnorm", 2)]["verdict"] == rows[("batchnorm", 32)]["verdict"] == "reference"
    assert rows[("groupnorm", None)]["verdict"] == "inconclusive"
    assert rows[("groupnorm", None)]["reason"] == "no reference group beside it"
