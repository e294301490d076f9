"""Issue 11's list, one regression test per item: values that must be refused, names that must
be plain, a runs directory treated as untrusted input."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from normbench.cli import app

runner = CliRunner()


def one_line_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, (word, result.output)


# ------------------------------------------------------------------- values that must be refused
@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("train.lr=nan", ("train.lr=nan", "a finite number")),
        ("train.lr=inf", ("train.lr=inf", "a finite number")),
        ("norm.momentum=nan", ("norm.momentum=nan", "a finite number")),
        ("data.val_fraction=nan", ("data.val_fraction=nan", "a finite number")),
        ("seed=4294967296", ("seed=4294967296", "from 0 to 4294967295")),
        ("norm.eps=" + "9" * 400, ("norm.eps=999", "a finite number")),
        ("seed=" + "9" * 300, ("seed=999", "...", "from 0 to 4294967295")),
        ("model.name=cnn", ("model.name names the chosen model", "model=VALUE")),
        ("data.name=tokens", ("data.name names the chosen data", "data=VALUE")),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path, override, words):
    for command in (["run", override], ["run", override, "--cfg"]):
        one_line_error(runner.invoke(app, [*command, "--runs-dir", str(tmp_path)]), *words)
    assert list(tmp_path.iterdir()) == []


def test_a_nan_validation_loss_is_a_divergence_not_a_complete_run(tmp_path):
    """norm.momentum=nan used to train to 'complete' with a NaN validation loss (running
    statistics turn NaN while the training loss, from batch statistics, stays finite). The
    config now refuses NaN; the trainer, given one anyway, records the divergence."""
    from helpers import tiny

    from normbench.experiment.compose import compose
    from normbench.training.run import run_experiment

    cfg = compose(tiny("model=cnn", "norm=batchnorm"))
    cfg["norm"]["momentum"] = float("nan")
    outcome = run_experiment(cfg, tmp_path, progress=False)
    assert outcome.status == "diverged"


def test_a_key_given_twice_to_run_is_refused_naming_both_values(tmp_path):
    """Hydra keeps the last of ``train.lr=1e-3 train.lr=3e-3`` silently (issue 50, item 9)."""
    for command in (["run"], ["run", "--cfg"]):
        result = runner.invoke(
            app, [*command, "train.lr=1e-3", "train.lr=3e-3", "--runs-dir", str(tmp_path)]
        )
        one_line_error(result, "train.lr is given twice", "train.lr=1e-3", "train.lr=3e-3")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------- sweep input
@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["seed=0,1", "seed=2,3"], ("seed is given twice", "seed=0,1", "seed=2,3")),
        (["seed=0,1", "seed=2"], ("seed is given twice",)),
        (["train.lr=1e-3", "train.lr=3e-3"], ("train.lr is given twice", "1e-3", "3e-3")),
        (["norm=layernorm", "norm=rmsnorm"], ("norm is given twice", "norm=rmsnorm")),
        (["seed=0,1", "--name", "x" * 300], ("--name", "1 to 64")),
        (["seed=0,1", "--name", "x*"], ("--name 'x*'",)),
        (["seed=0,1", "--name", "../up"], ("--name '../up'",)),
        (["seed=range(200000)", "--dry-run"], ("200000 combinations", "--max-runs 10000")),
        (["seed=0,1", "--max-runs", "0"], ("--max-runs 0",)),
        (["--max-seeds", "1"], ("--max-seeds 1", "--until-decided", "2 to 100")),
        (["seed=0,1", "--max-seeds", "8", "--dry-run"], ("--max-seeds 8", "--until-decided")),
        (["./missing.yaml"], ("sweep file './missing.yaml' does not exist",)),
    ],
)
def test_bad_sweep_input_is_one_line_and_writes_nothing(tmp_path, arguments, words):
    result = runner.invoke(app, ["sweep", *arguments, "--runs-dir", str(tmp_path / "runs")])
    one_line_error(result, *words)
    assert not (tmp_path / "runs").exists()


def test_report_sweep_takes_names_not_patterns(tmp_path):
    (tmp_path / "runs" / "sweeps").mkdir(parents=True)
    (tmp_path / "runs" / "sweeps" / "a-20260101-000000.json").write_text('{"runs": []}')
    for pattern in ("*", "a*", "[a]", "../x"):
        result = runner.invoke(app, ["report", str(tmp_path / "runs"), "--sweep", pattern])
        one_line_error(result, f"--sweep {pattern!r}")


def test_a_large_dry_run_streams_its_first_lines(tmp_path, monkeypatch):
    """Each job's line is printed as soon as it is composed, not after the whole grid: stop
    composing after three jobs and the three lines are already out."""
    from io import StringIO

    from rich.console import Console

    from normbench.store.rundir import Rerun
    from normbench.sweeps import plan

    composed = plan.compose_jobs

    def three_then_stop(job_overrides):
        for index, job in enumerate(composed(job_overrides)):
            if index == 3:
                raise KeyboardInterrupt
            yield job

    monkeypatch.setattr(plan, "compose_jobs", three_then_stop)
    out = StringIO()
    with pytest.raises(KeyboardInterrupt):
        plan.print_plan(
            Console(file=out, width=200), None, ["model=cnn", "seed=range(5000)"], tmp_path, Rerun()
        )
    lines = out.getvalue().splitlines()
    assert "5000 combinations" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["#", "1", "2", "3"]


# ------------------------------------------------------------ writes outside the runs directory
def tiny_cnn(*extra: str) -> list[str]:
    from helpers import tiny

    return tiny("model=cnn", "model.width=8", "model.depth=1", "norm=batchnorm", *extra)


def planted_run_id(*extra: str) -> str:
    from normbench.experiment.compose import compose
    from normbench.store.rundir import run_id

    return run_id(compose(tiny_cnn(*extra)))


def test_a_symlinked_lock_never_truncates_its_target(tmp_path):
    runs, victim = tmp_path / "runs", tmp_path / "victim.txt"
    victim.write_text("precious")
    (runs / ".locks").mkdir(parents=True)
    (runs / ".locks" / f"{planted_run_id()}.lock").symlink_to(victim)
    result = runner.invoke(app, ["run", *tiny_cnn(), "--runs-dir", str(runs), "-q"])
    one_line_error(result, ".lock", "cannot open the lock")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("where", ["run", ".locks"])
def test_symlinked_run_and_lock_directories_are_refused(tmp_path, where):
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs.mkdir()
    (runs / (planted_run_id() if where == "run" else ".locks")).symlink_to(elsewhere)
    result = runner.invoke(app, ["run", *tiny_cnn(), "--runs-dir", str(runs), "-q"])
    one_line_error(result, "is a symlink; normbench never writes through one")
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_sweeps_directory_is_refused(tmp_path):
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs.mkdir()
    (runs / "sweeps").symlink_to(elsewhere)
    result = runner.invoke(app, ["sweep", *tiny_cnn(), "seed=0,1", "--runs-dir", str(runs)])
    one_line_error(result, "sweeps is a symlink")
    assert list(elsewhere.iterdir()) == []


def test_files_respect_the_umask(tmp_path):
    import os

    from normbench.store.rundir import atomic_write, file_mode

    file_mode.cache_clear()
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "meta.json", "{}")
        assert (tmp_path / "meta.json").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)
        file_mode.cache_clear()


# ------------------------------------------------------------------- hangs and memory in readers
def hand_store(tmp_path):
    """One complete, two-seed group as normbench writes it (tests/test_report.make_run)."""
    from helpers import make_run

    runs = tmp_path / "runs"
    ids = [make_run(runs, ["norm=batchnorm", f"seed={s}"], acc=0.9 + s / 100) for s in range(2)]
    return runs, ids


def report_json(runs):

    result = runner.invoke(app, ["report", str(runs), "--format", "json"])
    assert result.exit_code in (0, 2), result.output
    return result


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (BOMB, "YAML aliases are not allowed"),
        ("a: &a [*a]\n", "YAML aliases are not allowed"),
        ("model: {name: cnn\n  broken", "not valid YAML"),
        ("", "not a run's config"),
        ("model:\n  name: cnn\n", "no norm.name"),  # truncated but parseable
        ("[" * 100_000 + "]" * 100_000, "not valid YAML"),
    ],
)
def test_corrupt_configs_are_named_warnings_never_tracebacks(tmp_path, content, words):
    import json

    runs, ids = hand_store(tmp_path)
    (runs / ids[0] / "config.yaml").write_text(content)
    result = report_json(runs)
    assert result.exit_code == 0 and "Traceback" not in result.output
    payload = json.loads(result.stdout)
    assert any(ids[0] in w and words in w for w in payload["warnings"]), payload["warnings"]
    assert (runs / ".index.sqlite").stat().st_size < 1_000_000


def test_a_fifo_never_blocks_report_run_or_dry_run(tmp_path):
    """Each command in this process under helpers.invoke's time limit (a blocking open of a
    FIFO is interrupted by its alarm and fails the test) and never a traceback."""
    import os

    from helpers import invoke

    from normbench.experiment.compose import compose
    from normbench.store.rundir import run_id

    runs, ids = hand_store(tmp_path)
    fifo_run = run_id(compose(tiny_cnn()))
    (runs / fifo_run).mkdir()
    os.mkfifo(runs / fifo_run / "meta.json")
    os.unlink(runs / ids[0] / "meta.json")
    os.mkfifo(runs / ids[0] / "meta.json")
    for command in (
        ["report", str(runs)],
        ["sweep", *tiny_cnn(), "--dry-run", "--runs-dir", str(runs)],
        [
            "run",
            *tiny_cnn("train.max_steps=2", "train.eval_every=2"),
            "--runs-dir",
            str(runs),
            "-q",
        ],
    ):
        done = invoke(*command, seconds=120)
        assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "meta",
    ["[1, 2]", '{"status": "complete", "summary": [1]}', '{"status": 5}', "{half", "[" * 50_000],
)
def test_meta_of_the_wrong_shape_is_a_warning(tmp_path, meta):
    import json

    runs, ids = hand_store(tmp_path)
    (runs / ids[0] / "meta.json").write_text(meta)
    result = report_json(runs)
    assert result.exit_code == 0, result.output
    assert any(ids[0] in w for w in json.loads(result.stdout)["warnings"])


def test_an_index_that_is_not_ours_is_rebuilt(tmp_path):
    """Garbage, an empty file, another program's database and an earlier normbench's JSON index
    in place of runs/.index.sqlite: the report reads the runs' files and rebuilds it."""
    import sqlite3

    runs, ids = hand_store(tmp_path)
    index = runs / ".index.sqlite"

    def foreign(path):
        connection = sqlite3.connect(path)
        connection.execute("CREATE TABLE runs (run_id TEXT, row TEXT)")
        connection.execute("INSERT INTO runs VALUES ('../victim', '{}')")
        connection.commit()
        connection.close()

    for make in (
        lambda path: path.write_bytes(b"garbage" * 100),
        lambda path: path.write_bytes(b""),
        foreign,
        lambda path: path.write_text('{"version": 5, "runs": {}}'),
    ):
        for leftover in runs.glob(".index.sqlite*"):
            leftover.unlink()
        make(index)
        result = report_json(runs)
        assert result.exit_code == 0 and '"complete": 2' in result.stdout, result.output
        tables = sqlite3.connect(index).execute("SELECT name FROM sqlite_master").fetchall()
        assert sorted(tables) == [("configs",), ("runs",)]


