"""Data-parallel runs (train.devices, normbench.training.distributed) on this CPU: gloo, two
ranks started by PyTorch's launcher. The invariance tests: at a fixed global batch a norm
without batch statistics trains the same on 2 ranks as in one process, step by step (the
global batch's loss and every gradient); BatchNorm with synchronized statistics is the
one-process full-batch run, and with per-device statistics the one-process run with ghost
batches of the per-device batch, not the full-batch one."""

from __future__ import annotations

import pytest
import torch
from data_parallel_steps import traced, traced_ranks
from helpers import tiny
from torch.distributed.launcher.api import elastic_launch

from normbench.experiment.compose import compose
from normbench.training.distributed import launch_config

STEPS = 5
# float32 sums in another order (per rank, then across): a few ulps of the values
TOLERANCE = {"rtol": 1e-4, "atol": 1e-6}


def config(*overrides: str) -> dict:
    return compose(tiny("model=cnn", "batch_size=32", "train.grad_clip=null", *overrides))


# (the two-rank config, the one-process config it must match)
MATCHES = {
    "layernorm": (["norm=layernorm"], ["norm=layernorm"]),
    "rmsnorm": (["norm=rmsnorm"], ["norm=rmsnorm"]),
    "groupnorm": (["norm=groupnorm"], ["norm=groupnorm"]),
    "dyt": (["norm=dyt"], ["norm=dyt"]),
    "batchnorm synchronized = full batch": (
        ["norm=batchnorm", "norm.sync=global"],
        ["norm=batchnorm"],
    ),
    "batchnorm per device = ghost batch 16": (
        ["norm=batchnorm"],
        ["norm=batchnorm", "norm.ghost_batch=16"],
    ),
}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, dict]:
    """Every two-rank config of MATCHES traced in one launch (starting ranks is the cost)."""
    runs = tmp_path_factory.mktemp("ranks")
    cfgs = [config(*two, "train.devices=2") for two, _ in MATCHES.values()]
    answers = elastic_launch(launch_config(2, "invariance", 120), traced_ranks)(
        cfgs, STEPS, str(runs)
    )
    return dict(zip(MATCHES, answers[0], strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MATCHES))
def test_two_ranks_match_one_process_step_by_step(case, two_ranks, tmp_path):
    one = traced(config(*MATCHES[case][1]), STEPS, str(tmp_path))
    two = two_ranks[case]
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), **TOLERANCE)
    torch.testing.assert_close(two["gradients"], one["gradients"], **TOLERANCE)
    assert two["gradients"].abs().sum() > 0  # a step that trains
    if case.startswith("batchnorm synchronized"):  # the running statistics moved as one's
        torch.testing.assert_close(two["buffers"], one["buffers"], **TOLERANCE)


@pytest.mark.slow
def test_per_device_batchnorm_is_not_the_full_batch(two_ranks, tmp_path):
    full = traced(config("norm=batchnorm"), STEPS, str(tmp_path))
    per_device = two_ranks["batchnorm per device = ghost batch 16"]
    assert not torch.allclose(per_device["gradients"], full["gradients"], **TOLERANCE)
    # the first step's gradients already differ (the statistics of 16 samples, not 32)
    assert not torch.allclose(per_device["gradients"][0], full["gradients"][0], **TOLERANCE)
