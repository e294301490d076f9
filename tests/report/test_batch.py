"""The batch-sensitivity table: the contrast of the reference batch against the smallest."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_run
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.report import stats
from normbench.report.base import ACCURACY, Method
from normbench.report.results import resolution
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


T_975 = {2: 4.302652729911275, 3: 3.182446305284263}  # Student's t quantiles, df = 2, 3


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