def test_a_truncated_sweep_record_is_named_unreadable(tmp_path):
    runs, ids = hand_store(tmp_path)
    (runs / "sweeps").mkdir()
    (runs / "sweeps" / "s-20260101-000000-abc.json").write_text('{"runs": [{"run_id": "')
    result = runner.invoke(app, ["report", str(runs), "--sweep", "s"])
    # the sweep is there, its only record spoiled: said so, naming the file (issue 51, 16)
    one_line_error(result, "--sweep s: its record cannot be read", "s-20260101-000000-abc.json")


# ------------------------------------------------------------ corrupt runs are trained again
def test_the_index_sees_an_edited_config(tmp_path):
    from normbench.store.catalog import load_runs

    runs, ids = hand_store(tmp_path)
    assert set(load_runs(runs).runs["train.lr"]) == {0.003}
    path = runs / ids[0] / "config.yaml"
    path.write_text(path.read_text().replace("lr: 0.003", "lr: 0.004"))
    assert set(load_runs(runs).runs["train.lr"]) == {0.003, 0.004}


@pytest.mark.parametrize("damage", ["delete metrics", "truncate metrics", "empty config"])
def test_a_damaged_finished_run_is_reported_and_trained_again(tmp_path, damage):
    from normbench.experiment.compose import compose
    from normbench.store.rundir import RunDir
    from normbench.training.run import run_experiment

    runs = tmp_path / "runs"
    cfg = compose(tiny_cnn())
    first = run_experiment(cfg, runs, progress=False)
    run = RunDir(runs, first.run_id)
    if damage == "delete metrics":
        run.metrics_path.unlink()
    elif damage == "truncate metrics":
        run.metrics_path.write_bytes(run.metrics_path.read_bytes()[:100])
    else:
        run.config_path.write_text("")
    warned = report_json(runs)
    assert first.run_id in warned.output or warned.exit_code == 2
    again = run_experiment(cfg, runs, progress=False)
    assert not again.skipped and run.intact()


