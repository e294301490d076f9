"""Shared fixtures: compose a real config, shrink it to a few steps, run it in tmp_path."""

from __future__ import annotations

import pytest

# A few steps on a small slice of real data: enough to exercise every code path quickly.
TINY = [
    "train.max_steps=6",
    "train.eval_every=3",
    "train.log_every=2",
    "train.warmup_steps=2",
    "model.width=16",
    "model.depth=2",
    "norm.groups=4",
    "threads=1",
]
TINY_DATA = {
    "mnist1d": ["data=mnist1d", "data.num_samples=600"],
    "digits": ["data=digits"],
    "tokens": ["data=tokens", "data.num_samples=400", "data.max_len=12"],
    "pysource": ["data=pysource", "data.context=16", "data.eval_windows=8"],
}


def tiny(*overrides: str, data: str = "mnist1d") -> list[str]:
    """TINY settings plus the given overrides (which win)."""
    heads = [] if "model=cnn" in overrides else ["model.heads=2"]  # a transformer-only key
    return ["device=cpu", *TINY_DATA[data], *TINY, *heads, *overrides]


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """One data cache for the whole session, outside the user's ~/.cache."""
    path = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMBENCH_CACHE", str(path))
    yield path
    mp.undo()
