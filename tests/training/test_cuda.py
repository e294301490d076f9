"""CUDA: the same norms, runs and precisions on a GPU. Skipped where there is none (CI); run
on a GPU machine with `python -m pytest tests/test_cuda.py`."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny

from normbench.experiment.compose import compose
from normbench.layers.norms import NORMS, make_norm
from normbench.store.rundir import RunDir, run_id
from normbench.training.run import resolve_device, run_experiment
from normbench.training.trainer import Trainer, Window

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

C = 16
SHAPES = {"channels": (8, C, 12), "tokens": (8, 10, C)}
CUDA = torch.device("cuda")


def padded_mask(n: int, t: int) -> torch.Tensor:
    mask = torch.ones(n, t, dtype=torch.bool)
    mask[0, 4:] = False
    mask[3, 1:] = False
    return mask


def twin_layers(name: str, layout: str):
    """The same norm (same random parameters) on the CPU and on the GPU."""
    torch.manual_seed(0)
    cpu = make_norm(name, C, layout, groups=4)
    with torch.no_grad():
        for p in cpu.parameters():
            p.add_(torch.rand_like(p) * 0.1)
    gpu = make_norm(name, C, layout, groups=4).to(CUDA)
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu


@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_every_norm_gives_the_cpu_answer_and_gradients_on_cuda(name, layout):
    cpu, gpu = twin_layers(name, layout)
    x = torch.randn(*SHAPES[layout]) * 3 + 1
    mask = padded_mask(*SHAPES[layout][:2]) if layout == "tokens" else None
    outputs, grads = [], []
    for layer, device in ((cpu, "cpu"), (gpu, CUDA)):
        xd = x.to(device, copy=True).requires_grad_()
        y = layer(xd, mask=None if mask is None else mask.to(device))
        (y * torch.linspace(-1, 1, y.numel(), device=device).view_as(y)).sum().backward()
        outputs.append(y.detach().cpu())
        grads.append([xd.grad.cpu()] + [p.grad.cpu() for p in layer.parameters()])
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)
    for gpu_grad, cpu_grad in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(gpu_grad, cpu_grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["channels", "tokens"])
@pytest.mark.parametrize("name", sorted(set(NORMS) - {"none"}))
def test_statistics_stay_float32_under_cuda_autocast(name, layout, dtype):
    """A large offset and small spread: float16 statistics would lose the variance."""
    _, gpu = twin_layers(name, layout)
    x = (torch.randn(*SHAPES[layout], device=CUDA) * 0.5 + 60).to(dtype)
    with torch.no_grad():
        reference = gpu(x.float()).to(dtype)
        with torch.autocast("cuda", dtype=dtype):
            y = gpu(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, reference, rtol=0, atol=0)


def test_device_auto_picks_cuda():
    assert resolve_device("auto").type == "cuda"


@pytest.mark.parametrize("model", ["transformer", "cnn"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_run_trains_on_cuda_in_every_precision(model, precision, tmp_path):
    cfg = compose(tiny(f"model={model}", f"precision={precision}", "device=cuda"))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "complete", outcome.error
    meta = json.loads((outcome.path / "meta.json").read_text())
    assert meta["device"].startswith("cuda")
    assert 0.0 <= outcome.summary["test_acc"] <= 1.0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("norm", ["layernorm", "batchnorm", "switchnorm"])
def test_training_steps_between_logs_never_wait_for_the_gpu(norm, precision, tmp_path):
    """No host synchronisation in a step that does not log: CUDA's sync debug mode turns any
    device-to-host wait into an error. Not fp16: it reads the loss scale once per step, so
    that a step GradScaler skips does not advance the learning-rate schedule."""
    cfg = compose(tiny(f"norm={norm}", f"precision={precision}", "device=cuda"))
    run = RunDir(tmp_path, run_id(cfg))
    trainer = Trainer(cfg, CUDA, run, progress=False)
    trainer.setup()
    window, batches = Window(CUDA), trainer.batches()
    x, y, mask = next(batches)
    trainer.step(x, y, mask, want_grad_norm=False)  # first step: lazy initialisation may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            x, y, mask = next(batches)
            loss, logits, _ = trainer.step(x, y, mask, want_grad_norm=False)
            window.add(loss, logits, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert window.steps == 3
