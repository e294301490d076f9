"""LR sensitivity (Wortsman et al. 2023): the pure statistic, and its column in the stability
table of a designed run store, both against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report import stats
from normbench.report.base import Method
from normbench.report.html import page
from normbench.report.sections import build
from normbench.store.catalog import load_runs

T_975_DF2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom


def test_lr_sensitivity_is_the_mean_gap_to_the_best_rate_capped_at_the_initial_loss():
    # E[min(loss, init)] - min loss: (1.0 + 0.5 + 2.3) / 3 - 0.5
    assert stats.lr_sensitivity(np.array([1.0, 0.5, 2.3]), 2.3) == pytest.approx(0.76666667)
    # diverged (NaN, inf) and worse-than-initial runs all count at the initial loss
    capped = stats.lr_sensitivity(np.array([1.0, 0.5, math.nan, math.inf, 9.0]), 2.3)
    assert capped == pytest.approx((1.0 + 0.5 + 3 * 2.3) / 5 - 0.5)
    assert stats.lr_sensitivity(np.array([0.7, 0.7, 0.7]), 2.3) == 0.0  # every rate as good
    assert stats.lr_sensitivity(np.array([math.nan, 5.0]), 2.3) == 0.0  # none learned: 0


# (final val loss at lr 0.001, 0.01, 0.1; initial val loss) per seed, None = diverged
BATCHNORM = {
    0: ((1.0, 0.5, None), 2.3),  # (1.0 + 0.5 + 2.3) / 3 - 0.5 = 0.766667
    1: ((1.2, 0.6, 2.5), 2.4),  # 2.5 is worse than at init: (1.2 + 0.6 + 2.4) / 3 - 0.6 = 0.8
    2: ((0.9, 0.7, 1.1), None),  # made before initial_val_loss: ln 10; (0.9+0.7+1.1)/3 - 0.7
}
BY_HAND = [0.7666666667, 0.8, 0.2]


@pytest.fixture
def store(tmp_path):
    """BatchNorm over three learning rates and three seeds, one diverged, one seed without a
    recorded initial loss; a fourth seed that lacks a rate; GroupNorm insensitive."""
    runs = tmp_path / "runs"
    for seed, (losses, initial) in BATCHNORM.items():
        for lr, loss in zip((0.001, 0.01, 0.1), losses, strict=True):
            extra = {"final_val_loss": loss}
            if initial is not None:
                extra["initial_val_loss"] = initial
            overrides = ["norm=batchnorm", f"train.lr={lr}", f"seed={seed}"]
            status = "complete" if loss is not None else "diverged"
            make_run(runs, overrides, status=status, acc=0.9, summary_extra=extra)
    make_run(runs, ["norm=batchnorm", "train.lr=0.001", "seed=3"], summary_extra={})
    for seed in (0, 1):
        for lr in (0.001, 0.01, 0.1):
            extra = {"final_val_loss": 0.5 + 0.01 * seed, "initial_val_loss": 2.3}
            make_run(
                runs, ["norm=groupnorm", f"train.lr={lr}", f"seed={seed}"], summary_extra=extra
            )
    return runs


def test_the_stability_table_gives_the_mean_lr_sensitivity_and_its_seed_interval(store):
    (section,) = build(load_runs(store)).sections
    table = section.tables["lr_stability"].set_index("norm.name")
    batchnorm = table.loc["batchnorm"]
    assert batchnorm["lr_sensitivity_values"] == pytest.approx(BY_HAND, rel=1e-6)
    assert batchnorm["lr_sensitivity_seeds"] == 3  # seed 3 has one rate of three: left out
    assert batchnorm["lr_sensitivity"] == pytest.approx(np.mean(BY_HAND))
    half = T_975_DF2 * np.std(BY_HAND, ddof=1) / math.sqrt(3)
    assert batchnorm["lr_sensitivity_ci95"] == pytest.approx(half)
    assert batchnorm["lr_sensitivity_loss"] == "val_loss"  # accuracy section: the loss
    groupnorm = table.loc["groupnorm"]
    assert groupnorm["lr_sensitivity_values"] == [0.0, 0.0] and groupnorm["lr_sensitivity"] == 0
    result = CliRunner().invoke(app, ["report", str(store)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "LR sens. (n)" in result.output and "0.589 ±0.838 (3)" in result.output
    report = build(load_runs(store))
    document = page(report, [[] for _ in report.sections], [], [])  # the HTML, no figures
    assert "LR sens. (n)" in document and "0.589 ±0.838 (3)" in document


def test_bits_per_byte_sections_measure_it_in_bits_and_fall_back_to_log2_classes():
    """A language-model group: bits per byte, loss_init from initial_val_bpb, else the
    uniform prediction's log2(256) = 8 bits."""
    import pandas as pd

    from normbench.report.base import BITS_PER_BYTE
    from normbench.report.stability import lr_sensitivity_by_seed

    part = pd.DataFrame(
        {
            "seed": [0, 0, 1, 1],
            "train.lr": [0.01, 0.1, 0.01, 0.1],
            "status": ["complete", "diverged", "complete", "complete"],
            "final_val_bpb": [2.0, math.nan, 2.5, 3.0],
            "initial_val_bpb": [8.3, 8.3, math.nan, math.nan],
            "num_classes": [256] * 4,
        }
    )
    values = lr_sensitivity_by_seed(part, BITS_PER_BYTE)
    assert values == pytest.approx({0: (2.0 + 8.3) / 2 - 2.0, 1: (2.5 + 3.0) / 2 - 2.5})


