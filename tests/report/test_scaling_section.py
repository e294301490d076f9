"""The scaling section (``report --scaling KEY``) on a designed store: a width ladder of two
norms whose losses follow known curves, read back in every format, and bad input refused in
one line."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from normbench import api
from normbench.cli import app
from tests.helpers import make_run, scaling_report

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
    "trend",
    "E",
    "E_shared",
    "count",
    "crossing",
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
    payload = scaling_report(ladder_store)
    rows = {row["group"]: row for row in payload["scaling"]}
    assert set(rows) == {"norm=batchnorm", "norm=layernorm"}
    bn = rows["norm=batchnorm"]
    assert set(bn) >= ROW_KEYS
    assert bn["reference"] == "norm=layernorm"
    assert bn["count"] == "parameters"
    assert bn["multiplier_ci_low"] <= 2.0 <= bn["multiplier_ci_high"]
    assert abs(bn["multiplier_top"] - 2.0) < 0.3
    assert bn["exponent_ci_low"] <= EXPONENT <= bn["exponent_ci_high"]
    assert rows["norm=layernorm"]["trend"] == "reference"
    assert bn["trend"] in ("constant", "inconclusive")
    assert payload["scaling_method"]["key"] == "model.width"
    rungs = payload["scaling_rungs"]
    assert sum(r["extrapolated"] for r in rungs) == 4  # 10x and 100x, per group
    assert {r["model.width"] for r in rungs if not r["extrapolated"]} == set(WIDTHS)


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
