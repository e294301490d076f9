"""normbench sweep: Hydra expansion, presets, resume, failures, kill -9, concurrency, submitit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import QUICK, metas, run_dirs
from typer.testing import CliRunner

from normbench.cli import app
from normbench.core.errors import UsageError
from normbench.report.sequential import look_alpha
from normbench.store.rundir import RunDir
from normbench.sweeps.cluster import SubmititLauncher, submitit_parameters
from normbench.sweeps.grid import expand
from normbench.sweeps.launchers import launcher_settings
from normbench.sweeps.presets import load_preset, presets

runner = CliRunner()


# A quick grid: a small CNN on a slice of MNIST-1D, a few steps per run.
def values(sweep, key):
    return [dict(o.split("=", 1) for o in job.overrides).get(key) for job in sweep.jobs]


@pytest.mark.parametrize(
    ("overrides", "key", "expected"),
    [
        (["norm=batchnorm,groupnorm"], "norm", ["batchnorm", "groupnorm"]),
        (["seed=range(3)"], "seed", ["0", "1", "2"]),
        (["seed=range(1,7,3)"], "seed", ["1", "4"]),
        (["seed=choice(5,7)"], "seed", ["5", "7"]),
        (["placement=sort(res_post,post,pre)"], "placement", ["post", "pre", "res_post"]),
        (["placement=sort(pre,post,reverse=true)"], "placement", ["pre", "post"]),
        (
            ["norm=glob(*norm,exclude=[switchnorm,batchnorm])"],
            "norm",
            ["groupnorm", "instancenorm", "layernorm", "rmsnorm", "scalenorm", "ssrmsnorm"],
        ),
        (["train.lr=0.1,0.01"], "train.lr", ["0.1", "0.01"]),
        (["seed=0,0,1"], "seed", ["0", "1"]),  # the same run twice is one run
    ],
)
def test_expansion_follows_hydra_sweep_syntax(overrides, key, expected):
    assert values(expand(None, overrides), key) == expected


def test_axes_cross_as_a_cartesian_product_in_hydra_order():
    sweep = expand(None, ["norm=batchnorm,groupnorm", "seed=range(2)", "model=cnn"])
    assert [(v, s) for v, s in zip(values(sweep, "norm"), values(sweep, "seed"), strict=True)] == [
        ("batchnorm", "0"),
        ("batchnorm", "1"),
        ("groupnorm", "0"),
        ("groupnorm", "1"),
    ]
    assert sweep.axes == ["norm", "seed"]


def test_interval_and_bad_jobs_refuse_the_whole_sweep_up_front():
    with pytest.raises(UsageError, match="interval"):
        expand(None, ["train.lr=interval(0,1)"])
    with pytest.raises(UsageError, match=r"job 2 of 2 \(norm=fancy\): norm=fancy: unknown norm"):
        expand(None, ["norm=layernorm,fancy"])
    with pytest.raises(UsageError, match="norm.groups=5 must divide"):
        expand(None, ["norm=groupnorm", "norm.groups=4,5"])


STUDY_PRESETS = (
    "batch_sensitivity",
    "batch_resnet",
    "placement",
    "precision",
    "lr_stability",
    "depth",
    "qk_norm",
)


def test_presets_ship_with_a_question_and_a_version():
    assert set(presets()) >= {*STUDY_PRESETS, "smoke"}
    for name in presets():
        text = (Path(__file__).parents[2] / "conf" / "sweep" / f"{name}.yaml").read_text()
        assert text.startswith("# ") and "?" in text.split("version")[0], name
        version = load_preset(name)["version"]
        assert isinstance(version, int) and version >= 1, name


def test_a_preset_header_says_question_design_run_and_read_and_holds_no_results():
    """Results live in docs/findings.md and changelogs in git: a header keeps what does not go
    stale (no dated measurement, no "Measured", no "version N:" history)."""
    import re

    from normbench.sweeps.live import HEADER_PARTS

    for name in presets():
        text = (Path(__file__).parents[2] / "conf" / "sweep" / f"{name}.yaml").read_text()
        header = text.split("\nversion:")[0]
        starts = [header.find(f"\n# {part}") for part in HEADER_PARTS]
        assert all(s > 0 for s in starts) and starts == sorted(starts), name
        assert "?" in header[: starts[0]], name
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b|Measured|measured \(|version \d+:", header), (
            name
        )


@pytest.mark.parametrize("name", STUDY_PRESETS)
def test_every_study_preset_says_what_it_decides_and_how_long_it_takes(name):
    header = (Path(__file__).parents[2] / "conf" / "sweep" / f"{name}.yaml").read_text()
    header = header.split("version:")[0]
    assert "Decides" in header or "decides" in header, name
    assert "minutes on 2 cores" in header, name


def test_precision_preset_v3_pairs_three_norms_over_three_precisions_in_the_cnn():
    assert load_preset("precision")["version"] == 3
    sweep = expand("precision", [])
    assert {job.cfg["model"]["name"] for job in sweep.jobs} == {"cnn"}
    assert len(sweep.jobs) == 3 * 3 * 4


def test_placement_preset_v2_warms_up_pre_and_post_only():
    sweep = expand("placement", [])
    cells = {(j.cfg["placement"]["name"], j.cfg["train"]["warmup_steps"]) for j in sweep.jobs}
    assert cells == {(p, 0) for p in ("pre", "post", "sandwich", "res_post", "deepnorm")} | {
        ("pre", 300),
        ("post", 300),
    }
    assert len(sweep.jobs) == 21 and {j.cfg["train"]["lr"] for j in sweep.jobs} == {0.01}


def test_batch_sensitivity_crosses_five_norms_with_ghost_batches_and_seeds():
    sweep = expand("batch_sensitivity", [])
    assert sweep.combinations == 5 * 5 * 3
    # batch-independent norms ignore norm.ghost_batch: one run per seed, not five
    assert len(sweep.jobs) == 2 * 5 * 3 + 3 * 3
    assert not any(job.cfg["model"]["weight_std"] for job in sweep.jobs)
    ghost = {job.cfg["norm"]["name"]: set() for job in sweep.jobs}
    for job in sweep.jobs:
        ghost[job.cfg["norm"]["name"]].add(job.cfg["norm"]["ghost_batch"])
    assert ghost["batchnorm"] == ghost["switchnorm"] == {2, 4, 8, 16, 32}
    assert ghost["groupnorm"] == ghost["layernorm"] == ghost["instancenorm"] == {None}
    assert {job.cfg["batch_size"] for job in sweep.jobs} == {32}


def test_muon_preset_crosses_both_optimizers_each_tuning_its_own_rate():
    from normbench.sweeps import tuned_plan

    sweep = expand("muon", [])
    assert len(sweep.jobs) == 5 * 2 * 3 + 2 * 3  # and the fused path's own runs
    muon = [job.cfg["train"] for job in sweep.jobs if job.cfg["train"]["optimizer"] == "muon"]
    assert len(muon) == 15 + 6 and all(train["muon_lr"] is None for train in muon)
    assert sorted(train["muon_qkv"] for train in muon).count("fused") == 6
    # every group (norm, placement, QK-norm, optimizer, QKV path) tunes train.lr over the
    # whole grid 3e-3 .. 1, each value at the full budget
    plan = tuned_plan.design(sweep, tuned_plan.parse_space([], "muon"))
    assert len(plan.groups) == 12 and plan.rung_count == 1
    assert {len(group.candidates) for group in plan.groups} == {6}
    # the references' settings: weight decay 0.1, AdamW's betas (0.9, 0.95), for both
    assert {(j.cfg["train"]["weight_decay"], j.cfg["train"]["adam_beta2"]) for j in sweep.jobs} == {
        (0.1, 0.95)
    }


def test_batch_resnet_adds_gn_ws_and_bn_ws_on_resnet_v1():
    sweep = expand("batch_resnet", [])
    assert sweep.combinations == 7 * 5 * 3
    assert len(sweep.jobs) == 2 * 5 * 3 + 3 * 3 + 3 + 5 * 3
    assert {(j.cfg["model"]["name"], j.cfg["placement"]["name"]) for j in sweep.jobs} == {
        ("resnet", "post")
    }
    with_ws = {
        (j.cfg["norm"]["name"], j.cfg["norm"]["ghost_batch"])
        for j in sweep.jobs
        if j.cfg["model"]["weight_std"]
    }
    assert with_ws == {("groupnorm", None)} | {("batchnorm", g) for g in (2, 4, 8, 16, 32)}


def test_command_line_overrides_replace_or_extend_preset_axes():
    assert len(expand("smoke", []).jobs) == 4
    narrowed = expand("smoke", ["norm=layernorm"])
    assert values(narrowed, "norm") == ["layernorm", "layernorm"]
    extended = expand("smoke", ["seed=0,1"])
    assert len(extended.jobs) == 8 and "seed" in extended.axes


def test_dry_run_prints_the_grid_and_trains_nothing(tmp_path):
    result = runner.invoke(app, ["sweep", "smoke", "--dry-run", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "4 runs: 4 missing; 4 to run" in result.output and "batch_size" in result.output
    assert list(tmp_path.iterdir()) == []


def test_bad_sweep_input_is_one_line_and_exit_2(tmp_path):
    for args in (
        ["nope"],
        ["smoke", "norm=fancy"],
        ["smoke", "--launcher", "pbs"],
        ["smoke", "--jobs", "0"],
        ["--launcher", "slurm", "launcher.partitio=x"],
    ):
        result = runner.invoke(app, ["sweep", *args, "--runs-dir", str(tmp_path)])
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("normbench: error: ") and result.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def sweep_cli(runs: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "normbench", "sweep", *args, "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        **kwargs,
    )


# Two short runs beside two long ones (50 times as many steps): once both short runs are
# complete, a long one is training and only a signal can end it.
SHORT_AND_LONG = [
    *(o for o in QUICK if not o.startswith(("train.max_steps=", "train.eval_every="))),
    "train.max_steps=20,1000",
    "train.eval_every=50",
]


def start_and_wait_for_progress(runs: Path, args: list[str], output) -> subprocess.Popen:
    """Start a sweep of two short runs and two long ones in its own process group; return once
    both short runs are complete and a long one is running (only a signal can end it now)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "normbench", "sweep", *args, "--runs-dir", str(runs)],
        stdout=output,
        stderr=output,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        statuses = [m and m.get("status") for m in metas(runs).values()] if runs.exists() else []
        if statuses.count("complete") == 2 and "running" in statuses:
            break
        time.sleep(0.1)
    return proc


