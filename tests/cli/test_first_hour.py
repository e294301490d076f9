"""Issue 50's frictions 1-8 ("a newcomer's first hour"), one regression test each through the
CLI, at the widths a newcomer's terminal has (80 and 100 columns)."""

from __future__ import annotations

import io
import json
import re

import pytest
from helpers import invoke, make_run, one_line

TWO_KEYS = {
    "group": "norm=layernorm data=pysource",
    "keys": ["train.lr", "train.weight_decay"],
    "space": 4,
    "trials": 4,
    "steps": 64,
    "full_grid_steps": 64,
    "chosen": {"train.lr": "0.003162", "train.weight_decay": "0.0001"},
    "metric": "val_loss",
    "value": 1.2345,
    "runner_up": "train.lr=0.01 train.weight_decay=0.0001",
    "gap": 0.0123,
    "regret_bound": 0.0456,
    "tried": {"train.lr": ["0.001", "0.003162"], "train.weight_decay": ["0.0001", "0.1"]},
    "edge": "train.weight_decay=0.0001: at the grid's bottom",
}


def tuned_store(runs, groups: list[dict]) -> None:
    """Two runs and a tuned sweep's record ``t`` over them, with these groups chosen."""
    ids = [make_run(runs, [f"norm={norm}", "seed=0"]) for norm in ("layernorm", "rmsnorm")]
    state = {
        "phase": "done",
        "rungs": [{"keep": 4, "steps": 16}],
        "tuning_seeds": [1000000, 1000001, 1000002],
        "groups": groups,
    }
    (runs / "sweeps").mkdir()
    record = {"name": "t", "started": "2026-01-01T00:00:00", "runs": [{"run_id": i} for i in ids]}
    (runs / "sweeps" / "t-20260101-000000.json").write_text(json.dumps({**record, "tuning": state}))


# ------------------------------------------------- 1. the tuned table, whole at 80 columns
@pytest.mark.parametrize("columns", [80, 100])
def test_the_tuned_table_shows_every_chosen_value_whole(tmp_path, columns):
    runs = tmp_path / "runs"
    other = {**TWO_KEYS, "group": "norm=rmsnorm data=pysource", "edge": None}
    tuned_store(runs, [TWO_KEYS, other])
    out = invoke("report", "--sweep", "t", "--runs-dir", str(runs), columns=columns)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    assert "…" not in out.stdout
    for value in ("train.lr=0.003162", "train.weight_decay=0.0001 *", "norm=layernorm"):
        assert any(value in line for line in lines), (value, out.stdout)
    # every column whole, every number shown (the sweep prints this very table)
    header = next(line for line in lines if line.lstrip().startswith("group"))
    assert header.split() == ["group", "trials", "steps", "chosen", "val", "gap", "regret"]
    assert any(line.rstrip().endswith("1.234 0.0123 0.0456") for line in lines), out.stdout
    assert "val, gap, regret: the columns val_chosen, val_gap, regret_bound" in " ".join(
        out.stdout.split()
    )
    csv = invoke(
        "report", "--sweep", "t", "--runs-dir", str(runs), "--table", "tuning", "--format", "csv"
    )
    assert "val_chosen" in csv.stdout and "val_gap" in csv.stdout and "regret_bound" in csv.stdout


def test_the_tuned_table_in_html_is_the_terminal_s(tmp_path):
    runs, page = tmp_path / "runs", tmp_path / "report.html"
    tuned_store(runs, [TWO_KEYS])
    out = invoke("report", "--sweep", "t", "--runs-dir", str(runs), "--html", str(page))
    assert out.exit_code == 0, out.output
    html = page.read_text()
    tuned = html[html.index("<h2>Tuned: t</h2>") : html.index("</table>")]
    heads = re.findall(r"<th(?: [^>]*)?>([^<]*)</th>", tuned)
    assert heads == ["group", "trials", "steps", "chosen", "val", "gap", "regret"]
    assert "train.lr=0.003162<br>train.weight_decay=0.0001 *" in tuned and "\\n" not in tuned


def test_the_sweep_and_the_report_print_the_same_tuned_table(tmp_path):
    from rich.console import Console

    from normbench.report import tuning
    from normbench.sweeps import tuned_view

    state = {"phase": "done", "tuning_seeds": [1000000], "groups": [TWO_KEYS]}

    def shown(renderable) -> str:
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(renderable)
        return console.export_text()

    swept = shown(tuned_view.choices_table("t", state))
    assert swept == shown(tuning.parse("t", state).rich())
    assert "regret" in swept and "train.weight_decay=0.0001 *" in swept


