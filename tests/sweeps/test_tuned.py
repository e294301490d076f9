"""Tuned comparisons (normbench.sweeps.tuned, halving): the pruning rule on designed curves,
equal budgets, a selection that never sees the confirmation seeds or test numbers, and resume
in each phase. The runs are designed: a fake launcher writes each run with chosen numbers as
normbench writes them, so the real planner, record and report read them and nothing trains
(one slow test trains tiny runs end to end)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from rich.console import Console
from typer.testing import CliRunner

from normbench import api
from normbench.cli.app import app
from normbench.core.errors import UsageError
from normbench.report import tuning
from normbench.report.base import Method
from normbench.store.provenance import source_hash
from normbench.store.records import sweep_record
from normbench.store.rundir import Rerun, RunDir
from normbench.sweeps import grid as grids
from normbench.sweeps import halving, search, tuned, tuned_view
from normbench.sweeps.session import Launch
from tests.helpers import QUICK, tiny

runner = CliRunner()
LRS = ["0.001", "0.01", "0.1", "1.0"]


# ------------------------------------------------------------------ the pruning rule
def test_rungs_halve_down_to_two_at_the_full_budget():
    assert halving.rungs(4, 90, 3) == [halving.Rung(4, 30), halving.Rung(2, 90)]
    assert halving.rungs(12, 90, 3) == [
        halving.Rung(12, 10),
        halving.Rung(4, 30),
        halving.Rung(2, 90),
    ]
    assert halving.rungs(3, 90, 3) == [halving.Rung(3, 90)]  # no halving: the full grid
    assert halving.rungs(4, 8, 2) == [halving.Rung(4, 4), halving.Rung(2, 8)]
    assert halving.steps_spent(halving.rungs(12, 90, 3), seeds=2) == (120 + 120 + 180) * 2


def test_promotion_on_designed_curves():
    # Short-budget values (val_bpb, lower is better) per tuning seed; a diverged run (None)
    # is the worst; a tie goes to the candidate listed first.
    early = {"a": [2.0, 2.2], "b": [1.5, 1.6], "c": [None, 1.0], "d": [1.5, 1.6]}
    assert halving.promote(early, 2, higher_is_better=False) == ["b", "d"]
    assert halving.promote(early, 2, higher_is_better=True) == ["a", "b"]
    late = {"b": [1.2, 1.3], "d": [1.1, 1.6]}  # d wins one seed by a little, loses the other
    assert halving.promote(late, 1, higher_is_better=False) == ["b"]
    firm = halving.firmness(late, "b", higher_is_better=False)
    assert firm.runner_up == "d" and firm.gap == pytest.approx(0.1)
    assert 0.5 < firm.win_rate < 1  # resampling only seed 0 (d's win) makes d the choice
    solid = halving.firmness({"x": [0.9, 0.9], "y": [0.5, 0.6]}, "x", higher_is_better=True)
    assert solid.win_rate == 1.0 and solid.gap == pytest.approx(0.35)
    assert halving.firmness({"x": [0.9], "y": [0.5]}, "x", True).win_rate is None


# ------------------------------------------------------------------ designed stores
def write_run(runs, job, val: float | None, test: float, status: str = "complete") -> None:
    """A finished run as normbench writes it, with chosen final validation and test accuracy."""
    run = RunDir(runs, job.run_id)
    run.write_config(job.cfg)
    summary = {
        "final_val_acc": val,
        "best_val_acc": val,
        "test_acc": test,
        "steps": job.cfg["train"]["max_steps"],
        "num_classes": 10,
        "parameters": 100,
    }
    run.write_meta(
        {
            "run_id": job.run_id,
            "status": status,
            "summary": summary,
            "code": {"source_hash": source_hash()},
            "device": "cpu",
            "command": ["normbench", "run"],
        }
    )
    run.write_metrics([{"step": 1, "samples": 8, "train_loss": 1.0, "val_acc": val}])


class FakeLauncher:
    """Writes each run it is given with numbers from ``numbers(cfg)``; ``stop_after``: raise
    KeyboardInterrupt after that many runs (Ctrl-C mid-sweep)."""

    def __init__(self, runs, numbers, stop_after: int | None = None):
        self.runs, self.numbers, self.stop_after = runs, numbers, stop_after
        self.trained: list[dict] = []

    def launch(self, jobs, view) -> None:
        for job in jobs:
            if self.stop_after is not None and len(self.trained) >= self.stop_after:
                raise KeyboardInterrupt
            write_run(self.runs, job, *self.numbers(job.cfg))
            self.trained.append(job.cfg)
            view.done(job.run_id, "complete")

    def close(self) -> None:
        pass


def numbers(cfg) -> tuple[float, float]:
    """Validation and test accuracy designed so that every shortcut gives another answer:
    at 4 steps lr 0.01 and 0.1 lead (1.0 is pruned), at 8 steps 0.1 is best on validation
    but 0.01 best on test, 1.0 would win at 8 steps had it not been pruned, and on the
    confirmation seeds (below the tuning seeds) 0.001 is best on both."""
    lr, steps = cfg["train"]["lr"], cfg["train"]["max_steps"]
    if cfg["seed"] < tuned.TUNING_SEED:
        return {0.001: 0.95, 0.01: 0.5, 0.1: 0.6, 1.0: 0.4}[lr], 0.9
    jitter = 0.01 * (cfg["seed"] - tuned.TUNING_SEED)
    if steps == 4:
        return {0.001: 0.3, 0.01: 0.7, 0.1: 0.6, 1.0: 0.2}[lr] + jitter, 0.5
    val = {0.001: 0.31, 0.01: 0.8, 0.1: 0.9, 1.0: 0.99}[lr] + jitter
    test = {0.001: 0.3, 0.01: 0.99, 0.1: 0.1, 1.0: 0.99}[lr]
    return val, test


def tuned_grid(*extra: str):
    return grids.expand(None, [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", *extra])


def run_tuned(runs, launcher, grid=None, name="tuned", max_seeds=None):
    grid = grid or tuned_grid()
    grid.name = name
    design = tuned.design(grid, {"train.lr": LRS}, tuning_seeds=2, eta=2)
    console = Console(quiet=True)
    with tuned.session(design, runs, Launch(), console, runner=launcher) as session:
        choices, _, _ = tuned.run(session, design, Rerun(), max_seeds, Method())
        session.finish()
    return design, choices


def test_selection_uses_validation_of_the_tuning_seeds_only(tmp_path):
    runs = tmp_path / "runs"
    grid = tuned_grid()
    for lr in LRS:  # confirmation-seed runs at every lr exist, and favour lr 0.001
        for job in tuned_grid(f"train.lr={lr}").jobs:
            write_run(runs, job, *numbers(job.cfg))
    launcher = FakeLauncher(runs, numbers)
    design, choices = run_tuned(runs, launcher, grid)
    assert [dict(o.split("=") for o in c.chosen) for c in choices] == [{"train.lr": "0.1"}] * 2
    # it trained the tuning rungs (4 lrs x 2 seeds at 4 steps, 2 x 2 at 8) and no confirmation
    # run (those at lr 0.1 were there); 1.0 never trained at 8 steps: it was pruned
    trained = Counter((c["train"]["max_steps"], c["train"]["lr"]) for c in launcher.trained)
    assert trained == {(4, lr): 4 for lr in map(float, LRS)} | {(8, 0.01): 4, (8, 0.1): 4}
    assert all(c["seed"] >= tuned.TUNING_SEED for c in launcher.trained)
    record = sweep_record(runs, "tuned")
    assert record["tuning"]["phase"] == "done"
    assert {r["overrides"][-1] for r in record["runs"]} == {"train.lr=0.1"}
    assert len(record["runs"]) == 4 and not set(record["tuning"]["runs"]) & {
        r["run_id"] for r in record["runs"]
    }
    group = record["tuning"]["groups"][0]
    assert group["runner_up"] == "train.lr=0.01" and group["gap"] == pytest.approx(0.1)
    assert group["steps"] == (4 * 4 + 2 * 8) * 2 and group["full_grid_steps"] == 4 * 8 * 2
    out = runner.invoke(
        app, ["report", "--sweep", "tuned", "--runs-dir", str(runs), "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["method"]["verdict_split"] == "test"
    assert payload["tuning"]["equal_budget"] is True
    assert [g["chosen"] for g in payload["tuning"]["groups"]] == ["train.lr=0.1"] * 2
    where = ["--sweep", "tuned", "--runs-dir", str(runs)]
    markdown = runner.invoke(app, ["report", *where, "--format", "markdown"]).stdout
    assert markdown.startswith("## Tuned") and "train.lr=0.1" in markdown
    csv = runner.invoke(app, ["report", *where, "--format", "csv", "--table", "tuning"]).stdout
    assert csv.splitlines()[0].startswith("group,tuned,space,trials,steps")
    assert list(api.report(runs, sweep="tuned")["tuning"]["chosen"]) == ["train.lr=0.1"] * 2


def test_groups_at_their_own_values_are_compared_with_each_other(tmp_path):
    """Each norm tunes its own lr (batchnorm 0.1, layernorm 0.01): the report groups by norm
    alone, so batchnorm is compared with layernorm, not left without a reference at its lr."""

    def own_best(cfg) -> tuple[float, float]:
        best = 0.1 if cfg["norm"]["name"] == "batchnorm" else 0.01
        lead = 0.3 if cfg["train"]["lr"] == best else 0.0
        jitter = 0.001 * (cfg["seed"] % 7)
        return 0.5 + lead + jitter, (0.9 if best == 0.1 else 0.7) + jitter

    runs = tmp_path / "runs"
    design, choices = run_tuned(runs, FakeLauncher(runs, own_best))
    by_key = {choice.group.key: choice for choice in choices}
    confirm = [
        job for g in design.groups for job in tuned.confirmation_jobs(g, by_key[g.key].chosen)
    ]
    lines = tuned_view.verdict_lines(design, confirm, runs, Method(reference=("norm=layernorm",)))
    assert lines[0] == "norm=layernorm, tuned: reference"
    assert lines[1].startswith("norm=batchnorm, tuned: better against the reference: +0.2")
    chosen = api.report(runs, sweep="tuned")["tuning"]["chosen"]
    assert list(chosen) == ["train.lr=0.1", "train.lr=0.01"]
    where = ["--sweep", "tuned", "--runs-dir", str(runs), "--reference", "norm=layernorm"]
    out = runner.invoke(app, ["report", *where, "--format", "json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert "lr_stability" not in payload  # one lr per group: no learning-rate sensitivity
    rows = {row["norm.name"]: row for row in payload["convergence"]}
    assert "train.lr" not in rows["batchnorm"]
    assert rows["layernorm"]["verdict"] == "reference"
    assert rows["batchnorm"]["verdict"] == "better", rows["batchnorm"]
    table = api.report(runs, sweep="tuned", reference=["norm=layernorm"])["convergence"]
    assert dict(zip(table["norm.name"], table["verdict"], strict=True)) == {
        "batchnorm": "better",
        "layernorm": "reference",
    }


def test_unequal_budgets_and_malformed_records_are_said():
    state = {
        "phase": "done",
        "equal_budget": False,
        "groups": [
            {"group": "norm=dyt", "chosen": {"train.lr": "0.01"}, "trials": 4, "gap": "x"},
            {"group": "norm=layernorm", "chosen": {"train.lr": "0.1"}, "trials": 2},
            "not a group",
        ],
    }
    section = tuning.parse("t", state)
    assert not section.equal and not section.table["equal_budget"].any()
    assert any("UNEQUAL BUDGETS" in n for n in section.notes)
    assert any("malformed" in n for n in section.notes) and len(section.table) == 2
    assert section.table["val_gap"].isna().all()  # a stored string is not a number
    for text in (section.markdown(), section.html(), section.caption()):
        assert "UNEQUAL BUDGETS" in text


def test_equal_budgets_and_keys_only_some_groups_take():
    # norm.groups: read by GroupNorm alone; LayerNorm's space is train.lr's two values,
    # GroupNorm's four: GroupNorm samples two, and both groups get the same steps.
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    space = {"train.lr": ["0.001", "0.01"], "norm.groups": ["2", "4"]}
    design = tuned.design(grid, space, tuning_seeds=1, eta=2)
    layer, group = sorted(design.groups, key=lambda g: g.label, reverse=True)
    assert layer.label == "norm=layernorm" and layer.keys == ["train.lr"] and layer.space == 2
    assert group.keys == ["train.lr", "norm.groups"] and group.space == 4
    assert len(layer.candidates) == len(group.candidates) == 2 and design.equal
    assert design.steps_of(layer) == design.steps_of(group) and not design.notes
    assert tuned.design(grid, space, tuning_seeds=1, eta=2).groups[1].candidates == (
        group.candidates
    )  # the sample is a fixed draw: a resume samples the same
    only = tuned.design(grid, {"norm.groups": ["2", "4"]}, tuning_seeds=1, eta=2)
    layer_only = next(g for g in only.groups if g.label == "norm=layernorm")
    assert layer_only.space == 1 and only.steps_of(layer_only) == 0 and only.trials == 2
    assert only.equal  # a group with nothing to tune does not make the budgets unequal
    with pytest.raises(UsageError, match="no group of the grid takes"):
        tuned.design(grids.expand(None, [*QUICK, "norm=layernorm", "seed=0"]), only.space)
    unequal = tuned.design(grid, space, tuning_seeds=1, eta=2, trials=4)
    assert not unequal.equal and "UNEQUAL BUDGETS" in unequal.notes[0]
    assert "norm=layernorm 2" in unequal.notes[0]


@pytest.mark.parametrize(
    "space, message",
    [
        ({"seed": ["1", "2"]}, "not tunable"),
        ({"norm": ["layernorm", "rmsnorm"]}, "also an axis of the grid"),
    ],
)
def test_bad_designs_are_refused(space, message):
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    with pytest.raises(UsageError, match=message):
        tuned.parse_space([f"{k}={','.join(v)}" for k, v in space.items()], None)
        tuned.design(grid, space)


@pytest.mark.parametrize("stop_after, phase", [(20, "tuning"), (26, "confirmation")])
def test_resume_in_each_phase_trains_only_what_is_missing(tmp_path, stop_after, phase):
    # 28 runs in all: 16 at rung 1, 8 at rung 2, then 4 of confirmation; Ctrl-C after
    # ``stop_after`` of them, then the same sweep again
    first = FakeLauncher(tmp_path, numbers, stop_after=stop_after)
    with pytest.raises(KeyboardInterrupt):
        run_tuned(tmp_path, first)
    assert sweep_record(tmp_path, "tuned")["tuning"]["phase"] == phase
    again = FakeLauncher(tmp_path, numbers)
    _, choices = run_tuned(tmp_path, again)
    assert len(first.trained) == stop_after and len(again.trained) == 28 - stop_after
    assert [c.chosen for c in choices] == [("train.lr=0.1",)] * 2
    assert sweep_record(tmp_path, "tuned")["tuning"]["phase"] == "done"


def test_until_decided_adds_seeds_to_the_confirmation_only(tmp_path):
    def noisy(cfg):  # a clear trend, undecided at 2 seeds (not futile): one more seed each
        if cfg["seed"] >= tuned.TUNING_SEED:
            return numbers(cfg)
        value = 0.5 + (0.1 + 0.02 * (cfg["seed"] % 2)) * (cfg["norm"]["name"] == "batchnorm")
        return value, value  # validation and test: the confirmation's verdicts read test

    launcher = FakeLauncher(tmp_path, noisy)
    run_tuned(tmp_path, launcher, max_seeds=3)
    record = sweep_record(tmp_path, "tuned")
    seeds = Counter(dict(o.split("=") for o in r["overrides"])["seed"] for r in record["runs"])
    assert seeds == {"0": 2, "1": 2, "2": 2}  # the next seed, at the chosen value
    assert all("train.lr=0.1" in r["overrides"] for r in record["runs"])
    assert record["until_decided"]["max_seeds"] == 3 and record["tuning"]["phase"] == "done"
    assert sum(c["seed"] >= tuned.TUNING_SEED for c in launcher.trained) == 24  # tuning: once


def test_cli_dry_run_shows_both_phases_and_the_budget(tmp_path):
    args = [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", "--tune", "train.lr=0.001,0.01,0.1"]
    out = runner.invoke(app, ["sweep", *args, "--dry-run", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "phase 1, tuning: 3 trials per group x 2 seed(s)" in out.stdout
    assert "phase 2, confirmation" in out.stdout and "budget:" in out.stdout
    assert not tmp_path.joinpath("sweeps").exists()
    bad = runner.invoke(app, ["sweep", *args, "--tune", "seed=1,2", "--runs-dir", str(tmp_path)])
    assert bad.exit_code == 2 and "not tunable" in bad.output


@pytest.mark.slow
def test_tuned_sweep_end_to_end(tmp_path):
    runs = tmp_path / "runs"
    args = tiny("model=cnn", "norm=batchnorm,layernorm", "seed=0")
    command = ["sweep", *args, "--tune", "train.lr=0.001,0.1", "--tune-seeds", "1", "-j", "1"]
    out = runner.invoke(app, [*command, "--runs-dir", str(runs), "--name", "e2e"])
    assert out.exit_code == 0, out.output
    record = sweep_record(runs, "e2e")
    assert record["tuning"]["phase"] == "done" and len(record["runs"]) == 2
    report = runner.invoke(app, ["report", "--sweep", "e2e", "--runs-dir", str(runs)])
    assert report.exit_code == 0 and "tuned: e2e" in report.stdout


def test_each_setting_tunes_at_its_own_step_budget():
    # The suite's workloads train 600 (MNIST-1D, digits), 800 (tokens) and 400 (pysource)
    # steps: each group's rungs end at its own budget, equal within a setting.
    grid = grids.expand("suite", ["seed=0", "norm=layernorm,dyt"])
    design = tuned.design(grid, {"train.lr": LRS}, tuning_seeds=1)
    assert design.step_budgets == [400, 600, 800]
    for group in design.groups:
        assert design.schedule_of(group)[-1].steps == group.max_steps
        assert design.full_grid_steps(group) == 4 * group.max_steps
    assert any("step budgets per setting: 400, 600, 800" in note for note in design.notes)
    state = tuned.state(design, "tuning", 1, [], [])
    assert state["max_steps"] == [400, 600, 800] and state["rungs"][-1]["steps"] == 800


def test_one_setting_at_two_step_budgets_is_refused():
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    grid.jobs[0].cfg["train"]["max_steps"] = 16  # layernorm's run, as a preset grid could
    with pytest.raises(UsageError, match="one train.max_steps per"):
        tuned.design(grid, {"train.lr": LRS})


def test_an_interval_is_searched_by_a_fixed_quasi_random_draw_within_the_budget():
    # train.lr log-uniform for every group; norm.groups listed (GroupNorm only): each group
    # draws --tune-trials candidates, the same on every call (a resume finds its runs)
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    space = tuned.parse_space(["train.lr=tag(log,interval(1e-4,1e-1))", "norm.groups=2,4"], None)
    assert space["train.lr"] == search.Interval(1e-4, 1e-1, log=True)
    design = tuned.design(grid, space, tuning_seeds=1, trials=6)
    again = tuned.design(grid, space, tuning_seeds=1, trials=6)
    for group, same in zip(design.groups, again.groups, strict=True):
        assert math.isinf(group.space) and len(group.candidates) == 6 and design.equal
        assert group.candidates == same.candidates
        rates = [float(dict(o.split("=") for o in c)["train.lr"]) for c in group.candidates]
        assert all(1e-4 <= rate <= 1e-1 for rate in rates) and len(set(rates)) == 6
        # Sobol points on the log scale: every decade of the range is visited
        assert {math.floor(math.log10(rate)) for rate in rates} == {-4, -3, -2}
    layer, group = sorted(design.groups, key=lambda g: g.label, reverse=True)
    assert layer.keys == ["train.lr"] and group.keys == ["train.lr", "norm.groups"]
    assert layer.candidates != group.candidates  # each group its own draw
    state = tuned.state(design, "tuning", 1, [], [])
    assert state["space"]["train.lr"] == "tag(log,interval(0.0001,0.1))"
    json.dumps(state)  # the record is JSON


@pytest.mark.parametrize(
    "given, message",
    [
        (["train.lr=interval(1e-2,1e-3)"], "LOW < HIGH"),
        (["train.lr=tag(log,interval(0,1e-1))"], "0 < LOW"),
    ],
)
def test_bad_intervals_are_refused(given, message):
    with pytest.raises(UsageError, match=message):
        tuned.parse_space(given, None)


def test_an_interval_needs_a_trial_count():
    grid = grids.expand(None, [*QUICK, "norm=layernorm", "seed=0"])
    space = tuned.parse_space(["train.lr=interval(1e-3,1e-1)"], None)
    with pytest.raises(UsageError, match="--tune-trials N"):
        tuned.design(grid, space)