@pytest.mark.slow
def test_sweep_runs_records_and_resumes(tmp_path):
    runs = tmp_path / "runs"
    first = sweep_cli(
        runs, *QUICK, "norm=batchnorm,groupnorm", "seed=0,1", "--jobs", "2", "--name", "quick"
    )
    assert first.returncode == 0, first.stderr
    assert "normbench report --sweep quick" in first.stdout
    before = metas(runs)
    assert len(before) == 4 and {m["status"] for m in before.values()} == {"complete"}
    assert {m["threads"] for m in before.values()} == {max(1, os.cpu_count() // 2)}
    (record_path,) = (runs / "sweeps").glob("quick-*.json")
    record = json.loads(record_path.read_text())
    assert {r["run_id"] for r in record["runs"]} == set(before)
    assert record["counts"] == {"complete": 4} and record["axes"] == ["norm", "seed"]
    # one run failed last time: only it runs again
    failed = sorted(before)[0]
    RunDir(runs, failed).write_meta({**before[failed], "status": "failed"})
    stamp = RunDir(runs, failed).metrics_path.stat().st_mtime_ns
    again = sweep_cli(runs, *QUICK, "norm=batchnorm,groupnorm", "seed=0,1", "--name", "quick")
    assert again.returncode == 0 and "4 runs: 3 complete, 1 failed; 1 to run" in again.stdout
    after = metas(runs)
    assert after[failed]["status"] == "complete"
    assert RunDir(runs, failed).metrics_path.stat().st_mtime_ns != stamp  # trained again
    for name in set(before) - {failed}:
        assert after[name] == before[name]  # untouched
    nothing = sweep_cli(runs, *QUICK, "norm=batchnorm,groupnorm", "seed=0,1", "--name", "quick")
    assert "0 to run" in nothing.stdout and metas(runs) == after


@pytest.mark.slow
def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    runs = tmp_path / "runs"
    # BatchNorm over a batch of one sample with one token: PyTorch refuses it at run time.
    result = sweep_cli(
        runs,
        "model.patch_size=40",
        "batch_size=1",
        "model.width=8",
        "model.depth=1",
        "model.heads=2",
        "data.num_samples=500",
        "train.max_steps=4",
        "norm=batchnorm,layernorm,rmsnorm",
        "--jobs",
        "2",
    )
    assert result.returncode == 1
    assert "failed transformer-batchnorm" in result.stdout
    assert "Expected more than 1 value per channel" in result.stdout
    statuses = {name.split("-")[1]: meta["status"] for name, meta in metas(runs).items()}
    assert statuses == {"batchnorm": "failed", "layernorm": "complete", "rmsnorm": "complete"}


@pytest.mark.slow
def test_kill_9_of_the_sweep_and_its_workers_then_resume(tmp_path):
    runs = tmp_path / "runs"
    args = [*SHORT_AND_LONG, "seed=0,1", "--jobs", "2"]
    proc = start_and_wait_for_progress(runs, args, subprocess.DEVNULL)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and every worker at once
    proc.wait()
    killed = metas(runs)
    complete_before = {n: m for n, m in killed.items() if m and m["status"] == "complete"}
    assert complete_before and any(m and m["status"] == "running" for m in killed.values())
    resumed = sweep_cli(runs, *args)
    assert resumed.returncode == 0, resumed.stderr
    after = metas(runs)
    assert len(after) == 4 and {m["status"] for m in after.values()} == {"complete"}
    for name, meta in complete_before.items():
        assert after[name] == meta  # not trained again
    assert f"{4 - len(complete_before)} to run" in resumed.stdout


@pytest.mark.slow
@pytest.mark.parametrize("whole_group", [True, False], ids=["terminal", "parent-only"])
def test_ctrl_c_interrupts_running_runs_and_the_same_command_finishes_the_rest(
    tmp_path, whole_group
):
    runs = tmp_path / "runs"
    args = [*SHORT_AND_LONG, "seed=0,1", "--jobs", "2"]
    proc = start_and_wait_for_progress(runs, args, subprocess.PIPE)
    if whole_group:  # a terminal's Ctrl-C reaches the sweep and its workers
        os.killpg(proc.pid, signal.SIGINT)
    else:  # only the sweep: it must stop its workers itself
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "run the same command again" in out
    stopped = metas(runs)
    assert "running" not in {m["status"] for m in stopped.values()}
    assert "interrupted" in {m["status"] for m in stopped.values()}  # the one seen training
    complete = {n: m for n, m in stopped.items() if m["status"] == "complete"}
    rerun = sweep_cli(runs, *args)
    assert rerun.returncode == 0, rerun.stderr
    after = metas(runs)
    assert len(after) == 4 and {m["status"] for m in after.values()} == {"complete"}
    assert all(after[name] == meta for name, meta in complete.items())


@pytest.mark.slow
def test_two_concurrent_sweeps_never_train_a_run_twice(tmp_path):
    runs = tmp_path / "runs"
    longer = [o for o in QUICK if not o.startswith("train.max_steps=")]
    common = [*longer, "train.max_steps=60", "seed=0,1,2", "--jobs", "1"]
    # Both start with the same three GroupNorm runs, at the same time.
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "normbench",
                "sweep",
                *common,
                f"norm={n}",
                "--name",
                name,
                "--runs-dir",
                str(runs),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, name in (("groupnorm,batchnorm", "a"), ("groupnorm,layernorm", "b"))
    ]
    for proc in procs:
        assert proc.wait(timeout=900) == 0, proc.stderr.read()  # a hang guard only
    records = [json.loads(p.read_text()) for p in (runs / "sweeps").glob("*.json")]
    trained = sum(r["counts"].get("complete", 0) for r in records)
    finished_meanwhile = sum(r["counts"].get("skipped", 0) for r in records)
    assert len(run_dirs(runs)) == 9  # 3 norms x 3 seeds
    assert trained == 9  # each run trained once, by one of the two sweeps
    assert finished_meanwhile == 3  # the shared runs: found complete by the other sweep
    assert {m["status"] for m in metas(runs).values()} == {"complete"}


@pytest.mark.slow
def test_submitit_local_runs_the_sweep_end_to_end(tmp_path):
    runs = tmp_path / "runs"
    result = sweep_cli(
        runs,
        *QUICK,
        "norm=batchnorm,groupnorm",
        "--launcher",
        "submitit_local",
        "launcher.array_parallelism=2",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert {m["status"] for m in metas(runs).values()} == {"complete"} and len(metas(runs)) == 2
    assert {m["threads"] for m in metas(runs).values()} == {1}  # cpus_per_task
    assert list((runs / "sweeps").glob("*.submitit/*_log.out"))  # submitit's own job logs


def test_slurm_parameters_come_from_the_launcher_config(tmp_path, monkeypatch):
    """SLURM cannot run here: build submitit's SLURM executor (it only checks that srun
    exists) and read the sbatch script it would submit."""
    from submitit.slurm.slurm import _make_sbatch_string

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    settings = launcher_settings(
        "slurm",
        [
            "launcher.partition=gpu",
            "launcher.time_min=30",
            "launcher.gpus_per_node=1",
            "launcher.mem_gb=16",
            "launcher.array_parallelism=8",
            "launcher.additional={account:myproj,qos:high}",
            "launcher.setup=[module load cuda]",
        ],
    )
    executor = SubmititLauncher(settings, tmp_path, False, tmp_path / "submitit").executor()
    script = _make_sbatch_string(
        command="python -m job", folder=tmp_path, map_count=20, **executor._executor.parameters
    )
    for line in (
        "--partition=gpu",
        "--time=30",
        "--gpus-per-node=1",
        "--mem=16GB",
        "--cpus-per-task=2",
        "--array=0-19%8",
        "--account=myproj",
        "--qos=high",
        "--job-name=normbench",
    ):
        assert f"#SBATCH {line}" in script, line
    assert "module load cuda" in script
    assert submitit_parameters(launcher_settings("submitit_local", []))["cpus_per_task"] == 1


@pytest.mark.slow
def test_stale_runs_are_counted_kept_and_rerun_on_request(tmp_path):
    runs = tmp_path / "runs"
    args = [*QUICK, "norm=batchnorm,groupnorm"]
    assert sweep_cli(runs, *args, "--jobs", "1").returncode == 0
    stale = sorted(run_dirs(runs))[0]
    meta = RunDir(runs, stale).read_meta()
    RunDir(runs, stale).write_meta({**meta, "code": {**meta["code"], "source_hash": "0" * 16}})
    dry = sweep_cli(runs, *args, "--dry-run")
    assert "2 runs: 2 complete (1 stale: made by other code; 1 kept, --rerun-stale" in dry.stdout
    assert "skip (stale)" in dry.stdout
    kept = sweep_cli(runs, *args, "--jobs", "1")
    assert "0 to run" in kept.stdout
    assert RunDir(runs, stale).read_meta()["code"]["source_hash"] == "0" * 16
    again = sweep_cli(runs, *args, "--jobs", "1", "--rerun-stale")
    assert again.returncode == 0 and "1 to run" in again.stdout
    assert RunDir(runs, stale).read_meta()["code"]["source_hash"] == meta["code"]["source_hash"]


@pytest.mark.slow
def test_until_decided_adds_seeds_only_to_open_groups_and_spends_alpha(tmp_path):
    runs = tmp_path / "runs"
    longer = [o for o in QUICK if not o.startswith("train.max_steps=")]
    args = [*longer, "norm=batchnorm,groupnorm,none", "seed=0,1", "train.max_steps=12"]
    result = sweep_cli(
        runs,
        *args,
        "--jobs",
        "2",
        "--until-decided",
        "--max-seeds",
        "3",
        "--name",
        "adaptive",
        "--reference",
        "norm=groupnorm",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record_path,) = (runs / "sweeps").glob("adaptive-*.json")
    record = json.loads(record_path.read_text())
    design = record["until_decided"]
    assert design["fixed_design_runs"] == 9 and design["fractions"] == [2 / 3, 1.0]
    assert design["reference"] == ["norm=groupnorm"] and design["looks_taken"] in (1, 2)
    seeds = [dict(o.split("=", 1) for o in r["overrides"])["seed"] for r in record["runs"]]
    assert seeds.count("0") == seeds.count("1") == 3 and seeds.count("2") <= 3
    said = " ".join(result.stdout.split())  # the closing lines are wrapped at 80 columns
    assert "until decided:" in said and "comparisons decided from" in said
    assert "a fixed design of 3 seeds per group would take 9 runs" in said
    assert "these runs, reported once at alpha 0.05, decide" in said or (
        "this design was not simulated" in said
    )
    report = runner.invoke(
        app, ["report", "--sweep", "adaptive", "--runs-dir", str(runs), "--format", "json"]
    )
    method = json.loads(report.stdout)["method"]
    look = design["looks_taken"]
    assert method["alpha_this_look"] == pytest.approx(look_alpha(0.05, design["fractions"], look))
    assert method["ci_level"] == pytest.approx(1 - 2 * method["alpha_this_look"])
    bad = sweep_cli(runs, *args, "--until-decided", "--max-seeds", "1")
    assert bad.returncode == 2 and "--max-seeds 1: one seed decides nothing" in bad.stderr


def test_lr_stability_crosses_norms_and_placements_with_a_log_spaced_lr_grid():
    sweep = expand("lr_stability", [])
    groups = {(job.cfg["norm"]["name"], job.cfg["placement"]["name"]) for job in sweep.jobs}
    assert groups == {
        ("layernorm", "pre"),
        ("layernorm", "post"),
        ("layernorm", "sandwich"),
        ("rmsnorm", "pre"),
        ("rmsnorm", "post"),
        ("none", "pre"),
    }
    lrs = sorted({job.cfg["train"]["lr"] for job in sweep.jobs})
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert len(lrs) == 5 and all(ratio == pytest.approx(ratios[0], rel=0.15) for ratio in ratios)
    assert {job.cfg["data"]["name"] for job in sweep.jobs} == {"pysource"}
    assert len(sweep.jobs) == len(groups) * len(lrs) * 2


def test_depth_preset_holds_the_learning_rate_and_varies_depth_and_placement():
    sweep = expand("depth", [])
    assert {job.cfg["train"]["lr"] for job in sweep.jobs} == {0.01}
    assert {job.cfg["train"]["warmup_steps"] for job in sweep.jobs} == {0}
    assert {job.cfg["model"]["depth"] for job in sweep.jobs} == {4, 8, 16}
    assert {job.cfg["placement"]["name"] for job in sweep.jobs} >= {"pre", "post", "sandwich"}
    assert {job.cfg["placement"]["name"] for job in sweep.jobs} >= {"lns", "mix"}
    assert {job.cfg["data"]["name"] for job in sweep.jobs} == {"pysource"}
    assert load_preset("depth")["version"] == 2 and len(sweep.jobs) == 3 * 6 * 3


def test_qk_norm_preset_crosses_qk_norm_with_a_learning_rate_grid_that_reaches_divergence():
    """Wortsman et al.'s LR sensitivity needs a log-spaced grid over orders of magnitude;
    seeds pair the groups; diagnostics record the attention logits over training."""
    sweep = expand("qk_norm", [])
    configs = [job.cfg for job in sweep.jobs]
    assert {c["model"]["qk_norm"] for c in configs} == {"none", "layernorm", "rmsnorm"}
    lrs = sorted({c["train"]["lr"] for c in configs})
    assert lrs[-1] / lrs[0] >= 100 and lrs[-1] >= 0.3  # lr_stability: Pre-LN fails at 0.3
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert all(ratio == pytest.approx(ratios[0], rel=0.15) for ratio in ratios)  # log-spaced
    assert {c["seed"] for c in configs} == set(range(6))
    assert all(c["diagnostics"] and c["data"]["name"] == "pysource" for c in configs)
    assert {c["train"]["z_loss"] for c in configs} == {1e-4}  # the same in every group
    assert len(sweep.jobs) == 3 * len(lrs) * 6


def test_the_run_counts_a_preset_header_states_are_its_grids():
    """A header's "N combinations, M distinct runs" / "N runs" is what the preset expands to,
    a tuned preset's "at most N runs" what its plan trains at most (a ladder's headers state
    estimates its own test checks against its plan)."""
    import re

    from normbench.sweeps import tuned_plan
    from normbench.sweeps.live import preset_header

    for name in presets():
        run = preset_header(name).partition(" Run: ")[2].partition(" Read: ")[0]
        stated = dict(
            (kind, int(count.replace(",", "")))
            for count, kind in re.findall(r"(\d[\d,]*) (combinations|distinct runs|runs)", run)
        )
        if not stated or load_preset(name).get("ladder"):
            continue
        sweep = expand(name, [])
        if load_preset(name).get("tune"):
            plan = tuned_plan.design(sweep, tuned_plan.parse_space([], name))
            assert stated == {"runs": plan.runs}, name
            continue
        assert stated.get("runs", stated.get("distinct runs")) in (None, len(sweep.jobs)), name
        assert stated.get("distinct runs", len(sweep.jobs)) == len(sweep.jobs), name
        assert stated.get("combinations", sweep.combinations) == sweep.combinations, name
