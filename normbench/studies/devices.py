"""BatchNorm across devices: data-parallel runs (``train.devices``) at a fixed global batch, the
registered claims that per-device BatchNorm loses accuracy as the per-device batch shrinks
(Ioffe 2017; Wu & He 2018), that synchronized statistics recover it, and that GroupNorm and
LayerNorm do not see N; and, exploratory (no direction is claimed anywhere), what evaluating
with the ranks' mean running statistics changes against rank 0's (issue 59 item 6).

Every arm is paired by seed against its norm's 1-rank run: at N = 1 there is one BatchNorm
run whatever ``norm.sync`` and ``norm.eval_stats`` say (normbench.experiment.compose), so the
per-device, mean-evaluated and synchronized arms share their reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from normbench.report.batch import PER_DEVICE_BATCH
from normbench.report.labels import label
from normbench.store.catalog import Selection
from normbench.studies import family, registry
from normbench.studies.study import (
    Context,
    Study,
    command_of,
    load,
    md,
    paragraphs,
    report,
    section_of,
    subset,
)
from normbench.sweeps import grid as grids

# The devices preset: global batch 16 on 1, 2 and 4 ranks (per-device batch 16, 8, 4). One
# torch thread a rank; a 4-rank run takes 4 worker slots (findings --jobs 4). --smoke: the
# per-device BatchNorm arm on 1 and 2 ranks at one seed, 2 runs: each rank is a process that
# imports torch (seconds of CPU), and the test suite runs every study at two slots; the other
# arms' mechanics are tests/training/test_distributed.py's.
DEVICES = Study(
    "devices",
    ["devices", "threads=1"],
    ["seed=0,1", "train.max_steps=150"],
    smoke=(
        "train.devices=1,2",
        "norm=batchnorm",
        "norm.sync=device",
        "norm.eval_stats=rank0",
        "seed=0",
    ),
)

STUDIES = (DEVICES,)

CLAIMS = (
    "ioffe-batchnorm-per-device",
    "sync-batchnorm-global",
    "wu-he-groupnorm-devices",
    "ba-layernorm-devices",
)


@dataclass(frozen=True)
class Arm:
    """One line of the per-N table: a norm and its statistics settings (filters, KEY=VALUE, on
    the runs at N > 1), each paired against ``norm``'s 1-rank runs."""

    name: str
    norm: str
    filters: tuple[str, ...]
    statistics: str  # the batch its statistics see: "device", "global" or "none"


ARMS = (
    Arm(
        "BatchNorm, per device, rank 0's at evaluation",
        "batchnorm",
        ("norm.sync=device", "norm.eval_stats=rank0"),
        "device",
    ),
    Arm(
        "BatchNorm, per device, ranks' mean at evaluation",
        "batchnorm",
        ("norm.sync=device", "norm.eval_stats=mean"),
        "device",
    ),
    Arm("BatchNorm, synchronized", "batchnorm", ("norm.sync=global",), "global"),
    Arm("GroupNorm", "groupnorm", (), "none"),
    Arm("LayerNorm", "layernorm", (), "none"),
)

TABLE_COLUMNS = [
    "arm",
    "train.devices",
    "per_device_batch",
    "statistics_batch",
    "n",
    "test_acc_mean",
    "verdict",
    "diff_vs_reference",
    "diff_ci_low",
    "diff_ci_high",
]


def devices_of(runs: pd.DataFrame) -> pd.Series:
    return runs["train.devices"].map(label).astype(int)


def arm_runs(selection: Selection, arm: Arm) -> Selection:
    """The arm's runs at N > 1 with its norm's runs at N = 1 (the reference)."""

    def keep(runs: pd.DataFrame) -> pd.Series:
        norm = runs["norm.name"] == arm.norm
        mask = norm & (devices_of(runs) > 1)
        for item in arm.filters:
            key, value = item.split("=", 1)
            mask &= runs[key].map(label) == value
        return (norm & (devices_of(runs) == 1)) | mask

    return subset(selection, keep)


