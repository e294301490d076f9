"""The cost table: what each group's steps cost, and verdicts on step time only where the runs
were timed alike (one host, like load)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import invoke, make_run
from scipy import stats as scipy_stats

from normbench.report.base import Method
from normbench.report.cost_plots import cost_pareto, pareto_front
from normbench.report.sections import build
from normbench.store.catalog import load_runs

LAYERNORM_S = (0.010, 0.012, 0.011, 0.013)  # seconds per step, seeds 0 to 3


def cost(step_s: float, load: float = 1.0, cpus: int = 2, flops: float = 2.0e6) -> dict:
    """A run's cost fields, as normbench.training.cost records them."""
    return {
        "matmul_flops_per_step": flops,
        "saved_bytes_per_step": 3.0e5,
        "peak_memory_bytes": None,
        "step_s_median": step_s,
        "step_s_iqr": step_s / 10,
        "timed_steps": 20,
        "examples_per_s": 32 / step_s,
        "tokens_per_s": None,
        "load_start": load,
        "load_end": load,
        "cpu_count": cpus,
    }


def two_norms(runs, ratios, host="a", load=1.0, rms_acc=0.9) -> None:
    """LayerNorm at LAYERNORM_S and RMSNorm at those times by ``ratios``, seed by seed, on
    host ``a``, accuracy 0.9; RMSNorm's runs on ``host`` at load ``load``, accuracy
    ``rms_acc``."""
    for seed, (seconds, ratio) in enumerate(zip(LAYERNORM_S, ratios, strict=True)):
        make_run(runs, ["norm=layernorm", f"seed={seed}"], summary_extra=cost(seconds), host="a")
        make_run(
            runs,
            ["norm=rmsnorm", f"seed={seed}"],
            summary_extra=cost(seconds * ratio, load=load, flops=1.9e6),
            host=host,
            acc=rms_acc,
        )


def cost_rows(runs) -> dict:
    report = build(load_runs(runs), method=Method(reference=("norm=layernorm",)))
    return report.sections[0].tables["cost"].set_index("norm.name").to_dict("index")


def test_a_clearly_faster_group_is_faster_by_a_paired_t_test_on_log_ratios(tmp_path):
    ratios = (0.80, 0.78, 0.82, 0.79)
    two_norms(tmp_path, ratios)
    rows = cost_rows(tmp_path)
    assert rows["layernorm"]["verdict"] == "reference"
    rms = rows["rmsnorm"]
    assert rms["verdict"] == "faster" and rms["reason"] == "paired, 4 seeds"
    logs = np.log(ratios)
    assert rms["step_ratio"] == pytest.approx(math.exp(logs.mean()))
    rms_s = np.array(LAYERNORM_S) * ratios
    expected = scipy_stats.ttest_rel(np.log(rms_s), np.log(LAYERNORM_S))
    assert rms["p_differs_adj"] == pytest.approx(expected.pvalue)
    assert rms["ratio_ci_low"] < rms["step_ratio"] < rms["ratio_ci_high"] < 1
    # the group's own numbers: geometric mean of its step times, medians of its counts
    assert rms["step_s"] == pytest.approx(math.exp(np.log(rms_s).mean()))
    half = scipy_stats.t.ppf(0.975, 3) * np.log(rms_s).std(ddof=1) / 2
    assert rms["step_s_ci_high"] == pytest.approx(math.exp(np.log(rms_s).mean() + half))
    assert rms["flops_per_step"] == 1.9e6 and rms["saved_bytes_per_step"] == 3.0e5
    assert rms["examples_per_s"] == pytest.approx(np.mean(32 / rms_s))
    assert rms["hosts"] == "a"


def test_step_times_that_vary_both_ways_are_inconclusive(tmp_path):
    two_norms(tmp_path, (0.90, 1.12, 0.97, 1.08))
    rms = cost_rows(tmp_path)["rmsnorm"]
    assert rms["verdict"] == "inconclusive"
    assert rms["p_differs_adj"] > 0.05 and rms["ratio_ci_low"] < 1 < rms["ratio_ci_high"]


def test_runs_on_different_hosts_or_under_different_load_are_not_compared(tmp_path):
    two_norms(tmp_path / "hosts", (0.80, 0.78, 0.82, 0.79), host="b")
    rms = cost_rows(tmp_path / "hosts")["rmsnorm"]
    assert rms["verdict"] == "not compared" and rms["reason"] == "hosts differ: a, b"
    assert math.isnan(rms["step_ratio"]) and math.isnan(rms["p_differs_adj"])
    # the same host, RMSNorm's runs beside 3 more CPUs' worth of work on a 2-CPU machine
    two_norms(tmp_path / "load", (0.80, 0.78, 0.82, 0.79), load=4.0)
    rms = cost_rows(tmp_path / "load")["rmsnorm"]
    assert rms["verdict"] == "not compared"
    assert rms["reason"] == "load per CPU differs: 0.50 to 2.00"


def test_without_a_reference_each_group_is_compared_with_the_fastest(tmp_path):
    two_norms(tmp_path, (0.80, 0.78, 0.82, 0.79))
    table = build(load_runs(tmp_path)).sections[0].tables["cost"]
    assert table.attrs["against"] == "fastest"
    assert list(table["norm.name"]) == ["rmsnorm", "layernorm"]
    assert list(table["verdict"]) == ["reference", "slower"]


