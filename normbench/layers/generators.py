"""Common random numbers: a run's seed fixes every initial weight outside its norm layers,
whatever the norm, placement, precision or batch size.

A model is built from one random generator (torch's default, seeded with the run's seed).
Anything that may or may not be built, or may draw more or fewer numbers, depending on the
choices being compared (a norm, a second norm of the sandwich placement, DeepNorm's or
Xavier's re-initialisation of a sublayer) draws inside ``own_generator`` instead: from a
generator of its own, seeded from the model's generator without moving it. So two runs at one
seed that differ in the norm share every other weight, value for value, and their results
differ by the norm, not by the luck of the draw (the paired verdicts of the report rely on it).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def own_generator(role: str) -> Iterator[None]:
    """Draws inside come from a generator seeded by (the model generator's next number, role);
    the model generator is then restored to where it was, as if nothing had been drawn.
    ``role`` tells apart things built one after another from the same state (a unit's two
    norms)."""
    with torch.random.fork_rng(devices=[]):
        # from the CPU generator the fork saved (also when a model is built on the meta device)
        position = int(torch.randint(2**62, (), device="cpu").item())
        digest = hashlib.sha256(f"{position}/{role}".encode()).digest()
        torch.manual_seed(int.from_bytes(digest[:8], "big"))
        yield
