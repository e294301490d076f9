"""The scaling section (``report --scaling KEY``) on designed stores: width ladders whose
losses follow known curves, read back in every format; the compute counted as the ladder's
plan counts it; a group with too few rungs left out, not the ladder; bad input refused in one
line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from normbench import api
from normbench.cli import app
from tests.helpers import make_run, scaling_report
from tests.report.scaling_designs import SHIPPED, Design, designs

runner = CliRunner()
WIDTHS = (8, 16, 32, 64)
FLOOR, SCALE, EXPONENT = 1.0, 2.0, 0.5
# what every JSON row of the scaling table carries at least (docs/design.md)
ROW_KEYS = {
    "group",
    "reference",
    "exponent",
    "exponent_ci_low",
    "exponent_ci_high",
    "multiplier_top",
    "multiplier_ci_low",
    "multiplier_ci_high",
    "multiplier_top_kind",
    "trend",
    "trend_rungs",
    "form",
    "lack_of_fit_p",
    "E",
    "E_shared",
    "count",
    "crossing",
    "crossing_kind",
}


def _loss(parameters: int, steps: int, batch: int, k: float, seed: int) -> float:
    compute = 6 * parameters * steps * batch
    return FLOOR + SCALE * (k * compute / 1e6) ** -EXPONENT + 0.004 * ((seed * 7919) % 5 - 2)


@pytest.fixture(scope="module")
def ladder_store(tmp_path_factory):
    """batchnorm needs half the compute layernorm does to reach any loss (multiplier 2)."""
    runs = tmp_path_factory.mktemp("ladder")
    for width in WIDTHS:
        parameters = 100 * width * width
        for norm, k in (("layernorm", 1.0), ("batchnorm", 2.0)):
            for seed in range(3):
                make_run(
                    runs,
                    [f"model.width={width}", f"norm={norm}", f"seed={seed}"],
                    parameters=parameters,
                    summary_extra={"final_val_loss": _loss(parameters, 30, 32, k, seed)},
                )
    return runs


def test_the_json_rows_carry_the_fit_the_multiplier_and_the_trend(ladder_store):
    """batchnorm is better than the reference at every rung: at the top rung its loss lies
    below anything the reference measured, so the multiplier there is a bound (> 1), and the
    rungs below measure it (2) with intervals that cover it."""
    payload = scaling_report(ladder_store)
    rows = {row["group"]: row for row in payload["scaling"]}
    assert set(rows) == {"norm=batchnorm", "norm=layernorm"}
    bn = rows["norm=batchnorm"]
    assert set(bn) >= ROW_KEYS
    assert bn["reference"] == "norm=layernorm"
    assert bn["count"] == "parameters"
    assert bn["multiplier_top_kind"] == "lower bound"
    assert bn["multiplier_top"] == pytest.approx(1.0) and bn["multiplier_ci_high"] is None
    measured = [
        r
        for r in payload["scaling_rungs"]
        if r["group"] == "norm=batchnorm" and r["multiplier_kind"] == "measured"
    ]
    assert len(measured) == 3 == bn["rungs_measured"]
    for rung in measured:
        assert rung["multiplier_ci_low"] <= 2.0 <= rung["multiplier_ci_high"]
        assert abs(rung["multiplier"] - 2.0) < 0.3
    assert bn["form"] in ("per group", "shared", "fixed at 0", "curved")
    assert 0 <= bn["lack_of_fit_p"] <= 1
    assert bn["multiplier_10x_ci_low"] <= 2.0 <= bn["multiplier_10x_ci_high"]
    assert rows["norm=layernorm"]["trend"] == "reference"
    assert bn["trend"] in ("constant", "inconclusive")
    assert payload["scaling_method"]["key"] == "model.width"
    rungs = payload["scaling_rungs"]
    assert sum(r["extrapolated"] for r in rungs) == 4  # 10x and 100x, per group
    assert {r["model.width"] for r in rungs if not r["extrapolated"]} == set(WIDTHS)


def test_a_designed_ladder_with_different_floors_is_measured_on_the_right_side_of_1(tmp_path):
    """Issue 58's designed ladder (tests/report/scaling_designs.py): one group converging on
    the reference (true top-rung multiplier 0.95), one with a higher floor (0.33); 4 seeds a
    rung. The method before it said 1.36 [1.28, 1.44] and 0.46 [0.44, 0.49] on such a
    store: both intervals missed, the first wholly on the wrong side of 1."""
    design = designs()[0]
    widths = (8, 15, 23, 46, 76)  # compute 1, 3.5, 8.3, 33, 90 x the first: the shipped span
    relative = np.array([w * w for w in widths], dtype=float) / widths[0] ** 2
    compute = relative * SHIPPED[0]
    design = Design(design.name, compute, design.curves, design.seeds, design.sd, False)
    truth = 10 ** design.truth()[:, -1]
    rng = np.random.default_rng(58)
    for width, c in zip(widths, compute, strict=True):
        for norm, curve in zip(("layernorm", "rmsnorm", "dyt"), design.curves, strict=True):
            for seed in range(design.seeds):
                loss = float(curve(c)) + design.sd * rng.standard_normal()
                make_run(
                    tmp_path,
                    [f"model.width={width}", f"norm={norm}", f"seed={seed}"],
                    parameters=100 * width * width,
                    summary_extra={"final_val_loss": loss, "num_classes": 256},
                )
    rows = {row["group"]: row for row in scaling_report(tmp_path)["scaling"]}
    for name, true in (("norm=rmsnorm", truth[1]), ("norm=dyt", truth[2])):
        row = rows[name]
        assert row["multiplier_top_kind"] == "measured", row
        assert row["multiplier_ci_low"] <= true <= row["multiplier_ci_high"], (name, true, row)
        assert row["multiplier_ci_low"] < 1.0  # worse than the reference: not all above 1


def test_an_image_ladder_counts_the_tokens_its_plan_counts(tmp_path):
    """A CNN on 8x8 digits computes at 64 positions an image; the ladder's plan counts 64
    (normbench.experiment.budget), so the report's D must too (issue 62, M4)."""
    from normbench.experiment.budget import size_of
    from normbench.experiment.compose import compose

    for width in WIDTHS[:3]:
        for norm in ("layernorm", "rmsnorm"):
            for seed in range(2):
                make_run(
                    tmp_path,
                    ["data=digits", f"model.width={width}", f"norm={norm}", f"seed={seed}"],
                    parameters=100 * width * width,
                    summary_extra={"final_val_loss": 2.0 / width + 0.01 * seed},
                )
    payload = scaling_report(tmp_path)
    per_step = size_of(compose(["model=cnn", "data=digits"])).tokens_per_step
    assert per_step % 64 == 0
    for rung in payload["scaling_rungs"]:
        if not rung["extrapolated"]:
            assert rung["tokens"] == 30 * per_step  # make_run's 30 steps
            assert rung["compute"] == pytest.approx(6 * rung["parameters"] * 30 * per_step)


