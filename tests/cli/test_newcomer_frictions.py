"""What a new user met on the command line and in the HTML report (issue 62), each through
the CLI: progress lines whose counts add up and fit 80 columns, help and hints that say what
the code does, suggestions for a mistyped option, and refusals before any plan is printed."""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import QUICK, invoke, make_run


def normbench(*args: str, runs: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`normbench ARGS` in a subprocess, as a user runs it (piped: nothing wraps for it)."""
    where = ["--runs-dir", str(runs)] if runs is not None else []
    return subprocess.run(
        [sys.executable, "-m", "normbench", *args, *where],
        capture_output=True,
        text=True,
        **kwargs,
    )


def in_process(
    *args: str, runs: Path | None = None, columns: int = 100
) -> subprocess.CompletedProcess:
    """`normbench ARGS` in this process (tests.helpers.invoke: bounded, never a traceback), its
    exit code and streams as ``normbench`` gives them: for a test of what a command prints,
    where the process is not what it checks (a subprocess costs seconds of importing torch)."""
    where = ["--runs-dir", str(runs)] if runs is not None else []
    result = invoke(*args, *where, columns=columns)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


@pytest.mark.slow
def test_until_decided_lines_add_up_say_why_seeds_are_drawn_and_fit_80_columns(tmp_path):
    """Two norms at two batches: 4 groups, so 3 comparisons against the reference and 2 batch
    contrasts. Every count the lines give adds up to that, and a round that adds seeds to the
    groups of a comparison stopped for futility says they draw them for another one."""
    grid = [*QUICK, "norm=batchnorm,groupnorm", "batch_size=8,16"]
    result = normbench(
        "sweep", *grid, "seed=0,1", "--until-decided", "--max-seeds", "3", runs=tmp_path / "runs"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    ours = ("after round", "until decided:", "a fixed design", "  ")
    too_wide = [line for line in lines if line.startswith(ours) and len(line) > 80]
    assert not too_wide, too_wide
    text = " ".join(line.strip() for line in lines)
    total = re.search(
        r"until decided: \d rounds?, \d+ of (\d+) comparisons \((\d+) against the reference, "
        r"(\d+) batch contrasts\) decided from (\d+) runs",
        text,
    )
    assert total, result.stdout
    comparisons, against, batch, _ = map(int, total.groups())
    assert (against, batch) == (3, 2) and comparisons == against + batch
    for look in re.finditer(r"after round \d[^:]*: (\d+) comparisons? undecided among (\d+)", text):
        assert int(look.group(1)) <= comparisons and int(look.group(2)) <= 4
    for between in re.finditer(
        r"after round \d of at most \d: [^;]*; round \d adds[^\n]*?groups?"
        r"(, those of the \d+ still drawing seeds)?",
        text,
    ):
        stopped = "stopped for futility" in between.group(0)
        assert stopped == bool(between.group(1)), between.group(0)


def test_a_refused_dry_run_prints_the_refusal_alone(tmp_path):
    """The plan's header and column titles stood above the refusal of a grid's first job."""
    result = in_process("sweep", "smoke", "norm=fancy", "--dry-run", runs=tmp_path / "runs")
    assert result.returncode == 2 and result.stdout == "", result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("normbench: error: job 1 of 2") and "norm=fancy" in line


@pytest.mark.parametrize(
    "overrides", [["norm=layernorm,rmsnorm", "seed=range(2)"], ["batch_size=8,16"]]
)
def test_the_no_preset_note_suggests_only_a_command_that_is_accepted(overrides, tmp_path):
    """`normbench sweep batch_size=8,16` was told to try `normbench sweep batch_sensitivity
    batch_size=8,16`, which the preset's ghost batches (up to 32) refuse."""
    runs = tmp_path / "runs"
    result = in_process("sweep", *overrides, "--dry-run", runs=runs)
    assert result.returncode == 0, result.stderr
    note = next(line for line in result.stdout.splitlines() if line.startswith("no preset"))
    suggested = re.search(r"default preset: normbench (sweep .*)$", note)
    if suggested is None:
        assert "The default preset, batch_sensitivity, with them is not suggested (" in note
        assert "norm.ghost_batch=16 is larger than batch_size=8" in note
        assert "`normbench list` shows the presets" in note
        return
    again = in_process(*shlex.split(suggested.group(1)), "--dry-run", runs=runs)
    assert again.returncode == 0, again.stderr


def test_sweep_help_says_how_tune_chooses_as_the_design_does():
    """The help said successive halving always; docs/design.md: every candidate at the full
    budget, halving only where it trains at most half the full grid's steps."""
    result = in_process("sweep", "--help", columns=200)
    said = " ".join(result.stdout.replace("│", " ").split())
    assert "every candidate at the full budget, or successive halving where that trains at " in (
        said
    )
    assert "at most half the full grid's steps" in said


def test_a_mistyped_table_is_answered_with_the_one_meant_before_any_run_is_read(tmp_path):
    """`--table convergnce` listed eleven tables and no guess; it was checked after the whole
    report was computed. An empty runs directory shows it is refused before any is read."""
    result = in_process("report", str(tmp_path), "--table", "convergnce")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("normbench: error: --table convergnce: no such table (did you mean ")
    assert "(did you mean convergence?); valid: across, convergence," in line


def test_a_mistyped_api_option_is_answered_with_the_one_meant(tmp_path):
    from normbench import api
    from normbench.core.errors import UsageError

    with pytest.raises(UsageError, match=r"option refrence: .* \(did you mean reference\?\)"):
        api.report(tmp_path, refrence="norm=layernorm")
    with pytest.raises(UsageError, match=r"--table batch: .* \(did you mean batch_sensitivity\?"):
        api.report(tmp_path, table="batch")


def screen(raw: bytes) -> list[str]:
    """The lines a terminal shows for ``raw``: enough of one for rich's live line (carriage
    return, erase line, cursor up; other escape sequences dropped)."""
    lines, row, column = [""], 0, 0
    text = raw.decode(errors="replace")
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", text):
        if token == "\r":
            column = 0
        elif token == "\n":
            row, column = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif token == "\x1b[2K":
            lines[row] = ""
        elif token == "\x1b[1A":
            row = max(0, row - 1)
        elif not token.startswith("\x1b"):
            line = lines[row].ljust(column)
            lines[row] = line[:column] + token + line[column + len(token) :]
            column += len(token)
    return [line.rstrip() for line in lines if line.strip()]


@pytest.mark.slow
def test_ctrl_c_on_a_terminal_erases_the_live_line_and_breaks_its_line_between_words(tmp_path):
    """At 80 columns the interrupted line (a run's path in it) wrapped mid-word, under the
    live line's last frame cut mid-update."""
    runs = tmp_path / "runs"
    endless = [o for o in QUICK if not o.startswith("train.max_steps=")] + ["train.max_steps=99999"]
    reader, writer = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "normbench", "run", *endless, "threads=1", "--runs-dir", str(runs)],
        stdin=subprocess.DEVNULL,
        stdout=writer,
        stderr=writer,
        env={**os.environ, "COLUMNS": "80"},
    )
    os.close(writer)
    chunks, interrupted = [], False
    deadline = time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([reader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(reader, 4096)
            except OSError:  # a pty's reader after its writer closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        if not interrupted and list(runs.glob("*/metrics.parquet")):
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            interrupted = True
    assert proc.wait(timeout=60) == 130
    os.close(reader)
    shown = screen(b"".join(chunks))
    assert not [line for line in shown if "━" in line], shown  # the live line is gone
    # broken between words: a line is wider than 80 only where one word is (the run's path)
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in shown), shown
    said = " ".join(line.strip() for line in shown)
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    assert re.fullmatch(
        rf"interrupted at step \d+: metrics so far kept in {re.escape(str(run_dir))}; running "
        r"it again resumes from its last checkpoint if it saved one \(train.checkpoint_every\), "
        r"else starts it over",
        said,
    ), shown


@pytest.mark.parametrize(
    ("threads", "torch_threads", "on_cpu", "load", "warned"),
    [
        (None, 2, True, 1.0, True),  # one other process on two cores: half of them busy
        (None, 2, True, 0.9, False),  # a quiet machine
        (1, 2, True, 9.0, False),  # threads=1 given
        (2, 2, True, 9.0, False),  # threads given: the user chose
        (None, 1, True, 9.0, False),  # OMP_NUM_THREADS=1: torch runs one thread already
        (None, 2, False, 9.0, False),  # a GPU run
    ],
)
def test_a_cpu_run_without_threads_on_a_busy_machine_is_warned_once(
    threads, torch_threads, on_cpu, load, warned
):
    """The load average is injected (never a loaded machine in a test): the line appears only
    when threads is unset, torch would run several threads on the CPU, and the machine is
    busy; it is one line, naming the load, the cores and the fix."""
    from normbench.cli.run import load_warning

    line = load_warning(threads, torch_threads, on_cpu, load=load, cores=2)
    assert (line is not None) == warned
    if warned:
        assert line == (
            f"warning: this machine is busy (load average {load:.1f} on 2 cores) and torch runs "
            "2 threads that wait for each other: threads=1 can be many times faster here"
        )


def test_the_html_scaling_table_puts_its_answer_beside_the_group(tmp_path):
    """At 800 pixels the trend and cross columns, last as the terminal has them, were off the
    window with only an edge shadow to say so (looked at in headless Chromium at 800 and 1280
    pixels): they follow the group column now, whatever the window."""
    from tests.report.test_scaling_section import WIDTHS, _loss

    runs = tmp_path / "runs"
    for width in WIDTHS:
        for norm, k in (("layernorm", 1.0), ("batchnorm", 2.0)):
            for seed in range(2):
                make_run(
                    runs,
                    [f"model.width={width}", f"norm={norm}", f"seed={seed}"],
                    parameters=100 * width * width,
                    summary_extra={"final_val_loss": _loss(100 * width * width, 30, 32, k, seed)},
                )
    page = tmp_path / "r.html"
    result = in_process("report", str(runs), "--scaling", "model.width", "--html", str(page))
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    scaling = text[text.index("<h2>Scaling along model.width</h2>") :]
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", scaling).group(1)
    headers = re.findall(r"<th[^>]*>(.*?)</th>", head)
    assert headers[:4] == ["group", "trend", "cross", "x ref top"], headers


@pytest.mark.slow
def test_a_tuned_sweeps_warning_is_shown_once_in_the_html(tmp_path):
    """The tuned section shows its notes as warnings; the page's top showed them again."""
    from tests.sweeps.test_tuned import FakeLauncher, loss_and_accuracy_disagree, run_tuned

    run_tuned(tmp_path, FakeLauncher(tmp_path, loss_and_accuracy_disagree))
    page = tmp_path / "report.html"
    result = in_process("report", "--sweep", "tuned", "--html", str(page), runs=tmp_path)
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "loss-best and accuracy-best differ" in text
    warnings = re.findall(r'<p class="warning">(.*?)</p>', text, re.S)
    said = [w for w in warnings if "loss-best and accuracy-best differ" in w]
    assert len(said) <= 1, warnings  # it was twice, the page's top repeating the section


REPOSITORY = Path(__file__).resolve().parents[2]


def documented_commands(page: str, containing: str) -> list[str]:
    """The console commands of a docs page (continuation lines joined) that contain a word."""
    text = (REPOSITORY / page).read_text()
    commands = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        commands += [line.strip()[2:] for line in joined.splitlines() if line.strip()[:2] == "$ "]
    return [command for command in commands if containing in command]


def test_docs_sweeps_shows_a_ladder_and_its_command_is_accepted(tmp_path):
    """`--ladder` was on no page a user reads (docs/design.md only)."""
    (command,) = documented_commands("docs/sweeps.md", "--ladder ")
    argv = shlex.split(command)
    assert argv[:2] == ["normbench", "sweep"] and "--dry-run" in argv
    result = in_process(*argv[1:], runs=tmp_path / "runs")
    assert result.returncode == 0, result.stderr
    assert "ladder my-ladder: train.tokens_per_param=20 sets each rung's steps" in result.stdout
    assert not (tmp_path / "runs" / "sweeps").exists()  # a dry run writes nothing


def tutorial_norm(where: Path) -> None:
    """docs/your-own-norm.md's mynorms.py, written in ``where``."""
    page = (REPOSITORY / "docs" / "your-own-norm.md").read_text()
    body = re.search(r'```python title="mynorms.py"\n(.*?)```', page, re.S).group(1)
    (where / "mynorms.py").write_text(body)


def test_a_plugins_option_beside_shipped_norms_points_to_a_name_of_its_own(tmp_path):
    """`norm=layernorm,mynorms:PowerNorm norm.p=3` got "did you mean norm.eps" (of LayerNorm's
    keys), no word of the route that works; the route it names now is then followed."""
    tutorial_norm(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    runs = tmp_path / "runs"
    grid = ["model=cnn", "norm=layernorm,mynorms:PowerNorm", "norm.p=3", "--dry-run"]
    refused = normbench("sweep", *grid, runs=runs, cwd=tmp_path, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert "did you mean" not in line
    assert (
        "norm.p is an option of norm=mynorms:PowerNorm, not of norm=layernorm, and an override "
        "applies to every norm of a sweep" in line
    )
    named = re.search(
        r"a file NAME.yaml in a config directory's norm/ folder holding '(.*?)' and '(.*?)', "
        r"then --config-dir DIR (norm=\S+) \(docs/your-own-norm.md, \"Give it a name\"\)$",
        line,
    )
    assert named, line
    (tmp_path / "myconf" / "norm").mkdir(parents=True)
    (tmp_path / "myconf" / "norm" / "power3.yaml").write_text(
        f"{named.group(1)}\n{named.group(2)}\n"
    )
    grid = ["model=cnn", named.group(3).replace("NAME", "power3")]
    accepted = normbench(
        "sweep", "--config-dir", "myconf", *grid, "--dry-run", runs=runs, cwd=tmp_path, env=env
    )
    assert accepted.returncode == 0, accepted.stderr
    assert "mynorms:PowerNorm(p=3)" in accepted.stdout or "power3" in accepted.stdout
    # the no-preset note's command keeps the config directory, and is accepted as it stands
    note = accepted.stdout.splitlines()[-1]
    suggested = re.search(r"default preset: normbench (sweep .*)$", note).group(1)
    assert "--config-dir" in suggested
    again = normbench(*shlex.split(suggested), "--dry-run", runs=runs, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr


def test_the_documented_way_to_quiet_materials_notice_quiets_it(tmp_path):
    """`mkdocs build` opened with a boxed end-of-life notice of the Material theme; mkdocs.yml
    cannot turn it off (the theme prints it as it is imported), so docs/development.md gives
    the environment variable that does, and it does."""
    if shutil.which("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the docs extra: pip install -e '.[docs]')")
    page = (REPOSITORY / "docs" / "development.md").read_text()
    assert "`NO_MKDOCS_2_WARNING=1 mkdocs serve`" in page
    quiet = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        ["mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPOSITORY,
        env=quiet,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "end of life" not in built.stdout + built.stderr