def test_lr_sensitivity_gets_a_paired_verdict_against_a_named_reference(tmp_path):
    """QK-norm on against off at three seeds: every seed's LR sensitivity is lower with it, so
    against the named reference (qk_norm none) it is *better*, paired by seed; without a named
    reference the least sensitive row is the reference and the other is *worse*."""
    runs = tmp_path / "runs"
    by_seed = {"none": (1.0, 1.1, 1.3), "layernorm": (0.6, 0.65, 0.95)}  # the worst rate's loss
    for qk, worst in by_seed.items():
        for seed, high in enumerate(worst):
            for lr, loss in ((0.001, 0.5), (0.1, high)):
                extra = {"final_val_loss": loss + 0.01 * seed, "initial_val_loss": 2.3}
                overrides = [f"model.qk_norm={qk}", f"train.lr={lr}", f"seed={seed}"]
                make_run(runs, ["model=transformer", *overrides], summary_extra=extra)
    method = Method(reference=("model.qk_norm=none",))
    (section,) = build(load_runs(runs), method=method).sections
    table = section.tables["lr_stability"].set_index("model.qk_norm")
    assert table.loc["none", "lr_sensitivity_verdict"] == "reference"
    assert table.loc["layernorm", "lr_sensitivity_verdict"] == "better"
    assert table.loc["layernorm", "lr_sensitivity_diff"] == pytest.approx(-0.2)  # (0.4-0.2... )/2
    assert table.loc["layernorm", "lr_sensitivity_reason"] == "paired, 3 seeds"
    (section,) = build(load_runs(runs)).sections
    table = section.tables["lr_stability"].set_index("model.qk_norm")
    assert table.loc["layernorm", "lr_sensitivity_verdict"] == "reference"
    assert table.loc["none", "lr_sensitivity_verdict"] in ("worse", "inconclusive")


