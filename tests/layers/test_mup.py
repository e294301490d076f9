"""muP's attention scale where a ladder adds heads at a fixed head size (issue 58 item 4), and
the base model's heads (issue 62): the scale each rung's built model uses is the one muP
prescribes, derived here from the plan itself rather than from normbench.layers.mup."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from normbench.core.errors import UsageError
from normbench.data.datasets import describe
from normbench.layers.models import Attention, build_model
from normbench.sweeps import ladder_plan


def built_scales(cfg: dict) -> set[float]:
    """The logit scale of every attention of the model a config builds (on the meta device:
    shapes only): its own, or scaled dot-product attention's 1/sqrt(d_head) where None."""
    data = describe(cfg["data"])
    with torch.device("meta"):
        model = build_model(cfg, data.input_shape, data.num_classes, data.vocab_size)
    head = cfg["model"]["width"] / cfg["model"]["heads"]
    return {
        module.scale if module.scale is not None else 1 / math.sqrt(head)
        for module in model.modules()
        if isinstance(module, Attention)
    }


def mup_plan(preset: str) -> ladder_plan.LadderPlan:
    """The preset's ladder under muP at its own base width (one norm, one step: the budget
    rule sets steps, not shapes, so it is left out)."""
    spec, rest = ladder_plan.parse(None, None, preset, ["model.parametrization=mup"])
    spec = dataclasses.replace(spec, tokens_per_param=None)
    overrides = [*rest, "norm=layernorm", "train.max_steps=1"]
    return ladder_plan.design(spec, preset, overrides, 10_000, {}, (2, 3, None, True), None)


@pytest.mark.parametrize("preset", ["ladder_lm", "ladder_lm_gpu"])
def test_each_rung_of_a_head_size_ladder_scales_its_logits_as_mup_prescribes(preset):
    """muP's attention is 1/d_head with a multiplier fixed across widths, set so that the
    base model (the rung at base_width, which is this preset's bottom or top rung) is the
    standard one: scale(rung) = (1/sqrt(d_base)) x d_base / d_head. The presets grow the
    heads at a fixed head size, so every rung's scale is the base model's, 1/sqrt(8) or
    1/sqrt(32); the scale that assumed the base model kept each rung's heads was 2.00x that
    at ladder_lm's width 16 and 0.35x at ladder_lm_gpu's width 512."""
    rungs = {int(rung.value): rung.grid.jobs[0].cfg for rung in mup_plan(preset).rungs}
    base_width = {cfg["model"]["base_width"] for cfg in rungs.values()}.pop()
    base = rungs[base_width]["model"]
    base_head = base["width"] / base["heads"]
    assert built_scales(rungs[base_width]) == {1 / math.sqrt(base_head)}  # the standard model
    for width, cfg in rungs.items():
        head = cfg["model"]["width"] / cfg["model"]["heads"]
        prescribed = 1 / math.sqrt(base_head) * base_head / head
        (scale,) = built_scales(cfg)
        assert scale == pytest.approx(prescribed, rel=1e-12), (preset, width)


def test_a_fixed_heads_ladder_keeps_mups_one_over_d_head():
    """Without a head size the heads stay and each widens: the base model keeps them, and the
    scale decays as 1/d_head from the base model's 1/sqrt(d_base)."""
    spec = ladder_plan.LadderSpec("model.width", ["64", "256"], None)
    overrides = ["data=pysource", "model.depth=1", "model.parametrization=mup", "norm=layernorm"]
    plan = ladder_plan.design(
        spec, None, [*overrides, "train.max_steps=1"], 100, {}, (1, 3, None, True), None
    )
    base, wide = (rung.grid.jobs[0].cfg for rung in plan.rungs)
    assert wide["model"]["base_head_dim"] is None and wide["model"]["heads"] == 4
    assert built_scales(base) == {1 / math.sqrt(16)}
    (scale,) = built_scales(wide)
    assert scale == pytest.approx(math.sqrt(16) / 64, rel=1e-12)


def test_a_head_size_ladder_sets_the_base_head_size_and_refuses_another():
    spec, rest = ladder_plan.parse(None, None, "ladder_lm", [])
    assert spec.overrides("24") == ["model.width=24", "model.heads=3", "model.base_head_dim=8"]
    with pytest.raises(UsageError, match="model.base_head_dim: give one"):
        ladder_plan.parse(None, None, "ladder_lm", ["model.base_head_dim=4"])