# ------------------------------------------- 3. a runs directory named twice, differently
@pytest.mark.parametrize("command", [["report"], ["runs", "list"], ["runs", "clean", "--dry-run"]])
def test_a_runs_directory_given_twice_differently_is_refused(tmp_path, command):
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    other = tmp_path / "other"
    out = invoke(*command, str(runs), "--runs-dir", str(other))
    one_line(out, "two runs directories", str(runs), f"--runs-dir {other}")
    same = invoke(*command, str(runs), "--runs-dir", str(runs))  # the same one twice: fine
    assert same.exit_code == 0, same.output


# ------------------------------------------ 7. a runs directory that is a file, or empty
def test_a_runs_directory_that_is_a_file_is_named_as_one(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    one_line(invoke("report", str(afile)), f"runs directory {afile}: a file, not a directory")
    one_line(invoke("runs", "list", "--runs-dir", str(afile)), "a file, not a directory")
    for dry in (["--dry-run"], []):  # refused before the plan, as the sweep itself is
        out = invoke("sweep", "smoke", *dry, "--yes", "--runs-dir", str(afile))
        one_line(out, f"--runs-dir {afile}: a file, not a directory")
    out = invoke("run", "model=cnn", "--runs-dir", str(afile))
    one_line(out, f"--runs-dir {afile}: a file, not a directory")
    below = invoke("sweep", "smoke", "--dry-run", "--runs-dir", str(afile / "runs"))
    one_line(below, f"--runs-dir {afile / 'runs'}: {afile} is a file")
    assert afile.read_text() == ""


def test_a_report_of_an_empty_directory_writes_nothing_there(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke("report", str(empty)).exit_code == 2  # no runs match
    assert invoke("runs", "list", str(empty)).exit_code == 0  # 0 run(s)
    assert list(empty.iterdir()) == []
    make_run(empty, ["norm=layernorm"])  # with runs, the index is made as before
    assert invoke("report", str(empty)).exit_code == 0
    assert (empty / ".index.sqlite").is_file()


@pytest.mark.tracking
def test_runs_export_validates_before_it_makes_its_destination(tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra")
    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    board = tmp_path / "board"
    out = invoke("runs", "export", "--to", "tensorboard", str(board), str(runs), "nrom=x")
    one_line(out, "nrom")
    none = invoke("runs", "export", "--to", "tensorboard", str(board), str(runs), "norm=dyt")
    one_line(none, "no runs match")
    assert not board.exists()
    pytest.importorskip("mlflow", reason="the tracking extra")
    store = tmp_path / "ml.db"
    out = invoke("runs", "export", "--to", "mlflow", f"sqlite:///{store}", "--experiment", "")
    one_line(out, "--experiment ''")
    assert not store.exists()


# ------------------------------ 4. a smaller scale never replaces the full-scale document
@pytest.mark.parametrize("scale", ["--smoke", "--quick"])
def test_findings_at_a_smaller_scale_writes_under_the_runs_directory(tmp_path, scale):
    # A runs directory under a file: the document's place is refused before any study
    # trains, and the refusal names where a smaller scale writes by default.
    afile = tmp_path / "afile"
    afile.write_text("")
    runs = afile / "findings"
    out = invoke("findings", scale, "--runs-dir", str(runs))
    one_line(out, f"--out {runs / f'findings-{scale[2:]}.md'}", "not a directory")
    shown = " ".join(invoke("findings", "--help").output.replace("│", " ").split())
    assert "with --quick or --smoke RUNS_DIR/findings-quick.md or findings-smoke.md" in shown


# ---------------------------- 6. runs list at 95-105 columns; a key a run's norm lacks
@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Three norms at two learning rates and seeds, and two DyT runs apart by alpha_init."""
    runs = tmp_path_factory.mktemp("mixed") / "runs"
    for norm in ("layernorm", "batchnorm"):
        for seed in range(2):
            for lr in ("0.001", "0.01"):
                make_run(runs, [f"norm={norm}", f"seed={seed}", f"train.lr={lr}"])
    for alpha in ("0.5", "1.0"):
        make_run(runs, ["norm=dyt", "seed=0", f"norm.alpha_init={alpha}"])
    return runs


@pytest.mark.parametrize("columns", [95, 100, 105])
def test_runs_list_never_gives_each_choice_its_own_line(mixed, columns):
    out = invoke("runs", "list", str(mixed), columns=columns)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    assert "nan" not in out.stdout  # alpha_init is no key of LayerNorm's or BatchNorm's
    words = out.stdout.split()
    assert "norm.alpha_init=0.5" in words and "norm.alpha_init=1.0" in words
    # a row's choices take at most two lines, beside it or under it
    for start in [i for i, line in enumerate(lines) if line.startswith("cnn-")]:
        following = 0
        while start + following + 1 < len(lines) and lines[start + following + 1][0] == " ":
            following += 1
        assert following <= 1, lines[start : start + following + 1]


# ----------------------------------------------------- 8. the suggestions that were wrong
def test_a_mistyped_word_is_offered_the_one_it_starts_with(tmp_path):
    one_line(invoke("run", "placement=prenorm"), "(did you mean pre?)", "valid: deepnorm")
    one_line(invoke("run", "norm=layrnorm"), "(did you mean layernorm?)")
    out = invoke("sweep", "batch_sensitvity", "--dry-run", "--runs-dir", str(tmp_path / "r"))
    one_line(out, "'batch_sensitvity' does not exist (did you mean batch_sensitivity?)")
    tune = ["sweep", "smoke", "--dry-run", "--runs-dir", str(tmp_path / "r"), "--tune"]
    one_line(
        invoke(*tune, "train.lrr=1e-3,3e-3"), "train.lrr: unknown key (did you mean train.lr?)"
    )
    one_line(invoke(*tune, "train.lr=abc"), "train.lr=abc: 'abc' is not a number", "finite number")
    one_line(invoke(*tune, "train.lr=1e-3,abc"), "'abc' is not a number")
    assert not (tmp_path / "r").exists()


def test_an_unknown_key_of_the_runs_names_the_keys_there_are(tmp_path):
    import normbench.api as nb
    from normbench.core.errors import UsageError

    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm", "seed=0"])
    make_run(runs, ["norm=rmsnorm", "seed=0"])
    for option in (["--by", "nrom"], ["--best-over", "nrom"], ["nrom=x"]):
        out = invoke("report", str(runs), *option)
        one_line(out, "no key 'nrom' in these runs (did you mean norm?)", "valid: norm (vary")
        assert "keys held fixed, e.g. batch_size" in out.output
        assert "log.tensorboard" not in out.output
    with pytest.raises(UsageError, match=r"did you mean norm\?") as raised:
        nb.runs(runs, "nrom=layernorm")
    assert "log.tensorboard" not in str(raised.value)


def test_the_tables_are_one_list_in_the_help_the_cli_and_the_api(tmp_path):
    import normbench.api as nb
    from normbench.core.errors import UsageError
    from normbench.report import TABLE_NAMES

    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm", "seed=0"])
    listed = ", ".join(TABLE_NAMES)
    assert "across" in TABLE_NAMES and "tuning" in TABLE_NAMES
    shown = " ".join(invoke("report", "--help").output.replace("│", " ").split())
    assert " | ".join(TABLE_NAMES) in shown
    one_line(invoke("report", str(runs), "--table", "nope"), f"valid: {listed}")
    with pytest.raises(UsageError, match=f"valid: {listed}"):
        nb.report(runs, table="nope")
    one_line(invoke("report", str(runs), "--table", "tuning"), "not a tuned sweep")
    with pytest.raises(UsageError, match="not a tuned sweep"):
        nb.report(runs, table="tuning")


# ------------------------------------------- 5. on a terminal, lines wrap between words
def on_terminal(columns: int, *args: str, answer: bytes = b"", cwd=None) -> list[str]:
    """``normbench ARGS`` on a pseudo-terminal ``columns`` wide (what a newcomer's tmux is),
    ``answer`` typed in; its lines, escape codes stripped."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "normbench", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**env, "TERM": "xterm"},
        cwd=cwd,
    )
    os.close(child)
    if answer:
        os.write(main, answer)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(main)
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", b"".join(chunks).decode(errors="replace"))
    return [line for line in text.replace("\r", "").split("\n") if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100])
def test_on_a_terminal_lines_wrap_between_words(tmp_path, columns):
    runs = tmp_path / "runs"
    plan = on_terminal(columns, "sweep", "threads=1", "norm=layernorm,rmsnorm", "--dry-run",
                       "--runs-dir", str(runs))  # fmt: skip
    assert all(len(line) <= columns for line in plan), plan
    assert "  normbench sweep batch_sensitivity threads=1 norm=layernorm,rmsnorm" in plan
    assert all(line.split()[-1].endswith(("5c3bb75c", "28cc7bb9")) for line in plan[2:4]), plan
    asked = on_terminal(columns, "sweep", answer=b"n\n", cwd=tmp_path)
    assert all(len(line) <= columns for line in asked), asked
    assert "(Wu & He 2018)?" in " ".join(asked) and asked[-1].endswith("nothing written")
    assert list(tmp_path.iterdir()) == []
    make_run(runs, ["norm=layernorm"])  # finished: `run` closes with its line, not training
    closing = on_terminal(columns, "run", "model=cnn", "norm=layernorm", "--runs-dir", str(runs))
    assert closing[0].startswith("skipped, already finished")
    path = closing[-1]  # on a line of its own, whole, however long the temporary directory
    assert path.startswith(str(runs / "cnn-layernorm-pre-fp32-b32-s0-")) and " " not in path
    assert all(len(line) <= columns for line in closing[:-1]), closing
