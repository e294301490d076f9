"""Does successive halving pick what the full grid would? For a tuned sweep's record, per
group: the value halving chose against the best of every candidate trained at the group's
full budget on the same tuning seeds, the regret (the full-budget metric lost by the choice),
and the tuning steps spent against the full grid's.

The full grid's runs are not part of a tuned sweep (halving stops most candidates early):
train them first on the tuning seeds at the full budget, e.g. for the suite's learning rates

    normbench sweep suite seed=1000000 train.lr=1e-3,3e-3,1e-2,3e-2 ...

(the candidates halving already trained at the full budget are the same runs and are
skipped). A group with a candidate missing at the full budget is reported as missing.

    python scripts/halving_agreement.py --runs-dir runs/findings --sweep findings-suite
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from normbench.report.labels import label
from normbench.report.tuning import group_values
from normbench.store import catalog, records


def same(value, wanted: str) -> bool:
    """A run's config value against an override's text (``0.85``, ``cnn``)."""
    try:
        return math.isclose(float(value), float(wanted), rel_tol=1e-9)
    except (TypeError, ValueError):
        return label(value) == wanted


def where(frame, key: str, value: str):
    """The rows whose ``key`` has ``value``, or none (a key a norm does not take, such as
    GroupNorm's norm.groups for LayerNorm, is null in its runs: they match)."""
    if key not in frame:
        return frame.iloc[:0]
    if frame.empty:
        return frame
    keep = frame[key].map(lambda v: v is None or v != v or same(v, value))
    return frame[keep.astype(bool).to_numpy()]


def pairs(text: str) -> dict[str, str]:
    """``norm=batchnorm data=mnist1d`` as {column: text}: a config group's choice is its
    ``.name`` column (norm.name), a top-level key its own (batch_size)."""
    found = group_values(text)
    groups = ("norm", "model", "data", "placement", "precision")
    return {(f"{k}.name" if k in groups else k): v for k, v in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--sweep", required=True)
    args = parser.parse_args()
    tuning = records.latest_record(args.runs_dir, args.sweep).get("tuning")
    if not isinstance(tuning, dict):
        raise SystemExit(f"--sweep {args.sweep}: not a tuned sweep")
    runs = catalog.load_runs(args.runs_dir).runs
    runs = runs[runs["seed"].isin(tuning["tuning_seeds"])]
    metric = {"val_acc": "final_val_acc", "val_bpb": "final_val_bpb", "val_loss": "final_val_loss"}
    spent = sum(g["steps"] for g in tuning["groups"])
    grid = sum(g["full_grid_steps"] for g in tuning["groups"])
    print(f"tuning steps: {spent:,} spent, {grid:,} for the full grid ({spent / grid:.3f})")
    agree = differ = missing = 0
    for group in tuning["groups"]:
        full_budget = group["rungs"][-1]["steps"]  # the short rungs' runs are not the grid's
        mine = runs[runs["train.max_steps"] == full_budget]
        for key, value in pairs(group["group"]).items():
            mine = where(mine, key, value)
        candidates = list(group["rungs"][0]["values"])
        results = {}
        for candidate in candidates:
            cell = mine
            for key, value in pairs(candidate).items():
                cell = where(cell, key, value)
            cell = cell[cell["status"].isin(["complete", "diverged"])]
            if len(cell) < len(tuning["tuning_seeds"]):
                break
            numbers = cell[metric[group["metric"]]].astype(float)
            worst = -math.inf if group["higher_is_better"] else math.inf
            results[candidate] = (
                numbers.fillna(worst).where(cell["status"] == "complete", worst).mean()
            )
        chosen = " ".join(f"{k}={v}" for k, v in group["chosen"].items())
        if len(results) < len(candidates):
            missing += 1
            print(f"{group['group']}: missing at the full budget")
            continue
        pick = max if group["higher_is_better"] else min
        best = pick(results, key=results.get)
        regret = abs(results[best] - results[chosen])
        agree += regret == 0  # a tie with the best counts as the same choice
        differ += regret != 0
        print(f"{group['group']}: chosen {chosen}, full grid {best}, regret {regret:.4g}")
    print(
        f"the same value as the full grid in {agree} of {agree + differ} groups ({missing} missing)"
    )


if __name__ == "__main__":
    main()
