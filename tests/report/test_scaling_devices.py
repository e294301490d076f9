"""The report's cost line for runs that differ only in train.devices (report.scaling_devices):
step time per N, scaling efficiency paired by seed with its interval, the reasons it is not
computed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from normbench.report.scaling_devices import device_scaling_lines, efficiency

KEYS = ["norm.name", "train.devices", "per_device_batch"]


def runs_of(step_s: dict[tuple[str, int], list[float]], hosts=("vm",)) -> pd.DataFrame:
    """Finished runs with the given median step times, seeds 0, 1, ... in each group."""
    rows = []
    for (norm, devices), times in step_s.items():
        for seed, seconds in enumerate(times):
            rows.append(
                {
                    "norm.name": norm,
                    "train.devices": devices,
                    "batch_size": 32,
                    "per_device_batch": 32 // devices,
                    "seed": seed,
                    "status": "complete",
                    "step_s_median": seconds,
                    "host": hosts[seed % len(hosts)],
                    "load_start": 2.0,
                    "load_end": 3.0,
                    "cpu_count": 2,
                }
            )
    return pd.DataFrame(rows)


def test_the_efficiency_is_paired_by_seed_with_a_t_interval_on_the_log_ratio():
    one, two = [0.100, 0.120, 0.090], [0.070, 0.080, 0.066]
    logs = [math.log(a) - math.log(b) - math.log(2) for a, b in zip(one, two, strict=True)]
    low, high = scipy_stats.t.interval(0.95, len(logs) - 1, np.mean(logs), scipy_stats.sem(logs))
    mean, got_low, got_high, seeds = efficiency(
        {s: math.log(v) for s, v in enumerate(one)}, {s: math.log(v) for s, v in enumerate(two)}, 2
    )
    assert seeds == 3
    assert mean == pytest.approx(math.exp(np.mean(logs)))
    assert (got_low, got_high) == pytest.approx((math.exp(low), math.exp(high)))


def test_each_family_that_differs_only_in_devices_gets_one_line():
    runs = runs_of(
        {
            ("batchnorm", 1): [0.100, 0.120, 0.090],
            ("batchnorm", 2): [0.070, 0.080, 0.066],
            ("layernorm", 1): [0.100, 0.100],
            ("layernorm", 2): [0.050, 0.050],
        }
    )
    batchnorm, layernorm = device_scaling_lines(runs, KEYS)
    assert batchnorm.startswith("scaling over train.devices (norm.name=batchnorm): ")
    assert "efficiency at 2 71% (95% CI 64% to 80%" in batchnorm and "3 seeds paired" in batchnorm
    assert "load per CPU 1.25 to 1.25" in batchnorm
    assert "collectives' share not measured" in batchnorm
    shares = runs.assign(allreduce_share_median=[None] * 6 + [0.2, 0.4, 0.1, 0.3])
    _, layernorm = device_scaling_lines(shares, KEYS)
    assert layernorm.endswith("; all-reduce 20% of a step at 2")  # the median of 0.1 and 0.3
    # equal step times at two seeds: a zero-width interval at exactly 100%
    assert "100 ms a step at 1; 50 ms a step at 2; efficiency at 2 100% (95% CI 100% to 100%" in (
        layernorm
    )


def test_no_line_without_a_devices_axis_and_no_efficiency_across_hosts_or_seeds():
    runs = runs_of({("batchnorm", 1): [0.1, 0.1], ("batchnorm", 2): [0.06, 0.06]})
    assert device_scaling_lines(runs, ["norm.name"]) == []
    (line,) = device_scaling_lines(runs.assign(host=["a", "b", "a", "b"]), KEYS)
    assert "efficiency not computed (hosts differ: a, b)" in line
    (line,) = device_scaling_lines(runs.assign(seed=[0, 1, 2, 3]), KEYS)
    assert "efficiency at 2 not computed (no seed ran at both 1 and 2)" in line
    (line,) = device_scaling_lines(runs.iloc[[0, 2]], KEYS)
    assert "efficiency at 2 83% (1 seed paired: no interval)" in line
    wide = runs.assign(**{"train.devices": [2, 2, 4, 4]})
    (line,) = device_scaling_lines(wide, KEYS)
    assert "efficiency not computed (no 1-rank runs)" in line


def test_no_efficiency_from_runs_timed_under_unlike_load():
    """The 1-rank runs of the devices study trained at a load of 10 per CPU, the 2-rank ones
    at 2.5: the line read 368% off them. Loads per CPU further apart than the cost table's
    LOAD_SPREAD give no efficiency, as they give no step-time verdict there."""
    runs = runs_of({("layernorm", 1): [0.25, 0.25], ("layernorm", 2): [0.03, 0.03]})
    busy = runs.assign(load_start=[20.0, 20.0, 5.0, 5.0], load_end=[20.0, 20.0, 5.0, 5.0])
    (line,) = device_scaling_lines(busy, KEYS)
    assert "efficiency not computed (load per CPU differs: 2.50 to 10.00)" in line
    assert "%" not in line.partition("efficiency")[2]
    (alike,) = device_scaling_lines(runs, KEYS)
    assert "efficiency at 2 417%" in alike  # the same times under one load: computed
