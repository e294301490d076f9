"""Weight Standardization as Qiao et al. publish it: exactly the convs and linears whose output
goes straight into a norm are standardized, in every model; where there are none it is refused."""

from __future__ import annotations

import pytest
import torch.fx as fx
from helpers import tiny
from torch import nn

from normbench.core.errors import UsageError
from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import build_model
from normbench.layers.norms import Norm
from normbench.layers.weight_std import StdConv1d, StdConv2d, StdLinear

WEIGHTS = (nn.Linear, nn.Conv1d, nn.Conv2d)


class LayerTracer(fx.Tracer):
    """Traces a model down to its norms and weight layers."""

    def is_leaf_module(self, module: nn.Module, name: str) -> bool:
        return isinstance(module, (Norm, *WEIGHTS)) or super().is_leaf_module(module, name)


def followed_by_norm(root: nn.Module, prefix: str = "") -> set[str]:
    """The weight layers of ``root`` whose every use is as a norm's input, found in its
    traced graph (not from how normbench built it)."""
    modules = dict(root.named_modules())
    found = set()
    for node in LayerTracer().trace(root).nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], WEIGHTS):
            continue
        users = list(node.users)
        if users and all(
            u.op == "call_module" and isinstance(modules[u.target], Norm) for u in users
        ):
            found.add(prefix + node.target)
    return found


def standardized(model: nn.Module) -> set[str]:
    return {
        name
        for name, m in model.named_modules()
        if isinstance(m, (StdConv1d, StdConv2d, StdLinear))
    }


def model_of(*overrides: str, data: str = "mnist1d") -> nn.Module:
    resnet = "model=resnet" in overrides
    composed = [o for o in tiny(*overrides, data=data) if not (resnet and "heads" in o)]
    cfg = compose(composed)
    return build_model(cfg, input_shape(cfg["data"]), 10)


@pytest.mark.parametrize(
    "overrides",
    [
        ("model=resnet", "placement=post"),
        ("model=resnet", "placement=pre"),
        ("model=cnn", "placement=res_post"),
        ("model=cnn", "placement=sandwich"),
    ],
)
@pytest.mark.parametrize("data", ["mnist1d", "digits"])
def test_ws_touches_exactly_the_convs_followed_by_a_norm(overrides, data):
    model = model_of(*overrides, "model.weight_std=true", "norm=groupnorm", data=data)
    followed = followed_by_norm(model)
    assert followed and standardized(model) == followed
    assert not standardized(model_of(*overrides, "norm=groupnorm", data=data))


@pytest.mark.parametrize("placement", ["res_post", "sandwich"])
def test_ws_in_the_transformer_touches_the_linears_a_norm_reads(placement):
    model = model_of(f"placement={placement}", "model.weight_std=true", "model.qk_norm=rmsnorm")
    followed = set().union(
        *(followed_by_norm(unit, f"units.{i}.") for i, unit in enumerate(model.units))
    )
    assert followed == {f"units.{i}.sublayer.{n}" for i in (0, 2) for n in ("proj",)} | {
        f"units.{i}.sublayer.fc2" for i in (1, 3)
    }
    assert standardized(model) == followed


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("model=cnn", "placement=pre"), "model=cnn with placement=pre none is"),
        (("model=cnn", "placement=post"), "model=cnn with placement=post none is"),
        (("model=cnn", "placement=deepnorm"), "valid: placement=res_post, sandwich, model=resnet"),
        (("placement=pre",), "model=transformer with placement=pre none is"),
        (("placement=lns",), "model=transformer with placement=lns none is"),
        (("model=resnet", "norm=none"), "norm=none has none"),
        (("model=cnn", "placement=res_post", "norm=none"), "norm=none has none"),
    ],
)
def test_ws_is_refused_where_no_layer_is_followed_by_a_norm(overrides, message):
    resnet = "model=resnet" in overrides
    composed = [
        o for o in tiny(*overrides, "model.weight_std=true") if not (resnet and "heads" in o)
    ]
    with pytest.raises(UsageError, match=message):
        compose(composed)
