"""Issue 50's frictions 1-8 ("a newcomer's first hour"), one regression test each through the
CLI, at the widths a newcomer's terminal has (80 and 100 columns)."""

from __future__ import annotations

import io
import json

import pytest
from helpers import invoke, make_run, one_line

TWO_KEYS = {
    "group": "norm=layernorm data=pysource",
    "keys": ["train.lr", "train.weight_decay"],
    "space": 4,
    "trials": 4,
    "steps": 64,
    "full_grid_steps": 64,
    "chosen": {"train.lr": "0.003162", "train.weight_decay": "0.0001"},
    "metric": "val_loss",
    "value": 1.2345,
    "runner_up": "train.lr=0.01 train.weight_decay=0.0001",
    "gap": 0.0123,
    "regret_bound": 0.0456,
    "tried": {"train.lr": ["0.001", "0.003162"], "train.weight_decay": ["0.0001", "0.1"]},
    "edge": "train.weight_decay=0.0001: at the grid's bottom",
}


def tuned_store(runs, groups: list[dict]) -> None:
    """Two runs and a tuned sweep's record ``t`` over them, with these groups chosen."""
    ids = [make_run(runs, [f"norm={norm}", "seed=0"]) for norm in ("layernorm", "rmsnorm")]
    state = {
        "phase": "done",
        "rungs": [{"keep": 4, "steps": 16}],
        "tuning_seeds": [1000000],
        "groups": groups,
    }
    (runs / "sweeps").mkdir()
    record = {"name": "t", "started": "2026-01-01T00:00:00", "runs": [{"run_id": i} for i in ids]}
    (runs / "sweeps" / "t-20260101-000000.json").write_text(json.dumps({**record, "tuning": state}))


# ------------------------------------------------- 1. the tuned table, whole at 80 columns
@pytest.mark.parametrize("columns", [80, 100])
def test_the_tuned_table_shows_every_chosen_value_whole(tmp_path, columns):
    runs = tmp_path / "runs"
    other = {**TWO_KEYS, "group": "norm=rmsnorm data=pysource", "edge": None}
    tuned_store(runs, [TWO_KEYS, other])
    out = invoke("report", "--sweep", "t", "--runs-dir", str(runs), columns=columns)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    assert "…" not in out.stdout
    for value in ("train.lr=0.003162", "train.weight_decay=0.0001 *", "norm=layernorm"):
        assert any(value in line for line in lines), (value, out.stdout)
    # the columns under the names CSV and JSON give them (and the sweep prints this table)
    assert "val_chosen" in out.stdout and "val_gap" in out.stdout and "regret_bound" in out.stdout
    csv = invoke(
        "report", "--sweep", "t", "--runs-dir", str(runs), "--table", "tuning", "--format", "csv"
    )
    assert "val_chosen" in csv.stdout and "val_gap" in csv.stdout and "regret_bound" in csv.stdout


def test_the_sweep_and_the_report_print_the_same_tuned_table(tmp_path):
    from rich.console import Console

    from normbench.report import tuning
    from normbench.sweeps import tuned_view

    state = {"phase": "done", "tuning_seeds": [1000000], "groups": [TWO_KEYS]}

    def shown(renderable) -> str:
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(renderable)
        return console.export_text()

    swept = shown(tuned_view.choices_table("t", state))
    assert swept == shown(tuning.parse("t", state).rich())
    assert "val_chosen" in swept and "train.weight_decay=0.0001 *" in swept
