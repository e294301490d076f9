"""normbench report end to end: sections per setting, notes on runs not averaged, options
and filters, unreadable stores, the index, and no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import make_run, user_norm_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.report.base import Method
from normbench.report.sections import build
from normbench.store.catalog import load_runs, select
from normbench.store.rundir import RunDir

runner = CliRunner()


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


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--margin", "-1", "--margin -1.0: valid: a positive number"),
        ("--alpha", "2", "--alpha 2.0: valid: a number strictly between 0 and 0.5"),
        ("--diverged", "drop", "--diverged drop: valid: chance, exclude"),
        ("--format", "xml", "--format xml: valid: rich, csv, markdown, json"),
        ("--table", "nope", "--table nope: no such table; valid: across, convergence"),
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


def test_filters_select_in_override_syntax(study):
    selection = load_runs(study)
    assert len(select(selection, ["norm=groupnorm"], None).runs) == 3
    assert len(select(selection, ["norm=batchnorm,groupnorm", "seed=0"], None).runs) == 3
    assert len(select(selection, ["norm.ghost_batch=2"], None).runs) == 3
    with pytest.raises(UsageError, match="no key 'nrom'"):
        select(selection, ["nrom=batchnorm"], None)


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
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"runs directory {tmp_path / 'empty'} has no runs" in result.output
    assert "normbench run or normbench sweep writes runs there" in result.output
    filtered = runner.invoke(app, ["report", str(tmp_path / "empty"), "norm=layernorm"])
    assert f"runs directory {tmp_path / 'empty'} has no runs" in filtered.output
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
    """The smoke preset's grid, trained for real at 30 steps rather than its 150: what is
    asserted (the groups, their seeds, the tables and the figure) does not depend on the
    budget."""
    runs = tmp_path / "runs"
    budget = ["train.max_steps=30", "train.eval_every=10", "train.warmup_steps=5"]
    sweep = subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", "smoke", "seed=0,1", *budget]
        + ["--runs-dir", str(runs)],
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


def test_by_a_subset_of_the_varying_keys_averages_each_seed_and_says_so(tmp_path):
    """The smoke sweep's shape (2 norms x batch 8, 16 x 3 seeds) reported --by norm.name: each
    group's six runs are three results, each seed's mean over both batch sizes (never one run
    per seed picked arbitrarily), and a note names the key averaged over and the --by that
    compares it."""
    runs = tmp_path / "runs"
    accs = {
        ("layernorm", 8): 0.30,
        ("layernorm", 16): 0.32,
        ("rmsnorm", 8): 0.28,
        ("rmsnorm", 16): 0.34,
    }
    for (norm, batch), acc in accs.items():
        for seed in range(3):
            make_run(
                runs, [f"norm={norm}", f"batch_size={batch}", f"seed={seed}"], acc=acc + seed / 100
            )
    result = runner.invoke(app, ["report", str(runs), "--by", "norm.name", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    rows = {row["norm.name"]: row for row in payload["convergence"]}
    assert rows["layernorm"]["n"] == 6 and rows["layernorm"]["results"] == 3
    assert rows["layernorm"]["values"] == pytest.approx([0.31, 0.32, 0.33])
    assert rows["rmsnorm"]["val_acc_mean"] == pytest.approx(0.32)
    (note,) = [n for n in payload["sections"][0]["notes"] if "mean of its runs" in n]
    assert "over batch_size (8, 16)" in note and "--by norm.name,batch_size" in note
    rich = runner.invoke(app, ["report", str(runs), "--by", "norm.name"])
    assert "note: each seed's result is the mean of its runs over batch_size" in rich.output
    # grouped by every key that varies, nothing is averaged and nothing is noted
    payload = json.loads(runner.invoke(app, ["report", str(runs), "--format", "json"]).stdout)
    assert not payload["sections"][0]["notes"]
    assert {row["results"] for row in payload["convergence"]} == {3}


def test_a_user_norms_options_fold_into_its_name(tmp_path):
    """The tutorial's report: PowerNorm beside shipped norms is grouped by norm (and ghost
    batch) only; _target_, fp32_stats, mask_padding and p are no columns, p is in its name;
    --reference takes the norm by the name it was given."""
    runs = tmp_path / "runs"
    for seed in range(2):
        make_run(runs, ["norm=batchnorm", "norm.ghost_batch=2", f"seed={seed}"], acc=0.8)
        make_run(runs, ["norm=batchnorm", "norm.ghost_batch=32", f"seed={seed}"], acc=0.9)
        make_run(runs, ["norm=rmsnorm", f"seed={seed}"], acc=0.85 + seed / 100)
        user_norm_run(runs, 2.0, seed, 0.7 + seed / 100)
    (section,) = build(load_runs(runs)).sections
    assert section.keys == ["norm.name", "norm.ghost_batch"]
    names = set(section.tables["convergence"]["norm.name"])
    assert names == {"batchnorm", "rmsnorm", "mynorms:PowerNorm(p=2)"}
    method = Method(reference=("norm=mynorms:PowerNorm",))
    (section,) = build(load_runs(runs), method=method).sections
    assert section.tables["convergence"].iloc[0]["norm.name"] == "mynorms:PowerNorm(p=2)"
    # two values of p: two groups, each named by its p
    for seed in range(2):
        user_norm_run(runs, 3.0, seed, 0.6)
    (section,) = build(load_runs(runs)).sections
    assert section.keys == ["norm.name", "norm.ghost_batch"]
    names = set(section.tables["convergence"]["norm.name"])
    assert {"mynorms:PowerNorm(p=2)", "mynorms:PowerNorm(p=3)"} <= names


@pytest.mark.parametrize("fmt", ["rich", "markdown"])
def test_table_names_are_checked_in_every_format(study, fmt):
    for table, words in (
        ("nope", "--table nope: no such table; valid: across, convergence, batch_sensitivity"),
        ("precision", "--table precision: this selection has no precision table"),
    ):
        result = runner.invoke(app, ["report", str(study), "--table", table, "--format", fmt])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert words in result.output
    result = runner.invoke(app, ["report", str(study), "--table", "batch_sensitivity"])
    assert result.exit_code == 0 and "Batch sensitivity" in result.output
    assert "Verdicts on" not in result.output


def test_section_notes_read_run_ids_only_of_runs_they_name():
    import pandas as pd

    from normbench.report.base import ACCURACY
    from normbench.report.sections import section_notes

    runs = pd.DataFrame({"status": ["complete", "diverged"]})  # no run_id, no error: none named
    assert section_notes(runs, ACCURACY, Method()) == [
        "1 diverged run(s) counted at chance (val acc of a model that learned nothing)"
    ]
