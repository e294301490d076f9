"""Issue 24's list, one regression test per item: the commands added since issue 11 (runs
list, show, diff, clean), the index, the figures and diagnostics of a report, data=arrays and
sweep presets, each given a runs directory (or file) made by an attacker. Every case ends in
one line or a named skip: never a traceback, a hang, or a write outside the store."""

from __future__ import annotations

import json
import os
import sqlite3
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import invoke, make_run, one_line

from normbench.store.catalog import load_runs

TORCH_MEMORY = 8 << 30  # importing torch maps gigabytes of address space it never touches
# 673 bytes that expand to 9^9 values in a YAML loader that follows aliases
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.fixture
def store(tmp_path):
    """Two complete runs and a failed one, indexed (as a first `runs list` leaves them)."""
    runs = tmp_path / "runs"
    ids = [
        make_run(runs, ["norm=batchnorm", "seed=0"], acc=0.90),
        make_run(runs, ["norm=batchnorm", "seed=1"], acc=0.91),
        make_run(runs, ["norm=layernorm", "seed=0"], status="failed", acc=None, error="x"),
    ]
    load_runs(runs)
    return runs, ids


def plant_old_index(runs, changes: dict[str, dict]) -> None:
    """A .index.json as an earlier normbench left it (its rows trusted while the files' sizes and
    mtimes matched), with some rows changed: the attack of issue 24, item 1."""
    rows = load_runs(runs).runs.set_index("run_id", drop=False)
    entries = {}
    for rid in rows.index:
        row = {
            k: (None if isinstance(v, float) and v != v else v) for k, v in rows.loc[rid].items()
        }
        row.update(changes.get(rid, {}))
        stamp = []
        for name in ("config.yaml", "meta.json", "metrics.parquet"):
            info = os.lstat(runs / rid / name)
            stamp.append([info.st_mtime_ns, info.st_size])
        entries[rid] = {"stamp": stamp, "row": row}
    (runs / ".index.json").write_text(json.dumps({"version": 5, "runs": entries}))


# ---------------------------------------------------------------- 1. the index names no path
@pytest.mark.parametrize("where", ["sibling", "absolute"])
def test_clean_never_deletes_outside_the_runs_directory_whatever_the_index_says(store, where):
    runs, ids = store
    victim = runs.parent / "victim" if where == "sibling" else runs.parent / "elsewhere" / "v"
    victim.mkdir(parents=True)
    (victim / "precious").write_text("keep me")
    named = "../victim" if where == "sibling" else str(victim)
    plant_old_index(runs, {ids[2]: {"run_id": named}})
    with sqlite3.connect(runs / ".index.sqlite") as index:
        index.execute("UPDATE runs SET run_id = ? WHERE run_id = ?", (named, ids[2]))
    result = invoke("runs", "clean", str(runs), "--yes")
    assert result.exit_code == 0, result.output
    assert (victim / "precious").read_text() == "keep me"
    assert not (runs / ids[2]).exists() and (runs / ids[0]).is_dir()  # the failed run went
    assert not (runs / ".index.json").exists()  # the old index is deleted, never read


