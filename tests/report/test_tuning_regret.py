"""A tuned section's regret bound is no larger than a loss allows (normbench.report.tuning.
capped): over 2 tuning seeds the paired t bound has one degree of freedom, and a candidate
with a seed near divergence sent the suite's bound for no norm on tokens to 1.8e10."""

from __future__ import annotations

from normbench.report.tuning import parse


def state(metric: str, value: float, bound: float) -> dict:
    group = {
        "group": "norm=none data=tokens",
        "keys": ["train.lr"],
        "space": 4,
        "trials": 4,
        "chosen": {"train.lr": "0.003"},
        "tried": {"train.lr": ["0.001", "0.003", "0.01", "0.03"]},
        "metric": metric,
        "value": value,
        "gap": 0.536,
        "regret_bound": bound,
    }
    return {"phase": "done", "groups": [group], "tuning_seeds": [1000000, 1000001]}


def test_a_loss_s_regret_bound_is_at_most_the_chosen_loss():
    (regret,) = parse("s", state("val_loss", 0.4907, 17692037605.2)).table["regret_bound"]
    assert regret == 0.4907  # no candidate's loss is below 0
    (regret,) = parse("s", state("val_loss", 0.4907, 0.12)).table["regret_bound"]
    assert regret == 0.12  # a bound inside the cap is kept


def test_a_metric_without_a_floor_keeps_its_bound():
    (regret,) = parse("s", state("val_acc", 0.91, 3.5)).table["regret_bound"]
    assert regret == 3.5