def test_a_group_with_too_few_rungs_leaves_the_ladder_not_the_report(ladder_store, tmp_path):
    """Issue 62, M5: one group at 3 widths, another at one: the ladder is the first's, and a
    note names the group left out."""
    for width in WIDTHS[:3]:
        for seed in range(2):
            make_run(
                tmp_path,
                [f"model.width={width}", "norm=layernorm", f"seed={seed}"],
                parameters=100 * width * width,
                summary_extra={"final_val_loss": _loss(100 * width * width, 30, 32, 1.0, seed)},
            )
    make_run(tmp_path, ["model.width=8", "norm=batchnorm"], summary_extra={"final_val_loss": 1.5})
    args = ["report", str(tmp_path), "--scaling", "model.width", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [row["group"] for row in payload["scaling"]] == ["norm=layernorm"]
    notes = payload["scaling_method"]["notes"]
    assert any("norm=batchnorm: left out" in note for note in notes), notes


def test_every_format_shows_the_section(ladder_store, tmp_path):
    base = ["report", str(ladder_store), "--scaling", "model.width"]
    terminal = runner.invoke(app, base, env={"COLUMNS": "80"})
    assert terminal.exit_code == 0, terminal.output
    assert "scaling along model.width" in terminal.stdout
    assert max(len(line) for line in terminal.stdout.splitlines()) <= 80
    markdown = runner.invoke(app, [*base, "--format", "markdown"])
    assert "## Scaling along model.width" in markdown.stdout
    csv = runner.invoke(app, [*base, "--format", "csv", "--table", "scaling"])
    assert csv.stdout.splitlines()[0].startswith("group,reference,")
    page = tmp_path / "r.html"
    plots = tmp_path / "img"
    html = runner.invoke(app, [*base, "--html", str(page), "--plots", str(plots)])
    assert html.exit_code == 0, html.output
    assert "Scaling along model.width" in page.read_text()
    assert {p.name for p in plots.glob("scaling_*.png")} == {
        "scaling_loss.png",
        "scaling_multiplier.png",
    }
    tables = api.report(ladder_store, scaling="model.width")
    assert not math.isnan(tables["scaling"]["exponent"].iloc[0])


def test_a_key_along_which_compute_does_not_grow_is_refused(tmp_path):
    for lr in (0.001, 0.002, 0.004):
        make_run(tmp_path, [f"train.lr={lr}"], summary_extra={"final_val_loss": 1.0 + lr})
    result = runner.invoke(app, ["report", str(tmp_path), "--scaling", "train.lr"])
    assert result.exit_code == 2
    assert "compute 6 N D does not grow with train.lr" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "key, says",
    [("model.nonsense", "valid: model.width"), ("norm.name", "distinct value")],
)
def test_a_key_that_is_no_ladder_is_refused_in_one_line(ladder_store, key, says):
    result = runner.invoke(app, ["report", str(ladder_store), "--scaling", key])
    assert result.exit_code == 2
    assert says in result.output and key in result.output
    assert len(result.output.strip().splitlines()) == 1


def _ladder_record(runs, name: str, key: str) -> None:
    """A ladder sweep's record over every run of the store (normbench.store.sweep_record)."""
    ids = sorted(p.name for p in runs.iterdir() if (p / "meta.json").exists())
    record = {
        "name": name,
        "started": "2026-01-01T00:00:00+00:00",
        "runs": [{"run_id": i, "overrides": []} for i in ids],
        "ladder": {"key": key, "values": [str(w) for w in WIDTHS], "rule": None},
    }
    (runs / "sweeps").mkdir(exist_ok=True)
    (runs / "sweeps" / f"{name}-20260101-000000-abc.json").write_text(json.dumps(record))


def test_report_of_a_ladder_sweep_fits_along_its_own_key(ladder_store, tmp_path):
    """`report --sweep NAME` of a ladder sweep has the scaling section without --scaling; a
    ladder that cannot be fitted (a key with too few rungs) gets a note, not a refusal."""
    _ladder_record(ladder_store, "lad", "model.width")
    out = runner.invoke(app, ["report", str(ladder_store), "--sweep", "lad", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert {row["group"] for row in json.loads(out.stdout)["scaling"]} >= {"norm=batchnorm"}
    _ladder_record(ladder_store, "flat", "model.depth")  # one depth: no ladder to fit
    out = runner.invoke(app, ["report", str(ladder_store), "--sweep", "flat", "--format", "json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert not payload.get("scaling")
    assert any("--scaling model.depth) was not computed" in w for w in payload["warnings"])
