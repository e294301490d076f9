"""Tuned comparisons (normbench.sweeps.tuned, halving): the pruning rule on designed curves,
equal budgets, a selection that never sees the confirmation seeds or test numbers, and resume
in each phase. The runs are designed: a fake launcher writes each run with chosen numbers as
normbench writes them, so the real planner, record and report read them and nothing trains
(one slow test trains tiny runs end to end)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from normbench import api
from normbench.cli.app import app
from normbench.core.errors import UsageError
from normbench.report import tuning
from normbench.report.base import Method
from normbench.store.provenance import source_hash
from normbench.store.records import latest_record
from normbench.store.rundir import Rerun, RunDir
from normbench.sweeps import adaptive, halving, search, tuned, tuned_plan, tuned_view
from normbench.sweeps import grid as grids
from normbench.sweeps.session import Launch, Session
from tests.helpers import QUICK, tiny

runner = CliRunner()
LRS = ["0.001", "0.01", "0.1", "1.0"]


# ------------------------------------------------------------------ the pruning rule
def test_rungs_halve_only_where_it_saves_half_the_steps():
    # 12 candidates, eta 3: 12 x 10 + 4 x 30 + 2 x 90 = 420 steps against 1,080: halved
    assert halving.rungs(12, 90, 3) == [
        halving.Rung(12, 10),
        halving.Rung(4, 30),
        halving.Rung(2, 90),
    ]
    assert halving.steps_spent(halving.rungs(12, 90, 3), seeds=2) == (120 + 120 + 180) * 2
    assert halving.rungs(10, 90, 3)[0] == halving.Rung(10, 10)
    # 4 to 9 candidates: halving would train 2/3 or more of the full grid: the full grid
    for trials in range(1, 10):
        assert halving.rungs(trials, 90, 3) == [halving.Rung(trials, 90)]
    assert halving.rungs(4, 8, 2) == [halving.Rung(4, 8)]  # eta 2 on 4 saves nothing


def test_a_rung_is_the_full_schedule_compressed():
    # warm-up scaled with the rung: at the same fraction of the run, the same learning rate
    from normbench.training.optimizers import lr_factor

    assert halving.scaled_warmup(300, 100, 900) == 33 and halving.scaled_warmup(0, 10, 90) == 0
    assert halving.scaled_warmup(5, 1, 900) == 1 and halving.scaled_warmup(30, 90, 90) == 30
    full = {"warmup_steps": 300, "schedule": "cosine"}
    rung = {"warmup_steps": halving.scaled_warmup(300, 100, 900), "schedule": "cosine"}
    for fraction in (0.01, 0.2, 0.3, 0.5, 0.9):
        at_full = lr_factor(full, 900, round(fraction * 900))
        assert lr_factor(rung, 100, round(fraction * 100)) == pytest.approx(at_full, abs=0.04)
    # before the fix a rung of 100 steps with the full run's 300 warm-up steps never left it
    assert lr_factor(full, 100, 99) == pytest.approx(1 / 3)


def test_promotion_on_designed_curves():
    # Short-budget values (val loss, lower is better) per tuning seed; a diverged run (None)
    # is the worst; a tie goes to the candidate listed first.
    early = {"a": [2.0, 2.2], "b": [1.5, 1.6], "c": [None, 1.0], "d": [1.5, 1.6]}
    assert halving.promote(early, 2, higher_is_better=False) == ["b", "d"]
    assert halving.promote(early, 2, higher_is_better=True) == ["a", "b"]
    late = {"b": [1.2, 1.3], "d": [1.1, 1.6]}  # d wins one seed by a little, loses the other
    assert halving.promote(late, 1, higher_is_better=False) == ["b"]
    firm = halving.firmness(late, "b", higher_is_better=False)
    assert firm.runner_up == "d" and firm.gap == pytest.approx(0.1)
    # d - b (oriented: b's loss minus d's) per seed 0.1, -0.3: mean -0.1, sd 0.283; t_0.9,1
    # = 3.078: the bound is -0.1 + 3.078 * 0.2 = 0.516 (two seeds bound little: withheld)
    assert firm.regret is None
    bound = halving.regret_bound(late, "b", higher_is_better=False, min_seeds=2)
    assert bound == pytest.approx(-0.1 + 3.0777 * 0.2, abs=1e-3)
    solid = halving.firmness(
        {"x": [0.9, 0.9, 0.91], "y": [0.5, 0.6, 0.55]}, "x", higher_is_better=True
    )
    assert solid.regret == 0.0 and solid.gap == pytest.approx(0.3533, abs=1e-3)
    assert halving.firmness({"x": [0.9], "y": [0.5]}, "x", True).regret is None
    # a candidate that diverged on half its seeds or more is no better in its typical run;
    # one that diverged on fewer is compared on the others: a best rate near divergence that
    # spiked once (the old bound skipped it, "cannot be better", and missed it)
    chosen = [0.9, 0.8, 0.85]
    assert halving.regret_bound({"x": chosen, "y": [None, None, 0.99]}, "x", True) == 0.0
    once = halving.regret_bound({"x": chosen, "y": [0.95, None, 0.9]}, "x", True)
    assert once == pytest.approx(0.05)  # d = 0.05 on both seeds it has: sd 0
    assert halving.regret_bound({"x": [None] * 3, "y": [None] * 3}, "x", True) is None


TYPICAL_LOSS = np.array([0.50, 0.52, 0.53, 0.60])  # candidate 0: the best rate, nearest divergence


def simulated_tuning(seeds: int, design: str, rng: np.random.Generator) -> dict[str, list]:
    """One simulated last rung: 4 candidates' validation losses over ``seeds`` tuning seeds,
    seed noise shared by the candidates of a seed (rho 0.5). ``design``: "normal"; "spikes",
    the best rate's run spiking near divergence (0.3 to 2 nats above its typical loss) in
    15% of runs; "divergences", its run diverging (no value) in 15% of runs."""
    shared = rng.normal(0, 0.03, size=seeds)
    values = TYPICAL_LOSS[:, None] + shared + rng.normal(0, 0.03, size=(4, seeds))
    per_seed: dict[str, list] = {str(i): list(values[i]) for i in range(4)}
    for seed in np.flatnonzero(rng.random(seeds) < 0.15) if design != "normal" else []:
        spiked = per_seed["0"][seed] + rng.uniform(0.3, 2.0)
        per_seed["0"][seed] = spiked if design == "spikes" else None
    return per_seed


def regret_coverage(seeds: int, design: str, draws: int = 1000) -> tuple[float, float]:
    """How often the 90% bound covers the chosen's true regret in its typical run (what it
    bounds), and its median: the chosen is the best mean over the seeds, as tuning chooses."""
    rng = np.random.default_rng(seeds * 10 + len(design))
    covered, bounds = [], []
    for _ in range(draws):
        per_seed = simulated_tuning(seeds, design, rng)
        chosen = halving.promote(per_seed, 1, higher_is_better=False)[0]
        bound = halving.regret_bound(per_seed, chosen, higher_is_better=False, min_seeds=2)
        regret = TYPICAL_LOSS[int(chosen)] - TYPICAL_LOSS.min()
        covered.append(regret <= bound)
        bounds.append(bound)
    return float(np.mean(covered)), float(np.median(bounds))


@pytest.mark.parametrize("design", ["normal", "spikes", "divergences"])
@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_regret_bound_covers_the_true_regret_under_spikes(seeds, design):
    # The audit: the old bound skipped a candidate with a diverged run ("cannot be better"),
    # so a best rate that diverged once was never compared: 77% at 5 seeds here. At 2 seeds
    # the bound covers but is as wide as the effects decided (median 0.27 to 0.38 nats
    # against gaps of 0.02 to 0.1): withheld, "not estimable (2 tuning seeds)".
    coverage, median = regret_coverage(seeds, design)
    assert coverage >= 0.90, (seeds, design, coverage)
    per_seed = simulated_tuning(seeds, design, np.random.default_rng(0))
    withheld = halving.regret_bound(per_seed, "1", higher_is_better=False)
    assert (withheld is None) == (seeds < halving.MIN_REGRET_SEEDS)
    if seeds == 2:
        assert median > 0.2  # why it is withheld


def test_no_bound_from_three_tuning_seeds_covers_the_mean_regret_under_spikes():
    # Why the default stays at 2 tuning seeds with no bound (docs/statistics.md): a third
    # seed gives a bound on the typical run, but where the truth is the mean loss with the
    # best rate's spikes counted (its mean 0.67: 0.52 is the best) it covers 0.57 of the time
    # (4,000 draws; issue 58's audit: 0.41); the limitation every output states.
    mean_loss = TYPICAL_LOSS + np.array([0.15 * 1.15, 0, 0, 0])  # 15% x U(0.3, 2.0)'s mean
    rng = np.random.default_rng(3)
    covered = []
    for _ in range(600):
        per_seed = simulated_tuning(3, "spikes", rng)
        chosen = halving.promote(per_seed, 1, higher_is_better=False)[0]
        bound = halving.regret_bound(per_seed, chosen, higher_is_better=False)
        covered.append(mean_loss[int(chosen)] - mean_loss.min() <= bound)
    assert 0.45 < np.mean(covered) < 0.7, np.mean(covered)


def test_a_draw_within_the_budget_tries_every_value_of_every_key():
    # 4 rates x 3 alphas, 4 trials: an unstratified sample of 4 of the 12 misses values
    # (the audit's DyT draw had no 3e-3 or 1e-2); the stratified one never does
    space = [
        (f"train.lr={lr}", f"norm.alpha_init={a}")
        for lr in ("1e-3", "3e-3", "1e-2", "3e-2")
        for a in ("0.5", "1.0", "2.0")
    ]
    for seed in range(50):
        drawn = tuned_plan.stratified(space, 4, f"group {seed}")
        assert len(set(drawn)) == 4 and drawn == sorted(drawn, key=space.index)
        assert {c[0] for c in drawn} == {c[0] for c in space}
        assert {c[1] for c in drawn} == {c[1] for c in space}
        assert drawn == tuned_plan.stratified(space, 4, f"group {seed}")  # a fixed draw
    assert len({tuple(tuned_plan.stratified(space, 4, f"g {s}")) for s in range(20)}) > 1


# ------------------------------------------------------------------ designed stores
def write_run(
    runs, job, val: float | None, test: float, status: str = "complete", acc: float | None = None
) -> None:
    """A finished run as normbench writes it, with a chosen final validation loss (and its
    accuracy: ``acc``, or 1 - loss) and test accuracy."""
    run = RunDir(runs, job.run_id)
    run.write_config(job.cfg)
    acc = acc if acc is not None or val is None else 1 - val
    summary = {
        "final_val_loss": val,
        "final_val_acc": acc,
        "best_val_acc": acc,
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
    run.write_metrics([{"step": 1, "samples": 8, "train_loss": 1.0, "val_acc": acc}])


class FakeLauncher:
    """Writes each run it is given with numbers from ``numbers(cfg)`` (validation loss, test
    accuracy, and optionally a status); ``stop_after``: raise KeyboardInterrupt after that
    many runs (Ctrl-C mid-sweep)."""

    def __init__(self, runs, numbers, stop_after: int | None = None):
        self.runs, self.numbers, self.stop_after = runs, numbers, stop_after
        self.trained: list[dict] = []

    def launch(self, jobs, view) -> None:
        for job in jobs:
            if self.stop_after is not None and len(self.trained) >= self.stop_after:
                raise KeyboardInterrupt
            result = self.numbers(job.cfg)
            write_run(self.runs, job, *result)
            self.trained.append(job.cfg)
            view.done(job.run_id, result[2] if len(result) > 2 else "complete")

    def close(self) -> None:
        pass


def numbers(cfg) -> tuple[float, float]:
    """Validation loss and test accuracy designed so that every shortcut gives another
    answer: on the tuning seeds lr 0.1 has the lowest validation loss, 0.01 the best test
    accuracy; on the confirmation seeds (below the tuning seeds) 0.001 is best on both."""
    lr = cfg["train"]["lr"]
    if cfg["seed"] < tuned.TUNING_SEED:
        return {0.001: 0.05, 0.01: 0.5, 0.1: 0.4, 1.0: 0.6}[lr], 0.9
    jitter = 0.01 * (cfg["seed"] - tuned.TUNING_SEED)
    val = {0.001: 0.69, 0.01: 0.2, 0.1: 0.1, 1.0: 0.3}[lr] + jitter
    test = {0.001: 0.3, 0.01: 0.99, 0.1: 0.1, 1.0: 0.5}[lr]
    return val, test


def tuned_grid(*extra: str):
    return grids.expand(None, [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", *extra])


def run_tuned(
    runs, launcher, grid=None, name="tuned", max_seeds=None, space=None, eta=2, reference=()
):
    grid = grid or tuned_grid()
    grid.name = name
    design = tuned_plan.design(grid, space or {"train.lr": LRS}, tuning_seeds=2, eta=eta)
    console = Console(quiet=True)
    with tuned.session(design, runs, Launch(), console, runner=launcher) as session:
        if reference:  # as normbench sweep --reference records it
            session.save(reference=list(reference))
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
    # 4 candidates: the full grid (4 lrs x 2 seeds at 8 steps) and no confirmation run (those
    # at lr 0.1 were there); 0.1 is inside the grid: nothing tried beyond it
    trained = Counter((c["train"]["max_steps"], c["train"]["lr"]) for c in launcher.trained)
    assert trained == {(8, lr): 4 for lr in map(float, LRS)}
    assert all(c["seed"] >= tuned.TUNING_SEED for c in launcher.trained)
    record = latest_record(runs, "tuned")
    assert record["tuning"]["phase"] == "done"
    assert {r["overrides"][-1] for r in record["runs"]} == {"train.lr=0.1"}
    assert len(record["runs"]) == 4 and not set(record["tuning"]["runs"]) & {
        r["run_id"] for r in record["runs"]
    }
    group = record["tuning"]["groups"][0]
    assert group["metric"] == "val_loss" and group["value"] == pytest.approx(0.105)
    assert group["runner_up"] == "train.lr=0.01" and group["gap"] == pytest.approx(0.1)
    # two tuning seeds: the bound (1 degree of freedom) is withheld, said in words
    assert group["regret_bound"] is None and group["edge"] is None
    assert group["tried"] == {"train.lr": LRS}
    assert group["steps"] == 4 * 8 * 2 == group["full_grid_steps"]
    out = runner.invoke(
        app, ["report", "--sweep", "tuned", "--runs-dir", str(runs), "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["method"]["verdict_split"] == "test"
    assert payload["tuning"]["equal_budget"] is True
    assert [g["chosen"] for g in payload["tuning"]["groups"]] == ["train.lr=0.1"] * 2
    assert {g["regret"] for g in payload["tuning"]["groups"]} == {"not estimable (2 tuning seeds)"}
    # chosen on the loss (0.1); the accuracy (1 - loss here) agrees: nothing said
    assert {g["acc_best"] for g in payload["tuning"]["groups"]} == {None}
    assert payload["tuning"]["groups"][0]["tried"] == "train.lr 0.001,0.01,0.1,1.0"
    where = ["--sweep", "tuned", "--runs-dir", str(runs)]
    markdown = runner.invoke(app, ["report", *where, "--format", "markdown"]).stdout
    assert markdown.startswith("## Tuned") and "train.lr=0.1" in markdown
    assert (
        "train.lr 0.001,0.01,0.1,1.0" in markdown
        and "every candidate at the full budget (no halving)" in markdown
    )
    csv = runner.invoke(app, ["report", *where, "--format", "csv", "--table", "tuning"]).stdout
    assert csv.splitlines()[0].startswith("group,tuned,space,trials,steps")
    assert "regret_bound,tried,edge" in csv.splitlines()[0]
    assert list(api.report(runs, sweep="tuned")["tuning"]["chosen"]) == ["train.lr=0.1"] * 2


def test_halving_prunes_on_a_compressed_schedule(tmp_path):
    # 12 rates, eta 3, 8 steps: rungs of 12 x 1, 4 x 3 and 2 x 8 steps, each rung's
    # warm-up scaled to it; the short rungs rank by the designed curve, so the best at the
    # full budget survives only if every rung keeps it
    rates = [f"{r:g}" for r in np.geomspace(1e-4, 1e-1, 12)]

    def curve(cfg):
        lr, steps = cfg["train"]["lr"], cfg["train"]["max_steps"]
        if cfg["seed"] < tuned.TUNING_SEED:
            return 0.3, 0.9
        distance = abs(math.log10(lr) - math.log10(float(rates[7])))  # best: rates[7]
        return 0.1 + distance * (0.1 if steps == 8 else 0.05) + 0.001 * (cfg["seed"] % 2), 0.5

    launcher = FakeLauncher(tmp_path, curve)
    design, choices = run_tuned(tmp_path, launcher, space={"train.lr": rates}, eta=3)
    assert design.rungs_at(8) == [halving.Rung(12, 1), halving.Rung(4, 3), halving.Rung(2, 8)]
    assert [c.chosen for c in choices] == [(f"train.lr={rates[7]}",)] * 2
    by_steps = Counter(c["train"]["max_steps"] for c in launcher.trained)
    assert by_steps == {1: 2 * 12 * 2, 3: 2 * 4 * 2, 8: 2 * 2 * 2 + 2 * 2}  # + confirmation
    warmups = {c["train"]["max_steps"]: c["train"]["warmup_steps"] for c in launcher.trained}
    full = design.groups[0].jobs[0].cfg["train"]["warmup_steps"]
    assert warmups == {1: halving.scaled_warmup(full, 1, 8), 3: round(full * 3 / 8), 8: full}
    record = latest_record(tmp_path, "tuned")["tuning"]["groups"][0]
    assert record["tried"]["train.lr"] == rates and record["steps"] == (12 + 12 + 16) * 2


def test_a_choice_at_the_edge_is_extended_until_it_is_bracketed(tmp_path):
    # (rising, below) both choose 1.0, the grid's top; 10.0 one step beyond (ratio 10) is
    # trained at the full budget: for layernorm it is worse (bracketed), for batchnorm better,
    # and from the new choice 100.0 is tried: worse, so 10.0 is bracketed too
    launcher = FakeLauncher(tmp_path, rising)
    design, choices = run_tuned(tmp_path, launcher)
    chosen = {c.group.label: c.chosen for c in choices}
    assert chosen == {"norm=batchnorm": ("train.lr=10.0",), "norm=layernorm": ("train.lr=1.0",)}
    beyond = [c for c in launcher.trained if c["train"]["lr"] >= 10.0 and c["seed"] >= 10**6]
    assert {c["train"]["max_steps"] for c in beyond} == {8}
    assert Counter((c["norm"]["name"], c["train"]["lr"]) for c in beyond) == {
        ("batchnorm", 10.0): 2,
        ("layernorm", 10.0): 2,
        ("batchnorm", 100.0): 2,
    }
    groups = {g["group"]: g for g in latest_record(tmp_path, "tuned")["tuning"]["groups"]}
    assert groups["norm=batchnorm"]["edge"] == (
        "train.lr=10.0: 1 step beyond the grid's top (1.0), chosen; 100.0 beyond it was "
        "tried at the full budget, not better"
    )
    assert groups["norm=layernorm"]["edge"] == (
        "train.lr=1.0: at the grid's top; 10.0 beyond it was tried at the full budget, not better"
    )
    assert groups["norm=batchnorm"]["tried"] == {"train.lr": [*LRS, "10.0", "100.0"]}
    assert groups["norm=layernorm"]["steps"] == (4 + 1) * 8 * 2
    assert groups["norm=batchnorm"]["steps"] == (4 + 2) * 8 * 2
    out = runner.invoke(app, ["report", "--sweep", "tuned", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0 and "at an edge of the grid: norm=batchnorm" in out.output
    # without extension the same choice is flagged, untried beyond
    other = tmp_path / "other"
    grid = tuned_grid()
    grid.name = "flat"
    flat = tuned_plan.design(grid, {"train.lr": LRS}, tuning_seeds=2, eta=2, extend=False)
    with tuned.session(
        flat, other, Launch(), Console(quiet=True), runner=FakeLauncher(other, rising)
    ) as session:
        picks, _, _ = tuned.run(session, flat, Rerun(), None, Method())
    assert all("at the grid's top, not extended: widen the grid" in c.edge for c in picks)


def loss_and_accuracy_disagree(cfg):
    """On the tuning seeds batchnorm's loss is lowest at lr 0.1 and its accuracy highest at
    0.01 (a confident model's loss can fall as its accuracy does); layernorm's agree."""
    lr = cfg["train"]["lr"]
    loss = {0.001: 0.6, 0.01: 0.45, 0.1: 0.4, 1.0: 0.5}[lr] + 0.001 * (cfg["seed"] % 2)
    agree = cfg["norm"]["name"] == "layernorm"
    acc = 1 - loss if agree else {0.001: 0.5, 0.01: 0.8, 0.1: 0.7, 1.0: 0.6}[lr]
    return loss, 0.5, "complete", acc


def test_every_output_says_where_the_loss_best_and_accuracy_best_differ(tmp_path):
    launcher = FakeLauncher(tmp_path, loss_and_accuracy_disagree)
    _, choices = run_tuned(tmp_path, launcher)
    assert {c.group.label: c.chosen for c in choices} == {
        "norm=batchnorm": ("train.lr=0.1",),
        "norm=layernorm": ("train.lr=0.1",),
    }
    groups = {g["group"]: g for g in latest_record(tmp_path, "tuned")["tuning"]["groups"]}
    assert groups["norm=batchnorm"]["acc_best"] == {
        "candidate": "train.lr=0.01",
        "metric": "val_acc",
        "value": pytest.approx(0.8),
        "chosen_value": pytest.approx(0.7),
    }
    assert groups["norm=layernorm"]["acc_best"]["candidate"] == "train.lr=0.1"  # agrees
    said = (
        "loss-best and accuracy-best differ: norm=batchnorm: chosen train.lr=0.1 on the loss; "
        "best validation accuracy train.lr=0.01 (val acc 0.8; the chosen 0.7)"
    )
    where = ["report", "--sweep", "tuned", "--runs-dir", str(tmp_path)]
    for fmt in ("rich", "markdown", "json"):  # a note in each; the terminal's caption too
        out = runner.invoke(app, [*where, "--format", fmt])
        assert out.exit_code == 0, out.output
        assert said in " ".join(out.output.split()), fmt
        assert "norm=layernorm: chosen" not in out.output
    payload = json.loads(runner.invoke(app, [*where, "--format", "json"]).stdout)
    rows = {g["group"]: g["acc_best"] for g in payload["tuning"]["groups"]}
    assert rows == {
        "norm=batchnorm": "train.lr=0.01 (val acc 0.8; the chosen 0.7)",
        "norm=layernorm": None,
    }
    page = tmp_path / "report.html"
    assert runner.invoke(app, [*where, "--html", str(page)]).exit_code == 0
    assert said in " ".join(page.read_text().split())
    console = Console(width=100, record=True)  # the sweep's closing table
    console.print(tuned_view.choices_table("tuned", latest_record(tmp_path, "tuned")["tuning"]))
    assert said in " ".join(console.export_text().split())
    csv = runner.invoke(app, [*where, "--format", "csv", "--table", "tuning"]).stdout
    assert "acc_best" in csv.splitlines()[0] and "train.lr=0.01 (val acc 0.8" in csv


def test_the_steps_beyond_an_edge_keep_the_grid_s_spacing():
    # geometric where every value is positive, else additive; integers stay integers; each
    # step from the listed edge, not from a rounded step (no drift over three)
    assert tuned.steps_beyond(["3e-3", "1e-2", "3e-2"], "top") == ["0.09", "0.27", "0.81"]
    assert tuned.steps_beyond(["0.001", "0.01"], "bottom") == ["0.0001", "1e-05", "1e-06"]
    assert tuned.steps_beyond(["1", "2", "4"], "top") == ["8", "16", "32"]
    assert tuned.steps_beyond(["-1", "0", "1"], "bottom") == ["-2", "-3", "-4"]
    assert len(tuned.steps_beyond(["1", "2"], "top")) == tuned_plan.MAX_EXTENSIONS


def far_or_diverging(cfg):
    """Batchnorm's loss falls with the rate past every step the extension may take (best at
    1e6); layernorm's falls up to 30 and diverges at 100 and above."""
    if cfg["seed"] < tuned.TUNING_SEED:
        return 0.3, 0.9
    lr = cfg["train"]["lr"]
    if cfg["norm"]["name"] == "layernorm" and lr >= 100:
        return None, 0.1, "diverged"
    best = 1e6 if cfg["norm"]["name"] == "batchnorm" else 30.0
    return 0.1 + abs(math.log10(lr / best)) * 0.1 + 0.001 * (cfg["seed"] % 2), 0.5


