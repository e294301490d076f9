"""scripts/mup_transfer.py: each group's choice per rung from a designed ladder record, and how
many grid steps transfer from the smallest rung lands from the top rung's own choice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "mup_transfer.py"
spec = importlib.util.spec_from_file_location("mup_transfer", SCRIPT)
mup_transfer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mup_transfer)


def test_choices_per_rung_and_the_grid_steps_transfer_is_off():
    record = {
        "ladder": {
            "rungs": [
                {"value": "16", "chosen": {"norm=a": {"train.lr": "0.03"}}},
                {"value": "32", "chosen": {"norm=a": {"train.lr": "0.01"}, "norm=b": {}}},
                {"value": "64", "chosen": {"norm=a": {"train.lr": "0.003"}}},
            ]
        }
    }
    sizes, per_group = mup_transfer.choices(record)
    assert sizes == ["16", "32", "64"]
    assert per_group == {"norm=a": ["0.03", "0.01", "0.003"], "norm=b": ["-", "-", "-"]}
    grid = ["0.003", "0.01", "0.03"]
    assert mup_transfer.grid_steps(grid, "0.03", "0.003") == 2
    assert mup_transfer.grid_steps(grid, "0.01", "0.01") == 0
    assert mup_transfer.grid_steps(grid, "0.09", "0.01") is None  # beyond the grid
