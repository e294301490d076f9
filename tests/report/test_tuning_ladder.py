"""A tuned ladder's report says what each rung chose (normbench.report.tuning.ladder_choices):
the table is the last rung's, and whether the best value moves with the size is the question
muP transfer answers."""

from __future__ import annotations

from normbench.report.tuning import ladder_choices


def test_every_rung_s_choice_per_group_with_transferred_rungs_marked():
    ladder = {
        "key": "model.width",
        "rungs": [
            {"value": "16", "tuned": True, "chosen": {"norm=a": {"train.lr": "0.03"}}},
            {"value": "32", "tuned": True, "chosen": {"norm=a": {"train.lr": "0.01"}}},
            {"value": "64", "tuned": False, "chosen": {"norm=a": {"train.lr": "0.01"}}},
        ],
    }
    (line,) = ladder_choices(ladder)
    assert line == (
        "Chosen per rung (model.width 16, 32, 64; the table is the last rung's): "
        "norm=a 0.03, 0.01, 0.01 (transferred)"
    )


def test_an_untrusted_ladder_record_never_raises():
    assert ladder_choices({"rungs": "x"}) == []
    assert ladder_choices({"rungs": [None, {"value": 8}]}) == []
    (line,) = ladder_choices(
        {"rungs": [{"value": 8, "chosen": {"g": 1}}, {"value": 16, "chosen": {"g": {"lr": 2}}}]}
    )
    assert line.endswith("g -, 2")
