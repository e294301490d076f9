"""One answer across workloads: probability of improvement and IQM by hand (ties included), the
stratified bootstrap's coverage by simulation, the performance profile with a missed target,
and `normbench report --across` in every output."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import make_run
from scipy import stats as scipy_stats
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report import aggregate
from normbench.report.across import across
from normbench.report.base import Method
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


def test_improvement_is_mann_whitney_u_over_nm_with_ties_at_one_half():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0])
    # 1 loses twice; 2 ties twice (1/2 each); 3 wins twice: (0 + 1 + 2) / 6
    assert aggregate.improvement(x, y) == pytest.approx(0.5)
    u = scipy_stats.mannwhitneyu(x, y).statistic
    assert aggregate.improvement(x, y) == pytest.approx(u / 6)
    tasks = [(x, y), (np.array([5.0]), np.array([1.0]))]
    assert aggregate.probability_of_improvement(tasks) == pytest.approx((0.5 + 1.0) / 2)


def test_the_interquartile_mean_trims_a_quarter_from_each_end():
    assert aggregate.interquartile_mean(np.arange(1.0, 9.0)) == pytest.approx(4.5)
    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 7, 10, 13):
        x = rng.standard_normal(n)
        assert aggregate.interquartile_mean(x) == pytest.approx(scipy_stats.trim_mean(x, 0.25))
    assert aggregate.interquartile_mean(np.array([0.0, 1.0, 1.0, 100.0])) == pytest.approx(1.0)
    assert list(aggregate.normalized(np.array([0.1, 0.55, 1.0]), 0.1, 1.0)) == pytest.approx(
        [0.0, 0.5, 1.0]
    )


def test_the_profile_counts_a_missed_target_as_never():
    costs = [[100, 200, math.inf], [300, math.inf, math.inf]]
    ratios = aggregate.profile_ratios(costs)
    assert ratios.tolist() == [[1.0, 2.0, math.inf], [1.0, math.inf, math.inf]]
    fractions = aggregate.performance_profile(ratios, np.array([1.0, 2.0, 4.0]))
    assert fractions.tolist() == [[1.0, 0.0, 0.0], [1.0, 0.5, 0.0], [1.0, 0.5, 0.0]]
    # the area under each profile from 1 to 4, over 3: (3 + 3) / 6, (2 + 0) / 6, 0
    assert aggregate.profile_score(ratios).tolist() == pytest.approx([1.0, 1 / 3, 0.0])


def test_the_stratified_bootstrap_covers_at_its_nominal_rate():
    """Four tasks, ten runs of each group per task, normal scores with a gap of 0.5 sd: the
    true probability of improvement is Phi(0.5 / sqrt(2)) in every task. The 95% interval
    must cover it in about 95% of simulated studies (it is a percentile interval of a mean of
    U statistics; with 3-4 tasks and few seeds it covers less, as docs/statistics.md says)."""
    rng = np.random.default_rng(0)
    truth = scipy_stats.norm.cdf(0.5 / math.sqrt(2))
    covered, studies = 0, 150
    for _ in range(studies):
        tasks = [(rng.normal(0.5, 1, 10), rng.normal(0, 1, 10)) for _ in range(4)]
        low, high = aggregate.stratified_bootstrap(
            tasks, aggregate.probability_of_improvement, samples=400, seed=int(rng.integers(1e9))
        )
        covered += low <= truth <= high
    assert covered / studies >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / studies)


@pytest.fixture
def workloads(tmp_path):
    """Two tasks (MNIST-1D and digits), three norms; BatchNorm only on MNIST-1D; RMSNorm misses
    the target on digits."""
    runs = tmp_path / "runs"
    numbers = {
        ("mnist1d", "layernorm"): ([0.90, 0.92, 0.94], 100),
        ("mnist1d", "rmsnorm"): ([0.91, 0.93, 0.95], 200),
        ("mnist1d", "batchnorm"): ([0.80, 0.82, 0.84], 400),
        ("digits", "layernorm"): ([0.70, 0.72, 0.74], 300),
        ("digits", "rmsnorm"): ([0.72, 0.72, 0.76], None),
    }
    for (data, norm), (accs, target) in numbers.items():
        for seed, acc in enumerate(accs):
            make_run(
                runs,
                [f"data={data}", f"norm={norm}", f"seed={seed}"],
                acc=acc,
                steps_to_target=target,
            )
    return runs


def test_across_tasks_by_hand(workloads):
    method = Method(reference=("norm=layernorm",))
    report = build(load_runs(workloads), method=method)
    result = across(report, ["data"])
    assert result.tasks == ["data=digits", "data=mnist1d"] and result.named
    rows = result.table.set_index("norm.name")
    # rmsnorm against layernorm: digits [.72 .72 .76] v [.70 .72 .74]: wins 5, ties 2 -> 6/9;
    # mnist1d [.91 .93 .95] v [.90 .92 .94]: wins 6 of 9 -> 6/9
    assert rows.loc["rmsnorm", "poi"] == pytest.approx((6 / 9 + 6 / 9) / 2)
    assert rows.loc["rmsnorm", "poi_ci_low"] <= rows.loc["rmsnorm", "poi"]
    assert math.isnan(rows.loc["layernorm", "poi"])  # the reference
    assert rows.loc["batchnorm", "missing"] == "data=digits" and rows.loc["batchnorm", "tasks"] == 1
    # IQM: scores normalized per task, 0 at chance (0.1), 1 at the best group's mean
    digits_best, mnist_best = np.mean([0.72, 0.72, 0.76]), np.mean([0.91, 0.93, 0.95])
    ln = np.concatenate(
        [
            (np.array([0.70, 0.72, 0.74]) - 0.1) / (digits_best - 0.1),
            (np.array([0.90, 0.92, 0.94]) - 0.1) / (mnist_best - 0.1),
        ]
    )
    assert rows.loc["layernorm", "iqm"] == pytest.approx(scipy_stats.trim_mean(ln, 0.25))
    # the profile: steps to target 300 v never on digits, 100 v 200 v 400 on mnist1d
    assert rows.loc["layernorm", "profile_score"] == pytest.approx(1.0)
    assert rows.loc["rmsnorm", "profile_score"] == pytest.approx((0 + (4 - 2)) / 6)
    assert rows.loc["batchnorm", "profile_score"] == pytest.approx((0 + (4 - 4)) / 6)
    assert rows.loc["layernorm", "reference"] == 2  # its own row in both sections


def test_without_a_reference_the_highest_iqm_is_the_reference_chosen_after_looking(workloads):
    result = across(build(load_runs(workloads)), ["data"])
    assert not result.named and result.reference == "norm=rmsnorm"
    assert math.isnan(result.table.set_index("norm.name").loc["rmsnorm", "poi"])


def test_report_across_in_every_output(workloads, tmp_path):
    args = ["report", str(workloads), "--across", "data", "--reference", "norm=layernorm"]
    rich = runner.invoke(app, args, env={"COLUMNS": "100"})
    assert rich.exit_code == 0, rich.output
    assert "== across data: 2 tasks (data=digits, data=mnist1d) ==" in rich.output
    assert "P(>ref)" in rich.output and "data=digits" in rich.output  # batchnorm's missing task
    assert max(len(line) for line in rich.output.splitlines()) <= 100
    payload = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    assert {row["norm.name"] for row in payload["across"]} == {"layernorm", "rmsnorm", "batchnorm"}
    assert payload["across_tasks"] == ["data=digits", "data=mnist1d"]
    assert "## Across data" in runner.invoke(app, [*args, "--format", "markdown"]).stdout
    csv = runner.invoke(app, [*args, "--format", "csv", "--table", "across"])
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0].startswith("norm.name,tasks")
    page = tmp_path / "r.html"
    figures = tmp_path / "img"
    drawn = runner.invoke(app, [*args, "--html", str(page), "--plots", str(figures)])
    assert drawn.exit_code == 0, drawn.output
    assert "Across data" in page.read_text() and (figures / "performance_profile.png").is_file()


@pytest.mark.parametrize(
    ("across_keys", "words"),
    [
        ("norm", "--across norm: it does not split these runs into workloads; valid: data"),
        ("seed", "--across seed: it does not split"),
    ],
)
def test_a_bad_across_key_is_one_line(workloads, across_keys, words):
    result = runner.invoke(app, ["report", str(workloads), "--across", across_keys])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert words in result.output


@pytest.fixture
def one_workload_diverged(tmp_path):
    """The issue's store: mnist1d, digits and tokens x BatchNorm (0.55) / LayerNorm (0.90) x
    two seeds, every digits run diverged."""
    runs = tmp_path / "runs"
    for data in ("mnist1d", "digits", "tokens"):
        for norm, acc in (("batchnorm", 0.55), ("layernorm", 0.90)):
            for seed in range(2):
                overrides = ["model=transformer", f"data={data}", f"norm={norm}", f"seed={seed}"]
                if data == "digits":
                    make_run(runs, overrides, status="diverged", acc=None)
                else:
                    make_run(runs, overrides, acc=acc + seed / 100)
    return runs


@pytest.mark.filterwarnings("error")  # no numpy RuntimeWarning leaks
def test_a_workload_without_a_usable_score_is_named_and_left_out(one_workload_diverged):
    result = runner.invoke(
        app, ["report", str(one_workload_diverged), "--across", "data", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert "warning: --across: data=digits left out: no usable score" in result.stderr
    assert "RuntimeWarning" not in result.stderr
    payload = json.loads(result.stdout)
    assert payload["across_tasks"] == ["data=mnist1d", "data=tokens"]
    # the reference is what the caption says: the highest IQM
    assert payload["across_reference"] == "norm=layernorm"
    rows = {row["norm.name"]: row for row in payload["across"]}
    assert rows["layernorm"]["iqm"] == pytest.approx(1.0, abs=0.01)
    assert rows["batchnorm"]["iqm"] == pytest.approx(0.565, abs=0.01)
    assert any("data=digits left out" in w for w in payload["warnings"])


def test_a_workload_at_chance_is_left_out_and_one_left_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    for data, acc in (("mnist1d", 0.9), ("digits", 0.1)):  # 0.1: chance for ten classes
        for seed in range(2):
            make_run(runs, [f"data={data}", "norm=layernorm", f"seed={seed}"], acc=acc)
            make_run(runs, [f"data={data}", "norm=rmsnorm", f"seed={seed}"], acc=acc / 2)
    result = runner.invoke(app, ["report", str(runs), "--across", "data"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "--across: 1 of 2 workloads have a usable score (data=digits: no usable" in (
        result.output
    )
