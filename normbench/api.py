"""normbench's public API: what your own norm and your own model may build on
(docs/your-own-norm.md). Names here keep their meaning across versions; the rest of normbench
may change.

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
``make_norm("groupnorm", 64, "channels", groups=8)``.
"""

from __future__ import annotations

from normbench.layers.models import NEEDS_FINAL_NORM, PLACEMENTS, ResidualUnit, final_norm
from normbench.layers.norms import (
    LAYOUTS,
    Norm,
    NormFactory,
    feature_view,
    make_norm,
    masked_moments,
)

__all__ = [
    "LAYOUTS",
    "NEEDS_FINAL_NORM",
    "PLACEMENTS",
    "Norm",
    "NormFactory",
    "ResidualUnit",
    "feature_view",
    "final_norm",
    "make_norm",
    "masked_moments",
]