def test_a_running_run_whose_process_died_is_abandoned_and_trained_again(tmp_path):
    import json

    from normbench.experiment.compose import compose
    from normbench.store.rundir import RunDir
    from normbench.training.run import run_experiment

    runs = tmp_path / "runs"
    cfg = compose(tiny_cnn())
    first = run_experiment(cfg, runs, progress=False)
    run = RunDir(runs, first.run_id)
    run.write_meta({**run.read_meta(), "status": "running"})  # as a kill -9 leaves it
    result = report_json(runs)
    assert json.loads(result.stdout)["statuses"] == {"abandoned": 1}
    with run.lock():  # while a process holds the lock, it is running, not abandoned
        held = report_json(runs)
        assert json.loads(held.stdout)["statuses"] == {"running": 1}
    assert not run_experiment(cfg, runs, progress=False).skipped


# ------------------------------------------------------------------------- stored text shown
def test_escape_sequences_and_markup_from_a_runs_directory_are_shown_inert(tmp_path):
    import yaml

    runs, ids = hand_store(tmp_path)
    (runs / "evil\x1b[2Jname").mkdir()  # a directory name with an escape sequence
    path = runs / ids[0] / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["norm"]["name"] = "[link=https://example.com]click[/link]"
    path.write_text(yaml.safe_dump(cfg))
    result = runner.invoke(app, ["report", str(runs)], env={"COLUMNS": "200"})
    assert "\x1b[2J" not in result.output
    assert "[link=https://example.com]click[/link]" in result.output.replace("\n", "")


