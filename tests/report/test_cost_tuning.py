"""A tuned comparison's tuning runs summed into the cost of the configuration each group
chose: the cost table's tuning columns and the Pareto figure's hollow markers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import make_run

from normbench.report.cost_plots import cost_pareto
from normbench.report.cost_tuning import with_tuning_cost
from normbench.report.sections import build
from normbench.store.catalog import load_runs
from tests.report.test_cost import cost

STEP_S = {"layernorm": 0.010, "rmsnorm": 0.008}  # seconds per step, every run of the norm
TUNING_LRS = {"layernorm": (0.001, 0.01), "rmsnorm": (0.001, 0.003, 0.01)}  # 2 and 3 tried


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Confirmation runs (2 seeds per norm) in one runs directory, tuning runs (every
    candidate learning rate, 2 tuning seeds) in another; every run 30 steps. Built once."""
    tmp_path = tmp_path_factory.mktemp("tuned")
    confirmation, tuning = tmp_path / "confirmation", tmp_path / "tuning"
    for norm, seconds in STEP_S.items():
        for seed in (0, 1):
            make_run(confirmation, [f"norm={norm}", f"seed={seed}"], summary_extra=cost(seconds))
            for lr in TUNING_LRS[norm]:
                overrides = [f"norm={norm}", f"seed={10 + seed}", f"train.lr={lr}"]
                make_run(tuning, overrides, summary_extra=cost(seconds))
    section = build(load_runs(confirmation)).sections[0]
    return section, load_runs(tuning).runs


def test_each_group_pays_for_its_own_tuning_runs_per_confirmation_step(stores):
    section, tuning = stores
    table = with_tuning_cost(section.tables["cost"], section.keys, section.runs, tuning)
    rows = table.set_index("norm.name").to_dict("index")
    for norm, seconds in STEP_S.items():
        tried = 2 * len(TUNING_LRS[norm])
        row = rows[norm]
        assert row["tuning_runs"] == tried and row["tuning_untimed"] == 0
        assert row["tuning_s"] == pytest.approx(tried * 30 * seconds)
        assert row["tuning_flops"] == pytest.approx(tried * 30 * 2.0e6)
        # (tuning + confirmation) / confirmation steps: (tried + 2) runs' cost over 2 runs' steps
        assert row["step_s_with_tuning"] == pytest.approx(seconds * (tried + 2) / 2)
        assert row["flops_per_step_with_tuning"] == pytest.approx(2.0e6 * (tried + 2) / 2)


def test_the_pareto_figure_marks_the_cost_with_tuning_hollow(stores):
    section, tuning = stores
    tables = {
        **section.tables,
        "cost": with_tuning_cost(section.tables["cost"], section.keys, section.runs, tuning),
    }
    step_axis, _ = cost_pareto(replace(section, tables=tables)).axes
    hollow = [line for line in step_axis.get_lines() if line.get_markerfacecolor() == "white"]
    expected = {1e3 * s * (2 * len(TUNING_LRS[n]) + 2) / 2 for n, s in STEP_S.items()}
    assert {round(float(line.get_xdata()[0]), 6) for line in hollow} == {
        round(x, 6) for x in expected
    }
    (front,) = [line for line in step_axis.get_lines() if line.get_linestyle() == "--"]
    assert min(front.get_xdata()) == pytest.approx(min(expected))  # the frontier pays it too
