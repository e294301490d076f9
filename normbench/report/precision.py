"""The precision table: per group without precision, the mean per precision and each lower
precision's contrast against fp32.
"""

from __future__ import annotations

import pandas as pd

from normbench.report import stats
from normbench.report.base import Method, Metric
from normbench.report.grouping import frame, groups
from normbench.report.results import resolution, scored, seeded_results


def precision_table(
    runs: pd.DataFrame, keys: list[str], metric: Metric, method: Method
) -> pd.DataFrame | None:
    """Rows: groups without precision; per precision the mean metric and 95% CI, the diverged
    and total counts, and for each lower precision a pre-specified contrast against fp32 (the
    change, its (1 - 2 alpha) CI and a verdict: worse or equivalent, as
    normbench.report.stats.contrast decides, paired by seed, Holm over every row and
    precision). None when precision does not vary."""
    if "precision.name" not in runs or runs["precision.name"].nunique() < 2:
        return None
    row_keys = [k for k in keys if k != "precision.name"]
    precisions = [p for p in ("fp32", "bf16", "fp16") if p in set(runs["precision.name"])]
    rows, pairs, cells = [], [], []
    for values, part in groups(runs, row_keys):
        row = {**values}
        by_precision = {}
        for precision in precisions:
            cell = part[part["precision.name"] == precision]
            by_precision[precision] = seeded_results(cell, metric.column, metric, method)
            mean, ci = stats.mean_ci(list(by_precision[precision].values()))
            row.update(
                {
                    f"{precision}_mean": mean,
                    f"{precision}_ci95": ci,
                    f"{precision}_diverged": int((cell["status"] == "diverged").sum()),
                    f"{precision}_n": len(cell),
                }
            )
        for precision in precisions[1:]:
            if "fp32" in by_precision:
                pairs.append(
                    (scored(by_precision["fp32"], metric), scored(by_precision[precision], metric))
                )
                cells.append((len(rows), precision))
        rows.append(row)
    verdicts = stats.contrast(pairs, method.level, method.margin, resolution(runs, metric))
    sign = 1 if metric.higher_is_better else -1  # the change in the metric's own units
    for (index, precision), verdict in zip(cells, verdicts, strict=True):
        low, high = sign * verdict.ci_low, sign * verdict.ci_high
        rows[index].update(
            {
                f"{precision}_delta": sign * verdict.diff,
                f"{precision}_delta_ci_low": min(low, high),
                f"{precision}_delta_ci_high": max(low, high),
                f"{precision}_verdict": verdict.verdict,
            }
        )
    return frame(rows, row_keys)
