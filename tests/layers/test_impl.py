"""norm.impl: the module as written, PyTorch's fused kernel, torch.compile of the module. The
three compute the same norm: outputs and gradients agree within TOLERANCE (float32)."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny

from normbench.core.errors import UsageError
from normbench.experiment.compose import compose
from normbench.layers.keys import NORM_TABLE
from normbench.layers.norms import make_norm
from normbench.store.rundir import run_id

# float32: the fused kernels and the modules take their statistics in other orders, so
# results differ in their last bits (about 1e-7 relative); 1e-5 leaves two orders of margin.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
FUSED = sorted(name for name, entry in NORM_TABLE.items() if entry.fused)
SHAPES = {"channels": (4, 8, 10), "tokens": (4, 6, 8)}


def outputs_and_gradients(name: str, impl: str, layout: str) -> tuple[torch.Tensor, ...]:
    """A norm's output and the gradients of its input and parameters on one seeded input
    (its parameters moved off their initial values, so the affine is exercised), and its
    buffers after the step."""
    torch.manual_seed(0)
    norm = make_norm(name, 8, layout, impl=impl, groups=4)
    with torch.no_grad():
        for p in norm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = (torch.randn(SHAPES[layout]) * 3 + 1).requires_grad_()
    y = norm(x)
    (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
    grads = [p.grad for p in norm.parameters()]
    return (y.detach(), x.grad, *grads, *norm.buffers())


@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("name", FUSED)
def test_the_fused_kernel_computes_the_module_s_norm(name, layout):
    module = outputs_and_gradients(name, "module", layout)
    fused = outputs_and_gradients(name, "fused", layout)
    assert len(module) == len(fused)
    for a, b in zip(module, fused, strict=True):
        torch.testing.assert_close(b, a, **TOLERANCE)


def test_the_four_norms_with_a_fused_kernel():
    assert FUSED == ["batchnorm", "groupnorm", "layernorm", "rmsnorm"]


def test_implementations_share_parameter_names():
    """A checkpoint of one implementation loads into another (compiled in place: no
    _orig_mod prefix)."""
    keys = {
        impl: set(make_norm("layernorm", 8, impl=impl).state_dict())
        for impl in ("module", "fused", "compiled")
    }
    assert keys["module"] == keys["fused"] == keys["compiled"] == {"weight", "bias"}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "layout"), [("rmsnorm", "tokens"), ("dyt", "channels")])
def test_the_compiled_module_computes_the_module_s_norm(name, layout):
    module = outputs_and_gradients(name, "module", layout)
    compiled = outputs_and_gradients(name, "compiled", layout)
    for a, b in zip(module, compiled, strict=True):
        torch.testing.assert_close(b, a, **TOLERANCE)


def test_a_norm_without_a_fused_kernel_is_refused_naming_those_it_has():
    with pytest.raises(
        UsageError,
        match=r"^norm.impl=fused: norm=dyt has no fused kernel; valid: module, compiled$",
    ):
        compose(tiny("norm=dyt", "norm.impl=fused"))
    with pytest.raises(ValueError, match="valid: module, compiled"):
        make_norm("scalenorm", 8, impl="fused")


@pytest.mark.parametrize(
    ("overrides", "valid"),
    [
        (("norm.ghost_batch=4",), "norm.ghost_batch=null, or norm.impl=module"),
        (("data=tokens", "data.num_samples=400"), "norm.impl=module, or norm.mask_padding=false"),
    ],
)
def test_fused_batchnorm_refuses_what_one_call_cannot_take(overrides, valid):
    with pytest.raises(UsageError, match=valid):
        compose(tiny("norm=batchnorm", "norm.impl=fused", *overrides))


def test_the_module_keeps_run_ids_and_the_others_are_other_runs():
    """norm.impl=module is the id every run had before the key (the README's first run)."""
    readme = ["model=cnn", "norm=batchnorm", "train.max_steps=300", "threads=1"]
    assert run_id(compose(readme)) == "cnn-batchnorm-pre-fp32-b32-s0-228e94e2"
    assert run_id(compose([*readme, "norm.impl=module"])) == run_id(compose(readme))
    ids = {run_id(compose([*readme, f"norm.impl={impl}"])) for impl in ("fused", "compiled")}
    assert len(ids) == 2 and run_id(compose(readme)) not in ids


@pytest.mark.slow
def test_a_run_trains_with_the_fused_kernel_as_with_the_module(tmp_path):
    """End to end: the Transformer with LayerNorm trains to the same losses (within float32's
    reordering) whichever implementation computes its norms."""
    from normbench.training.run import run_experiment

    losses = {}
    for impl in ("module", "fused"):
        cfg = compose(tiny("norm=layernorm", f"norm.impl={impl}"))
        outcome = run_experiment(cfg, tmp_path / impl, progress=False)
        assert outcome.status == "complete"
        losses[impl] = (outcome.summary["final_val_loss"], outcome.summary["train_loss_auc"])
    assert losses["fused"] == pytest.approx(losses["module"], rel=1e-4)