def test_a_seed_with_several_runs_at_a_rate_counts_their_mean_and_one_missing_a_rate_none():
    """Seeds with one run at each rate (computed as rows of one array) beside a seed with two
    runs at a rate (their mean capped loss), a seed missing a rate (left out) and rows out of
    seed order: each seed's value is the formula's, in seed order."""
    import pandas as pd

    from normbench.report.base import ACCURACY
    from normbench.report.stability import lr_sensitivity_by_seed

    part = pd.DataFrame(
        {
            "seed": pd.Series([2, 0, 0, 1, 1, 1, 2, 3], dtype=object),  # as the store gives
            "train.lr": [0.1, 0.01, 0.1, 0.01, 0.1, 0.1, 0.01, 0.01],
            "status": ["complete", "complete", "diverged", "complete", "complete", "complete"]
            + ["complete", "complete"],
            "final_val_loss": [0.4, 1.0, math.nan, 0.5, 0.9, 3.0, 0.8, 0.6],
            "initial_val_loss": [2.0, 2.3, 2.3, 2.2, 2.2, 2.2, math.nan, 2.0],
            "num_classes": [10] * 8,
        }
    )
    values = lr_sensitivity_by_seed(part, ACCURACY)
    assert values == lr_sensitivity_by_seed(part.astype({"seed": int}), ACCURACY)
    assert list(values) == [0, 1, 2]  # seed 3 has no run at 0.1
    assert values[0] == pytest.approx((1.0 + 2.3) / 2 - 1.0)
    assert values[1] == pytest.approx((0.5 + (0.9 + 2.2) / 2) / 2 - 0.5)  # 3.0 capped at 2.2
    assert values[2] == pytest.approx((0.4 + 0.8) / 2 - 0.4)  # its first recorded loss_init
    # a class count no run can have (a tampered store) gives no loss_init to fall back on
    hostile = part.assign(num_classes=0, initial_val_loss=math.nan)
    assert all(math.isnan(v) for v in lr_sensitivity_by_seed(hostile, ACCURACY).values())


def test_sensitivity_is_over_the_rates_every_group_was_tried_at(tmp_path):
    """The audit's case: DyT tried at one rate, LayerNorm at two. DyT's LR sensitivity over one
    rate is 0 by construction, which made it "the least sensitive"; now no row has one (fewer
    than two shared rates) and nothing is judged. With a third group at both rates, the
    shared rates are still one: the same. Then DyT at both: sensitivity over both, for all.
    DyT's largest stable rate is a lower bound (nothing it tried failed): "≥ 0.01"."""
    runs = tmp_path / "runs"

    def add(norm, lr, seed, loss):
        extra = {"final_val_loss": loss, "initial_val_loss": 2.3}
        make_run(runs, [f"norm={norm}", f"train.lr={lr}", f"seed={seed}"], summary_extra=extra)

    for seed in range(3):
        add("dyt", 0.01, seed, 0.5)
        add("layernorm", 0.01, seed, 0.5 + 0.01 * seed)
        add("layernorm", 0.1, seed, 0.9)
    (section,) = build(load_runs(runs)).sections
    table = section.tables["lr_stability"].set_index("norm.name")
    assert table["lr_sensitivity"].isna().all() and (table["lr_sensitivity_seeds"] == 0).all()
    assert "lr_sensitivity_verdict" not in table or table["lr_sensitivity_verdict"].isna().all()
    assert table.loc["dyt", "largest_stable_is_bound"]  # it was never tried above 0.01
    assert table.loc["layernorm", "largest_stable_is_bound"]  # both its rates trained
    out = CliRunner().invoke(app, ["report", str(runs)], env={"COLUMNS": "160"})
    assert out.exit_code == 0 and "≥ 0.01" in out.output and "≥ 0.1" in out.output
    for seed in range(3):
        add("dyt", 0.1, seed, 2.3 if seed else 1.0)
    (section,) = build(load_runs(runs)).sections
    table = section.tables["lr_stability"].set_index("norm.name")
    assert (table["lr_sensitivity_seeds"] == 3).all()
    assert (table["lr_sensitivity_rates"] == "0.01,0.1").all()
    assert table.loc["dyt", "lr_sensitivity"] > table.loc["layernorm", "lr_sensitivity"]
    assert table.loc["layernorm", "lr_sensitivity_verdict"] == "reference"
