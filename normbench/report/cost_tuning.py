"""What a tuned comparison's choice cost: the tuning runs (normbench.sweeps.tuned; the sweep
record's ``tuning.runs``) summed into the cost of the configuration each group chose, for the
cost table and its Pareto figure.

A tuned group's confirmation runs are one configuration; finding it took every tuning run of
that group (every candidate, every tuning seed, every halving rung). Per group: the tuning
runs' count, their training seconds (each run's median step time times its steps: the unit
of the table's step time) and FLOPs (steps times FLOPs per step), and the cost per
confirmation step with the tuning included, amortised over the confirmation runs' steps:

    (tuning total + confirmation total) / confirmation steps

in seconds and in FLOPs per step: the x of the Pareto figure's second, hollow marker. A tuning
run without recorded cost (made before normbench measured it) counts as nothing, and the row
says how many there were (``tuning_untimed``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report.base import Report
from normbench.report.cost import timed_mask
from normbench.report.grouping import group_rows
from normbench.report.labels import label
from normbench.report.results import numbers
from normbench.store import catalog, records, sweep_record

TUNING_COLUMNS = (
    "tuning_runs",
    "tuning_untimed",
    "tuning_s",
    "tuning_flops",
    "step_s_with_tuning",
    "flops_per_step_with_tuning",
)


def attach_tuning_cost(result: Report, runs_dir: Path, sweep: str) -> None:
    """Each section's cost table gains ``TUNING_COLUMNS`` from the tuned sweep's tuning runs."""
    record = records.latest_record(runs_dir, sweep)
    ids = sweep_record.tuning_runs(record)
    if not ids:
        return
    tuning = catalog.select(catalog.load_runs(runs_dir), [], ids).runs
    for section in result.sections:
        if section.tables.get("cost") is not None:
            confirmation = section.runs[timed_mask(section.runs)]
            section.tables["cost"] = with_tuning_cost(
                section.tables["cost"], section.keys, confirmation, tuning
            )


def totals(runs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: its steps, its training seconds (median step time times steps) and its FLOPs
    (steps times FLOPs per step), NaN where not recorded."""

    def column(name: str) -> np.ndarray:
        return numbers(runs[name]) if name in runs else np.full(len(runs), math.nan)

    steps = column("steps")
    return steps, steps * column("step_s_median"), steps * column("matmul_flops_per_step")


def with_tuning_cost(
    cost: pd.DataFrame, keys: list[str], confirmation: pd.DataFrame, tuning: pd.DataFrame
) -> pd.DataFrame:
    """The cost table with ``TUNING_COLUMNS``: per group its tuning runs (those of its group
    keys), their seconds and FLOPs summed, and the cost per confirmation step with them."""
    keys = [k for k in keys if k in cost]
    present = [k for k in keys if k in tuning]
    sums: dict[tuple, tuple[int, int, float, float]] = {}
    if len(present) == len(keys) and len(tuning):
        _, seconds, flops = totals(tuning)
        for values, at in group_rows(tuning, keys):
            timed = np.isfinite(seconds[at])
            sums[tuple(label(values[k]) for k in keys)] = (
                len(at),
                int((~timed).sum()),
                float(np.nansum(seconds[at])),
                float(np.nansum(flops[at])),
            )
    steps, seconds, flops = totals(confirmation)
    own = {}
    for values, at in group_rows(confirmation, keys):
        own[tuple(label(values[k]) for k in keys)] = (
            float(np.nansum(steps[at])),
            float(np.nansum(seconds[at])),
            float(np.nansum(flops[at])),
        )
    rows = []
    for _, row in cost.iterrows():
        name = tuple(label(row[k]) for k in keys)
        count, untimed, tuning_s, tuning_flops = sums.get(name, (0, 0, 0.0, 0.0))
        conf_steps, conf_s, conf_flops = own.get(name, (math.nan, math.nan, math.nan))
        per = conf_steps if conf_steps > 0 else math.nan
        rows.append(
            {
                "tuning_runs": count,
                "tuning_untimed": untimed,
                "tuning_s": tuning_s,
                "tuning_flops": tuning_flops,
                "step_s_with_tuning": (conf_s + tuning_s) / per,
                "flops_per_step_with_tuning": (conf_flops + tuning_flops) / per,
            }
        )
    extra = pd.DataFrame(rows, columns=list(TUNING_COLUMNS), index=cost.index)
    table = pd.concat([cost, extra], axis=1)
    table.attrs = dict(cost.attrs)
    return table