def arm_table(selection: Selection, arm: Arm, global_batch: int) -> pd.DataFrame:
    """The arm's row per N: test accuracy, and against the 1-rank run its paired difference
    with its interval and the report's verdict (Holm over the arm's N)."""
    runs = arm_runs(selection, arm)
    # The report adds the per-device batch as a grouping key beside train.devices and picks a
    # reference per value of the other keys: named too, so that the 1-rank run is every N's.
    reference = ("train.devices=1", f"{PER_DEVICE_BATCH}={global_batch}")
    result = report(runs, by=["train.devices"], reference=reference, test=True)
    table = section_of(result).tables["convergence"].copy()
    devices = table["train.devices"].map(label).astype(int)
    per_device = global_batch // devices
    seen = {"device": per_device, "global": global_batch}.get(arm.statistics, "-")
    table.insert(0, "arm", arm.name)
    table = table.assign(per_device_batch=per_device, statistics_batch=seen, order=devices)
    return table.sort_values("order").drop(columns="order")


def per_n_table(selection: Selection, global_batch: int) -> pd.DataFrame:
    """Every arm's rows, one table; an arm with no run beyond its 1-rank reference (--smoke
    trains one arm) has no rows."""
    tables = [
        arm_table(selection, arm, global_batch)
        for arm in ARMS
        if (devices_of(arm_runs(selection, arm).runs) > 1).any()
    ]
    return pd.concat(tables, ignore_index=True)


def eval_stats_lines(selection: Selection) -> list[str]:
    """Exploratory, two-sided: per-device BatchNorm evaluated with the ranks' mean running
    statistics against rank 0's at each N > 1, paired by seed (the report's verdict: better,
    worse, equivalent within the margin, or inconclusive)."""
    runs = selection.runs
    evaluated = runs["norm.eval_stats"].map(label) == "mean"
    lines = []
    for devices in sorted(set(devices_of(runs[evaluated]))):
        chosen = subset(
            selection,
            lambda r, n=devices: (
                (r["norm.name"] == "batchnorm")
                & (devices_of(r) == n)
                & (r["norm.sync"].map(label) == "device")
            ),
        )
        result = report(
            chosen, by=["norm.eval_stats"], reference=("norm.eval_stats=rank0",), test=True
        )
        table = section_of(result).tables["convergence"]
        row = table[table["norm.eval_stats"].map(label) == "mean"].iloc[0]
        lines.append(f"On {devices} ranks the ranks' mean is {difference_text(row)}.")
    return lines


def difference_text(row: pd.Series) -> str:
    """A convergence row's verdict against the reference with its paired difference and 90%
    interval, or why there is none (no seed run in both groups yet)."""
    if pd.isna(row["diff_vs_reference"]) or pd.isna(row["diff_ci_low"]):
        return f"not compared ({row['n']} run(s), no seed paired with the reference)"
    return (
        f"**{row['verdict']}** against rank 0's ({row['diff_vs_reference']:+.4f}, 90% CI "
        f"{row['diff_ci_low']:+.4f} to {row['diff_ci_high']:+.4f}, {row['n']} seeds)"
    )


# ------------------------------------------------------------------------ the GPU variant
GPU_PRESET = "devices_gpu"
# Assumed, not measured (no GPU here): a step of the width-64 CNN at batch 32 on one GPU,
# DDP's all-reduce included; and each rank's start (CUDA context, NCCL's rendezvous, data).
GPU_STEP_S = 0.005
GPU_START_S = 60.0


@dataclass(frozen=True)
class GpuPlan:
    """The GPU variant's grid as `normbench sweep devices_gpu --dry-run` composes it: its
    runs, their rank processes, and the GPU time they take at the assumed step and start."""

    runs: int
    ranks: int
    widest: int
    gpu_seconds: float


def gpu_plan() -> GpuPlan:
    """The GPU preset's grid, composed as its dry run composes it, planned."""
    jobs = grids.expand(GPU_PRESET, []).jobs
    return plan_of([(job.cfg["train"]["devices"], job.cfg["train"]["max_steps"]) for job in jobs])


def plan_of(runs: list[tuple[int, int]]) -> GpuPlan:
    """Runs of (ranks, steps) planned: every rank holds a GPU for its steps and its start."""
    seconds = sum(ranks * (steps * GPU_STEP_S + GPU_START_S) for ranks, steps in runs)
    return GpuPlan(len(runs), sum(r for r, _ in runs), max(r for r, _ in runs), seconds)


