"""What a study shows without a registered claim (studies.study.unregistered): never a label;
a tuned study's command line; and how a section's blocks are laid out (studies.study.paragraphs)."""

from __future__ import annotations

from normbench.studies.study import Study, command_of, paragraphs, unregistered


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


def test_a_sections_blocks_have_one_blank_line_between_and_figures_are_one_block():
    figures = ["![a](img/a.png)", "![b](img/b.png)"]
    assert paragraphs("## T", "text", figures, "end") == (
        "## T\n\ntext\n\n![a](img/a.png)\n![b](img/b.png)\n\nend"
    )
    # no figures drawn: the block is empty, its blank line stays (as the sections always wrote)
    assert paragraphs("table", [], "end") == "table\n\n\nend"
