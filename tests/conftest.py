"""Shared fixtures: one data cache for the session, outside the user's ~/.cache (the tiny
configs and run builders are in helpers.py).

The tests run in two pytest-xdist workers (pyproject's addopts). Two processes that each spin
two torch threads on two cores slow each other down tenfold, so every process the tests start
uses one thread unless a test says otherwise (set before torch is imported anywhere). An xdist
worker is given COLUMNS=80 and LINES=24; the tests read output at normbench's own width for
piped output (100) unless they set COLUMNS themselves."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
for inherited in ("COLUMNS", "LINES"):
    os.environ.pop(inherited, None)

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """One data cache for the whole session, outside the user's ~/.cache."""
    path = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMBENCH_CACHE", str(path))
    yield path
    mp.undo()
