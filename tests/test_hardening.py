"""Issue 11's list, one regression test per item: values that must be refused, names that must
be plain, a runs directory treated as untrusted input."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


def one_line_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, (word, result.output)


# ------------------------------------------------------------------- values that must be refused
@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("train.lr=nan", ("train.lr=nan", "a finite number")),
        ("train.lr=inf", ("train.lr=inf", "a finite number")),
        ("norm.momentum=nan", ("norm.momentum=nan", "a finite number")),
        ("data.val_fraction=nan", ("data.val_fraction=nan", "a finite number")),
        ("seed=4294967296", ("seed=4294967296", "from 0 to 4294967295")),
        ("seed=" + "9" * 300, ("seed=999", "...", "from 0 to 4294967295")),
        ("model.name=cnn", ("model.name names the chosen model", "model=VALUE")),
        ("data.name=tokens", ("data.name names the chosen data", "data=VALUE")),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path, override, words):
    for command in (["run", override], ["run", override, "--cfg"]):
        one_line_error(runner.invoke(app, [*command, "--runs-dir", str(tmp_path)]), *words)
    assert list(tmp_path.iterdir()) == []


def test_a_nan_validation_loss_is_a_divergence_not_a_complete_run(tmp_path):
    """norm.momentum=nan used to train to 'complete' with a NaN validation loss (running
    statistics turn NaN while the training loss, from batch statistics, stays finite). The
    config now refuses NaN; the trainer, given one anyway, records the divergence."""
    from conftest import tiny

    from normbench.config import compose
    from normbench.train import run_experiment

    cfg = compose(tiny("model=cnn", "norm=batchnorm"))
    cfg["norm"]["momentum"] = float("nan")
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "diverged"


# -------------------------------------------------------------------------------- sweep input
@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["seed=0,1", "seed=2,3"], ("seed is given twice", "seed=0,1", "seed=2,3")),
        (["seed=0,1", "--name", "x" * 300], ("--name", "1 to 64")),
        (["seed=0,1", "--name", "x*"], ("--name 'x*'",)),
        (["seed=0,1", "--name", "../up"], ("--name '../up'",)),
        (["seed=range(200000)", "--dry-run"], ("200000 combinations", "--max-runs 10000")),
        (["seed=0,1", "--max-runs", "0"], ("--max-runs 0",)),
        (["./missing.yaml"], ("sweep file './missing.yaml' does not exist",)),
    ],
)
def test_bad_sweep_input_is_one_line_and_writes_nothing(tmp_path, arguments, words):
    result = runner.invoke(app, ["sweep", *arguments, "--runs-dir", str(tmp_path / "runs")])
    one_line_error(result, *words)
    assert not (tmp_path / "runs").exists()


def test_report_sweep_takes_names_not_patterns(tmp_path):
    (tmp_path / "runs" / "sweeps").mkdir(parents=True)
    (tmp_path / "runs" / "sweeps" / "a-20260101-000000.json").write_text('{"runs": []}')
    for pattern in ("*", "a*", "[a]", "../x"):
        result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--sweep", pattern])
        one_line_error(result, f"--sweep {pattern!r}")


def test_a_large_dry_run_streams_its_first_lines(tmp_path):
    import subprocess
    import sys
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "normbench",
            "sweep",
            "model=cnn",
            "seed=range(5000)",
            "--dry-run",
            "--runs-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    header = proc.stdout.readline()
    first = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.kill()
    proc.wait()
    assert "5000 combinations" in header and first.split()[0] == "1"
    assert elapsed < 20  # composing all 5,000 jobs takes far longer than the first line