def gpu_text(plan: GpuPlan) -> str:
    hours = plan.gpu_seconds / 3600
    return (
        f"**Planned on GPUs, not run here.** `normbench sweep {GPU_PRESET} --dry-run` composes "
        f"{plan.runs} runs of {plan.ranks} rank processes (up to {plan.widest} ranks a run, "
        "NCCL, torch's own SyncBatchNorm, 3,000 steps: trained to the CNN's plateau, global "
        "batch 32, per-device batch down to 4). At an assumed "
        f"{GPU_STEP_S * 1000:g} ms a step and {GPU_START_S:g} s to start a rank (no GPU here "
        f"to measure either): about {hours:.1f} GPU-hours, {hours * 60 / plan.widest:.0f} "
        f"minutes on one node of {plan.widest} GPUs. On a cluster each run is one job of N "
        "tasks (`--launcher slurm`, docs/distributed.md)."
    )


def complete_seeds(selection: Selection) -> tuple[Selection, str]:
    """The runs of the seeds that trained every run of the design (the most runs any seed
    has), so that every mean in the table is over the same seeds as its paired difference;
    and a sentence saying which seeds those are, and what was left out."""
    runs = selection.runs[selection.runs["status"] == "complete"]
    per_seed = runs.groupby(runs["seed"].map(label).astype(int))["run_id"].count()
    kept = sorted(int(seed) for seed in per_seed.index[per_seed == per_seed.max()])
    chosen = subset(selection, lambda r: r["seed"].map(label).astype(int).isin(kept))
    left = len(selection.runs) - len(chosen.runs)
    said = f"Seed{'s' * (len(kept) > 1)} {', '.join(map(str, kept))}: each ran every arm at every N"
    return chosen, said + (f" ({left} runs of other seeds left out)." if left else ".")


# --------------------------------------------------------------------------- the section
def devices(ctx: Context) -> str:
    """The per-N table, the registered claims labelled by the rule, the evaluation-statistics
    comparison (exploratory), and the GPU variant's plan."""
    selection, seeds_text = complete_seeds(load(ctx.runs, "devices"))
    runs = selection.runs
    global_batch = int(label(runs["batch_size"].iloc[0]))
    table = per_n_table(selection, global_batch)
    widest = int(devices_of(runs).max())
    claims = [family.claim_lines(registry.claim(name), runs) for name in CLAIMS]
    return paragraphs(
        "## BatchNorm across devices: per-device statistics, synchronized statistics, and the "
        "norms that never see the batch (Ioffe 2017; Wu & He 2018)",
        "**Claim.** Under data-parallel training each device normalizes its own slice of the "
        "batch: at a fixed global batch BatchNorm loses accuracy as the per-device batch "
        "shrinks; synchronizing its statistics over the devices recovers it; GroupNorm and "
        "LayerNorm, whose statistics are one sample's, do not depend on the number of devices.",
        f"**Command.** `{command_of(DEVICES, ctx.scale)}` (the CNN on MNIST-1D, global batch "
        f"{global_batch} on 1 to {widest} ranks of DistributedDataParallel over gloo, one "
        "thread a rank, `findings --jobs 4`: a 4-rank run takes four worker slots). Per arm and "
        "number of ranks: test accuracy and, against the same norm's 1-rank run, the paired "
        "difference with its 90% interval (per comparison, not adjusted) and the report's "
        "verdict (better or worse: paired t, two-sided; equivalent: TOST within ±0.01; Holm "
        "over the arm's rows; docs/statistics.md). `statistics_batch`: the samples "
        "BatchNorm's statistics see in training. " + seeds_text,
        md(table, TABLE_COLUMNS),
        *claims,
        family.RULE,
        "**What the evaluation statistics change.** *Exploratory (not a registered claim): no "
        "source predicts a direction, so two-sided.* Per-device BatchNorm evaluated with the "
        "running statistics averaged over the ranks (timm's `distribute_bn`) against rank 0's "
        "(DDP's broadcast), paired by seed on test: "
        + (" ".join(eval_stats_lines(selection)) or "no run at this scale evaluates with it."),
        gpu_text(gpu_plan()),
        "**What this does not show.** A CNN of width 32 on MNIST-1D for a few hundred steps, "
        "not ImageNet: every arm is still learning, so the table's accuracies are a budget's, "
        "not a plateau's. Its BatchNorm normalizes over the sequence too, so the per-device "
        "batch of 4 still gives each channel 160 values (4 samples of length 40), where a "
        "detector's batch of 2 images gives fewer samples of far larger maps. The ranks are "
        "processes on one 2-core CPU exchanging over gloo; neither NCCL nor torch's "
        "SyncBatchNorm ran (CUDA only), and this study times nothing: the cost of "
        "synchronizing is the report's cost line, not this section's.",
    )