def test_the_extension_stops_at_a_divergence_or_at_its_step_limit(tmp_path):
    launcher = FakeLauncher(tmp_path, far_or_diverging)
    _, choices = run_tuned(tmp_path, launcher)
    edge = {c.group.label: c.edge for c in choices}
    chosen = {c.group.label: c.chosen for c in choices}
    # batchnorm: 10, 100, 1000 beyond the top, each better: the limit, then "widen the grid"
    assert chosen["norm=batchnorm"] == (f"train.lr={1000.0!r}",)
    assert edge["norm=batchnorm"] == (
        f"train.lr=1000.0: {tuned_plan.MAX_EXTENSIONS} steps beyond the grid's top (1.0), "
        "chosen; nothing was tried further (3 steps beyond, the limit): widen the grid"
    )
    # layernorm: 10 better than 1.0, 100 diverged: the divergence bounds the choice
    assert chosen["norm=layernorm"] == ("train.lr=10.0",)
    assert edge["norm=layernorm"] == (
        "train.lr=10.0: 1 step beyond the grid's top (1.0), chosen; 100.0 beyond it diverged "
        "at the full budget: bounded"
    )
    rates = Counter(
        (c["norm"]["name"], c["train"]["lr"]) for c in launcher.trained if c["seed"] >= 10**6
    )
    assert rates[("batchnorm", 10000.0)] == 0 and rates[("layernorm", 1000.0)] == 0
    out = runner.invoke(app, ["report", "--sweep", "tuned", "--runs-dir", str(tmp_path)])
    said = " ".join(out.output.split())
    assert out.exit_code == 0 and "widen the grid" in said
    # issue 58: a choice still at an edge after the cap is said to be unbracketed, in the
    # report's notes and in the verdict line of the group and of every group against it
    assert "at an edge of the grid, unbracketed: norm=batchnorm" in said
    assert "unbracketed: norm=layernorm" not in said  # the divergence bounds it
    design, _ = run_tuned(tmp_path, launcher)  # finished: trains nothing, gives the design
    by_key = {c.group.key: c for c in choices}
    confirm = [j for g in design.groups for j in tuned.confirmation_jobs(g, by_key[g.key].chosen)]
    expected = {
        "norm=batchnorm": ["norm=batchnorm, tuned, unbracketed", "(the reference, norm=batchnorm"],
        "norm=layernorm": ["norm=layernorm, tuned: reference", "norm=batchnorm, tuned, unb"],
    }
    for reference, lines in expected.items():
        said = tuned_view.verdict_lines(
            design, confirm, tmp_path, Method(reference=(reference,)), choices
        )
        assert all(any(words in line for line in said) for words in lines), said
        assert sum("unbracketed" in line for line in said) == 2 - (reference == "norm=layernorm")


