"""The scan of a runs directory: the same run directories, stamps and warnings whether it runs
here or in a forked child (store.scan.Scan), a failed child answered by a scan here, an unread
child stopped and reaped, and no fork from a process that runs other threads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from helpers import make_run

from normbench.store.scan import Scan, one_thread, scan


def designed(tmp_path):
    """A runs directory holding every kind of entry a scan meets."""
    runs = tmp_path / "runs"
    for seed in range(3):
        make_run(runs, ["norm=layernorm", f"seed={seed}"], acc=0.8 + seed / 100)
    first = sorted(p for p in runs.iterdir() if p.is_dir())[0]
    half = runs / (first.name[:-1] + ("1" if first.name.endswith("0") else "0"))
    half.mkdir()  # a run id, no meta.json
    (runs / "notes").mkdir()  # not a run id
    (runs / "alias").symlink_to(first)  # a link
    (runs / "README.txt").write_text("a file: not listed")
    (runs / ".hidden").mkdir()
    (runs / "sweeps").mkdir()
    return runs


# Run in a fresh interpreter: one thread until pandas is imported, so Scan.start forks.
CHILD = """
import json, sys
from pathlib import Path
from normbench.store.scan import Scan, one_thread
alone = one_thread()
scanning = Scan.start(Path(sys.argv[1]))
forked = scanning._child is not None
import pandas  # its threads start while the child scans, as in `normbench report`
try:
    found, warnings = scanning.result()
except OSError as err:
    found, warnings = None, [type(err).__name__]
print(json.dumps({"alone": alone, "forked": forked, "found": found, "warnings": warnings}))
"""


def in_child(runs) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(runs)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_a_forked_scan_finds_what_a_scan_here_finds(tmp_path):
    runs = designed(tmp_path)
    found, warnings = scan(runs)
    assert len(found) == 3 and len(warnings) == 3  # the half-written run, notes, the link
    answer = in_child(runs)
    assert answer["alone"] and answer["forked"]
    assert answer["found"] == found
    assert sorted(answer["warnings"]) == sorted(warnings)


def test_a_child_that_fails_is_answered_by_a_scan_here(tmp_path):
    """No runs directory: the child's scan fails, and the scan here raises what it raises."""
    answer = in_child(tmp_path / "absent")
    assert answer["forked"] and answer["found"] is None
    assert answer["warnings"] == ["FileNotFoundError"]


def test_a_child_nobody_reads_is_stopped_and_reaped(tmp_path):
    runs = designed(tmp_path)
    code = (
        "import os, sys\nfrom pathlib import Path\nfrom normbench.store.scan import Scan\n"
        "scanning = Scan.start(Path(sys.argv[1]))\nchild = scanning._child\nscanning.close()\n"
        "try:\n    os.waitpid(child, 0)\nexcept ChildProcessError:\n    print('reaped')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(runs)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "reaped"


def test_a_process_with_other_threads_scans_here(tmp_path):
    runs = designed(tmp_path)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert not one_thread()
        scanning = Scan.start(runs)
        assert scanning._child is None
        assert scanning.result() == scan(runs)
    finally:
        stop.set()
        worker.join()


# Run in a fresh interpreter with one thing spoiled: the scan must still answer, from here.
SPOILED = """
import json, os, signal, sys
from pathlib import Path
from normbench.store.scan import Scan, scan
if sys.argv[2] == "no fork":
    def refused():
        raise BlockingIOError(11, "Resource temporarily unavailable")
    os.fork = refused
else:  # children reaped by the kernel: none could be waited for
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
scanning = Scan.start(Path(sys.argv[1]))
print(json.dumps({"forked": scanning._child is not None,
                  "same": scanning.result() == scan(Path(sys.argv[1]))}))
"""


def test_no_fork_to_be_had_or_children_unwaitable_scan_here(tmp_path):
    runs = designed(tmp_path)
    for spoiled in ("no fork", "SIGCHLD ignored"):
        out = subprocess.run(
            [sys.executable, "-c", SPOILED, str(runs), spoiled],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == {"forked": False, "same": True}, spoiled
        assert out.stderr == ""
