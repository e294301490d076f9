"""How far a norm's output in bf16/fp16 is from the exact answer: the measurement behind the
precision study, taken on the norm alone, where accuracy after training would mix it with
everything else.

``norm_errors`` runs every built-in norm, in both layouts (and on padded tokens), on inputs
of a given activation scale, under autocast exactly as a model's forward runs it, with
``norm.fp32_stats`` on and off, and compares the output with a float64 run of the same module
(weights copied) on the same low-precision input. So the error is the norm's computation and
the rounding of its output, not the rounding of its input. Activation scales: ``offset``
inputs are N(0, 1) + s (mean/std = s), ``magnitude`` inputs N(0, s^2).

``fused_kernel_errors`` asks the same of PyTorch's fused kernels called directly on half
inputs. Measured on CPU (torch 2.13, x86; (16, 32, 2048) inputs, N(0, 1) + offset for offsets
0 to 1,000; ``ratio`` = error over that of the float32 computation rounded to the dtype):

- ``F.layer_norm``, ``F.group_norm`` and ``F.rms_norm`` accumulate in float32: ratio 1.00 in
  fp16 and bf16 at every offset, with or without a float32 affine. ``norm.fp32_stats`` cannot
  change them.
- ``F.batch_norm`` and ``F.instance_norm`` (batch_norm per sample) with float32 weight and
  bias, which is how normbench's BatchNorm and InstanceNorm call them under autocast: ratio
  1.00 as well (a float32 path). Without an affine (or with a half one) they take a
  reduced-precision path whose error grows with the offset: ratio 1.4-2.3 at offset 0, up to
  11 (batch_norm, fp16, offset 100: 3.9e-3) and 32 (instance_norm, fp16, offset 1,000:
  1.1e-2); instance_norm in bf16 reaches 1.9e-2.
- Under CPU autocast these kernels run in their input's dtype (a half input is not cast up).

So on CPU ``norm.fp32_stats`` matters only where normbench computes statistics itself:
SwitchNorm, ScaleNorm, masked InstanceNorm and AdaLN's condition (``scripts/precision_error.py``
prints the table; the fused kernels' rows change nothing when it is off). Where the rounded
input has lost its spread (``input_step`` above about 1: bf16 at mean/std >= 1,000, fp16 at
10,000) errors are measured on a different signal and say little. CUDA was not measured here
(no GPU in this session); ``scripts/precision_error.py --device cuda`` takes the same tables
there.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.layers.norms import NORMS, make_norm

PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Activations of the default models: the CNN's (batch, width, length) on mnist1d, the
# Transformer's (batch, tokens, width); "masked" pads the end of most sequences.
CASES = {"channels": (32, 32, 40), "tokens": (32, 16, 64), "masked": (32, 16, 64)}
KINDS = ("offset", "magnitude")
SCALES = (1.0, 10.0, 100.0, 1e3, 1e4)


def relative_error(output: Tensor, reference: Tensor, mask: Tensor | None = None) -> float:
    """Largest absolute error over the largest absolute reference value (real tokens only when
    ``mask`` is given); inf when the output is not finite."""
    if mask is not None:
        output, reference = output[mask], reference[mask]
    output, reference = output.double(), reference.double()
    if not torch.isfinite(output).all():
        return math.inf
    return ((output - reference).abs().max() / reference.abs().max()).item()


def input_step(low: Tensor) -> float:
    """The dtype's rounding step at the input's largest value, in units of the input's std:
    above 1 the rounded input no longer carries its spread (bf16 at mean/std = 1e4 rounds to
    multiples of 64), and an error measured on it says little. inf for an input that
    overflowed."""
    high = low.double()
    if not torch.isfinite(high).all():
        return math.inf
    return (torch.finfo(low.dtype).eps * high.abs().max() / high.std()).item()


def activations(
    case: str, kind: str, scale: float, generator: torch.Generator
) -> tuple[Tensor, Tensor | None]:
    """A float64 input of the case's shape at the given scale, and its mask (masked case)."""
    shape = CASES[case]
    z = torch.randn(shape, generator=generator, dtype=torch.float64)
    x = z + scale if kind == "offset" else z * scale
    mask = None
    if case == "masked":  # lengths 1..T, padding at the end as in data=tokens
        batch, tokens = shape[:2]
        lengths = torch.randint(1, tokens + 1, (batch,), generator=generator)
        mask = torch.arange(tokens) < lengths[:, None]
    return x, mask


