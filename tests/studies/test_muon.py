"""The muon study's logit-growth comparisons: each group at its own tuned learning rate (the
record's choice), per seed its confirmation run's growth, paired by seed, lower growth better;
runs at any other rate are not read."""

from __future__ import annotations

import pandas as pd

from normbench.report import tuning
from normbench.studies import family, muon, registry
from normbench.sweeps.presets import load_preset


def growth_frame(values: dict[tuple[str, str, str], list[float]]) -> pd.DataFrame:
    """Runs of (group, optimizer, rate), one per seed: growth = the given per-seed value."""
    rows = []
    for (group, optimizer, rate), per_seed in values.items():
        for seed, value in enumerate(per_seed):
            rows.append(
                dict(
                    group=group,
                    optimizer=optimizer,
                    lr=rate,
                    seed=seed,
                    growth=value,
                    first=2.0,
                    last=2.0 * 10**value,
                )
            )
    return pd.DataFrame(rows)


def decided(growth: pd.DataFrame, claim_id: str, chosen: dict) -> family.Tested:
    claim = registry.claim(claim_id)
    (tested,) = family.decide_claim(claim, muon.pairs_of(growth, claim, chosen))
    return tested


EVERY_GROUP_AT_0_01 = {
    ("Pre-LN", "muon"): "0.01",
    ("Pre-LN + QK-norm", "muon"): "0.01",
    ("Peri-LN", "muon"): "0.01",
    ("Pre-LN", "adamw"): "0.01",
}


def test_qk_norm_growing_far_less_in_every_seed_is_for_and_muon_above_adamw_is_for():
    growth = growth_frame(
        {
            ("Pre-LN", "muon", "0.01"): [3.0, 3.2, 3.1],
            ("Pre-LN + QK-norm", "muon", "0.01"): [0.50, 0.62, 0.55],
            ("Peri-LN", "muon", "0.01"): [3.05, 3.18, 3.12],  # Pre-LN's within a factor 2
            ("Pre-LN", "adamw", "0.01"): [1.0, 1.25, 1.1],
        }
    )
    assert decided(growth, "muon-qk-norm", EVERY_GROUP_AT_0_01).decided is True
    assert decided(growth, "kimi-muon-logits", EVERY_GROUP_AT_0_01).decided is True
    peri = decided(growth, "muon-peri-ln", EVERY_GROUP_AT_0_01)  # predicted lower: it is not
    assert peri.decided in (False, None)
    assert peri.difference.diff < 0.1  # negated growth: Peri-LN no lower than Pre-LN


def test_the_claims_read_each_group_at_its_own_chosen_rate_and_no_other():
    # Muon's Pre-LN grows at 0.1 and not at 0.01; AdamW's the other way round: which way the
    # claim goes is decided by the rate each group chose, each optimizer its own
    growth = growth_frame(
        {
            ("Pre-LN", "muon", "0.01"): [0.1, 0.2, 0.15],
            ("Pre-LN", "muon", "0.1"): [3.0, 3.2, 3.1],
            ("Pre-LN", "adamw", "0.01"): [3.0, 3.3, 3.1],
            ("Pre-LN", "adamw", "0.1"): [0.1, 0.25, 0.2],
        }
    )
    own = {("Pre-LN", "muon"): "0.1", ("Pre-LN", "adamw"): "0.1"}
    assert decided(growth, "kimi-muon-logits", own).decided is True  # Muon grows more
    other = {("Pre-LN", "muon"): "0.01", ("Pre-LN", "adamw"): "0.01"}
    assert decided(growth, "kimi-muon-logits", other).decided is False  # AdamW grows more
    # the rate as the record writes it (1.0) and as a run's label (1) are one rate
    assert muon.growth_by_seed(
        growth_frame({("Pre-LN", "muon", "1"): [2.0]}), "Pre-LN", "muon", "1.0"
    ) == {0: 2.0}


def test_a_group_without_a_recorded_choice_is_undecided():
    growth = growth_frame({("Pre-LN", "muon", "0.01"): [3.0, 3.2, 3.1]})
    growth = pd.concat(
        [growth, growth_frame({("Pre-LN + QK-norm", "muon", "0.01"): [0.5, 0.6, 0.55]})]
    )
    tested = decided(growth, "muon-qk-norm", {("Pre-LN", "muon"): "0.01"})
    assert tested.decided is None and tested.difference is None


def test_too_few_seeds_is_undecided_with_the_reason():
    growth = growth_frame(
        {("Pre-LN", "muon", "0.01"): [3.0], ("Pre-LN + QK-norm", "muon", "0.01"): [0.5]}
    )
    tested = decided(growth, "muon-qk-norm", EVERY_GROUP_AT_0_01)
    assert tested.decided is None and tested.difference is None
    assert "needs 2 each" in tested.text(0.05)


def test_the_chosen_rates_are_read_from_the_record_by_group_and_optimizer():
    group = "norm={} placement={} model.qk_norm={} train.optimizer={} train.muon_qkv={}"
    state = {
        "phase": "done",
        "groups": [
            {
                "group": group.format("layernorm", "pre", "none", "adamw", "split"),
                "chosen": {"train.lr": 0.03},
            },
            {
                "group": group.format("layernorm", "peri", "none", "muon", "split"),
                "chosen": {"train.lr": 0.3},
            },
            {
                "group": group.format("layernorm", "pre", "layernorm", "muon", "fused"),
                "chosen": {"train.lr": 1.0},
            },
            {
                "group": group.format("dyt", "pre", "none", "muon", "split"),
                "chosen": {"train.lr": 0.1},
            },
        ],
    }
    chosen = muon.chosen_rates(tuning.parse("findings-muon", state))
    assert chosen == {
        ("Pre-LN", "adamw"): "0.03",
        ("Peri-LN", "muon"): "0.3",
        ("Pre-LN + QK-norm (fused QKV)", "muon"): "1.0",
        ("Pre-DyT", "muon"): "0.1",
    }
    assert muon.chosen_rates(None) == {}


def test_the_study_tunes_the_presets_grid():
    preset = [float(v) for v in load_preset("muon")["tune"]["train.lr"].split(",")]
    assert muon.grid_rates("full") == preset and len(muon.grid_rates("smoke")) == 2


def test_group_names_read_as_the_literature_names_them():
    assert muon.group_name("layernorm", "pre", "layernorm") == "Pre-LN + QK-norm"
    assert muon.group_name("layernorm", "sandwich", "none") == "Peri-LN"
    assert muon.group_name("rmsnorm", "pre", "none") == "Pre-RMSNorm"
