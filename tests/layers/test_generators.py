"""Common random numbers: at one seed, every initial weight outside the norm layers is the
same whatever the norm (shipped, or yours and drawing random numbers), the placement, QK-norm,
the precision or the batch size."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.api import build_model
from normbench.layers.norms import NORMS

BASE = ["model.width=16", "model.depth=2", "norm.groups=4", "seed=3"]


def outside_norms(model: nn.Module, placement: str = "pre") -> dict[str, torch.Tensor]:
    """Every parameter that is not a norm's (QK-norm's included), except the sublayer weights
    that DeepNorm re-initialises by its definition (Xavier-normal with gain beta)."""
    kept = {}
    for name, value in model.named_parameters():
        parts = name.split(".")
        if {"norm", "norm2", "qk_norm"} & set(parts) or parts[0] == "final_norm":
            continue
        if placement == "deepnorm" and "sublayer" in parts and name.endswith("weight"):
            continue
        kept[name] = value.detach().clone()
    return kept


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


MODELS = {"transformer": ["model=transformer", "model.heads=2"], "cnn": ["model=cnn"]}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_shipped_norm_shares_every_other_initial_weight(model):
    extra = MODELS[model]
    reference = outside_norms(build_model([*BASE, *extra, "norm=layernorm"]))
    for norm in sorted(NORMS):
        built = outside_norms(build_model([*BASE, *extra, f"norm={norm}"]))
        assert same(built, reference), norm


@pytest.mark.parametrize("model", sorted(MODELS))
def test_placements_precisions_and_batch_sizes_share_the_weights_outside_the_norms(model):
    reference = outside_norms(build_model([*BASE, *MODELS[model]]))
    qk_norms = [["model.qk_norm=layernorm"], ["model.qk_norm=rmsnorm"]] * (model == "transformer")
    for extra in (
        ["placement=post"],
        ["placement=res_post"],
        ["placement=sandwich"],
        ["placement=lns"],
        ["placement=mix", "placement.post_fraction=0.5"],
        ["precision=bf16", "batch_size=4"],
        ["model.init=xavier"],
        *qk_norms,
    ):
        built = outside_norms(build_model([*BASE, *MODELS[model], *extra]), "deepnorm")
        assert same(built, outside_norms(build_model([*BASE, *MODELS[model]]), "deepnorm"))
        if "model.init=xavier" not in extra:
            assert same(outside_norms(build_model([*BASE, *MODELS[model], *extra])), reference)
    deepnorm = outside_norms(build_model([*BASE, *MODELS[model], "placement=deepnorm"]), "deepnorm")
    assert same(deepnorm, outside_norms(build_model([*BASE, *MODELS[model]]), "deepnorm"))


def test_a_user_norm_that_draws_random_numbers_leaves_the_rest_of_the_model_alone():
    user = build_model([*BASE, "norm=user_norms:DrawingNorm"])
    assert same(outside_norms(user), outside_norms(build_model([*BASE, "norm=layernorm"])))
    # and its own draws are a function of the seed: the same model twice
    again = build_model([*BASE, "norm=user_norms:DrawingNorm"])
    assert all(
        torch.equal(a, b) for a, b in zip(user.parameters(), again.parameters(), strict=True)
    )


def test_another_seed_is_another_model_and_build_model_leaves_the_callers_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_model([*BASE, "norm=rmsnorm"])
    assert torch.equal(torch.rand(3), expected)
    b = build_model([*BASE[:-1], "seed=4", "norm=rmsnorm"])
    assert not same(outside_norms(a), outside_norms(b))