def norm_error(
    name: str,
    case: str,
    precision: str,
    fp32_stats: bool,
    x: Tensor,
    mask: Tensor | None,
    device: torch.device,
) -> float:
    """Relative error of norm ``name`` (train mode, as constructed) on ``x`` held in
    ``precision`` under autocast, against its float64 twin on the same rounded input."""
    layout = "channels" if case == "channels" else "tokens"
    torch.manual_seed(0)
    features = x.shape[1 if layout == "channels" else 2]
    layer = make_norm(name, features, layout, fp32_stats=fp32_stats).to(device)
    reference = copy.deepcopy(layer).double()
    low = x.to(device=device, dtype=PRECISIONS[precision])
    mask = None if mask is None else mask.to(device)
    with torch.no_grad():
        expected = reference(low.double(), mask=mask)
        with torch.autocast(device.type, dtype=PRECISIONS[precision]):
            output = layer(low, mask=mask)
    return relative_error(output, expected, mask)


def available_devices() -> list[torch.device]:
    return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def norm_errors(
    norms: Iterable[str] | None = None,
    devices: Iterable[torch.device] | None = None,
    scales: Iterable[float] = SCALES,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per device, norm, case, precision, fp32_stats, kind and scale, with the
    relative error of the norm's output (``relative_error``). Every norm sees the same inputs.
    """
    norms = sorted(set(NORMS) - {"none"}) if norms is None else list(norms)
    rows = []
    for device in devices or available_devices():
        for kind in KINDS:
            for scale in scales:
                generator = torch.Generator().manual_seed(seed)
                inputs = {case: activations(case, kind, scale, generator) for case in CASES}
                for name in norms:
                    for case, (x, mask) in inputs.items():
                        for precision in PRECISIONS:
                            for fp32_stats in (True, False):
                                with warnings.catch_warnings():  # the unfused path: measured
                                    warnings.filterwarnings(
                                        "ignore", "Mismatch dtype between input and weight"
                                    )
                                    error = norm_error(
                                        name, case, precision, fp32_stats, x, mask, device
                                    )
                                rows.append(
                                    {
                                        "device": device.type,
                                        "norm": name,
                                        "case": case,
                                        "precision": precision,
                                        "fp32_stats": fp32_stats,
                                        "kind": kind,
                                        "scale": scale,
                                        "input_step": input_step(x.to(PRECISIONS[precision])),
                                        "error": error,
                                    }
                                )
    return pd.DataFrame(rows)


# Each fused kernel as (input, weight, bias) -> output; weight and bias per feature or None.
FUSED: dict[str, Callable[[Tensor, Tensor | None, Tensor | None], Tensor]] = {
    "layer_norm": lambda t, w, b: F.layer_norm(t, t.shape[-1:], w, b),
    "group_norm": lambda t, w, b: F.group_norm(t, 8, w, b),
    "batch_norm": lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True),
    "instance_norm": lambda t, w, b: F.instance_norm(t, weight=w, bias=b),
    "rms_norm": lambda t, w, b: F.rms_norm(t, t.shape[-1:], w),
}


def fused_kernel_errors(
    device: torch.device | str = "cpu",
    shape: tuple[int, ...] = (16, 32, 2048),
    offsets: Iterable[float] = (0.0, *SCALES),
    seed: int = 0,
) -> pd.DataFrame:
    """Each fused kernel called directly on a half input (N(0, 1) + offset, rounded to the
    dtype), without an affine (``weights`` none) and with a float32 one (weights 1, bias 0:
    how normbench's norms call them under autocast): its relative error against float64 on the
    same input (``error``), and that of the float32 computation rounded to the dtype
    (``float32_error``). A ``ratio`` of 1 means the half call is as good as float32."""
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for offset in offsets:
        x = torch.randn(shape, generator=generator, dtype=torch.float64) + offset
        for dtype_name, dtype in PRECISIONS.items():
            low = x.to(device=device, dtype=dtype)
            for op_name, op in FUSED.items():
                features = shape[-1] if op_name in ("layer_norm", "rms_norm") else shape[1]
                one, zero = (
                    torch.ones(features, device=device),
                    torch.zeros(features, device=device),
                )
                expected = op(low.double(), None, None)
                float32_error = relative_error(op(low.float(), None, None).to(dtype), expected)
                for weights, (w, b) in (("none", (None, None)), ("float32", (one, zero))):
                    with warnings.catch_warnings():  # "cannot dispatch to fused": measured here
                        warnings.simplefilter("ignore", UserWarning)
                        error = relative_error(op(low, w, b), expected)
                    rows.append(
                        {
                            "device": device.type,
                            "op": op_name,
                            "dtype": dtype_name,
                            "weights": weights,
                            "offset": offset,
                            "input_step": input_step(low),
                            "error": error,
                            "float32_error": float32_error,
                            "ratio": error / float32_error if float32_error else math.nan,
                        }
                    )
    return pd.DataFrame(rows)
