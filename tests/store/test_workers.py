"""The processes that read a large store for `report` and `runs list` end with their parent:
a parent killed (SIGKILL) mid-read leaves no worker blocked forever."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers import make_run

# The parent: read the store with worker processes from the first run on, note the workers'
# ids, and die by SIGKILL as soon as the first of them has answered.
PARENT = """
import multiprocessing, os, signal, sys
from pathlib import Path
from normbench.store import catalog, index
index.PARALLEL_FROM, index.CHUNK = 1, 1
add = index.Records.add
def add_then_die(self, part):
    add(self, part)
    pids = [p.pid for p in multiprocessing.active_children()]
    Path(sys.argv[2]).write_text(" ".join(map(str, pids)))
    os.kill(os.getpid(), signal.SIGKILL)
index.Records.add = add_then_die
catalog.load_runs(Path(sys.argv[1]))
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended (a container's init may be slow to reap it)


def test_reading_workers_end_when_their_parent_is_killed(tmp_path):
    runs = tmp_path / "runs"
    for seed in range(3):
        make_run(runs, ["norm=layernorm", f"seed={seed}"])
    pids_file = tmp_path / "pids"
    parent = subprocess.run(
        [sys.executable, "-c", PARENT, str(runs), str(pids_file)], timeout=120, check=False
    )
    assert parent.returncode == -9
    pids = [int(p) for p in pids_file.read_text().split()]
    assert pids
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:  # clean up what the test started before failing
        subprocess.run(["kill", "-9", str(pid)], check=False)
    assert not left, f"worker processes {left} outlived their parent"
