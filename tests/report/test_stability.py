"""The stability table: the largest learning rate (or depth) at which every seed trains."""

from __future__ import annotations

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.report.sections import build
from normbench.store.catalog import load_runs

runner = CliRunner()


def test_stability_table_gives_the_largest_learning_rate_that_trains(tmp_path):
    runs = tmp_path / "runs"
    # acc per (norm, lr) and seed; chance is 0.1, so "clear of chance" means >= 0.145
    cells = {
        ("layernorm", 0.01): [0.90, 0.91],
        ("layernorm", 0.1): [0.85, 0.86],
        ("layernorm", 1.0): [0.11, 0.60],  # one seed at chance: not every seed trained
        ("none", 0.01): [0.88, 0.87],
        ("none", 0.1): [0.12, 0.13],
    }
    for (norm, lr), accs in cells.items():
        for seed, acc in enumerate(accs):
            make_run(runs, [f"norm={norm}", f"train.lr={lr}", f"seed={seed}"], acc=acc)
    make_run(runs, ["norm=none", "train.lr=1.0", "seed=0"], status="diverged", acc=0.5)
    make_run(runs, ["norm=none", "train.lr=1.0", "seed=1"], status="diverged", acc=0.5)
    (section,) = build(load_runs(runs)).sections
    table = section.tables["lr_stability"].set_index("norm.name")
    assert table.loc["layernorm", "largest_stable"] == pytest.approx(0.1)
    assert table.loc["layernorm", "metric_there"] == pytest.approx(0.855)
    assert table.loc["layernorm", "1_trained"] == "1/2"
    assert table.loc["none", "largest_stable"] == pytest.approx(0.01)
    assert table.loc["none", "1_trained"] == "0/2"
    assert table.index[0] == "layernorm"  # the most stable first
    assert section.tables["depth_stability"] is None
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": "120"})
    assert "Stability" in result.output and "largest" in result.output


def test_with_a_key_left_out_a_seed_trains_when_each_of_its_runs_does(tmp_path):
    runs = tmp_path / "runs"
    for batch in (8, 16):
        for seed in range(2):
            make_run(runs, [f"batch_size={batch}", "train.lr=0.01", f"seed={seed}"], acc=0.9)
            broken = batch == 8 and seed == 0
            make_run(
                runs,
                [f"batch_size={batch}", "train.lr=1.0", f"seed={seed}"],
                status="diverged" if broken else "complete",
                acc=0.8,
            )
    (section,) = build(load_runs(runs), by=["norm.name", "train.lr"]).sections
    row = section.tables["lr_stability"].iloc[0]
    assert row["0.01_trained"] == "2/2" and row["1_trained"] == "1/2"  # seeds, not runs
    assert row["largest_stable"] == pytest.approx(0.01)
    assert any("mean of its runs over batch_size (8, 16)" in note for note in section.notes)


def test_seeds_trained_counts_as_the_seed_by_seed_definition():
    """A seed trained when each of its runs did: int64 seeds counted at once, any other kind
    (floats, objects) seed by seed, both as the definition reads."""
    import numpy as np

    from normbench.report.results import seed_array
    from normbench.report.stability import seeds_trained

    rng = np.random.default_rng(7)
    for _ in range(200):
        size = int(rng.integers(0, 12))
        seeds = rng.integers(0, 5, size)
        ran = rng.random(size) < 0.7
        by_seed: dict[int, bool] = {}
        for seed, trained in zip(seeds.tolist(), ran.tolist(), strict=True):
            by_seed[seed] = by_seed.get(seed, True) and trained
        want = (sum(by_seed.values()), len(by_seed))
        # int64, Python ints as the store gives them, and floats that int() truncates (seed
        # by seed: 2.25 is seed 2, as before)
        for kind in (seeds, seeds.astype(object), seeds.astype(float) + 0.25):
            assert seeds_trained(seed_array(kind), ran) == want


def test_a_typed_axis_column_is_labelled_as_before_not_refused():
    """numpy booleans on the axis are labelled True and False by ``labels`` and false/true by
    ``label``: cells no run falls in (0/0), as before the table took its cells from codes."""
    import pandas as pd

    from normbench.report.base import ACCURACY, Method
    from normbench.report.stability import stability_table

    runs = pd.DataFrame(
        {
            "norm.name": ["a"] * 4,
            "train.lr": [True, False, True, False],
            "seed": [0, 0, 1, 1],
            "status": ["complete"] * 4,
            "final_val_acc": [0.9, 0.8, 0.85, 0.7],
            "final_val_loss": [0.5] * 4,
            "initial_val_loss": [2.3] * 4,
            "num_classes": [10.0] * 4,
        }
    )
    table = stability_table(runs, ["norm.name", "train.lr"], "train.lr", ACCURACY, Method())
    assert table.loc[0, "true_trained"] == table.loc[0, "false_trained"] == "0/0"