def test_a_tampered_index_row_is_read_again_from_the_run_files(store):
    runs, ids = store
    plant_old_index(runs, {ids[0]: {"norm.name": {"a": 1}, "parameters": float("inf")}})
    with sqlite3.connect(runs / ".index.sqlite") as index:
        (config,) = index.execute(
            "SELECT config_id FROM runs WHERE run_id = ?", (ids[0],)
        ).fetchone()
        index.execute(
            "UPDATE configs SET flat = ? WHERE id = ?", ('{"norm.name": {"a": 1}}', config)
        )
        index.execute("UPDATE runs SET summary = 'x', seed = 1.5 WHERE run_id = ?", (ids[1],))
    result = invoke("report", str(runs), "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["convergence"][:1]
    assert row["norm.name"] == "batchnorm" and row["results"] == 2
    assert row["val_acc_mean"] == pytest.approx(0.905)


# ------------------------------------------------- 2, 3, 8. runs show and diff, runs show 'x*'
@pytest.mark.parametrize("planted", ["symlink outside", "fifo", "alias bomb", "/dev/zero"])
def test_runs_show_and_diff_read_a_config_through_the_trusted_reader(store, planted):
    runs, ids = store
    secret = runs.parent / "secret.txt"
    secret.write_text("TOP SECRET")
    config = runs / ids[0] / "config.yaml"
    config.unlink()
    if planted == "symlink outside":
        config.symlink_to(secret)
    elif planted == "fifo":
        os.mkfifo(config)
    elif planted == "alias bomb":
        config.write_text(BOMB)
    else:
        config.symlink_to("/dev/zero")
    for command in (["show", ids[0]], ["diff", ids[0], ids[1]]):
        result = invoke("runs", *command, "--runs-dir", str(runs), seconds=60)
        assert "TOP SECRET" not in result.output
        if planted == "alias bomb" and command[0] == "show":  # shown as text, never expanded
            assert result.exit_code == 0 and "*a" in result.output
        else:
            one_line(result, "config.yaml")


def test_runs_show_sends_no_terminal_escape_sequences(store):
    runs, ids = store
    config = runs / ids[2] / "config.yaml"
    escapes = "\x1b[2J\x1b]0;owned\x07\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
    config.write_text(f"# {escapes}\n" + config.read_text())
    meta = json.loads((runs / ids[2] / "meta.json").read_text())
    meta["traceback"] = f"boom {escapes}\n"
    (runs / ids[2] / "meta.json").write_text(json.dumps(meta))
    result = invoke("runs", "show", ids[2], "--runs-dir", str(runs))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\x1b[2J" in result.output  # shown, as an escape


@pytest.mark.parametrize("name", ["cnn-*", "cnn-[ab]", "../runs", "/etc", "cnn-?"])
def test_a_run_is_named_by_its_id_or_its_start_never_a_pattern_or_a_path(store, name):
    runs, _ = store
    for command in (["show", name], ["diff", name, name]):
        one_line(invoke("runs", *command, "--runs-dir", str(runs)), "a run id or the start")


# ------------------------------------------------------------------------ 4. markdown
def test_markdown_output_escapes_stored_names(store):
    runs, ids = store
    path = runs / ids[1] / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["norm"]["name"] = "x`y\n## forged\n<img src=https://evil.example/a.png> *b* [l](u) | c"
    path.write_text(yaml.safe_dump(config))
    result = invoke("report", str(runs), "--format", "markdown")
    assert result.exit_code == 0, result.output
    assert "<img" not in result.stdout and "&lt;img" in result.stdout
    assert not any(line.startswith("## forged") for line in result.stdout.splitlines())
    assert (
        "x\\`y\\\\n\\#\\# forged" in result.stdout and "\\*b\\* \\[l\\](u) \\| c" in result.stdout
    )


# -------------------------------------------------------------------- 5. --diagnostics
@pytest.mark.parametrize("planted", ["fifo", "garbage", "another run's metrics"])
def test_diagnostics_that_cannot_be_read_are_a_named_skip(store, planted):
    runs, ids = store
    path = runs / ids[0] / "diagnostics.parquet"
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "garbage":
        path.write_bytes(b"PAR1" + os.urandom(200))
    else:
        path.write_bytes((runs / ids[1] / "metrics.parquet").read_bytes())
    result = invoke("report", str(runs), "--diagnostics", seconds=30)
    one_line(result, "--diagnostics: none of these runs", "(1 skipped)")
    assert f"warning: diagnostics: skipped {ids[0]}" in result.output


# ------------------------------------------------------------------------ 6. --html
@pytest.mark.parametrize("planted", ["string column", "20 million rows"])
def test_html_figures_skip_a_metrics_file_of_strings_or_of_too_many_rows(store, planted):
    runs, ids = store
    path = runs / ids[0] / "metrics.parquet"
    if planted == "string column":
        frame = pd.read_parquet(path)
        frame["val_acc"] = frame["val_acc"].astype(str)
        frame.to_parquet(path)
    else:  # a few hundred kilobytes on disk, 800 MB once read
        zeros = pa.table({c: np.zeros(2_000_000) for c in ("step", "train_loss", "val_acc")})
        with pq.ParquetWriter(path, zeros.schema, compression="zstd") as writer:
            for _ in range(10):
                writer.write_table(zeros)
    out = runs.parent / "report.html"
    result = invoke("report", str(runs), "--html", str(out), seconds=120)
    assert result.exit_code == 0, result.output
    assert f"warning: learning curves: skipped {ids[0]}" in result.output
    assert "not numbers" in result.output or "more than 1000000" in result.output
    assert f"learning curves: skipped {ids[0]}" in out.read_text()


# ---------------------------------------------------------------------- 7. Infinity
def test_an_infinite_summary_number_is_no_number(store, tmp_path):
    runs, ids = store
    meta = runs / ids[0] / "meta.json"
    meta.write_text(meta.read_text().replace('"parameters": 1234', '"parameters": Infinity'))
    meta = runs / ids[1] / "meta.json"  # and a class count that would divide by zero
    meta.write_text(meta.read_text().replace('"num_classes": 10', '"num_classes": 0'))
    meta.write_text(meta.read_text().replace('"status": "complete"', '"status": "diverged"'))
    for extra in ([], ["--format", "json"], ["--html", str(tmp_path / "r.html")]):
        result = invoke("report", str(runs), *extra)
        assert result.exit_code == 0, (extra, result.output)


# --------------------------------------------------------------------- 10. symlinked lock
def test_a_symlinked_lock_keeps_its_run_and_clean_goes_on(tmp_path):
    runs = tmp_path / "runs"
    ids = [
        make_run(runs, ["norm=batchnorm", f"seed={seed}"], status="failed", acc=None)
        for seed in range(2)
    ]
    (runs / ".locks").mkdir()
    target = tmp_path / "target"
    target.write_text("untouched")
    (runs / ".locks" / f"{ids[0]}.lock").symlink_to(target)
    result = invoke("runs", "clean", str(runs), "--yes")
    assert result.exit_code == 0, result.output
    assert f"warning: kept {ids[0]}" in result.output and "cannot open the lock" in result.output
    assert (runs / ids[0]).is_dir() and not (runs / ids[1]).exists()
    assert target.read_text() == "untouched"


# ---------------------------------------------------------------------- 11. data=arrays
def test_an_npz_member_that_is_no_array_is_one_line(tmp_path):
    path = tmp_path / "data.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x_train", b"not an array")
    command = ["run", "data=arrays", f"data.path={path}", "--cfg", "--runs-dir", str(tmp_path)]
    result = invoke(*command, memory=TORCH_MEMORY)  # composing data=arrays imports torch
    one_line(result, "member 'x_train' is not an array (.npy)")


def test_a_fifo_as_data_path_is_one_line_not_a_hang(tmp_path):
    path = tmp_path / "data.npz"
    os.mkfifo(path)
    command = ["run", "data=arrays", f"data.path={path}", "--cfg", "--runs-dir", str(tmp_path)]
    result = invoke(*command, seconds=30, memory=TORCH_MEMORY)
    one_line(result, "is not a regular file")


# -------------------------------------------------------------------- 12. sweep presets
def test_an_alias_bomb_preset_is_refused_at_once(tmp_path):
    preset = tmp_path / "bomb.yaml"
    preset.write_text("params:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines()))
    result = invoke("sweep", str(preset), "--dry-run", "--runs-dir", str(tmp_path), seconds=60)
    one_line(result, "YAML aliases are not allowed")
    assert not (tmp_path / "sweeps").exists()


# ------------------------------------------------------------- 13. what --force keeps
def test_an_interrupted_run_says_what_it_kept(store):
    from normbench.cli.run import interrupted_note
    from normbench.store.rundir import RunDir

    runs, ids = store
    finished, failed = RunDir(runs, ids[0]), RunDir(runs, ids[2])
    forced = interrupted_note(finished, force=True)
    assert "the forced rerun was discarded" in forced and "keeps its previous result" in forced
    assert "metrics so far kept" in interrupted_note(failed, force=True)
    assert "metrics so far kept" in interrupted_note(finished, force=False)
