"""Shared fixtures: one data cache for the session, outside the user's ~/.cache (the tiny
configs and run builders are in helpers.py).

The tests run in two pytest-xdist workers (pyproject's addopts). Two processes that each spin
two torch threads on two cores slow each other down tenfold, so every process the tests start
uses one thread unless a test says otherwise (set before torch is imported anywhere). An xdist
worker is given COLUMNS=80 and LINES=24; the tests read output at normbench's own width for
piped output (100) unless they set COLUMNS themselves.

The suite must pass however it is started: from a terminal, as a script's background job
(SIGINT ignored), under nohup, with no standard input, with the caller's umask and environment.
So the process state a test may depend on is set here, never inherited: the umask (a group-
writable runs directory is refused by the submitit launchers), the variables that change what
normbench, rich or Hydra print, and the signal dispositions, put back after every test (an
in-process CLI call resets SIGINT to Ctrl-C; a test that needs a disposition sets it itself).
tests/test_environment.py runs part of the suite started the hostile way."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.umask(0o022)
# Output width, colour and error verbosity, whoever started the tests: rich honours
# FORCE_COLOR/NO_COLOR/TTY_*, Hydra HYDRA_FULL_ERROR; NORMBENCH_* and MLFLOW_* are the user's
# own settings, and SLURM_* (but the cluster's config) would tell submitit it runs in a job.
for inherited in list(os.environ):
    if (
        inherited in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE")
        or inherited in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "HYDRA_FULL_ERROR")
        or inherited.startswith(("NORMBENCH_", "MLFLOW_"))
        or (inherited.startswith("SLURM_") and inherited != "SLURM_CONF")
    ):
        os.environ.pop(inherited)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# No test may assert a time it does not control: hypothesis's default 200 ms deadline per case
# fails on a loaded machine. Derandomized, a property test checks the same cases every run.
settings.register_profile("normbench", deadline=None, derandomize=True)
settings.load_profile("normbench")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """Every test starts with the dispositions this process inherited, whatever an earlier
    test (or an in-process CLI call) set, so a test passes alone and in any order."""
    inherited = {signum: signal.getsignal(signum) for signum in SIGNALS}
    yield
    for signum, handler in inherited.items():
        signal.signal(signum, handler)


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """One data cache for the whole session, outside the user's ~/.cache."""
    path = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMBENCH_CACHE", str(path))
    yield path
    mp.undo()
