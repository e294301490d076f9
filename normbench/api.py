"""normbench's public API. Names here keep their meaning across versions; the rest of normbench
may change (docs/design.md lists them).

Configs and models:

- ``compose(overrides)``: the validated, resolved config of one run, as ``normbench run
  --cfg`` shows it (a plain dict); bad input raises ``UsageError`` with the CLI's one line.
- ``build_model(overrides)``: the model exactly as ``normbench run`` builds it at that seed,
  before training. Two configs that differ in the norm share every other initial weight.

Your norm: ``Norm(num_features, layout, **options)``, an ``nn.Module`` whose
``forward(x, mask=None, cond=None)`` takes channels (N, C, *S) or tokens (N, T, D) with a
padding mask (N, T), True at real tokens, and returns x's shape and dtype. Subclass ``Norm``
to have your statistics computed in float32 under bf16/fp16 autocast (override
``normalize(x, mask, cond)``); ``masked_moments`` and ``feature_view`` are the helpers the
shipped norms use. ``normbench check-norm`` tells whether a norm keeps the contract.

Your model: ``build(cfg, make_norm, input_shape, num_classes, **your_keys)`` returns an
``nn.Module`` with ``forward(x, mask=None) -> logits (N, num_classes)``. ``make_norm(width,
layout)`` builds the run's norm (``NormFactory``); ``ResidualUnit`` places it around any
sublayer as the run's placement (``cfg["placement"]["name"]``, one of ``PLACEMENTS``) says.
``make_norm`` here is the other spelling, a shipped norm by name:
``make_norm("groupnorm", 64, "channels", groups=8)``. The placements ``lns`` and ``mix``
need each unit's block: ``ResidualUnit(..., layer=l, layers=L)`` (l from 1), and mix its
``post_fraction=cfg["placement"]["post_fraction"]``.

Your attention: ``QKNorm(head_dim, "layernorm" | "rmsnorm")`` is QK-norm as normbench's
Transformer applies it (``q, k = qk_norm(q, k)`` on (N, heads, T, head_dim), before the
dot product); give your builder a ``qk_norm: str = "none"`` parameter and it becomes the
``model.qk_norm`` key. A sublayer with a method ``largest_logit(x, mask=None) -> float``
has its largest attention logit recorded by ``diagnostics=true``; ``max_attention_logit(q,
k, mask, causal)`` computes it from queries and keys.

Names are imported when first used, so ``import normbench.api`` does not import torch until a
name that needs it is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from normbench.core.errors import StoreError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

# name -> the module that defines it (imported on first use)
_LAZY = {
    "LAYOUTS": "normbench.layers.norms",
    "Norm": "normbench.layers.norms",
    "NormFactory": "normbench.layers.norms",
    "feature_view": "normbench.layers.norms",
    "make_norm": "normbench.layers.norms",
    "masked_moments": "normbench.layers.norms",
    "NEEDS_FINAL_NORM": "normbench.layers.models",
    "PLACEMENTS": "normbench.layers.models",
    "QKNorm": "normbench.layers.models",
    "ResidualUnit": "normbench.layers.models",
    "final_norm": "normbench.layers.models",
    "max_attention_logit": "normbench.layers.models",
}

__all__ = ["StoreError", "UsageError", "build_model", "compose", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'normbench.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def compose(overrides: Iterable[str] = ()) -> dict:
    """The resolved config of one run, validated (and its plugins probed) as ``normbench run``
    does; a ``UsageError`` carries the CLI's one-line message."""
    from normbench.experiment.probe import compose_checked

    return compose_checked(list(overrides))


def build_model(overrides: Iterable[str] = ()) -> nn.Module:
    """The model ``normbench run OVERRIDES`` trains, as it is before the first step: built at
    the run's seed (``seed=``, default 0) for its data's shape, on the CPU, in training mode.
    The caller's torch random state is left as it was."""
    import torch

    from normbench.data.datasets import describe
    from normbench.layers.models import seeded_model

    cfg = compose(overrides)
    data = describe(cfg["data"])
    with torch.random.fork_rng(devices=[]):
        return seeded_model(cfg, data.input_shape, data.num_classes, data.vocab_size)
