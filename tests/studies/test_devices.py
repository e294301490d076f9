"""The devices study (issue 59 item 6): which runs each arm of its per-N table pairs, the GPU
variant's plan, and findings refusing a run wider than its worker slots before any study
trains."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from normbench.store.catalog import Selection
from normbench.studies import devices, findings
from normbench.studies.study import Study
from tests.studies.test_findings_progress import InstantPool


def runs_of(rows: list[tuple[str, int, str | None, str | None]]) -> Selection:
    """A catalog of runs: (norm, devices, norm.sync, norm.eval_stats), as the store keys
    them (None where the norm has no batch statistics)."""
    frame = pd.DataFrame(
        rows, columns=["norm.name", "train.devices", "norm.sync", "norm.eval_stats"]
    )
    return Selection(frame.assign(run_id=[f"r{i}" for i in range(len(frame))]), [])


STORE = runs_of(
    [
        ("batchnorm", 1, "device", "rank0"),  # the one 1-rank BatchNorm run every arm pairs
        ("batchnorm", 2, "device", "rank0"),
        ("batchnorm", 2, "device", "mean"),
        ("batchnorm", 2, "global", None),
        ("groupnorm", 1, None, None),
        ("groupnorm", 2, None, None),
    ]
)


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        (devices.ARMS[0], ["r0", "r1"]),  # per device, rank 0's
        (devices.ARMS[1], ["r0", "r2"]),  # per device, the ranks' mean
        (devices.ARMS[2], ["r0", "r3"]),  # synchronized
        (devices.ARMS[3], ["r4", "r5"]),  # GroupNorm
        (devices.ARMS[4], []),  # LayerNorm: no runs
    ],
)
def test_each_arm_pairs_its_runs_beyond_one_rank_with_its_norms_one_rank_run(arm, expected):
    assert list(devices.arm_runs(STORE, arm).runs["run_id"]) == expected


def test_the_gpu_plan_holds_a_gpu_per_rank_for_its_steps_and_its_start():
    plan = devices.plan_of([(1, 3000), (2, 3000), (8, 100)])
    per_step, start = devices.GPU_STEP_S, devices.GPU_START_S
    expected = (3000 * per_step + start) * 3 + (100 * per_step + start) * 8
    assert (plan.runs, plan.ranks, plan.widest) == (3, 11, 8)
    assert plan.gpu_seconds == pytest.approx(expected)


def test_findings_widens_its_pool_to_the_widest_run_and_says_so(tmp_path, monkeypatch):
    """`normbench findings` at its default --jobs 2 must write the devices study's section,
    whose runs take 4 slots: the pool widens, said once before any study trains."""
    widths = []

    class Recording(InstantPool):
        def __init__(self, slots, *args):
            widths.append(slots)
            super().__init__(slots, *args)

    narrow = Study("narrow", ["model=cnn", "norm=layernorm"], [])
    wide = Study("wide", ["model=cnn", "norm=layernorm", "train.devices=2"], [])
    monkeypatch.setattr(findings, "STUDIES", (narrow, wide))
    monkeypatch.setattr(findings, "LocalLauncher", Recording)
    shown = io.StringIO()
    findings.run_studies(tmp_path / "runs", 1, "smoke", Console(file=shown, width=200))
    assert widths == [2]
    assert shown.getvalue().splitlines()[0] == (
        "--jobs 1 widened to 2: a run of 2 ranks takes 2 worker slots"
    )


def test_a_comparison_without_a_paired_seed_says_so_rather_than_printing_nan():
    unpaired = pd.Series({"verdict": "-", "diff_vs_reference": float("nan"), "n": 2})
    unpaired["diff_ci_low"] = unpaired["diff_ci_high"] = float("nan")
    assert devices.difference_text(unpaired).startswith("not compared (2 run(s)")
    paired = pd.Series(
        {"verdict": "equivalent", "diff_vs_reference": 0.002, "n": 5}
        | {"diff_ci_low": -0.001, "diff_ci_high": 0.005}
    )
    assert devices.difference_text(paired) == (
        "**equivalent** against rank 0's (+0.0020, 90% CI -0.0010 to +0.0050, 5 seeds)"
    )


def test_the_table_reads_only_the_seeds_that_ran_every_arm_at_every_n():
    frame = pd.DataFrame(
        {
            "run_id": ["a0", "b0", "c0", "a1", "b1", "c1", "a2"],
            "seed": [0, 0, 0, 1, 1, 1, 2],
            "status": ["complete"] * 5 + ["interrupted", "complete"],
        }
    )
    chosen, said = devices.complete_seeds(Selection(frame, []))
    assert list(chosen.runs["run_id"]) == ["a0", "b0", "c0"]
    assert said == "Seed 0: each ran every arm at every N (4 runs of other seeds left out)."
