"""How much of the seed noise groups share, and whether another outcome is quieter: measured on
a store of preset runs (docs/statistics.md's tables).

    python scripts/seed_noise.py runs/findings findings-batch findings-placement ...

Per sweep: the correlation, across seeds, between two groups' results at the same seed (every
pair of groups of a section that share at least three seeds; median and quartiles), and for
the outcomes a verdict could use, the seed variance within a group pooled over the groups,
relative to the last evaluation's: the mean of the last three evaluations, and the mean of
every evaluation (the area under the validation curve, per evaluation). The same ratio for the
variance of paired differences (what paired verdicts see).
"""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.core.files import read_parquet
from normbench.report.labels import label
from normbench.report.results import seeded_results
from normbench.report.sections import build
from normbench.store import catalog
from normbench.store.records import sweep_run_ids
from normbench.store.rundir import MAX_BYTES

OUTCOMES = ("last", "mean of last 3", "mean of all")


def outcomes(runs_dir: Path, run_id: str, metric: str) -> dict[str, float]:
    """A run's validation metric summarised three ways, from its logged evaluations."""
    frame = read_parquet(runs_dir / run_id / "metrics.parquet", MAX_BYTES["metrics.parquet"], 10**6)
    values = frame[metric].dropna().to_numpy()
    if not len(values):
        return {}
    return {"last": values[-1], "mean of last 3": values[-3:].mean(), "mean of all": values.mean()}


def study(runs_dir: Path, sweep: str) -> dict:
    ids, _, _ = sweep_run_ids(runs_dir, sweep)
    selection = catalog.select(catalog.load_runs(runs_dir), [], ids)
    report = build(selection)
    correlations, variances, paired = [], {o: [] for o in OUTCOMES}, {o: [] for o in OUTCOMES}
    for section in report.sections:
        metric, runs = section.metric, section.runs
        by_group = {}
        for _, row in section.tables["convergence"].iterrows():
            mask = pd.Series(True, index=runs.index)
            for key in section.keys:
                mask &= runs[key].map(label) == label(row[key])
            part = runs[mask & (runs["status"] == "complete")]
            per_seed = {
                int(r["seed"]): outcomes(runs_dir, r["run_id"], metric.name)
                for _, r in part.iterrows()
            }
            by_group[tuple(label(row[k]) for k in section.keys)] = {
                s: o for s, o in per_seed.items() if o
            }
            values = seeded_results(part, metric.column, metric, report.method)
            for name in OUTCOMES:
                series = [o[name] for o in per_seed.values() if o]
                if len(series) >= 2 and len(values) >= 2:
                    variances[name].append(np.var(series, ddof=1))
        for a, b in combinations(by_group.values(), 2):
            common = sorted(set(a) & set(b))
            if len(common) < 3:
                continue
            last_a = np.array([a[s]["last"] for s in common])
            last_b = np.array([b[s]["last"] for s in common])
            if last_a.std() > 0 and last_b.std() > 0:
                correlations.append(np.corrcoef(last_a, last_b)[0, 1])
            for name in OUTCOMES:
                d = np.array([a[s][name] - b[s][name] for s in common])
                paired[name].append(np.var(d, ddof=1))
    return {
        "sweep": sweep,
        "pairs": len(correlations),
        "correlation": np.nanquantile(correlations, [0.25, 0.5, 0.75]) if correlations else None,
        "variance": {o: np.mean(v) / np.mean(variances["last"]) for o, v in variances.items()},
        "paired": {o: np.mean(v) / np.mean(paired["last"]) for o, v in paired.items()}
        if paired["last"]
        else {},
    }


def main() -> None:
    runs_dir, sweeps = Path(sys.argv[1]), sys.argv[2:]
    print(
        "| sweep | group pairs | correlation, median [quartiles] | seed variance (last = 1): "
        "last 3, all | paired-difference variance: last 3, all |"
    )
    print("|---|---|---|---|---|")
    for sweep in sweeps:
        found = study(runs_dir, sweep)
        q = found["correlation"]
        corr = "-" if q is None else f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}]"
        var = found["variance"]
        pv = found["paired"]
        paired_text = f"{pv['mean of last 3']:.2f}, {pv['mean of all']:.2f}" if pv else "-"
        print(
            f"| {sweep} | {found['pairs']} | {corr} | {var['mean of last 3']:.2f}, "
            f"{var['mean of all']:.2f} | {paired_text} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
