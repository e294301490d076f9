"""The activation statistics of diagnostics=true: excess kurtosis against scipy, the attention
sink on hand-built attention, the hooks' removal, and a diagnosed run's rows at step 0."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny
from scipy import stats

from normbench.data.datasets import input_shape
from normbench.experiment.compose import compose
from normbench.layers.models import Attention, build_model
from normbench.store.rundir import RunDir
from normbench.training.activations import (
    PROBE_SAMPLES,
    attention_probabilities,
    attention_sink,
    chunked_sink,
    excess_kurtosis,
    max_abs,
    measure,
)
from normbench.training.run import run_experiment
from normbench.training.trainer import Trainer


def test_excess_kurtosis_is_scipys_per_sample_over_its_real_values():
    generator = torch.Generator().manual_seed(0)
    x = torch.distributions.StudentT(5.0).sample((3, 7, 4))  # heavy tails: kurtosis > 0
    x[1, :, 2] *= 20  # one outlier feature
    real = torch.ones(3, 7, dtype=torch.bool)
    real[0, 5:] = False  # padded tokens: their values are left out
    x[0, 5:] = torch.randn(2, 4, generator=generator) * 1e3
    expected = [stats.kurtosis(x[i][real[i]].double().numpy().ravel()) for i in range(3)]
    assert excess_kurtosis(x, real).tolist() == pytest.approx(expected, rel=1e-4)
    unmasked = [stats.kurtosis(x[i].double().numpy().ravel()) for i in range(3)]
    assert excess_kurtosis(x).tolist() == pytest.approx(unmasked, rel=1e-4)


def test_excess_kurtosis_does_not_overflow_on_massive_activations():
    """A value of 1e12 has a fourth power past float32's range; the kurtosis is still scipy's
    (one spike among n values: n - 2 + 1/(n - 1) - 3 in the limit)."""
    x = torch.randn(1, 2, 64).abs()
    x[0, 0, 0] = 1e12
    expected = stats.kurtosis(x.double().numpy().ravel())
    assert math.isfinite(expected) and expected > 100
    assert excess_kurtosis(x).item() == pytest.approx(expected, rel=1e-4)


def test_constant_samples_have_no_kurtosis_and_max_abs_skips_padding():
    x = torch.full((2, 3, 4), 2.0)
    assert excess_kurtosis(x).isnan().all()
    x[1, 2] = -50.0
    real = torch.tensor([[True, True, True], [True, True, False]])
    assert max_abs(x, real) == 2.0 and max_abs(x) == 50.0


def test_attention_sink_on_a_hand_built_pattern():
    """Two heads, three positions. The first query (row 0) is left out; the rest weigh the
    first key 0.5, 0.1 (head 0) and 0.9, 0.3 (head 1): mean 0.45."""
    weights = torch.tensor(
        [
            [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.1, 0.2, 0.7]],
            [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.3, 0.3, 0.4]],
        ]
    )[None]
    assert attention_sink(weights) == pytest.approx(0.45)
    padded = torch.tensor([[True, True, False]])  # the third query is padding
    assert attention_sink(weights, padded) == pytest.approx((0.5 + 0.9) / 2)
    assert math.isnan(attention_sink(weights[..., :1, :1]))  # one position: no query left


@pytest.mark.parametrize("causal", [False, True])
def test_the_sink_in_chunks_of_samples_is_the_sink_of_the_whole_batch(causal):
    """However few weights a chunk may hold (here one sample's at a time, unequal padding),
    the mean over every (sample, head, query) is the one formed at once."""
    torch.manual_seed(0)
    q, k = torch.randn(5, 2, 6, 4) * 2, torch.randn(5, 2, 6, 4) * 2
    real = torch.arange(6)[None, :] < torch.tensor([6, 2, 4, 1, 5])[:, None]
    real = None if causal else real
    whole = attention_sink(attention_probabilities(q, k, real, causal, None), real)
    assert chunked_sink(q, k, real, causal, None, chunk_elements=2 * 6 * 6) == pytest.approx(
        whole, rel=1e-6
    )


@pytest.mark.parametrize("causal", [False, True])
def test_attention_probabilities_are_the_weights_attention_applies(causal):
    """Weights times values through the output projection give the module's own output:
    the probabilities are those scaled dot-product attention formed (padding, causality)."""
    torch.manual_seed(0)
    attention = Attention(8, 2, torch.nn.Linear, causal=causal, qk_norm="rmsnorm")
    x = torch.randn(3, 5, 8)
    real = (
        None
        if causal
        else torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
    )
    with torch.no_grad():
        q, k, v = attention.queries_keys_values(x)
        weights = attention_probabilities(q, k, real, causal, attention.scale)
        mixed = (weights @ v).transpose(1, 2).reshape(3, 5, 8)
        rebuilt, output = attention.proj(mixed), attention(x, mask=real)
    assert weights.sum(-1).numpy() == pytest.approx(np.ones((3, 2, 5)))
    assert rebuilt.numpy() == pytest.approx(output.numpy(), abs=1e-5)


@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_measure_is_the_hooked_outputs_and_leaves_the_model_as_it_was(model):
    """Per unit, the statistics of the outputs a hand-made hook sees in an eval-mode forward;
    afterwards no hook is left, the model is back in train mode, its buffers (BatchNorm's
    running statistics) and the random generator untouched."""
    torch.manual_seed(0)
    cfg = compose(tiny(f"model={model}", "norm=batchnorm", "model.depth=2"))
    built = build_model(cfg, input_shape(cfg["data"]), 10).train()
    x = torch.randn(6, 1, 40)
    outputs = {}
    handles = [
        module.register_forward_hook(lambda m, a, out, key=(i, kind): outputs.update({key: out}))
        for i, unit in enumerate(built.units)
        for kind, module in (("stream", unit), ("sublayer", unit.sublayer))
    ]
    with torch.no_grad():
        built.eval()(x)
    for handle in handles:
        handle.remove()
    built.train()
    buffers = {name: b.clone() for name, b in built.named_buffers()}
    rng = torch.get_rng_state()
    measured = measure(built, list(built.units), (x, None))
    for i in range(len(built.units)):
        for kind in ("stream", "sublayer"):
            values = outputs[(i, kind)].double().numpy().reshape(6, -1)
            prefix = "resid" if kind == "stream" else "sublayer"
            kurtosis = np.mean([stats.kurtosis(row) for row in values])
            assert getattr(measured[i], f"{prefix}_kurtosis") == pytest.approx(kurtosis, rel=1e-4)
            assert getattr(measured[i], f"{prefix}_max_abs") == pytest.approx(
                np.abs(values).max(), rel=1e-6
            )
        has_attention = model == "transformer" and i % 2 == 0
        assert math.isnan(measured[i].attn_sink) != has_attention
    assert built.training and not any(m._forward_hooks for m in built.modules())
    assert all(torch.equal(b, buffers[name]) for name, b in built.named_buffers())
    assert torch.equal(torch.get_rng_state(), rng)


def test_hooks_are_removed_when_the_forward_fails():
    cfg = compose(tiny("model=cnn"))
    built = build_model(cfg, input_shape(cfg["data"]), 10).train()
    with pytest.raises(RuntimeError):
        measure(built, list(built.units), (torch.randn(2, 3, 40), None))  # 3 channels, not 1
    assert built.training and not any(m._forward_hooks for m in built.modules())


def test_step_zero_is_measured_at_initialisation_on_the_first_validation_samples(tmp_path):
    """The step-0 rows of a run on padded tokens are the model at initialisation on its first
    PROBE_SAMPLES (64) validation samples; the rows of the last step are not (it trained)."""
    cfg = compose(tiny("diagnostics=true", data="tokens"))
    trainer = Trainer(cfg, torch.device("cpu"), RunDir(tmp_path / "hand", "r"), progress=False)
    trainer.setup()
    val = trainer.tensors["val"]
    batch = (val["x"][:PROBE_SAMPLES], val["mask"][:PROBE_SAMPLES])
    expected = measure(trainer.model, list(trainer.model.units), batch)
    outcome = run_experiment(cfg, tmp_path / "runs", progress=False)
    frame = pd.read_parquet(outcome.path / "diagnostics.parquet").sort_values(["step", "unit"])
    first, last = frame[frame["step"] == 0], frame[frame["step"] == frame["step"].max()]
    for column in ("resid_kurtosis", "resid_max_abs", "sublayer_kurtosis", "attn_sink"):
        values = [getattr(expected[i], column) for i in range(len(expected))]
        assert first[column].tolist() == pytest.approx(values, rel=1e-5, nan_ok=True)
        assert last[column].tolist() != pytest.approx(values, rel=1e-5, nan_ok=True)
    attention = first["sublayer"] == "attention"
    assert first.loc[attention, "attn_sink"].between(0, 1).all()
    assert first.loc[~attention, "attn_sink"].isna().all()


@pytest.mark.parametrize("data", ["pysource", "tokens"])
def test_diagnostics_leave_a_transformers_training_bit_identical(data, tmp_path):
    """With the attention sink and the eval-mode forward on the fixed batch: the same metrics
    to the bit, with diagnostics on and off (padded tokens and a causal language model;
    BatchNorm, whose training differs in eval mode)."""
    plain = run_experiment(
        compose(tiny("norm=batchnorm", data=data)), tmp_path / "a", progress=False
    )
    diagnosed = run_experiment(
        compose(tiny("norm=batchnorm", "diagnostics=true", data=data)),
        tmp_path / "b",
        progress=False,
    )
    a = pd.read_parquet(plain.path / "metrics.parquet").drop(columns="elapsed_s")
    b = pd.read_parquet(diagnosed.path / "metrics.parquet").drop(columns="elapsed_s")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert plain.summary["test_loss"] == diagnosed.summary["test_loss"]
    assert pd.read_parquet(diagnosed.path / "diagnostics.parquet")["attn_sink"].notna().any()


@pytest.mark.slow
def test_run_and_report_diagnostics_show_the_activations_at_80_and_100_columns(tmp_path):
    """normbench run with diagnostics=true (a few steps of the Transformer, two placements),
    then normbench report --diagnostics: an activations table per diagnostics table, every
    line within the terminal's width, the output's kurtosis and largest |x| at 80 columns,
    every column at 100."""
    from typer.testing import CliRunner

    from normbench.cli import app

    runner, runs = CliRunner(), tmp_path / "runs"
    for placement in ("pre", "post"):
        overrides = tiny(f"placement={placement}", "diagnostics=true")
        result = runner.invoke(app, ["run", "--runs-dir", str(runs), *overrides])
        assert result.exit_code == 0, result.output
    for width, headers in ((80, ["kurt out", "max|out|"]), (100, ["kurt stream", "sink"])):
        result = runner.invoke(
            app, ["report", str(runs), "--diagnostics"], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        assert "Activations at initialisation (step 0" in result.output
        assert "Activations at the last evaluation" in result.output
        assert max(len(line) for line in result.output.splitlines()) <= width
        table = result.output.split("Activations at the last evaluation")[0].splitlines()
        header = next(line for line in reversed(table) if "kurt out" in line)
        assert all(name in header for name in ["placement", *headers])


def test_runs_diagnosed_before_the_activation_statistics_get_no_activations_table():
    """The report reads an older run's missing columns as NaN: no activations table for it."""
    from normbench.report.activations_terminal import has_activations

    older = pd.DataFrame({"unit": [0, 1], "resid_rms": [1.0, 2.0]})
    assert not has_activations(older)
    assert not has_activations(older.assign(resid_kurtosis=math.nan, attn_sink=math.nan))
    assert has_activations(older.assign(resid_kurtosis=[math.nan, 0.5]))
