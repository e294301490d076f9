"""Registered claims written after a pilot of the same design (issue 58): which ones, and
the pilot each followed, as the project's history has them.

Kept apart from the claim files because a claim's registration is the commit that last
changed its file (normbench.studies.registry.registration): saying it in the file would
re-register the claim after its confirmation runs and take its label away. The first three
cite "the project's exploratory ... run" in their power basis; each was committed in
3643192, after that run had been looked at.
"""

from __future__ import annotations

# claim id -> the pilot it was written after (its design, its seeds, what it showed)
PILOTS: dict[str, str] = {
    "notes-layernorm-residual": (
        "the depth study's exploratory run at learning rate 0.01 without warm-up, 2 seeds, in "
        "which Pre-LN and sandwich trained to depth 16, the top of the grid, and Post-LN to 4 "
        "in every seed"
    ),
    "notes-layernorm-stabilises": (
        "the lr_stability preset's exploratory run, 2 seeds, in which no norm diverged at 3 "
        "of 5 rates in both seeds where Pre-LN LayerNorm trained at all 5"
    ),
    "micikevicius-fp32-statistics": (
        "the precision study's exploratory fp16 run, 3 seeds, which gave ScaleNorm's paired "
        "spread for the power calculation"
    ),
    # Committed in 2f18ca7 after seed 0 of the devices design (global batch 16, 300 steps) had
    # been looked at for these two claims' arms; the other two devices claims' arms (LayerNorm
    # and synchronized BatchNorm on 2 ranks) finished after it.
    "ioffe-batchnorm-per-device": (
        "seed 0 of the devices study's design, per-device BatchNorm on 1, 2 and 4 ranks, test "
        "accuracy 0.874, 0.890 and 0.867"
    ),
    "wu-he-groupnorm-devices": (
        "seed 0 of the devices study's design, GroupNorm on 1 and 2 ranks, the same test "
        "accuracy (0.6585) on both"
    ),
}


def pilot_of(claim_id: str) -> str | None:
    """The pilot a claim was written after, or None where it preceded every run it reads."""
    return PILOTS.get(claim_id)