def test_runs_without_cost_fields_are_left_out_with_a_note(tmp_path):
    two_norms(tmp_path, (0.80, 0.78, 0.82, 0.79))
    make_run(tmp_path, ["norm=dyt", "seed=0"])  # made before normbench measured cost
    section = build(load_runs(tmp_path)).sections[0]
    assert "dyt" not in set(section.tables["cost"]["norm.name"])
    assert any("1 finished run(s) recorded no step time" in n for n in section.notes)
    assert section.tables["convergence"]["norm.name"].isin(["dyt"]).any()


def test_a_store_without_cost_fields_has_no_cost_table(tmp_path):
    for seed in range(2):
        make_run(tmp_path, ["norm=layernorm", f"seed={seed}"])
        make_run(tmp_path, ["norm=rmsnorm", f"seed={seed}"])
    section = build(load_runs(tmp_path)).sections[0]
    assert section.tables["cost"] is None
    assert not any("step time" in n for n in section.notes)


def test_every_format_shows_the_cost_table(tmp_path):
    two_norms(tmp_path, (0.80, 0.78, 0.82, 0.79))
    common = ["report", str(tmp_path), "--reference", "norm=layernorm"]
    terminal = invoke(*common, "--table", "cost", columns=200)
    assert terminal.exit_code == 0, terminal.output
    assert "faster" in terminal.output and "Cost: FLOPs per step" in terminal.output
    assert "0.80 [" in terminal.output  # the ratio and its interval
    rows = json.loads(invoke(*common, "--format", "json", "--table", "cost").stdout)
    assert {row["norm.name"]: row["verdict"] for row in rows["cost"]} == {
        "layernorm": "reference",
        "rmsnorm": "faster",
    }
    csv = invoke(*common, "--format", "csv", "--table", "cost").stdout
    assert "step_ratio" in csv.splitlines()[0]
    markdown = invoke(*common, "--format", "markdown").stdout
    assert "### Cost" in markdown and "| faster |" in markdown
    page = tmp_path / "report.html"
    assert invoke(*common, "--html", str(page), seconds=120).exit_code == 0
    html = page.read_text()
    assert "Cost: FLOPs per step" in html and "faster" in html
    assert "not compared</span></p>" in html  # the legend of the table's verdict words


def test_the_pareto_front_holds_the_points_nothing_beats_on_cost_and_score():
    cost, score = np.array([3.0, 1.0, 2.0, np.nan]), np.array([5.0, 1.0, 4.0, 9.0])
    assert list(pareto_front(cost, score)) == [1, 2, 0]  # each cheaper one scores less
    assert list(pareto_front(np.array([1.0, 2.0]), np.array([5.0, 4.0]))) == [0]
    assert list(pareto_front(np.array([1.0, 1.0]), np.array([5.0, 5.0]))) == [0]


def test_the_pareto_figure_joins_the_cheaper_worse_and_the_dearer_better_group(tmp_path):
    two_norms(tmp_path, (0.80, 0.78, 0.82, 0.79), rms_acc=0.85)
    for seed, seconds in enumerate(LAYERNORM_S):  # slower than LayerNorm and no better
        make_run(tmp_path, ["norm=dyt", f"seed={seed}"], summary_extra=cost(2 * seconds), host="a")
    section = build(load_runs(tmp_path)).sections[0]
    fig = cost_pareto(section)
    step_axis, flops_axis = fig.axes
    (front,) = [line for line in step_axis.get_lines() if line.get_linestyle() == "--"]
    table = section.tables["cost"].set_index("norm.name")
    expected = [1e3 * table.loc[n, "step_s"] for n in ("rmsnorm", "layernorm")]
    assert list(front.get_xdata()) == pytest.approx(expected)
    assert list(front.get_ydata()) == pytest.approx([0.85, 0.9])
    assert step_axis.get_xscale() == "log" and "FLOPs" in flops_axis.get_xlabel()


def test_each_implementation_is_compared_with_the_reference_norm_in_that_implementation(tmp_path):
    """'Is RMSNorm faster than LayerNorm here, eager and fused?': one verdict per impl."""
    ratios = {"module": (0.80, 0.78, 0.82, 0.79), "fused": (0.90, 1.12, 0.97, 1.08)}
    for impl, by_seed in ratios.items():
        for seed, (seconds, ratio) in enumerate(zip(LAYERNORM_S, by_seed, strict=True)):
            for norm, factor in (("layernorm", 1.0), ("rmsnorm", ratio)):
                overrides = [f"norm={norm}", f"norm.impl={impl}", f"seed={seed}"]
                make_run(tmp_path, overrides, summary_extra=cost(seconds * factor), host="a")
    report = build(load_runs(tmp_path), method=Method(reference=("norm=layernorm",)))
    table = report.sections[0].tables["cost"]
    verdicts = {(r["norm.name"], r["norm.impl"]): r["verdict"] for _, r in table.iterrows()}
    assert verdicts == {
        ("layernorm", "module"): "reference",
        ("layernorm", "fused"): "reference",
        ("rmsnorm", "module"): "faster",
        ("rmsnorm", "fused"): "inconclusive",
    }
