"""The registered cost claims (normbench/studies/registered/cost/, measured by
benchmarks/cost_claims.py): each reads as a claim, and each comparison names a norm in an
implementation it has (a claim naming DyT's fused kernel could never be measured)."""

from __future__ import annotations

from normbench.layers.keys import NORM_TABLE
from normbench.studies import registry

COST = registry.REGISTERED / "cost"


def test_every_cost_claim_names_implementations_its_norms_have():
    claims = registry.claims(COST)
    assert set(claims) == {
        "zhang-sennrich-rmsnorm-speed",
        "zhu-dyt-speed",
        "notes-batchnorm-saved-bytes",
    }
    for claim in claims.values():
        assert claim.study == "cost" and claim.metric in ("-log seconds", "-log saved bytes")
        for comparison in claim.comparisons:
            for filters in (comparison.group, comparison.reference):
                named = dict(item.split("=", 1) for item in filters)
                assert named["norm.impl"] in NORM_TABLE[named["norm.name"]].implementations


def test_the_cost_claims_stay_out_of_the_sweep_studies_claims():
    """findings reads registered/*.yaml, not the cost folder: its studies are sweeps."""
    assert not set(registry.claims(COST)) & set(registry.claims())
