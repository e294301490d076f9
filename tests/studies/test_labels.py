"""The labelling rule of findings (studies.study.label): a claim's label is computed from its
predicted verdicts, and an undecided comparison never counts for the claim."""

from __future__ import annotations

import pytest

from normbench.studies.study import LABEL_RULE, Prediction, Study, command_of, label


def test_every_comparison_decided_as_predicted_is_reproduced():
    claim = [Prediction("cold", "worse", "worse"), Prediction("warm", "not worse", "equivalent")]
    assert label(claim) is True
    assert label([Prediction("best", "not worse", "reference")]) is True


def test_one_comparison_decided_against_is_not_reproduced_whatever_the_rest():
    claim = [Prediction("cold", "worse", "inconclusive"), Prediction("warm", "not worse", "worse")]
    assert label(claim) is False
    assert label([Prediction("dyt vs ln", "equivalent", "better")]) is False


def test_an_undecided_comparison_is_inconclusive_not_reproduced():
    # Xiong et al. as docs/findings.md had it: Post-LN worse without warm-up, and with warm-up
    # inconclusive against the best (-0.53 [-0.68, -0.37]): the old rule said Reproduced.
    xiong = [
        Prediction("Post-LN without warm-up", "worse", "worse"),
        Prediction("Post-LN with 300 warm-up steps", "not worse", "inconclusive"),
    ]
    assert label(xiong) is None
    assert label([]) is None
    assert "Inconclusive" in LABEL_RULE and "decides nothing" in LABEL_RULE


def test_an_unknown_prediction_is_refused():
    with pytest.raises(ValueError, match="valid: worse, not worse"):
        label([Prediction("x", "roughly the same", "equivalent")])


def test_a_tuned_study_prints_its_tune_flags():
    study = Study("t", ["norm=dyt,layernorm", "seed=range(3)"], [], tune=("train.lr=1e-3,1e-2",))
    assert command_of(study, "full").endswith("seed=range(3) --tune train.lr=1e-3,1e-2")
