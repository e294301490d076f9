"""Before any run is written: does the user's code build and give the shapes training needs?

A cheap check of the contract (docs/your-own-norm.md) for configs with plugins: the norm built
at width 8 in both layouts runs one forward pass and returns its input's shape; the model
built for the run's data runs one forward pass on a batch of two and returns one row of
logits per sample. What fails is one line naming the object and what was expected (a
UsageError: exit 2, nothing written). ``normbench check-norm`` checks a norm thoroughly;
an exception inside user code during training is a failed run, as for any run.

torch and the layers are imported only when a plugin is probed: a config without one (every
shipped option) is composed and checked, or refused, without importing torch, so that a typo,
``run --cfg``, a finished run and a sweep's plan answer in about a second.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable

from normbench.core.errors import UsageError
from normbench.data.datasets import describe
from normbench.experiment.budget import DEPTH_BUILT
from normbench.experiment.compose import compose
from normbench.experiment.options import PLUGIN_GROUPS


def compose_checked(overrides: Iterable[str] = ()) -> dict:
    """``compose``, then, when the config names a plugin, the probe below: the config a run
    trains (``normbench run``, every job of a sweep, ``normbench.api.compose``)."""
    cfg = compose(overrides)
    if any("_target_" in cfg[group] for group in PLUGIN_GROUPS):
        probe_plugins(cfg)
    return cfg


def probe_plugins(cfg: dict) -> None:
    """Probe the norm (when it is a plugin) and the model (when the norm, the model or the data
    is one), once per process for each distinct combination."""
    sections = {group: cfg[group] for group in ("norm", "model", "data", "placement")}
    _probe(json.dumps(sections, sort_keys=True))


@functools.cache
def _probe(sections_json: str) -> None:
    import torch

    cfg = json.loads(sections_json)
    with torch.random.fork_rng(), torch.no_grad():  # the caller's random state stays as it was
        torch.manual_seed(0)
        if "_target_" in cfg["norm"]:
            probe_norm(cfg["norm"])
        probe_model(cfg)


def probe_norm(norm: dict) -> None:
    from torch import Tensor, nn

    from normbench.layers.conformance import FEATURES, LAYOUTS, sample
    from normbench.layers.norms import norm_factory

    bound = norm_factory(norm)
    cls, options = bound.cls, bound.options
    what = f"norm={norm['name']}"
    for layout in LAYOUTS:
        call = f"{norm['_target_']}({FEATURES}, {layout!r}{_keywords(options)})"
        try:
            built = cls(FEATURES, layout, **options)
        except Exception as err:  # the user's constructor: any failure is theirs
            raise UsageError(f"{what}: {call} raised {_error(err)}") from None
        if not isinstance(built, nn.Module):
            raise UsageError(f"{what}: {call} built a {type(built).__name__}, not an nn.Module")
        x, mask = sample(layout)
        try:
            y = built(x, mask=mask)
        except Exception as err:
            raise UsageError(
                f"{what}: forward(x {tuple(x.shape)}, mask=...) in the {layout} layout raised "
                f"{_error(err)}"
            ) from None
        if not isinstance(y, Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise UsageError(
                f"{what}: forward returned {got} for an input of shape {tuple(x.shape)} in the "
                f"{layout} layout; a norm returns its input's shape"
            )


def probe_model(cfg: dict) -> None:
    """The model for the run's data: one forward pass on a batch of two samples (zeros, or
    token id 1 everywhere), in training mode as its first step will be. A model deeper than
    ``DEPTH_BUILT`` (a user's model: the shipped ones stop at schema.MAX_DEPTH) is probed at
    that depth: the shapes a layer gives do not depend on how many follow it, and building a
    module per layer takes time in proportion to the depth (10^7 layers held the probe for
    hours); the run itself builds the depth asked for."""
    import torch
    from torch import Tensor

    from normbench.layers.models import build_model

    depth = cfg["model"].get("depth")
    if isinstance(depth, int) and not isinstance(depth, bool) and depth > DEPTH_BUILT:
        cfg = {**cfg, "model": {**cfg["model"], "depth": DEPTH_BUILT}}
    data = describe(cfg["data"])
    what = f"model={cfg['model']['name']} with norm={cfg['norm']['name']}"
    try:
        model = build_model(cfg, data.input_shape, data.num_classes, data.vocab_size).train()
    except Exception as err:
        raise UsageError(f"{what}: building the model raised {_error(err)}") from None
    if data.kind in ("tokens", "bytes"):
        x, mask = torch.ones(2, *data.input_shape, dtype=torch.long), None
        if data.kind == "tokens":
            mask = torch.ones(2, *data.input_shape, dtype=torch.bool)
    else:
        x, mask = torch.zeros(2, *data.input_shape), None
    try:
        logits = model(x, mask=mask)
    except Exception as err:
        raise UsageError(
            f"{what}: forward on a batch of shape {tuple(x.shape)} raised {_error(err)}"
        ) from None
    expected = (
        (2, *data.input_shape, data.num_classes) if data.kind == "bytes" else (2, data.num_classes)
    )
    if not isinstance(logits, Tensor) or tuple(logits.shape) != expected:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise UsageError(
            f"{what}: returned logits of shape {got} for a batch of 2; expected {expected} "
            f"(batch, num_classes={data.num_classes})"
        )


def _keywords(options: dict) -> str:
    return "".join(f", {key}={value!r}" for key, value in options.items())


def _error(err: Exception) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:200]