def test_a_failed_tuning_run_stops_the_rung_and_ranks_nothing(tmp_path):
    def one_fails(cfg):
        value, test = numbers(cfg)
        failed = cfg["seed"] == tuned.TUNING_SEED and cfg["train"]["lr"] == 0.1
        return (None, test, "failed") if failed else (value, test)

    with pytest.raises(tuned.TuningStopped, match="2 tuning run"):  # one per group
        run_tuned(tmp_path, FakeLauncher(tmp_path, one_fails))
    record = latest_record(tmp_path, "tuned")
    assert record["tuning"]["phase"] == "tuning" and record["tuning"]["groups"] == []
    # run again: the failed run is retrained (it is no result) and the choice is the one an
    # uninterrupted sweep makes
    again = FakeLauncher(tmp_path, numbers)
    _, choices = run_tuned(tmp_path, again)
    assert [c.chosen for c in choices] == [("train.lr=0.1",)] * 2
    assert len([c for c in again.trained if c["seed"] >= tuned.TUNING_SEED]) == 2


def test_groups_at_their_own_values_are_compared_with_each_other(tmp_path):
    """Each norm tunes its own lr (batchnorm 0.1, layernorm 0.01): the report groups by norm
    alone, so batchnorm is compared with layernorm, not left without a reference at its lr."""

    def own_best(cfg) -> tuple[float, float]:
        best = 0.1 if cfg["norm"]["name"] == "batchnorm" else 0.01
        lead = 0.3 if cfg["train"]["lr"] == best else 0.0
        jitter = 0.001 * (cfg["seed"] % 7)
        return 0.5 - lead + jitter, (0.9 if best == 0.1 else 0.7) + jitter

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
    design = tuned_plan.design(grid, space, tuning_seeds=1, eta=2)
    layer, group = sorted(design.groups, key=lambda g: g.label, reverse=True)
    assert layer.label == "norm=layernorm" and layer.keys == ["train.lr"] and layer.space == 2
    assert group.keys == ["train.lr", "norm.groups"] and group.space == 4
    assert len(layer.candidates) == len(group.candidates) == 2 and design.equal
    assert design.steps_of(layer) == design.steps_of(group) and not design.notes
    assert tuned_plan.design(grid, space, tuning_seeds=1, eta=2).groups[1].candidates == (
        group.candidates
    )  # the sample is a fixed draw: a resume samples the same
    only = tuned_plan.design(grid, {"norm.groups": ["2", "4"]}, tuning_seeds=1, eta=2)
    layer_only = next(g for g in only.groups if g.label == "norm=layernorm")
    assert layer_only.space == 1 and only.steps_of(layer_only) == 0 and only.trials == 2
    assert only.equal  # a group with nothing to tune does not make the budgets unequal
    with pytest.raises(UsageError, match="no group of the grid takes"):
        tuned_plan.design(grids.expand(None, [*QUICK, "norm=layernorm", "seed=0"]), only.space)
    unequal = tuned_plan.design(grid, space, tuning_seeds=1, eta=2, trials=4)
    assert not unequal.equal and "UNEQUAL BUDGETS" in unequal.notes[0]
    assert "norm=layernorm 2" in unequal.notes[0]


