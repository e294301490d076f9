"""The muon study's logit-growth comparisons: per seed a mean over the rate grid, paired by
seed, lower growth better, and a seed without a run at every rate left out."""

from __future__ import annotations

import pandas as pd

from normbench.studies import family, muon, registry


def growth_frame(values: dict[tuple[str, str], list[float]], rates=("0.01", "0.1")):
    """Runs at every rate for three seeds: growth = the given per-seed value at each rate."""
    rows = []
    for (group, optimizer), per_seed in values.items():
        for seed, value in enumerate(per_seed):
            for rate in rates:
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


def decided(growth: pd.DataFrame, claim_id: str) -> family.Tested:
    claim = registry.claim(claim_id)
    (tested,) = family.decide_claim(claim, muon.pairs_of(growth, claim))
    return tested


def test_qk_norm_growing_far_less_in_every_seed_is_for_and_muon_above_adamw_is_for():
    growth = growth_frame(
        {
            ("Pre-LN", "muon"): [3.0, 3.2, 3.1],
            ("Pre-LN + QK-norm", "muon"): [0.50, 0.62, 0.55],
            ("Peri-LN", "muon"): [3.05, 3.18, 3.12],  # the same as Pre-LN within a factor 2
            ("Pre-LN", "adamw"): [1.0, 1.25, 1.1],
        }
    )
    assert decided(growth, "muon-qk-norm").decided is True  # QK-norm grows less: predicted
    assert decided(growth, "kimi-muon-logits").decided is True  # Muon grows more than AdamW
    peri = decided(growth, "muon-peri-ln")  # predicted to grow less: it does not
    assert peri.decided in (False, None)
    assert peri.difference.diff < 0.1  # negated growth: Peri-LN no lower than Pre-LN


def test_a_seed_missing_a_rate_is_not_compared():
    growth = growth_frame({("Pre-LN", "muon"): [3.0, 3.2, 3.1]})
    growth = growth[~((growth["seed"] == 2) & (growth["lr"] == "0.1"))]
    assert set(muon.growth_by_seed(growth, "Pre-LN", "muon")) == {0, 1}


def test_too_few_seeds_is_undecided_with_the_reason():
    growth = growth_frame({("Pre-LN", "muon"): [3.0], ("Pre-LN + QK-norm", "muon"): [0.5]})
    tested = decided(growth, "muon-qk-norm")
    assert tested.decided is None and tested.difference is None
    assert "needs 2 each" in tested.text(0.05)


def test_group_names_read_as_the_literature_names_them():
    assert muon.group_name("layernorm", "pre", "layernorm") == "Pre-LN + QK-norm"
    assert muon.group_name("layernorm", "sandwich", "none") == "Peri-LN"
    assert muon.group_name("rmsnorm", "pre", "none") == "Pre-RMSNorm"
