"""runs/.index.sqlite: reused while a run's files are unchanged, updated when a run ends,
checked row by row, rebuilt when it is not ours, never followed through a symlink, shared by
processes writing at once, and left alone in a read-only runs directory."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys

import pytest
from helpers import make_run

from normbench.store import index, reading
from normbench.store.catalog import load_runs
from normbench.store.rundir import RunDir

# a summary blob of the right size whose last number is infinite (what no run writes)
INFINITE_LAST = reading.PACKED.pack(*[0.5] * (len(reading.SUMMARY_FIELDS) - 1), math.inf)


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    for norm in ("batchnorm", "layernorm"):
        for seed in range(2):
            make_run(runs, [f"norm={norm}", f"seed={seed}"], acc=0.8 + seed / 10)
    make_run(runs, ["norm=groupnorm", "seed=0"], status="failed", acc=None, error="boom")
    return runs


def essentials(runs) -> list[tuple]:
    """What a report reads of each run, in a comparable form."""
    frame = load_runs(runs).runs.sort_values("run_id")
    columns = ["run_id", "status", "seed", "final_val_acc", "norm.name", "tags", "command"]
    return [tuple(json.dumps(v) for v in row) for row in frame[columns].fillna(-1).values]


@pytest.fixture
def reads(monkeypatch):
    """The runs read from their files (not from the index) by each load after this."""
    names: list[str] = []
    read_run = reading.read_run

    def counting(runs_dir, name, files):
        names.append(name)
        return read_run(runs_dir, name, files)

    monkeypatch.setattr(reading, "read_run", counting)
    return names


def test_rows_come_from_the_index_until_a_file_changes(runs, reads):
    truth = essentials(runs)
    assert len(reads) == 5 and (runs / index.FILE).is_file()
    reads.clear()
    assert essentials(runs) == truth and reads == []
    rid = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))[0]
    run = RunDir(runs, rid)
    run.write_meta({**run.read_meta(), "note": "edited"})
    load_runs(runs)
    assert reads == [rid]


def test_the_update_after_a_run_makes_the_next_load_read_no_file(runs, reads):
    load_runs(runs)
    run = RunDir(runs, sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))[0])
    meta = run.read_meta()
    run.write_meta({**meta, "summary": {**meta["summary"], "final_val_acc": 0.123}})
    index.record_run(runs, run.run_id)
    reads.clear()
    frame = load_runs(runs).runs.set_index("run_id")
    assert reads == [] and frame.loc[run.run_id, "final_val_acc"] == pytest.approx(0.123)


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE runs SET status = 'complete; DROP' ",
        "UPDATE runs SET status = NULL",
        "UPDATE runs SET summary = '0.5'",
        "UPDATE runs SET summary = NULL",
        "UPDATE runs SET summary = x'00'",  # a blob of the wrong size
        f"UPDATE runs SET summary = x'{INFINITE_LAST.hex()}'",
        "UPDATE runs SET seed = 1.5",
        "UPDATE runs SET tags = 'not json'",
        "UPDATE runs SET tags = '[1, 2]'",
        "UPDATE runs SET stamp = NULL",
        "UPDATE configs SET flat = '[]'",
        'UPDATE configs SET flat = \'{"norm.name": {"a": 1}}\'',
        'UPDATE configs SET flat = \'{"status": "complete"}\'',
        "UPDATE configs SET flat = '{\"train.lr\": NaN}'",
    ],
)
def test_an_index_row_that_fails_its_checks_is_read_again_from_the_files(runs, reads, tamper):
    truth = essentials(runs)
    with sqlite3.connect(runs / index.FILE) as connection:
        connection.execute(tamper)
    reads.clear()
    assert essentials(runs) == truth
    assert len(reads) == 5  # every row failed, every run was read again (and re-indexed)
    reads.clear()
    assert essentials(runs) == truth and reads == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "corrupt page", "other schema"])
def test_an_index_that_is_not_ours_is_rebuilt(runs, reads, damage):
    truth = essentials(runs)
    path = runs / index.FILE
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(os.urandom(len(raw)))
    elif damage == "truncated":
        path.write_bytes(raw[:1000])
    elif damage == "corrupt page":
        path.write_bytes(raw[:4096] + os.urandom(len(raw) - 4096))
    else:
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE VIEW runs_view AS SELECT * FROM runs")
    assert essentials(runs) == truth
    reads.clear()
    assert essentials(runs) == truth and reads == []  # rebuilt, and used again


def test_a_symlinked_index_is_never_followed(runs, tmp_path):
    truth = essentials(runs)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in os.listdir(runs):
        if name.startswith(index.FILE):
            os.replace(runs / name, elsewhere / name)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    (runs / index.FILE).symlink_to(elsewhere / index.FILE)
    assert essentials(runs) == truth
    (runs / index.FILE).unlink()
    (runs / index.FILE).write_bytes(b"")
    (runs / f"{index.FILE}-wal").symlink_to(elsewhere / "wal")
    assert essentials(runs) == truth
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


def test_a_read_only_runs_directory_reports_without_writing(runs, reads, monkeypatch):
    truth = essentials(runs)
    (runs / index.FILE).unlink()
    monkeypatch.setattr(index.os, "access", lambda path, mode: False)  # root ignores chmod
    reads.clear()
    assert essentials(runs) == truth and len(reads) == 5
    assert not any(p.name.startswith(index.FILE) for p in runs.iterdir())
    monkeypatch.undo()
    essentials(runs)  # an index, made by its owner
    for name in os.listdir(runs):
        if name.startswith(f"{index.FILE}-"):
            (runs / name).unlink()
    listing = sorted(os.listdir(runs))
    written = (runs / index.FILE).read_bytes()
    monkeypatch.setattr(reading, "read_run", reads_nothing)
    monkeypatch.setattr(index.os, "access", lambda path, mode: False)
    assert essentials(runs) == truth  # read from the index, opened as immutable
    assert sorted(os.listdir(runs)) == listing and (runs / index.FILE).read_bytes() == written


def reads_nothing(*args):
    raise AssertionError("a run was read from its files")


WRITER = """
import sys
from pathlib import Path
from normbench.store.index import record_run
from normbench.store.rundir import RunDir
runs = Path(sys.argv[1])
for _ in range(int(sys.argv[2])):
    for name in sys.argv[3:]:
        run = RunDir(runs, name)
        run.write_meta({**run.read_meta(), "note": str(_)})
        record_run(runs, name)