# --------------------------------------------------------------------------- signals
@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "ignored_at_start"),
    [("SIGTERM", False), ("SIGINT", True)],  # SIGINT ignored: a script's `&` background job
)
def test_the_sweep_parent_stops_its_workers_and_records_them_interrupted(
    tmp_path, signum, ignored_at_start
):
    import signal
    import subprocess
    import sys
    import time

    from helpers import QUICK, metas

    runs = tmp_path / "runs"
    longer = [o for o in QUICK if not o.startswith(("train.max_steps=", "train.eval_every="))]
    args = [*longer, "train.max_steps=3000", "train.eval_every=50", "seed=range(4)", "--jobs", "2"]

    def start_ignoring_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-m", "normbench", "sweep", *args, "--runs-dir", str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=start_ignoring_sigint if ignored_at_start else None,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        states = [m and m.get("status") for m in metas(runs).values()] if runs.exists() else []
        if states.count("running") == 2:
            break
        time.sleep(0.1)
    # both workers are inside runs of 3,000 steps: only the signal can end them now
    proc.send_signal(getattr(signal, signum))  # the parent only, not its workers
    out, err = proc.communicate(timeout=120)  # a hang guard, not a speed claim
    assert proc.returncode == 130, out + err
    statuses = [m["status"] for m in metas(runs).values()]
    assert "running" not in statuses and statuses.count("interrupted") == 2, statuses


