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
from normbench.store import catalog, reading
reading.PARALLEL_FROM, reading.CHUNK = 1, 1
add = reading.Records.add
def add_then_die(self, part):
    add(self, part)
    pids = [p.pid for p in multiprocessing.active_children()]
    Path(sys.argv[2]).write_text(" ".join(map(str, pids)))
    os.kill(os.getpid(), signal.SIGKILL)
reading.Records.add = add_then_die
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


# The parent: start the scan's child (held up for a minute), note its id and where its
# standard output points, and die by SIGKILL without reading it.
SCANNING_PARENT = """
import os, signal, sys, time
from pathlib import Path
from normbench.store import scan
scan.scan = lambda runs_dir: time.sleep(60)  # the child's scan, inherited by the fork
scanning = scan.Scan.start(Path(sys.argv[1]))
child = scanning._child
for _ in range(100):  # until the child has let go of this process's streams
    if os.readlink(f"/proc/{child}/fd/1") == os.devnull:
        break
    time.sleep(0.05)
Path(sys.argv[2]).write_text(f"{child} {os.readlink(f'/proc/{child}/fd/1')}")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_scan_s_child_ends_when_its_parent_is_killed(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm", "seed=0"])
    noted = tmp_path / "child"
    parent = subprocess.run(
        [sys.executable, "-c", SCANNING_PARENT, str(runs), str(noted)],
        stdout=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    assert parent.returncode == -9 and parent.stdout == b""  # EOF: no child held the pipe
    child, stdout = noted.read_text().split()
    assert stdout == "/dev/null"
    deadline = time.monotonic() + 20
    while alive(int(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(int(child)):
        subprocess.run(["kill", "-9", child], check=False)
        raise AssertionError(f"the scan's child {child} outlived its parent")
