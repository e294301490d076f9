"""What a study shows without a registered claim (studies.study.unregistered): never a label;
and a tuned study's command line."""

from __future__ import annotations

from normbench.studies.study import Study, command_of, unregistered


def test_an_unregistered_measure_says_what_it_computed_and_no_label():
    for ok in (True, False, None):
        text = unregistered(ok)
        assert text.startswith("*Exploratory (not a registered claim)")
        assert not any(w in text for w in ("Reproduced", "Not reproduced", "Inconclusive"))


def test_a_tuned_study_prints_its_tune_flags():
    study = Study("t", ["norm=dyt,layernorm", "seed=range(3)"], [], tune=("train.lr=1e-3,1e-2",))
    assert command_of(study, "full").endswith("seed=range(3) --tune train.lr=1e-3,1e-2")


def test_a_study_with_registered_claims_trains_their_seeds_at_full_scale():
    study = Study("placement", ["placement"], ["seed=0,1"])
    assert command_of(study, "full") == "normbench sweep placement seed=range(10)"
    assert command_of(study, "quick") == "normbench sweep placement seed=0,1"
