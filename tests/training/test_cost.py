"""What a run's steps cost (normbench.training.cost): counted without changing the training,
recorded in the summary, never in the run id."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny

from normbench.experiment.compose import compose
from normbench.store.rundir import RunDir, run_id
from normbench.training import cost
from normbench.training.run import run_experiment
from normbench.training.trainer import Trainer

COST_KEYS = {
    "matmul_flops_per_step",
    "saved_bytes_per_step",
    "peak_memory_bytes",
    "step_s_median",
    "step_s_iqr",
    "timed_steps",
    "examples_per_s",
    "tokens_per_s",
    "load_start",
    "load_end",
    "cpu_count",
}


def test_flops_are_the_matrix_products_of_forward_and_backward():
    """A linear layer on (N, I) inputs that need no gradient: 2·N·I·O FLOPs forward and as
    many for the weight's gradient; the bias, the softmax and the loss are not counted."""
    n, i, o = 8, 16, 4
    layer = torch.nn.Linear(i, o)
    x, y = torch.randn(n, i), torch.randint(o, (n,))
    flops, _ = cost.count_step(layer, lambda: F.cross_entropy(layer(x), y), torch.device("cpu"))
    assert flops == 2 * (2 * n * i * o)


def test_saved_bytes_count_each_storage_once_and_leave_parameters_out():
    """exp saves its result; sin of a view of that result saves the same storage (once);
    x * p saves x and the parameter p (left out): 2 × 1,000 float32s."""
    p = torch.nn.Parameter(torch.randn(1000))
    model = torch.nn.ParameterList([p])
    x = torch.randn(1000, requires_grad=True)

    def loss() -> torch.Tensor:
        e = x.exp()
        return e.view(10, 100).sin().sum() + (x * p).sum()

    _, saved = cost.count_step(model, loss, torch.device("cpu"))
    assert saved == 2 * 1000 * 4


def test_counting_a_step_changes_nothing_the_training_reads(tmp_path):
    """After the counting step the parameters, running statistics, gradients, random number
    generator and data order are bit for bit as before (BatchNorm's running statistics move
    in any train-mode forward: they must be put back)."""
    cfg = compose(tiny("norm=batchnorm", "model=cnn"))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path, run_id(cfg)), progress=False)
    trainer.setup()

    def state() -> tuple:
        model = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        grads = [p.grad for p in trainer.model.parameters()]
        return model, grads, torch.get_rng_state(), trainer.data_order.state_dict()

    before = state()
    meter = cost.StepCost.attach(trainer)
    after = state()
    assert meter.flops > 0 and meter.saved > 0
    assert before[0].keys() == after[0].keys()
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert before[1] == after[1] == [None] * len(before[1])
    assert torch.equal(before[2], after[2])
    assert torch.equal(before[3]["generator"], after[3]["generator"])
    assert before[3]["position"] == after[3]["position"] == 0
    assert trainer.data_order.order is None  # the first epoch's permutation not drawn yet


def test_a_run_with_its_cost_counted_trains_as_one_without(tmp_path, monkeypatch):
    """The metrics of a run are bit for bit those of the same run without the counting step
    (the control: StepCost.count replaced by a method that does nothing)."""
    cfg = compose(tiny("norm=batchnorm", "model=cnn"))
    counted = run_experiment(cfg, tmp_path / "a", progress=False)
    monkeypatch.setattr(cost.StepCost, "count", lambda self, trainer: None)
    uncounted = run_experiment(cfg, tmp_path / "b", progress=False)
    frames = [RunDir(o.path.parent, o.run_id).read_metrics() for o in (counted, uncounted)]
    assert frames[0].drop(columns="elapsed_s").equals(frames[1].drop(columns="elapsed_s"))
    assert counted.summary["matmul_flops_per_step"] > 0
    assert uncounted.summary["matmul_flops_per_step"] is None


@pytest.mark.parametrize("data", ["mnist1d", "pysource"])
def test_a_run_records_its_cost_in_the_summary(data, tmp_path):
    """Every cost key in meta.json's summary: step times over the steps after the warm-up,
    throughput from the median, tokens per second for sequences only."""
    model = "model=cnn" if data == "mnist1d" else "model=transformer"
    cfg = compose(tiny(model, "train.max_steps=12", data=data))
    outcome = run_experiment(cfg, tmp_path, progress=False)
    summary = json.loads((outcome.path / "meta.json").read_text())["summary"]
    assert summary.keys() >= COST_KEYS
    assert summary["timed_steps"] == 12 - cost.WARMUP_STEPS
    assert summary["matmul_flops_per_step"] > 0 and summary["saved_bytes_per_step"] > 0
    assert summary["step_s_iqr"] >= 0 and 0 < summary["step_s_median"] < summary["train_s"]
    assert summary["examples_per_s"] == pytest.approx(cfg["batch_size"] / summary["step_s_median"])
    assert summary["peak_memory_bytes"] is None  # CPU
    if data == "pysource":
        context = cfg["data"]["context"]
        assert summary["tokens_per_s"] == pytest.approx(summary["examples_per_s"] * context)
    else:
        assert summary["tokens_per_s"] is None


def test_recording_cost_leaves_run_ids_as_they_were():
    """Ids computed before cost was recorded (the README's first run, and two Transformer
    defaults): the same configs still map to them."""
    assert run_id(compose(["model=cnn", "norm=batchnorm", "train.max_steps=300", "threads=1"])) == (
        "cnn-batchnorm-pre-fp32-b32-s0-228e94e2"
    )
    assert run_id(compose(["model=transformer", "norm=layernorm"])) == (
        "transformer-layernorm-pre-fp32-b32-s0-5c3bb75c"
    )
    assert run_id(compose(["model=transformer", "norm=dyt"])) == (
        "transformer-dyt-pre-fp32-b32-s0-06bfdaf2"
    )


def test_the_cost_is_read_with_the_runs_and_null_for_runs_made_before(tmp_path):
    """normbench.api.runs (through the index) holds the cost keys: numbers for a run that
    recorded them, NaN for one made before (no such keys in its summary)."""
    from helpers import make_run

    from normbench.api import runs

    cfg = compose(tiny("norm=layernorm", "model=cnn", "train.max_steps=9"))
    run_experiment(cfg, tmp_path, progress=False)
    make_run(tmp_path, ["norm=batchnorm", "seed=3"])  # an earlier run, without them
    table = runs(tmp_path).set_index("seed")
    for key in COST_KEYS - {"peak_memory_bytes", "tokens_per_s", "cpu_count"}:
        assert table.loc[0, key] >= 0, key  # a number (NaN fails)
        assert math.isnan(table.loc[3, key]), key