@pytest.mark.slow
def test_an_interrupted_forced_rerun_keeps_the_previous_result(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from helpers import invoke

    from normbench.experiment.compose import compose
    from normbench.store.rundir import RunDir
    from normbench.training.run import run_experiment

    runs = tmp_path / "runs"
    overrides = tiny_cnn("train.max_steps=1500", "train.eval_every=500")
    first = run_experiment(compose(overrides), runs, progress=False)
    run = RunDir(runs, first.run_id)
    before = (run.read_meta(), run.metrics_path.read_bytes())

    def forced_run(overrides: list[str]) -> list[str]:
        command = [sys.executable, "-m", "normbench", "run", *overrides, "--force", "-q"]
        return [*command, "--runs-dir", str(runs)]

    proc = subprocess.Popen(
        forced_run(overrides),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and not any((runs / ".staging").glob("*/*/metrics.parquet")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # training under way in the staging directory
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130
    assert "the forced rerun was discarded" in err and "keeps its previous result" in err
    assert (run.read_meta(), run.metrics_path.read_bytes()) == before
    assert not any((runs / ".staging").iterdir())
    again = invoke(
        "run", *tiny_cnn(), "--force", "-q", "--runs-dir", str(runs), seconds=180, memory=8 << 30
    )
    assert again.exit_code == 0, again.output  # another config: a plain run


def test_submitit_launchers_refuse_a_runs_directory_others_can_write(tmp_path):
    runs = tmp_path / "runs"
    (runs / "sweeps").mkdir(parents=True)
    runs.chmod(0o755)
    (runs / "sweeps").chmod(0o777)
    result = runner.invoke(
        app,
        ["sweep", *tiny_cnn(), "seed=0,1", "--launcher", "submitit_local", "--runs-dir", str(runs)],
    )
    one_line_error(result, "sweeps is writable by others", "chmod go-w")
    assert list((runs / "sweeps").iterdir()) == []


# ------------------------------------------------- issue 32: read-only and odd destinations
@pytest.fixture
def read_only_store(tmp_path):
    """A runs directory on a tmpfs remounted read-only (root only; skipped elsewhere): a
    finished run and a failed one."""
    import os
    import subprocess

    from helpers import make_run

    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    runs = mount / "runs"
    small = ["model.width=8", "model.depth=1", "train.max_steps=4", "threads=1"]
    make_run(runs, [*small, "seed=1"])
    make_run(runs, small, status="failed", acc=None)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    yield runs, ["model=cnn", *small]
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_runs_directory_gets_one_line_or_a_skip(read_only_store, tmp_path):
    runs, config = read_only_store
    skipped = runner.invoke(app, ["run", *config, "seed=1", "--runs-dir", str(runs)])
    assert skipped.exit_code == 0 and skipped.output.startswith("skipped, already finished")
    one_line_error(
        runner.invoke(app, ["run", *config, "seed=2", "--runs-dir", str(runs)]),
        "Read-only file system",
    )
    one_line_error(
        runner.invoke(app, ["sweep", *config, "seed=3,4", "--runs-dir", str(runs)]),
        "Read-only file system",
    )
    one_line_error(runner.invoke(app, ["runs", "clean", str(runs), "--yes"]), "is read-only")
    dry = runner.invoke(app, ["runs", "clean", str(runs), "--dry-run"])
    assert dry.exit_code == 0 and "1 run(s) would be deleted" in dry.output, dry.output
    one_line_error(
        runner.invoke(app, ["report", str(runs), "--format", "csv", "--out", str(runs / "r.csv")]),
        "--out",
        "not writable",
    )


@pytest.mark.parametrize(
    ("out", "fmt", "words"),
    [
        ("", "csv", ("--out .: a directory",)),
        ("{tmp}", "json", ("a directory; valid: a file name",)),
        ("{tmp}/r.txt", "rich", ("writes csv, markdown or json",)),
    ],
)
def test_report_out_to_a_directory_or_in_rich_is_one_line(tmp_path, out, fmt, words):
    from helpers import make_run

    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    before = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(
        app, ["report", str(runs), "--format", fmt, "--out", out.format(tmp=tmp_path)]
    )
    one_line_error(result, *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_runs_clean_dry_run_creates_no_lock_files(tmp_path):
    from helpers import make_run

    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"], status="failed", acc=None)
    result = runner.invoke(app, ["runs", "clean", str(runs), "--dry-run"])
    assert result.exit_code == 0 and "1 run(s) would be deleted" in result.output
    assert not (runs / ".locks").exists()


@pytest.mark.parametrize(
    "finished", [5, ["x"], "2026-01-01T01:00:00", "2026-01-01T01:00:00+00:00", "nope"]
)
def test_findings_reads_a_record_whose_finished_is_odd(tmp_path, finished):
    """`finished` not a string, or with a zone where `started` has none: no time, no crash."""
    import json

    from normbench.studies import findings

    study = findings.STUDIES[0].name
    (tmp_path / "sweeps").mkdir()
    record = {"runs": [], "started": "2026-01-01T00:00:00+00:00", "finished": finished}
    (tmp_path / "sweeps" / f"findings-{study}-20260101-000000-abc.json").write_text(
        json.dumps(record)
    )
    walls = findings.training_walls(tmp_path)
    assert walls == ({study: 3600.0} if finished == "2026-01-01T01:00:00+00:00" else {})


def test_findings_checks_its_out_before_any_study_trains(tmp_path):
    runs = tmp_path / "runs"
    result = runner.invoke(
        app, ["findings", "--smoke", "--out", str(tmp_path), "--runs-dir", str(runs)]
    )
    one_line_error(result, f"--out {tmp_path}: a directory")
    assert not runs.exists()


@pytest.fixture(scope="module")
def two_workloads(tmp_path_factory):
    from helpers import make_run

    runs = tmp_path_factory.mktemp("two") / "runs"
    for data in ("mnist1d", "digits"):
        for norm in ("layernorm", "rmsnorm"):
            for seed in range(2):
                make_run(runs, [f"data={data}", f"norm={norm}", f"seed={seed}"])
    return runs


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--table", "nope"], "--table nope: no such table; valid: across, convergence"),
        (["--profile", "time"], "--profile time: for the table across workloads; add --across"),
        (["--across", ""], "--across '': name setting keys"),
        (["--across", "data,data"], "--across data,data: a key is given twice"),
        (["--by", "run_id"], "--by run_id: not a config key to group by"),
        (["--by", "status"], "--by status: not a config key"),
        (["--by", "final_val_acc"], "--by final_val_acc: not a config key"),
        (["--best-over", "seed"], "--best-over seed: not a config key"),
    ],
)
def test_report_options_accepted_before_are_refused_in_one_line(two_workloads, options, words):
    one_line_error(runner.invoke(app, ["report", str(two_workloads), *options]), words)


def test_an_empty_sweep_preset_is_refused(tmp_path):
    for dry_run in ([], ["--dry-run"]):
        result = runner.invoke(app, ["sweep", "", *dry_run, "--runs-dir", str(tmp_path / "r")])
        one_line_error(result, "sweep '': valid: a preset's name or file")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("option", "where", "words"),
    [
        ("--html", "{tmp}", "a directory; valid: a file name"),
        ("--html", "", "--html .: a directory"),
        ("--html", "{tmp}/file/r.html", "is not a directory"),
        ("--plots", "{tmp}/file", "is not a directory"),
        ("--plots", "{tmp}/file/img", "is not a directory"),
    ],
)
def test_odd_figure_destinations_are_one_line_before_drawing(tmp_path, option, where, words):
    from helpers import make_run

    runs = tmp_path / "runs"
    make_run(runs, ["norm=layernorm"])
    (tmp_path / "file").write_text("")
    result = runner.invoke(app, ["report", str(runs), option, where.format(tmp=tmp_path)])
    one_line_error(result, option, words)
    assert "drawing figure" not in result.output
