"""Shared fixtures: one data cache for the session, outside the user's ~/.cache (the tiny
configs and run builders are in helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """One data cache for the whole session, outside the user's ~/.cache."""
    path = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMBENCH_CACHE", str(path))
    yield path
    mp.undo()
