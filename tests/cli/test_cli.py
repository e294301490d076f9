"""The command line: bad input is one line, exit 2, nothing written; --cfg, list, --help."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()

BAD_INPUTS = [
    (["norm=fancy"], "norm=fancy", "batchnorm"),
    (["placement=middle"], "placement=middle", "sandwich"),
    (["train.lrr=1"], "train.lrr", "train.lr"),
    (["foo=1"], "foo", "batch_size"),
    (["nrom=batchnorm"], "'nrom' (did you mean norm?)", "model, norm, placement"),
    (["norm=batchnrom"], "(did you mean batchnorm?)", "groupnorm"),
    (["batch_size=abc"], "batch_size='abc'", "integer"),
    (["batch_size=0"], "batch_size=0", ">= 1"),
    (["batch_size=99999"], "batch_size=99999", "1..14400"),
    (["device=tpu"], "device='tpu'", "auto, cpu, cuda, mps"),
    (["model=cnn", "data=tokens"], "data=tokens", "transformer"),
    (["norm=="], "norm==", "key=value"),
    (["norm=groupnorm", "norm.groups=5"], "norm.groups=5", "1, 2, 4, 8"),
    (["batch_size=2,4"], "batch_size=2,4", "normbench sweep"),
    (["seed=range(3)"], "seed=range(3)", "normbench sweep"),
    (["train.optimizer=adam"], "train.optimizer='adam'", "adamw, sgd"),
    (["precision=fp8"], "precision=fp8", "bf16, fp16, fp32"),
    (["model=cnn", "model.heads=2"], "model.heads", "model=transformer"),
    (["norm=batchnorm", "norm.ghost_batch=64"], "norm.ghost_batch=64", "1..32"),
    (["train.max_steps=null"], "train.max_steps", "set at least one"),
    (["model.patch_size=3"], "model.patch_size=3", "1, 2, 4, 5, 8"),
    (["norm.mask_padding=maybe"], "norm.mask_padding='maybe'", "true or false"),
    (["+foo=1"], "+foo=1", "not added"),
    (["train.lr=-1"], "train.lr=-1", ">= 0.0"),
]


@pytest.mark.parametrize(
    ("overrides", "names", "valid"), BAD_INPUTS, ids=[" ".join(case[0]) for case in BAD_INPUTS]
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    overrides, names, valid, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", *overrides, "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("normbench: error: ")
    assert names in lines[0] and valid in lines[0]
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_unavailable_device_is_refused_before_anything_is_written(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = runner.invoke(app, ["run", "device=cuda", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "device=cuda is not available" in result.output and "valid: auto, cpu" in result.output
    assert not (tmp_path / "runs").exists()


def test_cfg_prints_the_resolved_config_and_run_id_and_trains_nothing(tmp_path):
    result = runner.invoke(
        app,
        [
            "run",
            "--cfg",
            "model=cnn",
            "norm=groupnorm",
            "seed=3",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "# run_id: cnn-groupnorm-pre-fp32-b32-s3-" in result.output
    assert "name: groupnorm" in result.output and "kernel_size: 3" in result.output
    assert not (tmp_path / "runs").exists()


def test_list_shows_every_choice_and_the_refused_combinations():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    for name in (
        "transformer",
        "cnn",
        "switchnorm",
        "dyt",
        "derf",
        "deepnorm",
        "res_post",
        "peri",
        "Peri-LN (Kim et al. 2025)",
        "lns",
        "mix",
        "tokens",
        "digits",
        "bf16",
        "fp16",
    ):
        assert name in result.output
    assert "Refused before training" in result.output
    assert "model=cnn|resnet with data=tokens" in result.output
    assert "model=cnn with model.qk_norm other than none" in result.output


def test_help_and_list_do_not_import_torch():
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        "for args in (['--help'], ['run', '--help'], ['list']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_commands_that_train_nothing_do_not_import_torch(tmp_path):
    """A refused name or value, --cfg, a finished run kept and a preset's plan answer without
    importing torch (issue 31: about a second); a run that trains still imports it."""
    make_run(tmp_path, ["seed=3"])
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom normbench.cli import app\n"
        f"where = ['--runs-dir', {str(tmp_path)!r}]\n"
        "for args, code in ((['run', 'norm=fancy'], 2), (['run', 'model=cnn', 'threads=0'], 2),"
        " (['run', '--cfg'], 0), (['sweep', 'smoke', '--dry-run'], 0),"
        " (['run', 'model=cnn', 'seed=3'], 0)):\n"
        "    result = CliRunner().invoke(app, [*args, *where])\n"
        "    assert result.exit_code == code, (args, result.output)\n"
        "assert 'skipped, already finished' in result.output, result.output\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_python_dash_m_works():
    out = subprocess.run(
        [sys.executable, "-m", "normbench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "normbench" in out and "run" in out


def test_report_and_runs_list_pause_the_cyclic_collector_and_restore_it(tmp_path, monkeypatch):
    """report and runs list read the store and build the tables with gc paused
    (cli.app.collector_paused: 0.25-0.3 s of a 100,000-run report), draw figures with it on,
    and leave it as they found it, on success and on a refused input."""
    import gc

    from normbench.report import sections
    from normbench.store import catalog

    seen = []
    build, load = sections.build, catalog.load_runs
    for module, name, real in ((sections, "build", build), (catalog, "load_runs", load)):
        monkeypatch.setattr(
            module, name, lambda *a, real=real, **k: seen.append(gc.isenabled()) or real(*a, **k)
        )
    runs = tmp_path / "runs"
    for seed in (0, 1):
        make_run(runs, ["norm=layernorm", f"seed={seed}"])
    assert gc.isenabled()
    assert runner.invoke(app, ["report", "--runs-dir", str(runs)]).exit_code == 0
    assert runner.invoke(app, ["runs", "list", "--runs-dir", str(runs)]).exit_code == 0
    assert seen == [False, False, False] and gc.isenabled()
    assert runner.invoke(app, ["report", "--runs-dir", str(runs), "--alpha", "2"]).exit_code == 2
    assert gc.isenabled()
    from normbench.report import plots  # figures (cycles in matplotlib) with the collector on

    draw = plots.draw
    monkeypatch.setattr(plots, "draw", lambda *a, **k: seen.append(gc.isenabled()) or draw(*a, **k))
    plotted = runner.invoke(
        app, ["report", "--runs-dir", str(runs), "--plots", str(tmp_path / "p")]
    )
    assert plotted.exit_code == 0 and seen[-3:] == [False, False, True]
    gc.disable()
    try:
        assert runner.invoke(app, ["report", "--runs-dir", str(runs)]).exit_code == 0
        assert not gc.isenabled()  # paused before: left paused
    finally:
        gc.enable()


def test_help_names_values_as_the_command_line_writes_them():
    """typer 0.29 showed Python's types (``<bool>``, ``<list[str]>``, ``<list[Path]>``): help
    names a value TEXT, INTEGER, FLOAT or PATH, and a flag by nothing (issue 50, item 14)."""
    import re

    import typer

    command = typer.main.get_command(app)
    paths = [[]] + [[name] for name in command.commands]
    paths += [["runs", name] for name in command.commands["runs"].commands]
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert result.exit_code == 0, (path, result.output)
        assert not re.search(r"<[A-Za-z]", result.output), (path, result.output)
    run_help = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "100"}).output
    assert re.search(r"--runs-dir +PATH ", run_help) and re.search(r"--tag +TEXT\.\.\. ", run_help)
    assert re.search(r"--force +Run again", run_help)  # a flag: no type


def test_runs_list_takes_sweep_as_every_reader_does(tmp_path):
    """``runs list --sweep NAME``: the runs of the sweep's latest record, as report and runs
    export read them; an unknown name is one line naming the recorded ones (issue 50,
    item 14)."""
    import json

    ids = [make_run(tmp_path, [f"seed={seed}"]) for seed in range(3)]
    (tmp_path / "sweeps").mkdir()
    record = {"runs": [{"run_id": run_id} for run_id in ids[:2]], "started": "2026-01-01"}
    (tmp_path / "sweeps" / "pair-20260101-000000.json").write_text(json.dumps(record))
    listed = runner.invoke(app, ["runs", "list", str(tmp_path), "--sweep", "pair"])
    assert listed.exit_code == 0, listed.output
    assert ids[0] in listed.output and ids[1] in listed.output and ids[2] not in listed.output
    unknown = runner.invoke(app, ["runs", "list", str(tmp_path), "--sweep", "nope"])
    assert unknown.exit_code == 2 and "--sweep nope: no such sweep" in unknown.output
    assert "valid: pair" in unknown.output
