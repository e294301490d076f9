"""A newcomer's slips answered with the fix: an option where an override was meant, a filter
or grouping key written as the group, a typo in a filter's value, a wrong type in the API."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from normbench import api
from normbench.cli import app
from normbench.core.errors import UsageError
from tests.helpers import make_run

runner = CliRunner()


def one_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["--model", "cnn"], "overrides are KEY=VALUE: model=cnn"),
        (["--model=cnn"], "overrides are KEY=VALUE: model=cnn"),
        (["--train.lr", "0.1"], "overrides are KEY=VALUE: train.lr=0.1"),
    ],
)
def test_an_override_written_as_an_option_is_named(argv, hint, monkeypatch):
    monkeypatch.setattr("sys.argv", ["normbench", "run", *argv])
    assert hint in one_line(runner.invoke(app, ["run", *argv]))


def test_an_unknown_option_keeps_clicks_suggestions():
    line = one_line(runner.invoke(app, ["run", "--forse"]))
    assert "No such option: --forse" in line and "overrides" not in line


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("store") / "runs"
    for norm in ("batchnorm", "groupnorm"):
        for seed in (0, 1):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=0.5 + 0.1 * seed)
    return runs


def test_a_filter_that_matches_nothing_names_the_values_present(runs):
    line = one_line(runner.invoke(app, ["report", str(runs), "norm=batchnrom"]))
    assert "no runs match norm=batchnrom (did you mean batchnorm?)" in line
    assert line.endswith("norm in these runs: batchnorm, groupnorm")
    line = one_line(runner.invoke(app, ["runs", "list", str(runs), "seed=7"]))
    assert line.endswith("seed in these runs: 0, 1")


def test_by_and_best_over_take_a_group_as_filters_do(runs):
    by_group = runner.invoke(app, ["report", str(runs), "--by", "norm", "--format", "json"])
    by_name = runner.invoke(app, ["report", str(runs), "--by", "norm.name", "--format", "json"])
    assert by_group.exit_code == 0, by_group.output
    assert by_group.output == by_name.output
    tables = api.report(runs, by="norm")
    assert list(tables["sections"]["grouped_by"][0]) == ["norm.name"]


@pytest.mark.parametrize(
    ("option", "valid"),
    [
        ({"margin": "x"}, "a number"),
        ({"alpha": True}, "a number"),
        ({"reference_batch": 2.5}, "an integer"),
    ],
)
def test_api_report_refuses_a_wrong_type_in_one_line(runs, option, valid):
    with pytest.raises(UsageError, match=f"report option {next(iter(option))}=.*valid: {valid}"):
        api.report(runs, **option)


@pytest.mark.tracking
def test_export_to_mlflow_keeps_mlflows_info_lines_off_the_screen(monkeypatch):
    import logging

    from normbench.cli.runs import _quiet_mlflow

    pytest.importorskip("mlflow", reason="the tracking extra")
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    for logger in loggers:  # put back as found: other tests share the loggers
        monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "DEBUG")  # asked for: left alone
    _quiet_mlflow()
    assert all(logger.level == logging.INFO for logger in loggers)
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL")
    _quiet_mlflow()
    assert all(logger.getEffectiveLevel() == logging.WARNING for logger in loggers)


@pytest.mark.tracking
def test_log_tensorboard_on_a_finished_run_says_nothing_was_logged_and_how(tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra")
    runs = tmp_path / "runs"
    rid = make_run(runs, ["norm=layernorm"])
    board = tmp_path / "board"
    result = runner.invoke(
        app,
        ["run", "model=cnn", "norm=layernorm", f"log.tensorboard={board}", "--runs-dir", str(runs)],
    )
    assert result.exit_code == 0, result.output
    assert "skipped, already finished" in result.stdout
    assert result.stderr.strip() == (
        f"log.tensorboard: the run was already finished, not trained again, so nothing was "
        f"logged to {board} for it; to add it: normbench runs export --to tensorboard {board} "
        f"{runs} run_id={rid}"
    )
    assert not board.exists()


@pytest.mark.tracking
def test_a_sweep_names_the_finished_runs_its_board_did_not_get(tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra")
    runs = tmp_path / "runs"
    for seed in (0, 1):
        make_run(runs, ["norm=layernorm", f"seed={seed}"])
    board = tmp_path / "board"
    arguments = ["model=cnn", "norm=layernorm", "seed=0,1", f"log.tensorboard={board}"]
    result = runner.invoke(app, ["sweep", *arguments, "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        f"log.tensorboard: 2 runs were already finished, not trained again, so nothing was "
        f"logged to {board} for them; to add them: normbench runs export --to tensorboard "
        f"{board} --sweep seed --runs-dir {runs}"
    )


def test_best_over_a_key_with_one_value_is_refused_naming_the_keys_that_vary(runs):
    line = one_line(runner.invoke(app, ["report", str(runs), "--best-over", "train.lr"]))
    assert "--best-over train.lr: every run has train.lr=" in line and "nothing to choose" in line
    assert line.endswith(("norm, seed", "seed, norm")), line
    with pytest.raises(UsageError, match="nothing to choose"):
        api.report(runs, best_over="train.lr")


def test_help_texts_say_what_the_command_does():
    alpha = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200"}).output
    assert "strictly between 0 and 0.5" in alpha and "(0, 1)" not in alpha
    clean = runner.invoke(app, ["runs", "clean", "--help"], env={"COLUMNS": "200"}).output
    assert "failed, interrupted and abandoned by default" in clean
    assert "failed,interrupted,abandoned" in clean


def test_check_norm_speaks_of_what_it_checks():
    from normbench.cli.choices import CHECKED_FEATURES
    from normbench.layers.conformance import FEATURES

    assert CHECKED_FEATURES == FEATURES
    line = one_line(runner.invoke(app, ["check-norm", "groupnorm", "groups=5"]))
    assert line.endswith(
        "norm.groups=5 must divide the 8 features check-norm builds the norm on; valid: 1, 2, 4, 8"
    )
    line = one_line(runner.invoke(app, ["check-norm", "mynorms.PowerNorm"]))
    assert "(an import path names its object after a colon: mynorms:PowerNorm)" in line


@pytest.mark.parametrize(
    ("argv", "listed"),
    [
        (
            ["layernorm", "q=1"],
            "norm.eps, norm.fp32_stats, norm.impl, norm.mask_padding, norm.name",
        ),
        (
            ["batchnorm", "q=1"],
            "norm.eps, norm.eval_stats, norm.fp32_stats, norm.ghost_batch, norm.impl, "
            "norm.mask_padding, norm.momentum, norm.name, norm.sync",
        ),
        (
            ["dyt", "q=1"],
            "norm.alpha_init, norm.alpha_init_attention, norm.alpha_init_final, "
            "norm.alpha_init_mlp, norm.eps, norm.fp32_stats, norm.impl, norm.mask_padding, "
            "norm.name",
        ),
    ],
)
def test_check_norm_lists_only_the_keys_the_norm_reads(argv, listed):
    line = one_line(runner.invoke(app, ["check-norm", *argv]))
    assert line.endswith(f"valid under norm: {listed}")


def test_a_key_the_norm_does_not_read_is_named_as_such():
    line = one_line(runner.invoke(app, ["check-norm", "layernorm", "grops=2"]))
    assert "(did you mean norm.groups? the chosen norm does not read it)" in line
    assert "norm.groups," not in line  # not listed as valid
    line = one_line(runner.invoke(app, ["check-norm", "groupnorm", "grops=2"]))
    assert "(did you mean norm.groups?);" in line and "norm.groups," in line


def test_a_pasted_run_path_is_explained(runs):
    rid = next(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))
    path = str(runs / rid)
    line = one_line(runner.invoke(app, ["runs", "show", path]))
    assert line.endswith(f"runs show takes the run id: normbench runs show {rid} --runs-dir {runs}")
    for argv in (["report", path], ["runs", "list", path]):
        line = one_line(runner.invoke(app, argv))
        assert line.endswith(
            f"is one run's directory, not a runs directory; name the run by a filter of its "
            f"runs directory instead: {runs} run_id={rid}"
        )
    shown = runner.invoke(app, ["runs", "show", rid, "--runs-dir", str(runs)])
    assert shown.exit_code == 0, shown.output


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_mistyped_sweep_function_names_key_value_and_the_functions(command, tmp_path):
    runs = tmp_path / "runs"
    line = one_line(runner.invoke(app, [command, "seed=rnage(3)", "--runs-dir", str(runs)]))
    assert line.startswith("normbench: error: seed=rnage(3): unknown function rnage()")
    assert "(did you mean range()?)" in line and "range(), choice(), glob()" in line
    assert "key=value" not in line and not runs.exists()
    far = one_line(runner.invoke(app, [command, "seed=foo(3)", "--runs-dir", str(runs)]))
    assert "unknown function foo()" in far and "did you mean" not in far  # not bool()


def _stderr_of(argv: list[str], tmp_path, terminal: bool) -> str:
    """What ``normbench ARGV`` writes to stderr, a terminal 100 columns wide (a pty) or a pipe."""
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": os.getcwd()}
    reader, writer = os.openpty() if terminal else os.pipe()
    with os.fdopen(reader, "rb") as out:
        subprocess.run(
            [sys.executable, "-m", "normbench", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=writer,
            env=env,
            cwd=tmp_path,
            check=False,
            timeout=120,
        )
        os.close(writer)
        chunks = []
        while True:
            try:
                chunk = out.read1(4096)
            except OSError:  # a pty's reader after its writer closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_long_error_breaks_between_words_on_a_terminal_and_stays_one_line_piped(tmp_path):
    argv = ["run", "seed=rnage(3)", "--runs-dir", str(tmp_path / "runs")]
    piped = _stderr_of(argv, tmp_path, terminal=False)
    assert piped.count("\n") == 1 and len(piped) > 100, piped
    shown = _stderr_of(argv, tmp_path, terminal=True)
    lines = shown.splitlines()
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines), shown
    assert " ".join(line.strip() for line in lines) == piped.strip()  # broken at spaces only