@pytest.mark.parametrize(
    "space, message",
    [
        ({"seed": ["1", "2"]}, "not tunable"),
        ({"norm": ["layernorm", "rmsnorm"]}, "also an axis of the grid"),
        ({"train.lrr": ["1", "2"]}, r"unknown key \(did you mean train.lr\?\)"),
        ({"placement": ["pre", "post"]}, "a config group, whose choice is what a grid compares"),
        ({"placement.name": ["pre", "post"]}, "a config group"),
        ({"threads": ["1", "2"]}, "an execution setting"),
        ({"device": ["cpu", "auto"]}, "an execution setting"),
    ],
)
def test_bad_designs_are_refused(space, message):
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    with pytest.raises(UsageError, match=message):
        tuned_plan.parse_space([f"{k}={','.join(v)}" for k, v in space.items()], None)
        tuned_plan.design(grid, space)


@pytest.mark.parametrize("stop_after, phase", [(12, "tuning"), (18, "confirmation")])
def test_resume_in_each_phase_trains_only_what_is_missing(tmp_path, stop_after, phase):
    # 20 runs in all: 16 of tuning (the full grid), then 4 of confirmation; Ctrl-C after
    # ``stop_after`` of them, then the same sweep again
    first = FakeLauncher(tmp_path, numbers, stop_after=stop_after)
    with pytest.raises(KeyboardInterrupt):
        run_tuned(tmp_path, first)
    assert latest_record(tmp_path, "tuned")["tuning"]["phase"] == phase
    again = FakeLauncher(tmp_path, numbers)
    _, choices = run_tuned(tmp_path, again)
    assert len(first.trained) == stop_after and len(again.trained) == 20 - stop_after
    assert [c.chosen for c in choices] == [("train.lr=0.1",)] * 2
    assert latest_record(tmp_path, "tuned")["tuning"]["phase"] == "done"


