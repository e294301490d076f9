"""`sweep --until-decided` checks what its later rounds need before the first run trains,
in `--dry-run` too: one line, exit 2, nothing written (normbench.sweeps.precheck)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()
TINY = ["model=cnn", "model.width=8", "model.depth=1", "train.max_steps=4", "threads=1"]


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--reference", "nope=1"], "--reference nope=1: nope does not tell the groups"),
        (["--reference", "norm=nope"], "--reference norm=nope matches no group; valid: norm="),
        (["--max-seeds", "5"], "--max-seeds 5: rounds would add seeds up to 4294967298"),
        (["--max-seeds", "0"], "--max-seeds 0: a group needs 2 seeds or more; valid: an"),
        # each bound its own reason: 10002 was told "one seed decides nothing" (issue 62)
        (["--max-seeds", "10002"], "--max-seeds 10002: above the cap of 100 (a round per"),
    ],
)
def test_until_decided_is_checked_before_round_one(tmp_path, options, words, dry_run):
    runs = tmp_path / "runs"
    grid = [*TINY, "norm=layernorm,rmsnorm", "seed=4294967294"]
    result = runner.invoke(
        app, ["sweep", *grid, "--until-decided", *options, *dry_run, "--runs-dir", str(runs)]
    )
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert words in result.output
    assert not runs.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_dry_run_refuses_a_device_the_sweep_would_refuse(tmp_path):
    result = runner.invoke(
        app, ["sweep", *TINY, "device=cuda", "--dry-run", "--runs-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 2 and "device=cuda is not available" in result.output
