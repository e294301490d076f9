"""model=resnet: He et al.'s basic block, a norm after every conv, v1 (post) and v2 (pre)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.experiment.options import group_options
from normbench.layers.models import build_model
from normbench.layers.norms import Norm
from normbench.layers.resnet import BasicBlock, ResNet
from normbench.training.run import run_experiment


def tiny_resnet(*overrides: str, data: str = "mnist1d") -> list[str]:
    """helpers.tiny for model=resnet (without the transformer's model.heads)."""
    return [o for o in tiny("model=resnet", *overrides, data=data) if "heads" not in o]


def resnet(*overrides: str, data: str = "mnist1d") -> ResNet:
    cfg = compose(tiny_resnet(*overrides, data=data))
    return build_model(cfg, input_shape(cfg["data"]), 10)


def calls(model: torch.nn.Module, x: torch.Tensor) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(module name, input, output) of every conv and norm, in the order they ran."""
    seen = []
    hooks = [
        module.register_forward_hook(
            lambda m, args, out, name=name: seen.append((name, args[0], out))
        )
        for name, module in model.named_modules()
        if isinstance(module, (Norm, torch.nn.Conv1d, torch.nn.Conv2d))
    ]
    model(x)
    for hook in hooks:
        hook.remove()
    return seen


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_each_block_runs_its_norms_and_convs_in_he_et_al_order(placement):
    """v1: conv-N-conv-N in every block after a conv-N stem; v2: N-conv-N-conv after a bare
    stem conv, a final N. Every conv's output is what a norm reads next: directly in v1 and
    for v2's first conv; after the shortcut's addition for v2's second conv."""
    model = resnet(f"placement={placement}", "model.depth=2").eval()
    order = [name for name, _, _ in calls(model, torch.randn(3, 1, 40))]
    block = (
        ["conv1", "norm1", "conv2", "norm2"]
        if placement == "post"
        else ["norm1", "conv1", "norm2", "conv2"]
    )
    stem = ["stem", "stem_norm"] if placement == "post" else ["stem"]
    end = [] if placement == "post" else ["final_norm"]
    assert order == stem + [f"blocks.{b}.{n}" for b in range(2) for n in block] + end


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_a_block_computes_its_equation(placement):
    torch.manual_seed(0)
    model = resnet(f"placement={placement}", "norm=groupnorm").eval()
    b = model.blocks[0]
    assert isinstance(b, BasicBlock) and b.conv1.bias is None and b.conv2.bias is None
    x = torch.randn(2, 16, 40)
    if placement == "post":  # v1: relu(x + N2(conv2(relu(N1(conv1(x))))))
        expected = F.relu(x + b.norm2(b.conv2(F.relu(b.norm1(b.conv1(x))))))
    else:  # v2: x + conv2(relu(N2(conv1(relu(N1(x))))))
        expected = x + b.conv2(F.relu(b.norm2(b.conv1(F.relu(b.norm1(x))))))
    torch.testing.assert_close(b(x), expected)


def test_resnet_is_2d_for_images():
    model = resnet(data="digits")
    assert isinstance(model.stem, torch.nn.Conv2d)
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


@pytest.mark.parametrize("norm", group_options("norm"))
def test_every_norm_builds_and_trains_a_step_in_the_resnet(norm):
    model = resnet(f"norm={norm}", "model.depth=1", "placement=post")
    x, y = torch.randn(4, 1, 40), torch.tensor([0, 1, 2, 3])
    F.cross_entropy(model(x), y).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("placement", ["sandwich", "res_post", "deepnorm", "lns", "mix", "peri"])
def test_other_placements_are_refused_with_the_reason(placement):
    with pytest.raises(
        UsageError,
        match="has no meaning in a ResNet basic block.*valid for model=resnet: post, pre",
    ):
        compose(tiny_resnet(f"placement={placement}"))


@pytest.mark.parametrize("data", ["tokens", "pysource"])
def test_resnet_refuses_token_data(data):
    with pytest.raises(UsageError, match="model=resnet cannot take"):
        compose(tiny_resnet(data=data))


@pytest.mark.slow
def test_a_resnet_run_trains(tmp_path):
    cfg = compose(tiny_resnet("placement=post", "norm=batchnorm", "model.depth=1"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
    assert outcome.run_id.startswith("resnet-batchnorm-post-")


def test_diagnostics_are_refused_for_the_resnet_whose_blocks_are_no_residual_units():
    with pytest.raises(UsageError, match="diagnostics=true records each residual unit"):
        compose(tiny_resnet("diagnostics=true"))


@pytest.mark.parametrize("norm", ["batchnorm", "groupnorm"])
@pytest.mark.parametrize("placement", ["post", "pre"])
def test_zero_init_last_norm_starts_every_block_as_the_identity(norm, placement):
    """model.zero_init_last_norm (Goyal et al. 2017; Wu & He's recipe): each block's last norm's
    gain is 0, so its residual branch adds nothing at the start (a v1 block returns relu(x), a
    v2 block x); the other norms keep gain 1."""
    model = resnet(f"norm={norm}", f"placement={placement}", "model.zero_init_last_norm=true")
    for block in model.blocks:
        assert torch.count_nonzero(block.norm2.weight) == 0
        assert torch.all(block.norm1.weight == 1)
        x = torch.randn(2, block.conv1.in_channels, 40)
        assert torch.allclose(block.eval()(x), F.relu(x) if placement == "post" else x)
    plain = resnet(f"norm={norm}")
    assert all(torch.all(block.norm2.weight == 1) for block in plain.blocks)


def test_zero_init_last_norm_off_keeps_earlier_run_ids():
    from normbench.store.rundir import run_id

    off = run_id(compose(tiny_resnet("model.zero_init_last_norm=false")))
    assert off == run_id(compose(tiny_resnet()))
    assert run_id(compose(tiny_resnet("model.zero_init_last_norm=true"))) != off
