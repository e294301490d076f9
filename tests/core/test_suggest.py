"""The word a mistyped one meant: a shared start before difflib's letters in common."""

from __future__ import annotations

from normbench.core.suggest import closest, did_you_mean

PLACEMENTS = ["deepnorm", "lns", "mix", "peri", "post", "pre", "res_post", "sandwich"]


def test_a_word_that_starts_with_a_candidate_means_it():
    assert closest("prenorm", PLACEMENTS) == "pre"  # difflib alone: deepnorm
    assert closest("train.lrr", ["train", "train.lr", "train.log_every"]) == "train.lr"
    assert closest("batch", ["batch_sensitivity", "batch_resnet", "depth"]) in (
        "batch_sensitivity",
        "batch_resnet",
    )


def test_otherwise_the_closest_by_difflib_or_nothing():
    assert closest("nrom", ["norm", "model", "seed"]) == "norm"
    assert closest("batch_sensitvity", ["batch_sensitivity", "smoke"]) == "batch_sensitivity"
    assert closest("zzz", PLACEMENTS) is None
    assert closest("p", PLACEMENTS) is None  # one shared letter tells nothing
    assert did_you_mean("zzz", PLACEMENTS) == ""
    assert did_you_mean("nrom", ["norm"]) == " (did you mean norm?)"
