"""The cost of more ranks: for runs that differ only in ``train.devices`` (N), one line per
family of groups: the step time at each N, the scaling efficiency at each N above 1 with its
interval paired by seed, and the gradient all-reduce's share of a step where it was measured
(CPU ranks: normbench.training.distributed.AllReduceClock; "not measured" elsewhere).

Scaling efficiency is the throughput at N over N times the throughput at 1 rank; at a fixed
global batch (``batch_size``, which runs differing only in N share) that is step time at 1
over N times step time at N: 100% when N ranks take 1/N of one's time per step. Paired by
seed: for each seed both N and 1 ran, the log of that ratio (each side the mean of its runs'
log median step times); the line gives the geometric mean over the seeds and a Student-t 95%
interval on the mean log ratio, exponentiated (report.stats.mean_ci); one shared seed gives
no interval. Step times compare only as the cost table's do (report.cost.unlike): on one
host, under loads per CPU within ``LOAD_SPREAD`` of each other (the ranks' own processes
included); otherwise the line says why no efficiency is given. The 1-rank runs of a sweep
often train while the wider ones wait for slots, under another load: an efficiency of 368%
read off such runs was the machine's load, not the ranks.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normbench.report import stats
from normbench.report.batch import PER_DEVICE_BATCH
from normbench.report.cost import timed_mask, unlike
from normbench.report.grouping import group_rows
from normbench.report.labels import label
from normbench.report.results import numbers

DEVICES = "train.devices"
SHARE = "allreduce_share_median"  # each run's median over its steps (normbench.training.cost)


def device_scaling_lines(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """One line per family of groups that differ only in ``train.devices`` (the other group
    keys equal) and hold a 1-rank group and a wider one, all with recorded step times; none
    where the groups do not differ in ``train.devices``."""
    if DEVICES not in keys:
        return []
    timed = timed_mask(runs)
    if not timed.any():
        return []
    runs = runs[timed]
    others = [k for k in keys if k not in (DEVICES, PER_DEVICE_BATCH)]
    lines = []
    for values, at in group_rows(runs, others):
        family = runs.take(at)
        by_devices = {int(devices): family.take(rows) for (devices,), rows in _by_devices(family)}
        if len(by_devices) < 2:
            continue
        name = " ".join(f"{k}={label(v)}" for k, v in values.items()) or "all runs"
        lines.append(f"scaling over train.devices ({name}): {family_line(by_devices)}")
    return lines


def _by_devices(family: pd.DataFrame) -> list[tuple[tuple, np.ndarray]]:
    return [(tuple(v.values()), rows) for v, rows in group_rows(family, [DEVICES])]


def family_line(by_devices: dict[int, pd.DataFrame]) -> str:
    """The step time at each N, the efficiency of each N above 1 against 1 rank, the load
    per CPU and the collectives' share; why not, where the runs' step times do not compare
    (hosts, load: report.cost.unlike) or no 1-rank group is there."""
    steps = "; ".join(
        f"{_ms(math.exp(np.mean(list(log_steps(part).values()))))} a step at {n}"
        for n, part in sorted(by_devices.items())
    )
    hosts = {h for part in by_devices.values() for h in _hosts(part)}
    load = np.concatenate([_load(part) for part in by_devices.values()])
    shown_load = (
        f"load per CPU {np.nanmin(load):.2f} to {np.nanmax(load):.2f}"
        if np.isfinite(load).any()
        else "load not recorded"
    )
    collectives = collectives_text(by_devices)
    why = unlike(hosts, load)
    if why:
        return f"{steps}; efficiency not computed ({why}); {collectives}"
    if 1 not in by_devices:
        return f"{steps}; efficiency not computed (no 1-rank runs); {shown_load}; {collectives}"
    one = log_steps(by_devices[1])
    parts = [
        efficiency_text(n, efficiency(one, log_steps(part), n))
        for n, part in sorted(by_devices.items())
        if n != 1
    ]
    return f"{steps}; {'; '.join(parts)}; {shown_load}; {collectives}"


def collectives_text(by_devices: dict[int, pd.DataFrame]) -> str:
    """The gradient all-reduce's share of a step at each N above 1, the median over the
    runs of each run's median share; 'not measured' where no run recorded one (CUDA, or runs
    made before normbench timed it)."""
    shares = {
        n: numbers(part[SHARE]) if SHARE in part else np.full(len(part), math.nan)
        for n, part in sorted(by_devices.items())
        if n != 1
    }
    measured = [
        f"all-reduce {np.median(s[np.isfinite(s)]):.0%} of a step at {n}"
        for n, s in shares.items()
        if np.isfinite(s).any()
    ]
    return "; ".join(measured) if measured else "collectives' share not measured"


def log_steps(part: pd.DataFrame) -> dict:
    """Each seed's mean log median step time over its runs."""
    seeds = part["seed"].tolist() if "seed" in part else list(range(len(part)))
    by_seed: dict = {}
    for seed, seconds in zip(seeds, numbers(part["step_s_median"]).tolist(), strict=True):
        by_seed.setdefault(seed, []).append(math.log(seconds))
    return {seed: float(np.mean(logs)) for seed, logs in by_seed.items()}


def efficiency(one: dict, wide: dict, n: int) -> tuple[float, float, float, int]:
    """The scaling efficiency at ``n`` ranks, step time at 1 over ``n`` times step time at
    ``n``, paired by seed: (geometric mean, 95% interval low, high, seeds paired); NaN bounds
    with fewer than two seeds paired, all NaN with none."""
    paired = sorted(set(one) & set(wide), key=str)
    ratios = [one[s] - wide[s] - math.log(n) for s in paired]
    mean, half = stats.mean_ci(ratios)
    if not paired:
        return math.nan, math.nan, math.nan, 0
    if not math.isfinite(half):
        return math.exp(mean), math.nan, math.nan, len(paired)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(paired)


def efficiency_text(n: int, value: tuple[float, float, float, int]) -> str:
    mean, low, high, seeds = value
    if not seeds:
        return f"efficiency at {n} not computed (no seed ran at both 1 and {n})"
    if not math.isfinite(low):
        return f"efficiency at {n} {mean:.0%} (1 seed paired: no interval)"
    return f"efficiency at {n} {mean:.0%} (95% CI {low:.0%} to {high:.0%}, {seeds} seeds paired)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


def _hosts(part: pd.DataFrame) -> set:
    if "host" not in part:
        return {None}
    return {h if isinstance(h, str) else None for h in part["host"]}


def _load(part: pd.DataFrame) -> np.ndarray:
    columns = [
        numbers(part[c]) if c in part else np.full(len(part), math.nan)
        for c in ("load_start", "load_end", "cpu_count")
    ]
    return (columns[0] + columns[1]) / 2 / columns[2]