"""


def test_two_writers_and_a_reader_at_once(runs):
    """Two processes finishing runs (each update a transaction) while reports load: no
    error, no lost row, and the next load finds every run's newest files. (A report that read
    a run just before a writer changed it may store the older stamp after the writer's row;
    the stamp then differs from the files and the next load reads the run again: which of
    the two writes lands last is the scheduler's, so only the next load is asserted.)"""
    names = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(runs), "15", *half], env=env, stderr=subprocess.PIPE
        )
        for half in (names[::2], names[1::2])
    ]
    while any(writer.poll() is None for writer in writers):
        assert len(load_runs(runs).runs) == 5
    assert [writer.wait() for writer in writers] == [0, 0], [w.stderr.read() for w in writers]
    loaded = load_runs(runs).runs
    assert len(loaded) == 5
    with sqlite3.connect(runs / index.FILE) as connection:
        rows = connection.execute("SELECT run_id, stamp FROM runs").fetchall()
    assert sorted(name for name, _ in rows) == names
    assert all(stamp == reading.stamp(runs / name) for name, stamp in rows)


def test_many_runs_are_read_by_worker_processes_alike(runs, monkeypatch):
    wanted = [(name, reading.stamp(runs / name)) for name in sorted(os.listdir(runs))]
    wanted = [(name, files) for name, files in wanted if name.startswith("cnn-")]
    alone = reading.read_runs(runs, wanted)
    monkeypatch.setattr(reading, "PARALLEL_FROM", 2)
    monkeypatch.setattr(reading, "CHUNK", 2)
    spread = reading.read_many(runs, wanted)
    assert spread.runs == alone.runs and spread.configs == alone.configs


def test_a_config_key_named_like_the_index_s_own_columns_is_a_config_key(runs):
    """The index keeps a run's numbers in a column named summary; a config.yaml with a key
    of that name (hand-written: normbench's schema has none) is read as before, from its
    files and from the index."""
    run = sorted(p for p in runs.iterdir() if p.is_dir())[0]
    with open(run / "config.yaml", "a") as config:
        config.write("summary: 1\n")
    for _ in ("from the files", "from the index"):
        frame = load_runs(runs).runs.set_index("run_id")
        assert frame.loc[run.name, "summary"] == 1
        assert frame.loc[run.name, "final_val_acc"] == pytest.approx(0.8)
        assert frame["final_val_acc"].dtype == float


