"""Does the best learning rate transfer across a width ladder, and what does transfer save?
From two tuned ladder sweeps of the same preset, one under the standard parametrization and
one under muP, each tuning every rung (issue 49, items 2 and 7):

    normbench sweep ladder_lm norm=layernorm,dyt --name sp
    normbench sweep ladder_lm norm=layernorm,dyt model.parametrization=mup --name mup
    python scripts/mup_transfer.py --runs-dir runs --sweep sp --sweep mup

Per sweep: each group's choice at every rung (from the ladder record), whether the smallest
rung's choice is the top rung's (what transfer from the smallest rung would have chosen there,
and how many grid steps it is off), and the cost of tuning the smallest rung only against
tuning every rung, from the runs' own wall times (the tuning runs are those on tuning seeds,
1000000 and up), alone and with every rung's confirmation runs added (a ladder that
transfers still confirms every rung).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from normbench.report.tuning import ladder_chosen
from normbench.store import catalog, records
from normbench.sweeps.tuned_plan import TUNING_SEED


def choices(record: dict) -> tuple[list[str], dict[str, list[str]]]:
    """The rungs' sizes and, per group, its chosen value at each rung ('-' where none)."""
    rungs, per_group = ladder_chosen(record["ladder"])
    return [str(r.get("value")) for r in rungs], per_group


def grid_steps(grid: list[str], low: str, high: str) -> int | None:
    """How many steps of the tuning grid separate two of its values (None: one is not in it)."""
    values = sorted(grid, key=float)
    found = [
        next((i for i, v in enumerate(values) if float(v) == float(x)), None) for x in (low, high)
    ]
    return None if None in found else abs(found[0] - found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, required=True)
    parser.add_argument("--sweep", action="append", required=True, help="a tuned ladder sweep")
    args = parser.parse_args()
    runs = catalog.load_runs(args.runs_dir).runs
    for name in args.sweep:
        record = records.latest_record(args.runs_dir, name)
        sizes, per_group = choices(record)
        grid = [str(v) for v in next(iter(record["tuning"]["space"].values()))]
        print(f"{name}: chosen per rung ({record['ladder']['key']} {', '.join(sizes)})")
        for group, values in per_group.items():
            off = grid_steps(grid, values[0], values[-1])
            print(
                f"  {group}: {', '.join(values)}; transfer from the smallest rung: "
                f"{values[0]} at the top, {off} grid step(s) from the top rung's own"
            )
        ids = {run["run_id"] for run in record["runs"]}
        ids |= set(record["tuning"].get("runs") or [])
        mine = runs[runs["run_id"].isin(ids)]
        key = record["ladder"]["key"]
        tuning = mine["seed"].astype(int) >= TUNING_SEED
        by_rung = mine[tuning].groupby(mine[key].astype(str))["wall_s"].sum()
        smallest = float(by_rung.get(sizes[0], 0.0))
        every, confirm = float(by_rung.sum()), float(mine[~tuning]["wall_s"].sum())
        print(
            f"  tuning the smallest rung only: {smallest:.0f} s of {every:.0f} s "
            f"({smallest / every:.3f}x); with every rung's confirmation "
            f"({confirm:.0f} s): {(smallest + confirm) / (every + confirm):.3f}x"
        )


if __name__ == "__main__":
    main()
