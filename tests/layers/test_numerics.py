"""The precision measurement: errors against float64, what norm.fp32_stats changes, and which
fused kernels are float32-exact on half inputs (CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.layers.numerics import fused_kernel_errors, norm_errors, relative_error

CPU = [torch.device("cpu")]


def test_relative_error_is_the_largest_error_over_the_largest_reference():
    reference = torch.tensor([[1.0, -4.0], [2.0, 0.0]])
    output = reference + torch.tensor([[0.1, 0.0], [0.0, -0.2]])
    assert relative_error(output, reference) == pytest.approx(0.2 / 4)
    mask = torch.tensor([True, False])  # only the first row counts
    assert relative_error(output, reference, mask) == pytest.approx(0.1 / 4)
    assert relative_error(output / 0, reference) == math.inf


def test_with_float32_statistics_only_the_output_rounding_is_left():
    """Half a rounding step of the largest output: 2^-8 (bf16), 2^-11 (fp16). Without float32
    statistics, SwitchNorm's squares overflow fp16 once |x| passes 256; LayerNorm's fused
    kernels give the same output either way (to a last-bit difference)."""
    frame = norm_errors(norms=["switchnorm", "layernorm"], devices=CPU, scales=(100.0,))
    assert len(frame) == 2 * 3 * 2 * 2 * 2  # norms, cases, precisions, fp32_stats, kinds
    on = frame[frame["fp32_stats"]]
    bound = on["precision"].map({"bf16": 2.0**-8, "fp16": 2.0**-11})
    assert (on["error"] <= bound * 1.01).all()
    off = frame[~frame["fp32_stats"]].set_index(["norm", "case", "precision", "kind"])
    assert off.loc[("switchnorm", "channels", "fp16", "magnitude"), "error"] == math.inf
    keys = ["norm", "case", "precision", "kind"]
    layernorm = frame[frame["norm"] == "layernorm"].pivot_table(
        index=keys, columns="fp32_stats", values="error"
    )
    assert layernorm[True].to_numpy() == pytest.approx(layernorm[False].to_numpy(), rel=0.01)


def test_fused_kernels_with_a_float32_affine_are_as_good_as_float32_on_cpu():
    frame = fused_kernel_errors("cpu", shape=(4, 32, 512), offsets=(0.0, 100.0))
    exact = (frame["weights"] == "float32") | frame["op"].isin(
        ["layer_norm", "group_norm", "rms_norm"]
    )
    assert frame.loc[exact, "ratio"].between(0.9, 1.1).all()
    # batch_norm per sample without an affine: a reduced-precision path
    half_path = frame.query("op == 'instance_norm' and weights == 'none' and offset == 100")
    assert (half_path["ratio"] > 2).all()


def test_measuring_the_unfused_path_warns_nothing():
    """findings' precision section measures RMSNorm's unfused low-precision path: torch's
    "cannot dispatch to fused" warning is about that path, not for the reader."""
    import warnings

    from normbench.layers.numerics import norm_errors

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert len(norm_errors(norms=["rmsnorm"], scales=(1.0,))) > 0