# Run in a fresh interpreter: one thread until pandas is imported, so Scan.start forks and
# load_runs builds its guess while the child stamps.
GUESS = """
import json, sys
from pathlib import Path
from normbench.store.scan import Scan
runs = Path(sys.argv[1])
scanning = Scan.start(runs)
forked = scanning.in_child
from normbench.store import catalog
guesses = []
guessed_frame = catalog.guessed_frame
def spy(runs_dir, known):
    guesses.append(guessed_frame(runs_dir, known))
    return guesses[-1]
catalog.guessed_frame = spy
frame = catalog.load_runs(runs, scanning).runs
print(json.dumps({
    "forked": forked,
    "guessed": bool(guesses) and guesses[0] is not None,
    "kept": bool(guesses) and guesses[0] is not None and guesses[0].frame is frame,
    "frame": [list(frame.columns), frame.astype(object).where(frame.notna(), None).values.tolist()],
}, default=str))
"""


def loaded_in_child(runs) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", GUESS, str(runs)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def loaded_here(runs) -> list:
    frame = load_runs(runs).runs
    rows = frame.astype(object).where(frame.notna(), None).values.tolist()
    return json.loads(json.dumps([list(frame.columns), rows], default=str))


def test_the_frame_guessed_while_the_child_scans_is_kept_only_when_the_scan_agrees(runs):
    """Unchanged since the index: the guess is the frame. A run edited, spoiled (changed,
    and unreadable now: read again, but not a fresh run) or added since: the guess is
    dropped. A run removed since: the guess, made from the directory's listing, lacks it too.
    Every time, the frame is what a load without a guess reads."""
    load_runs(runs)  # the index
    answer = loaded_in_child(runs)
    assert answer["forked"] and answer["guessed"] and answer["kept"]
    assert answer["frame"] == loaded_here(runs)
    names = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))
    run = RunDir(runs, names[0])
    for change in ("edited", "spoiled", "removed", "added"):
        if change == "edited":
            run.write_meta({**run.read_meta(), "note": "edited"})
        elif change == "spoiled":
            (runs / names[2] / "meta.json").write_text("{not json")
        elif change == "removed":
            for path in (runs / names[1]).iterdir():
                path.unlink()
            (runs / names[1]).rmdir()
        else:
            make_run(runs, ["norm=rmsnorm", "seed=0"])
        answer = loaded_in_child(runs)
        assert answer["guessed"] and answer["kept"] == (change == "removed"), change
        assert answer["frame"] == loaded_here(runs), change
        if change == "edited":
            assert "edited" in json.dumps(answer["frame"])


def test_an_index_of_the_previous_version_is_rebuilt_and_old_configs_read_as_now(runs, reads):
    """Version 3 stamped mtime and size alone, and kept an AdamW run's train.momentum and
    muon keys as written (issue 51, items 10 and 20): such an index is rebuilt, never an
    error, and a run written before the optimizer's ignored keys were nulled reads as one
    written now."""
    truth = essentials(runs)
    rid = sorted(p.name for p in runs.iterdir() if p.name.startswith("cnn-"))[0]
    config = runs / rid / "config.yaml"
    text = config.read_text()
    assert "momentum: null" in text and "muon_lr: null" in text
    config.write_text(  # as normbench wrote it before: the defaults, not null
        text.replace("  momentum: null", "  momentum: 0.9")
        .replace("muon_lr: null", "muon_lr: 0.02")
        .replace("muon_momentum: null", "muon_momentum: 0.95")
    )
    load_runs(runs)
    with sqlite3.connect(runs / index.FILE) as connection:
        for name, stamp in connection.execute("SELECT run_id, stamp FROM runs").fetchall():
            old = " ".join(":".join(f.split(":")[:2]) for f in stamp.split(" "))
            connection.execute("UPDATE runs SET stamp = ? WHERE run_id = ?", (old, name))
        connection.execute(
            "UPDATE configs SET flat = json_set(flat, '$.\"train.momentum\"', 0.9, "
            "'$.\"train.muon_lr\"', 0.02)"
        )
        connection.execute("PRAGMA user_version = 3")
    reads.clear()
    assert essentials(runs) == truth and len(reads) == 5
    frame = load_runs(runs).runs
    assert frame["train.momentum"].isna().all() and frame["train.muon_lr"].isna().all()
    reads.clear()
    assert essentials(runs) == truth and reads == []  # rebuilt, and used again
