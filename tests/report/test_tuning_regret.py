"""A tuned section's regret bound is a number only where it informs (normbench.report.tuning.
regret_stated): over 2 tuning seeds the paired t bound has one degree of freedom (a candidate
with a seed near divergence sent the suite's bound for no norm on tokens to 1.8e10), a bound
that reaches the chosen's own loss says nothing (no loss is below 0), and a bound of 0 is no
proof that the chosen is best."""

from __future__ import annotations

from rich.console import Console

from normbench.report.tuning import parse

SEEDS = [1000000, 1000001, 1000002]


def state(metric: str, value: float, bound: float | None, seeds: list[int] = SEEDS) -> dict:
    group = {
        "group": "norm=none data=tokens",
        "keys": ["train.lr"],
        "space": 4,
        "trials": 4,
        "chosen": {"train.lr": "0.003"},
        "tried": {"train.lr": ["0.001", "0.003", "0.01", "0.03"]},
        "metric": metric,
        "value": value,
        "runner_up": "train.lr=0.01",
        "gap": 0.536,
        "regret_bound": bound,
    }
    return {"phase": "done", "groups": [group], "tuning_seeds": seeds}


def regret(given: dict) -> tuple:
    table = parse("s", given).table
    return table["regret_bound"].item(), table["regret"].item()


def test_a_bound_that_reaches_the_chosen_loss_is_vacuous_not_a_number():
    assert regret(state("val_loss", 0.4907, 17692037605.2)) == (
        None,
        "vacuous (≥ the chosen's loss, 0.4907)",
    )
    assert regret(state("val_loss", 0.4907, 0.4907))[0] is None
    assert regret(state("val_loss", 0.4907, 0.12)) == (0.12, "0.12")  # inside: kept


def test_below_three_tuning_seeds_the_bound_is_not_estimable_and_said_once():
    # an older record at 2 seeds holds a number: it is not shown as one
    assert regret(state("val_loss", 0.4907, 0.12, SEEDS[:2])) == (
        None,
        "not estimable (2 tuning seeds)",
    )
    assert regret(state("val_loss", 0.4907, None, SEEDS[:1]))[1] == "not estimable (1 tuning seed)"
    two_groups = state("val_loss", 0.4907, 0.12, SEEDS[:2])
    two_groups["groups"].append({**two_groups["groups"][0], "group": "norm=dyt data=tokens"})
    section = parse("s", two_groups)
    console = Console(width=80, record=True)
    console.print(section.rich())
    exported = console.export_text()
    text = " ".join(exported.split())
    # no column of the same words in every row: the caption says once why, and how to get one
    assert "not estimable" not in text and text.count("no regret bound") == 1
    assert "1 degree of freedom" in text and "--tune-seeds 3 or more gives one" in text
    assert "regret_bound: a 90% upper bound" not in text  # no definition of what is not shown
    header = next(line for line in exported.splitlines() if "group" in line)
    assert header.split() == ["group", "trials", "steps", "train.lr", "val", "gap"]
    markdown = section.markdown()
    assert "| regret" not in markdown and markdown.count("no regret bound") == 1
    assert "gives no paired t" in parse("s", state("val_loss", 0.49, None, SEEDS[:1])).caption()
    # CSV and JSON keep the columns, in words
    assert [g["regret"] for g in section.json()["groups"]] == ["not estimable (2 tuning seeds)"] * 2
    # at 3 seeds: the column and its definition, no such sentence
    shown = parse("s", state("val_loss", 0.4907, 0.12))
    assert "no regret bound" not in shown.caption() and "regret_bound: a 90%" in shown.caption()
    assert "| regret_bound |" in shown.markdown().replace("| regret |", "| regret_bound |")


def test_a_bound_of_zero_is_not_read_as_certainly_best():
    assert regret(state("val_loss", 0.4907, 0.0)) == (0.0, "≤0 at 90%")
    caption = parse("s", state("val_loss", 0.4907, 0.0)).caption()
    assert "not proof that none is" in caption


def test_a_metric_without_a_floor_keeps_its_bound():
    assert regret(state("val_acc", 0.91, 3.5)) == (3.5, "3.5")


def test_the_suite_and_a_study_say_the_withheld_bound_once(tmp_path):
    # the findings' tuned tables: no "regret not estimable" in every cell or row
    import json

    from normbench.studies import study, suite

    two = state("val_loss", 0.4907, 0.12, SEEDS[:2])
    two["groups"].append({**two["groups"][0], "group": "norm=dyt data=tokens"})
    (tmp_path / "sweeps").mkdir()
    record = {"name": "findings-suite", "started": "2026-01-01T00:00:00", "runs": []}
    path = tmp_path / "sweeps" / "findings-suite-20260101-000000.json"
    path.write_text(json.dumps({**record, "tuning": two}))
    frame, lines = suite.choices_table(tmp_path)
    cells = " ".join(frame.astype(str).to_numpy().ravel())
    assert "regret" not in cells and "gap 0.536" in cells
    assert sum("No regret bound" in line for line in lines) == 1
    block = "\n".join(study.tuning_block(tmp_path, "findings-suite"))
    assert "not estimable" not in block and block.count("no regret bound") == 1
