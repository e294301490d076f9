"""`run --force` swaps a finished run for its rerun in two renames; a process killed by
SIGKILL at any step of the swap loses no finished result: the next `normbench run` (of any
config) finds the run directory missing and puts back the new result when it is complete,
else the previous one.

The kill is real (SIGKILL in a forked child, at the hook normbench.training.run.fault_point
calls between the steps); the training is not (a stand-in writes a finished run at once)."""

from __future__ import annotations

import os
import signal

import pytest
from helpers import make_run
from typer.testing import CliRunner

from normbench.cli import app
from normbench.experiment.compose import compose
from normbench.store.rundir import Rerun, RunDir, run_id
from normbench.training import run as training

runner = CliRunner()
CONFIG = ["model=cnn", "norm=layernorm", "seed=0"]


def stand_in(cfg, run, device, progress, labels, ranks=None):
    """What train_and_record leaves: a finished run, its accuracy 0.5 (the previous: 0.9)."""
    summary = {"final_val_acc": 0.5}
    run.write_config(cfg)
    run.write_meta({"run_id": run.run_id, "status": "complete", "summary": summary})
    run.write_metrics([{"step": 1, "train_loss": 1.0, "val_acc": 0.5}])
    return training.Outcome(run.run_id, run.path, "complete", {"final_val_acc": 0.5})


def killed_at(step: str, runs) -> int:
    """`run --force` of CONFIG in a forked child that SIGKILLs itself at ``step``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        try:
            training.train_and_record = stand_in

            def fault(at: str) -> None:
                if at == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            training.fault_point = fault
            training.run_experiment(compose(CONFIG), runs, Rerun(force=True), progress=False)
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


@pytest.mark.parametrize(
    ("step", "accuracy"),
    [("trained", 0.9), ("moved aside", 0.5), ("moved in", 0.5)],
)
def test_a_kill_at_any_step_of_a_forced_swap_keeps_a_result(tmp_path, monkeypatch, step, accuracy):
    runs = tmp_path / "runs"
    make_run(runs, CONFIG[1:], acc=0.9)
    name = run_id(compose(CONFIG))
    status = killed_at(step, runs)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if step == "moved aside":  # the instant the issue found: no run directory at all
        assert not (runs / name).exists()
    monkeypatch.setattr(training, "train_and_record", stand_in)
    other = runner.invoke(app, ["run", "model=cnn", "norm=rmsnorm", "--runs-dir", str(runs)])
    assert other.exit_code == 0, other.output
    meta = RunDir(runs, name).read_meta()
    assert meta["status"] == "complete" and meta["summary"]["final_val_acc"] == accuracy
    assert RunDir(runs, name).intact()
    assert list((runs / ".staging").iterdir()) == []
    listed = runner.invoke(app, ["runs", "list", str(runs)], env={"COLUMNS": "200"})
    assert name in listed.stdout