def test_until_decided_adds_seeds_to_the_confirmation_only(tmp_path):
    def noisy(cfg):  # a clear trend, undecided at 2 seeds (not futile): one more seed each
        if cfg["seed"] >= tuned.TUNING_SEED:
            return numbers(cfg)
        value = 0.5 + (0.1 + 0.02 * (cfg["seed"] % 2)) * (cfg["norm"]["name"] == "batchnorm")
        return value, value  # validation and test: the confirmation's verdicts read test

    launcher = FakeLauncher(tmp_path, noisy)
    run_tuned(tmp_path, launcher, max_seeds=3)
    record = latest_record(tmp_path, "tuned")
    seeds = Counter(dict(o.split("=") for o in r["overrides"])["seed"] for r in record["runs"])
    assert seeds == {"0": 2, "1": 2, "2": 2}  # the next seed, at the chosen value
    assert all("train.lr=0.1" in r["overrides"] for r in record["runs"])
    assert record["until_decided"]["max_seeds"] == 3 and record["tuning"]["phase"] == "done"
    assert sum(c["seed"] >= tuned.TUNING_SEED for c in launcher.trained) == 16  # tuning: once


def test_cli_dry_run_shows_both_phases_and_the_budget(tmp_path):
    args = [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", "--tune", "train.lr=0.001,0.01,0.1"]
    out = runner.invoke(app, ["sweep", *args, "--dry-run", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "phase 1, tuning: 3 trials per group x 2 seed(s)" in out.stdout
    assert "phase 2, confirmation" in out.stdout and "budget:" in out.stdout
    rounds = runner.invoke(
        app,
        ["sweep", *args, "--dry-run", "--until-decided", "--max-seeds", "4", "--runs-dir"]
        + [str(tmp_path)],
    )
    assert "until decided: one more seed per open group and round, up to 4" in rounds.stdout
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
    record = latest_record(runs, "e2e")
    assert record["tuning"]["phase"] == "done" and len(record["runs"]) == 2
    report = runner.invoke(app, ["report", "--sweep", "e2e", "--runs-dir", str(runs)])
    assert report.exit_code == 0 and "tuned: e2e" in report.stdout


def test_each_setting_tunes_at_its_own_step_budget():
    # The suite's workloads train 600 (MNIST-1D, digits), 800 (tokens) and 400 (pysource)
    # steps: each group's rungs end at its own budget, equal within a setting.
    grid = grids.expand("suite", ["seed=0", "norm=layernorm,dyt"])
    design = tuned_plan.design(grid, {"train.lr": LRS}, tuning_seeds=1)
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
        tuned_plan.design(grid, {"train.lr": LRS})


def test_an_interval_is_searched_by_a_fixed_quasi_random_draw_within_the_budget():
    # train.lr log-uniform for every group; norm.groups listed (GroupNorm only): each group
    # draws --tune-trials candidates, the same on every call (a resume finds its runs)
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    space = tuned_plan.parse_space(
        ["train.lr=tag(log,interval(1e-4,1e-1))", "norm.groups=2,4"], None
    )
    assert space["train.lr"] == search.Interval(1e-4, 1e-1, log=True)
    design = tuned_plan.design(grid, space, tuning_seeds=1, trials=6)
    again = tuned_plan.design(grid, space, tuning_seeds=1, trials=6)
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
        tuned_plan.parse_space(given, None)


def test_an_interval_needs_a_trial_count():
    grid = grids.expand(None, [*QUICK, "norm=layernorm", "seed=0"])
    space = tuned_plan.parse_space(["train.lr=interval(1e-3,1e-1)"], None)
    with pytest.raises(UsageError, match="--tune-trials N"):
        tuned_plan.design(grid, space)


def test_a_whole_directory_report_leaves_tuning_runs_out(tmp_path):
    # 16 tuning runs (seeds 1000000, 1000001) and 4 confirmation runs: a bare report counts
    # the confirmation runs only and says how many it left out and of which sweep
    run_tuned(tmp_path, FakeLauncher(tmp_path, numbers))
    out = runner.invoke(app, ["report", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "16 tuning runs of the tuned sweep(s) tuned are left out" in out.output
    rows = json.loads(out.stdout)["convergence"]
    assert sum(row["n"] for row in rows) == 4
    with pytest.warns(UserWarning, match="16 tuning runs"):
        table = api.report(tmp_path)["convergence"]
    assert table["n"].sum() == 4
    listed = runner.invoke(app, ["runs", "list", "--all", "--runs-dir", str(tmp_path)])
    shown = [line for line in listed.output.splitlines() if line.startswith("cnn-")]
    assert listed.exit_code == 0 and len(shown) == 20  # runs list shows them all


def test_report_of_a_sweep_compares_against_the_reference_it_named(tmp_path):
    def layer_best(cfg):  # layernorm best on test, batchnorm second: the best is layernorm
        test = 0.95 if cfg["norm"]["name"] == "layernorm" else 0.9
        return 0.3, test + 0.001 * (cfg["seed"] % 3)

    run_tuned(tmp_path, FakeLauncher(tmp_path, layer_best), reference=("norm=batchnorm",))
    where = ["report", "--sweep", "tuned", "--runs-dir", str(tmp_path), "--format", "json"]
    rows = json.loads(runner.invoke(app, where).stdout)["convergence"]
    verdicts = {row["norm.name"]: row["verdict"] for row in rows}
    assert verdicts["batchnorm"] == "reference" and verdicts["layernorm"] != "reference"
    named = json.loads(runner.invoke(app, [*where, "--reference", "norm=layernorm"]).stdout)
    assert {r["norm.name"]: r["verdict"] for r in named["convergence"]}["layernorm"] == (
        "reference"
    )  # one named on the command line wins


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tune-trials", "1"], "--tune-trials 1: valid: an integer from 2 to 1000"),
        (["--tune-trials", "10"], "more than any group's space (the largest has 3"),
        (["--tune-seeds", "99999999999999999999"], "--tune-seeds"),
        (["--tune-seeds", "3000"], "valid: an integer from 1 to 100"),
        (["--until-decided", "--max-seeds", "1000000000"], "--max-seeds 1000000000"),
        (["--until-decided", "--max-seeds", "1"], "one seed decides nothing"),
        (["--max-seeds", "1"], "--max-seeds 1: applies only with --until-decided"),
        (["--reference", "nope=1"], "--reference"),
        (["--tune", "train.lr=range(0,2000)", "--tune", "train.weight_decay=0,1"], "combinations"),
        # 2 groups x 3 rates x 100 seeds, 3 extension rounds of 100, 4 confirmation runs
        (["--tune-seeds", "100", "--max-runs", "500"], "trains up to 1,204 runs, more than"),
    ],
)
def test_the_tuned_path_refuses_bad_bounds_before_anything_trains(tmp_path, extra, message):
    args = [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", "--tune", "train.lr=0.001,0.01,0.1"]
    for dry in ([], ["--dry-run"]):
        out = runner.invoke(app, ["sweep", *args, *extra, *dry, "--runs-dir", str(tmp_path)])
        assert out.exit_code == 2, out.output
        assert message in out.output and "Traceback" not in out.output
        assert not tmp_path.joinpath("sweeps").exists()


def test_until_decided_never_reaches_the_tuning_seeds(tmp_path):
    # seed 999999 and --max-seeds 3: rounds would add 1000000 and 1000001, the tuning
    # seeds, whose runs chose the value (issue: half of n=2 were tuning runs)
    args = [*QUICK, "norm=batchnorm,layernorm", "seed=999999", "--tune", "train.lr=1e-3,3e-2"]
    out = runner.invoke(
        app, ["sweep", *args, "--until-decided", "--max-seeds", "3", "--runs-dir", str(tmp_path)]
    )
    assert out.exit_code == 2 and "among the tuning seeds (1000000 and up)" in out.output


def test_a_tuned_confirmation_decides_its_rounds_on_test(tmp_path):
    # its looks (seeds added, futility) read the split its report and closing lines read
    grid = tuned_grid()
    design = tuned_plan.design(grid, {"train.lr": LRS}, tuning_seeds=2, eta=2)
    launcher = FakeLauncher(tmp_path, numbers)
    with tuned.session(design, tmp_path, Launch(), Console(quiet=True), runner=launcher) as s:
        _, plan, looks = tuned.run(s, design, Rerun(), 3, Method())
    seen = adaptive.look_at(s.jobs, tmp_path, plan.at(looks.taken), plan.tuned)
    assert plan.tuned == ("train.lr",) and seen.method.test
    assert not adaptive.look_at(s.jobs, tmp_path, plan.at(looks.taken)).method.test


def test_report_of_a_tuned_sweep_stopped_before_its_confirmation_says_so(tmp_path):
    first = FakeLauncher(tmp_path, numbers, stop_after=16)  # every tuning run, no confirmation
    with pytest.raises(KeyboardInterrupt):
        run_tuned(tmp_path, first)
    assert latest_record(tmp_path, "tuned")["tuning"]["phase"] == "confirmation"
    out = runner.invoke(app, ["report", "--sweep", "tuned", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 2 and "stopped in its confirmation phase" in out.output


def rising(cfg):
    """Validation loss falls with the rate up to 30 (batchnorm) or 2 (layernorm): both choose
    the grid's top, 1.0, and try 10.0 beyond it."""
    if cfg["seed"] < tuned.TUNING_SEED:
        return 0.3, 0.9
    best = 30.0 if cfg["norm"]["name"] == "batchnorm" else 2.0
    lr = cfg["train"]["lr"]
    return 0.1 + abs(math.log10(lr / best)) * 0.1 + 0.001 * (cfg["seed"] % 2), 0.5


@pytest.mark.parametrize("stop_after", [*range(0, 26, 3), 20, 22])
def test_killed_at_any_run_the_resumed_sweep_chooses_what_an_uninterrupted_one_does(
    tmp_path, stop_after
):
    # 26 runs: 16 of tuning, 4 beyond the grid's edge, 2 a step further (batchnorm), 4 of
    # confirmation; stopped after any of them (Ctrl-C, or a kill before the next run's files
    # exist), then the same command
    whole = tmp_path / "whole"
    _, expected = run_tuned(whole, FakeLauncher(whole, rising))
    first = FakeLauncher(tmp_path / "cut", rising, stop_after=stop_after)
    with pytest.raises(KeyboardInterrupt):
        run_tuned(tmp_path / "cut", first)
    again = FakeLauncher(tmp_path / "cut", rising)
    _, choices = run_tuned(tmp_path / "cut", again)
    assert [(c.chosen, c.edge) for c in choices] == [(c.chosen, c.edge) for c in expected]
    assert len(first.trained) + len(again.trained) == 26  # no run trained twice
    assert (
        latest_record(tmp_path / "cut", "tuned")["tuning"]["groups"]
        == (latest_record(whole, "tuned")["tuning"]["groups"])
    )


@pytest.mark.slow
@pytest.mark.tracking
def test_a_tuning_run_that_fails_stops_the_sweep_in_one_line_through_the_cli(tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra")  # how the run is made to fail
    # the audit's repro: a file where one tuning run's TensorBoard directory goes makes that
    # run fail; the sweep stops before ranking (exit 1, one line), and the same command again
    # retrains only that run and chooses
    grid = ["model=cnn", "data=digits", "model.width=8", "model.depth=1", "train.max_steps=20"]
    grid += ["train.eval_every=10", "threads=1", "norm=batchnorm,layernorm", "seed=range(2)"]
    space = ["--tune", "train.lr=1e-3,3e-3,1e-2,3e-2", "--tune-seeds", "2", "-j", "2"]
    cfg = runner.invoke(
        app, ["run", "--cfg", *grid[:-2], "norm=batchnorm", "train.lr=0.03"] + ["seed=1000000"]
    )
    failing = cfg.stdout.split()[2]
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / failing).write_text("not a directory")
    command = ["sweep", *grid, *space, f"log.tensorboard={tmp_path / 'tb'}", "--name", "t"]
    where = ["--runs-dir", str(tmp_path / "runs")]
    out = runner.invoke(app, [*command, *where])
    assert out.exit_code == 1, out.output
    assert "tuning stopped: 1 tuning run(s) failed or did not finish" in out.output
    assert "tuned: each group at its own best" not in out.output  # nothing ranked
    (tmp_path / "tb" / failing).unlink()
    again = runner.invoke(app, [*command, *where])
    assert again.exit_code == 0, again.output
    assert "1/1 runs (15 already complete)" in again.output  # only the failed one retrained
    record = latest_record(tmp_path / "runs", "t")
    assert record["tuning"]["phase"] == "done" and len(record["runs"]) == 4


def test_a_group_with_fewer_candidates_than_the_budget_trains_the_full_grid(tmp_path):
    # groupnorm tunes 4 rates x 3 group counts (12: halved, rungs of 1, 3 and 8 steps),
    # layernorm the 4 rates alone: 4 candidates are not worth halving, so layernorm trains its
    # full grid, at the last round (UNEQUAL BUDGETS said, as before)
    grid = grids.expand(None, [*QUICK, "norm=layernorm,groupnorm", "seed=0"])
    grid.name = "tuned"
    space = {"train.lr": LRS, "norm.groups": ["1", "2", "4"]}
    design = tuned_plan.design(grid, space, tuning_seeds=2, eta=3, trials=12, extend=False)
    layer, group = sorted(design.groups, key=lambda g: g.label, reverse=True)
    assert design.schedule_of(layer) == [halving.Rung(4, 8)]
    assert design.schedule_of(group) == [
        halving.Rung(12, 1),
        halving.Rung(4, 3),
        halving.Rung(2, 8),
    ]
    assert not design.equal

    def flat(cfg):
        return 0.3 + 0.01 * abs(math.log10(cfg["train"]["lr"]) + 2), 0.5

    launcher = FakeLauncher(tmp_path, flat)
    with tuned.session(design, tmp_path, Launch(), Console(quiet=True), runner=launcher) as s:
        choices, _, _ = tuned.run(s, design, Rerun(), None, Method())
    steps = Counter(
        (c["norm"]["name"], c["train"]["max_steps"]) for c in launcher.trained if c["seed"] > 9
    )
    assert steps == {
        ("layernorm", 8): 8,
        ("groupnorm", 1): 24,
        ("groupnorm", 3): 8,
        ("groupnorm", 8): 4,
    }
    assert {c.group.label: c.chosen[0] for c in choices}["norm=layernorm"] == "train.lr=0.01"


def test_a_tuned_sweep_is_reported_alone(tmp_path):
    run_tuned(tmp_path, FakeLauncher(tmp_path, numbers))
    grid = tuned_grid("train.lr=0.01,0.1")
    grid.name = "plain"
    plain_runs = FakeLauncher(tmp_path, numbers)
    with Session(grid, tmp_path, Launch(), Console(quiet=True), runner=plain_runs) as plain:
        plain.run(plain.planned.todo)
        plain.finish()
    out = runner.invoke(app, ["report", "--sweep", "tuned,plain", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 2 and "tuned is a tuned comparison" in out.output


def test_every_record_of_a_tuned_sweep_counts_and_an_unreadable_one_is_said(tmp_path):
    run_tuned(tmp_path, FakeLauncher(tmp_path, numbers))
    first = next((tmp_path / "sweeps").glob("tuned-*.json"))
    # a rerun killed at its first rung writes a newer record that lists fewer tuning runs
    newer = json.loads(first.read_text())
    newer["tuning"]["runs"] = newer["tuning"]["runs"][:3]
    newer["started"] = "2999-01-01T00:00:00"
    (tmp_path / "sweeps" / "tuned-29990101-000000-ab.json").write_text(json.dumps(newer))
    out = runner.invoke(app, ["report", str(tmp_path), "--format", "json"])
    assert "16 tuning runs of the tuned sweep(s) tuned are left out" in out.output
    (tmp_path / "sweeps" / "other-20000101-000000-cd.json").write_text("{not json")
    out = runner.invoke(app, ["report", str(tmp_path), "--format", "json"])
    assert (
        out.exit_code == 0 and "1 sweep record(s)" in out.output and "cannot be read" in out.output
    )


def test_a_finished_tuned_sweep_run_again_keeps_every_run_and_says_so(tmp_path):
    """Run again, a finished tuned sweep reports all its 20 runs already complete (it said 16:
    the first rung's), opens the confirmation naming the values it confirms, and its --dry-run
    says what the last record holds beyond rung 1 (issue 50, item 10)."""
    import io

    run_tuned(tmp_path, FakeLauncher(tmp_path, numbers))
    design = tuned_plan.design(tuned_grid(), {"train.lr": LRS}, tuning_seeds=2, eta=2)
    design.grid.name = "tuned"
    console = Console(file=io.StringIO(), width=100)
    again = FakeLauncher(tmp_path, numbers)
    with tuned.session(design, tmp_path, Launch(), console, runner=again) as session:
        tuned.run(session, design, Rerun(), None, Method())
        session.finish()
        console.print(session.summary())
    out = console.file.getvalue()
    assert not again.trained
    assert re.search(r"already complete +│ +20 │", out), out
    assert (
        "confirmation (4 runs, seeds 0, 1): norm=batchnorm at train.lr=0.1; "
        "norm=layernorm at train.lr=0.1" in out
    )
    args = [*QUICK, "norm=batchnorm,layernorm", "seed=0,1", "--tune", f"train.lr={','.join(LRS)}"]
    args += ["--eta", "2", "--name", "tuned", "--dry-run", "--runs-dir", str(tmp_path)]
    dry = runner.invoke(app, ["sweep", *args])
    assert dry.exit_code == 0, dry.output
    assert "this sweep's last record: phase done; tuning 16 of 16 runs finished, " in dry.output
    assert "confirmation 4 of 4" in dry.output
