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


def test_below_three_tuning_seeds_the_bound_is_not_estimable():
    # an older record at 2 seeds holds a number: it is not shown as one
    assert regret(state("val_loss", 0.4907, 0.12, SEEDS[:2])) == (
        None,
        "not estimable (2 tuning seeds)",
    )
    assert regret(state("val_loss", 0.4907, None, SEEDS[:1]))[1] == "not estimable (1 tuning seed)"
    section = parse("s", state("val_loss", 0.4907, 0.12, SEEDS[:2]))
    console = Console(width=80, record=True)
    console.print(section.rich())
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert all(words in text for words in ("not estimable", "(2 tuning", "seeds)"))  # wrapped
    assert "not estimable (2 tuning seeds)" in section.markdown()


def test_a_bound_of_zero_is_not_read_as_certainly_best():
    assert regret(state("val_loss", 0.4907, 0.0)) == (0.0, "≤0 at 90%")
    caption = parse("s", state("val_loss", 0.4907, 0.0)).caption()
    assert "not proof that none is" in caption


def test_a_metric_without_a_floor_keeps_its_bound():
    assert regret(state("val_acc", 0.91, 3.5)) == (3.5, "3.5")
