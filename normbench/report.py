"""Turn a runs directory into answers: convergence, batch-size sensitivity and precision tables.

Reads the run store only (never torch). One row per run comes from meta.json and config.yaml;
an index file (runs/.index.json) keeps those rows keyed by each meta.json's size and mtime,
so a second report over ten thousand runs re-reads only what changed. Runs are grouped by the
config keys that vary across the selection, seeds aggregated with t-based 95% confidence
intervals; differences are tested with Welch's t-test.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from normbench.config import EXECUTION_KEYS, NORM_KEYS, UsageError, flatten, parse_overrides
from normbench.store import atomic_write

INDEX = ".index.json"
INDEX_VERSION = 1
# Keys never used to group: the seed is what is aggregated over; the rest are not experiment.
NOT_GROUPING = {"seed", *EXECUTION_KEYS}
SUMMARY_FIELDS = (
    "final_val_acc",
    "best_val_acc",
    "final_val_loss",
    "test_acc",
    "steps",
    "steps_to_target",
    "time_to_target_s",
    "train_loss_auc",
    "train_s",
    "wall_s",
)
RESULT_STATUSES = ("complete", "diverged")  # runs that count towards accuracy means


@dataclass
class Selection:
    """The runs a report is about, and what was noticed while loading them."""

    runs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


# -------------------------------------------------------------------------------- loading
def read_run(path: Path) -> dict:
    """One run as a flat row: status, the flattened config, the summary numbers."""
    import yaml

    meta = json.loads((path / "meta.json").read_text())
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    cfg = yaml.load((path / "config.yaml").read_text(), Loader=loader)
    if not isinstance(cfg, dict) or "status" not in meta:
        raise ValueError("config.yaml or meta.json is incomplete")
    row = {"run_id": path.name, "status": meta["status"], "error": meta.get("error")}
    row.update(flatten(cfg))
    summary = meta.get("summary") or {}
    row.update({name: summary.get(name) for name in SUMMARY_FIELDS})
    return row


def load_runs(runs_dir: Path) -> Selection:
    """Every run under runs_dir; half-written or corrupt ones skipped with a warning."""
    if not runs_dir.is_dir():
        raise UsageError(
            f"runs directory {runs_dir} does not exist; train something first: "
            "normbench run, or normbench sweep smoke"
        )
    index_path = runs_dir / INDEX
    index = _read_index(index_path)
    rows, warnings, fresh = [], [], {}
    with os.scandir(runs_dir) as entries:
        for entry in entries:
            if not entry.is_dir() or entry.name.startswith(".") or entry.name == "sweeps":
                continue
            try:
                stat = os.stat(os.path.join(entry.path, "meta.json"))
            except FileNotFoundError:
                warnings.append(f"skipped {entry.name}: no meta.json (a half-written run?)")
                continue
            stamp = [stat.st_mtime_ns, stat.st_size]
            cached = index.get(entry.name)
            if cached and cached["stamp"] == stamp:
                row = cached["row"]
            else:
                try:
                    row = read_run(Path(entry.path))
                except (OSError, ValueError, TypeError, KeyError) as err:
                    warnings.append(f"skipped {entry.name}: unreadable ({type(err).__name__})")
                    continue
            fresh[entry.name] = {"stamp": stamp, "row": row}
            rows.append(row)
    if fresh.keys() != index.keys() or any(fresh[k]["stamp"] != index[k]["stamp"] for k in fresh):
        try:
            payload = {"version": INDEX_VERSION, "runs": fresh}
            atomic_write(index_path, json.dumps(payload, separators=(",", ":")))
        except OSError:  # a read-only runs directory still gets its report
            pass
    return Selection(pd.DataFrame(rows), warnings)


def _read_index(path: Path) -> dict:
    try:
        payload = json.loads(path.read_text())
        return payload["runs"] if payload.get("version") == INDEX_VERSION else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def sweep_run_ids(runs_dir: Path, name: str) -> list[str]:
    """The run ids of the latest sweep record called ``name``."""
    records = sorted((runs_dir / "sweeps").glob(f"{name}-*.json"))
    records = [r for r in records if r.stem[len(name) + 1 :].replace("-", "").isdigit()]
    if not records:
        known = sorted({r.stem.rsplit("-", 2)[0] for r in (runs_dir / "sweeps").glob("*.json")})
        raise UsageError(
            f"--sweep {name}: no such sweep in {runs_dir / 'sweeps'}; valid: "
            + (", ".join(known) or "none (run normbench sweep first)")
        )
    return [run["run_id"] for run in json.loads(records[-1].read_text())["runs"]]


def select(selection: Selection, filters: list[str], sweep_ids: list[str] | None) -> Selection:
    """Narrow to a sweep's runs and to override-syntax filters (``norm=batchnorm,groupnorm``)."""
    runs = selection.runs
    if sweep_ids is not None:
        missing = set(sweep_ids) - set(runs.get("run_id", []))
        if missing:
            selection.warnings.append(f"{len(missing)} runs of the sweep have no results yet")
        runs = runs[runs["run_id"].isin(sweep_ids)]
    for override in parse_overrides(filters):
        key = override.key_or_group
        column = f"{key}.name" if f"{key}.name" in runs.columns else key
        if column not in runs.columns:
            valid = ", ".join(sorted(c for c in runs.columns if "." in c or c in ("seed",)))
            raise UsageError(
                f"filter {override.input_line}: no key '{key}' in these runs; valid: {valid}"
            )
        wanted = (
            list(override.sweep_iterator()) if override.is_discrete_sweep() else [override.value()]
        )
        runs = runs[runs[column].map(lambda v, w=wanted: any(_same(v, x) for x in w))]
    return Selection(runs, selection.warnings)


def _same(value, wanted) -> bool:
    if isinstance(wanted, bool) or isinstance(value, bool):
        return value is wanted or str(value).lower() == str(wanted).lower()
    if isinstance(wanted, (int, float)) and isinstance(value, (int, float)):
        return math.isclose(value, wanted)
    return str(value) == str(wanted)


# ---------------------------------------------------------------------------- statistics
def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student's t; NaN for n = 1)."""
    from scipy import stats

    values = values[~np.isnan(values)]
    if len(values) == 0:
        return math.nan, math.nan
    if len(values) == 1:  # one seed: no interval
        return float(values[0]), math.nan
    sem = values.std(ddof=1) / math.sqrt(len(values))
    return float(values.mean()), float(stats.t.ppf(0.975, len(values) - 1) * sem)


def welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test; 1.0 when either side has fewer than two values,
    0.0 when both are constant and differ (seed noise is zero, the difference is real)."""
    from scipy import stats

    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if a.std() < 1e-12 and b.std() < 1e-12:  # constant (up to rounding) on both sides
        return 1.0 if math.isclose(a.mean(), b.mean(), abs_tol=1e-12) else 0.0
    with warnings.catch_warnings():  # one constant side is fine: its variance term is zero
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def grouping_keys(runs: pd.DataFrame, by: list[str] | None = None) -> list[str]:
    """Config keys whose value differs across the runs (seed and execution keys aside)."""
    if by:
        missing = [key for key in by if key not in runs.columns]
        if missing:
            raise UsageError(f"--by {','.join(missing)}: not a config key of these runs")
        return by
    config_columns = [
        c
        for c in runs.columns
        if c not in ("run_id", "status", "error", *SUMMARY_FIELDS) and c not in NOT_GROUPING
    ]
    varying = [c for c in config_columns if runs[c].astype(str).nunique() > 1]
    return sorted(varying, key=lambda c: (not c.endswith(".name"), c))


def _label(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def group_frame(runs: pd.DataFrame, keys: list[str]):
    """groupby over keys, with None/NaN kept as a group of their own."""
    if not keys:
        return [((), runs)]
    labelled = runs.assign(**{f"__{k}": runs[k].map(_label) for k in keys})
    return labelled.groupby([f"__{k}" for k in keys], sort=True, dropna=False)


# ----------------------------------------------------------------------------------- tables
def convergence_table(
    runs: pd.DataFrame, keys: list[str], metric: str = "final_val_acc"
) -> pd.DataFrame:
    """One row per group: seeds, accuracy mean and 95% CI, best accuracy, steps and time to
    target, training-loss AUC, diverged and failed counts; sorted best first, with the best
    row and the rows not significantly worse than it (Welch, p >= 0.05) marked."""
    rows, samples = [], []
    for labels, group in group_frame(runs, keys):
        labels = labels if isinstance(labels, tuple) else (labels,)
        results = group[group["status"].isin(RESULT_STATUSES)]
        accuracy = results[metric].astype(float).to_numpy()
        mean, ci = mean_ci(accuracy)
        reached = group["steps_to_target"].dropna()
        row = dict(zip(keys, labels, strict=True))
        row.update(
            n=len(group),
            val_acc_mean=mean,
            val_acc_ci95=ci,
            best_val_acc=_nanmean(results["best_val_acc"]),
            steps_to_target=float(reached.median()) if len(reached) else math.nan,
            reached_target=len(reached),
            time_to_target_s=float(group["time_to_target_s"].dropna().median())
            if len(reached)
            else math.nan,
            train_loss_auc=_nanmean(results["train_loss_auc"]),
            diverged=int((group["status"] == "diverged").sum()),
            failed=int((group["status"] == "failed").sum()),
            interrupted=int(group["status"].isin(["interrupted", "running"]).sum()),
        )
        rows.append(row)
        samples.append(accuracy)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    order = table["val_acc_mean"].fillna(-math.inf).argsort()[::-1].to_numpy()
    table = table.iloc[order].reset_index(drop=True)
    samples = [samples[i] for i in order]
    best = samples[0]
    table["p_vs_best"] = [welch_p(best, s) if i else 1.0 for i, s in enumerate(samples)]
    table["rank"] = [
        "best"
        if i == 0
        else "≈ best"
        if p >= 0.05 and not math.isnan(table.loc[i, "val_acc_mean"])
        else ""
        for i, p in enumerate(table["p_vs_best"])
    ]
    return table


def _nanmean(series: pd.Series) -> float:
    values = series.astype(float).to_numpy()
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def device_batch(runs: pd.DataFrame) -> pd.Series:
    """The batch a norm's statistics see: norm.ghost_batch when the norm uses it and it is
    set, else batch_size."""
    ghost = runs.get("norm.ghost_batch", pd.Series(np.nan, index=runs.index))
    uses = runs["norm.name"].map(lambda n: "ghost_batch" in NORM_KEYS.get(n, set()))
    chosen = np.where(uses & ghost.notna(), ghost, runs["batch_size"])
    return pd.Series(chosen.astype(float).astype(int), index=runs.index)


def batch_table(
    runs: pd.DataFrame, keys: list[str], metric: str = "final_val_acc"
) -> pd.DataFrame | None:
    """Rows: the groups without the batch keys; columns: per-device batch sizes (mean ± sd);
    then the drop from the best batch size to the smallest and whether it exceeds seed noise
    (Welch's t-test, p < 0.05). None when the batch size does not vary.

    A norm that ignores norm.ghost_batch has one result for every ghost batch: it is shown in
    each column of a ghost-batch study (marked "same run")."""
    runs = runs[runs["status"].isin(RESULT_STATUSES)].assign(device_batch=device_batch(runs))
    if runs.empty or runs["device_batch"].nunique() < 2:
        return None
    ghost_study = runs["batch_size"].nunique() == 1
    sizes = sorted(runs["device_batch"].unique())
    row_keys = [k for k in keys if k not in ("batch_size", "norm.ghost_batch")]
    rows = []
    for labels, group in group_frame(runs, row_keys):
        labels = labels if isinstance(labels, tuple) else (labels,)
        independent = (
            ghost_study
            and group["device_batch"].nunique() == 1
            and not any("ghost_batch" in NORM_KEYS.get(n, set()) for n in group["norm.name"])
        )
        per_size = {}
        for size in sizes:
            cell = group if independent else group[group["device_batch"] == size]
            per_size[size] = cell[metric].astype(float).to_numpy()
        row = dict(zip(row_keys, labels, strict=True))
        for size, values in per_size.items():
            row[f"b{size}_mean"] = float(values.mean()) if len(values) else math.nan
            row[f"b{size}_sd"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        present = [s for s in sizes if len(per_size[s])]
        best = max(present, key=lambda s: per_size[s].mean())
        smallest = present[0]
        row.update(
            best_batch=best,
            smallest_batch=smallest,
            drop=float(per_size[best].mean() - per_size[smallest].mean()),
            p_value=1.0 if independent else welch_p(per_size[best], per_size[smallest]),
            batch_independent=independent,
        )
        row["significant"] = row["p_value"] < 0.05 and row["drop"] > 0
        rows.append(row)
    return pd.DataFrame(rows).sort_values("drop", ascending=False).reset_index(drop=True)


def precision_table(
    runs: pd.DataFrame, keys: list[str], metric: str = "final_val_acc"
) -> pd.DataFrame | None:
    """Rows: groups without precision; per precision the mean accuracy, its change against
    fp32, and the diverged count. None when precision does not vary."""
    if "precision.name" not in runs or runs["precision.name"].nunique() < 2:
        return None
    row_keys = [k for k in keys if k != "precision.name"]
    precisions = [p for p in ("fp32", "bf16", "fp16") if p in set(runs["precision.name"])]
    rows = []
    for labels, group in group_frame(runs, row_keys):
        labels = labels if isinstance(labels, tuple) else (labels,)
        row = dict(zip(row_keys, labels, strict=True))
        reference = math.nan
        for precision in precisions:
            cell = group[group["precision.name"] == precision]
            results = cell[cell["status"].isin(RESULT_STATUSES)][metric].astype(float)
            mean = float(results.mean()) if len(results) else math.nan
            reference = mean if precision == "fp32" else reference
            row[f"{precision}_mean"] = mean
            row[f"{precision}_delta"] = mean - reference
            row[f"{precision}_diverged"] = int((cell["status"] == "diverged").sum())
            row[f"{precision}_n"] = len(cell)
        rows.append(row)
    return pd.DataFrame(rows)


def best_over(
    runs: pd.DataFrame, key: str, keys: list[str], metric: str = "final_val_acc"
) -> pd.DataFrame:
    """Within each group (the keys without ``key``), keep only the runs at the value of
    ``key`` with the best mean accuracy; the winning value stays in a column."""
    if key not in runs.columns:
        raise UsageError(f"--best-over {key}: not a config key of these runs")
    group_keys = [k for k in keys if k != key]
    kept = []
    for _, group in group_frame(runs, group_keys):
        results = group[group["status"].isin(RESULT_STATUSES)]
        if results.empty:
            kept.append(group)
            continue
        means = results.groupby(results[key].map(_label))[metric].mean()
        winner = means.idxmax()
        kept.append(group[group[key].map(_label) == winner])
    return pd.concat(kept) if kept else runs


# -------------------------------------------------------------------------------- output
@dataclass
class Report:
    """Every table that applies to a selection, by name (batch and precision may be None)."""

    keys: list[str]
    tables: dict[str, pd.DataFrame | None]
    counts: dict[str, int]
    warnings: list[str]


def build(
    selection: Selection, by: list[str] | None = None, best_over_key: str | None = None
) -> Report:
    runs = selection.runs
    if runs.empty:
        raise UsageError("no runs match: check the runs directory, --sweep and the filters")
    keys = grouping_keys(runs, by)
    if best_over_key:
        runs = best_over(runs, best_over_key, keys)
        keys = [k for k in keys if k != best_over_key] + [best_over_key]
    tables = {
        "convergence": convergence_table(runs, keys),
        "batch_sensitivity": batch_table(runs, keys),
        "precision": precision_table(runs, keys),
    }
    counts = runs["status"].value_counts().to_dict()
    return Report(keys, tables, counts, selection.warnings)


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def short(key: str) -> str:
    """Column headers for the terminal: norm.name -> norm, model.weight_std -> weight_std."""
    return key.split(".")[0] if key.endswith(".name") else key.split(".")[-1]


def rich_tables(report: Report) -> list:
    """The tables as rich renderables, for the terminal."""
    from rich.table import Table

    out = []
    conv = report.tables["convergence"]
    table = Table(
        title="Convergence: seeds aggregated, ± 95% CI; ≈ marks rows not significantly "
        "worse than the best (Welch p >= 0.05)",
        title_justify="left",
    )
    for key in report.keys:
        table.add_column(short(key), no_wrap=True)
    for name in ("n", "val acc", "best", "to target", "time", "loss AUC", "div/fail", ""):
        table.add_column(name, justify="right" if name else "left", no_wrap=True)
    for _, row in conv.iterrows():
        table.add_row(
            *(_label(row[k]) for k in report.keys),
            str(row["n"]),
            _fmt(row["val_acc_mean"], 4)
            + ("" if math.isnan(row["val_acc_ci95"]) else f"±{_fmt(row['val_acc_ci95'], 4)}"),
            _fmt(row["best_val_acc"], 4),
            f"{_fmt(row['steps_to_target'], 0)} {row['reached_target']}/{row['n']}",
            f"{_fmt(row['time_to_target_s'], 1)}s" if row["reached_target"] else "-",
            _fmt(row["train_loss_auc"]),
            f"{row['diverged']}/{row['failed']}",
            "best" if row["rank"] == "best" else "≈" if row["rank"] else "",
            style="bold green" if row["rank"] == "best" else None,
        )
    out.append(table)
    batch = report.tables["batch_sensitivity"]
    if batch is not None:
        sizes = sorted(int(c[1:-5]) for c in batch.columns if c.endswith("_mean"))
        row_keys = [k for k in report.keys if k not in ("batch_size", "norm.ghost_batch")]
        table = Table(
            title="Batch-size sensitivity: accuracy (mean ± sd) by per-device batch; "
            "drop from the best batch to the smallest, significant if Welch p < 0.05",
            title_justify="left",
        )
        for key in row_keys:
            table.add_column(short(key), no_wrap=True)
        for size in sizes:
            table.add_column(f"b{size}", justify="right", no_wrap=True)
        for name in ("drop", "p", "real"):
            table.add_column(name, justify="right", no_wrap=True)
        for _, row in batch.iterrows():
            cells = [f"{_fmt(row[f'b{s}_mean'], 3)}±{_fmt(row[f'b{s}_sd'], 3)}" for s in sizes]
            verdict = "same run" if row["batch_independent"] else _fmt(row["significant"])
            table.add_row(
                *(_label(row[k]) for k in row_keys),
                *cells,
                _fmt(row["drop"], 4),
                _fmt(row["p_value"]),
                verdict,
                style="red" if row["significant"] else None,
            )
        out.append(table)
    precision = report.tables["precision"]
    if precision is not None:
        table = Table(
            title="Precision: mean accuracy, change against fp32, diverged runs",
            title_justify="left",
        )
        precisions = [p for p in ("fp32", "bf16", "fp16") if f"{p}_mean" in precision]
        row_keys = [k for k in report.keys if k != "precision.name"]
        for key in row_keys:
            table.add_column(short(key), no_wrap=True)
        for p in precisions:
            table.add_column(p, justify="right", no_wrap=True)
        for _, row in precision.iterrows():
            cells = []
            for p in precisions:
                delta = "" if p == "fp32" else f" ({row[f'{p}_delta']:+.4f})"
                diverged = row[f"{p}_diverged"]
                cells.append(
                    f"{_fmt(row[f'{p}_mean'], 4)}{delta}"
                    + (f" div {diverged}/{row[f'{p}_n']}" if diverged else "")
                )
            table.add_row(*(_label(row[k]) for k in row_keys), *cells)
        out.append(table)
    return out


def to_markdown(frame: pd.DataFrame) -> str:
    """A pipe table (GitHub markdown) of a frame, numbers rounded to 4 places."""
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = [
        "| " + " | ".join(_fmt(v, 4) if isinstance(v, float) else _label(v) for v in row) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def render(report: Report, fmt: str, table: str | None) -> str:
    """csv (one table: --table, default convergence), markdown or json (every table)."""
    tables = {name: t for name, t in report.tables.items() if t is not None}
    if table:
        if table not in report.tables:
            raise UsageError(f"--table {table}: valid: {', '.join(report.tables)}")
        if report.tables[table] is None:
            raise UsageError(
                f"--table {table}: this selection has no {table} table (the key it "
                "compares does not vary)"
            )
        tables = {table: report.tables[table]}
    if fmt == "csv":
        name = table or "convergence"
        return report.tables[name].to_csv(index=False)
    if fmt == "markdown":
        return (
            "\n\n".join(
                f"### {name.replace('_', ' ').capitalize()}\n\n{to_markdown(t)}"
                for name, t in tables.items()
            )
            + "\n"
        )
    payload = {name: json.loads(t.to_json(orient="records")) for name, t in tables.items()}
    payload.update(grouped_by=report.keys, statuses=report.counts, warnings=report.warnings)
    return json.dumps(payload, indent=2) + "\n"


# --------------------------------------------------------------------------- diagnostics
def diagnostics_table(
    runs: pd.DataFrame, keys: list[str], runs_dir: Path, at: str = "last"
) -> pd.DataFrame | None:
    """Per group and residual unit, at each run's last (or first) diagnosed step, averaged
    over seeds:
    the sublayer's gradient norm, the activation std entering and leaving the norm, the
    train-mode minus eval-mode validation accuracy (BatchNorm, SwitchNorm) and SwitchNorm's
    mixing weights. None when no selected run was trained with diagnostics=true."""
    frames = []
    for rid in runs["run_id"]:
        path = runs_dir / rid / "diagnostics.parquet"
        if path.exists():
            frame = pd.read_parquet(path)
            step = frame["step"].max() if at == "last" else frame["step"].min()
            frames.append(frame[frame["step"] == step].assign(run_id=rid))
    if not frames:
        return None
    labelled = runs[["run_id", *keys]].assign(**{k: runs[k].map(_label) for k in keys})
    merged = pd.concat(frames).merge(labelled, on="run_id")
    merged["gap"] = merged["train_mode_val_acc"] - merged["eval_mode_val_acc"]
    columns = [
        "grad_norm",
        "in_std",
        "out_std",
        "gap",
        "sn_mean_in",
        "sn_mean_ln",
        "sn_mean_bn",
        "sn_var_in",
        "sn_var_ln",
        "sn_var_bn",
    ]
    table = merged.groupby([*keys, "unit", "sublayer"], sort=True)[columns].mean().reset_index()
    return table.assign(seeds=merged.groupby([*keys, "unit"]).size().to_numpy())


def diagnostics_rich(table: pd.DataFrame, keys: list[str]):
    from rich.table import Table

    out = Table(
        title="Diagnostics at the last evaluation (mean over seeds): gradient norm of "
        "each unit's sublayer, activation std into and out of its norm, train-mode "
        "minus eval-mode val accuracy, SwitchNorm weights (IN/LN/BN)",
        title_justify="left",
    )
    for key in [
        *keys,
        "unit",
        "sublayer",
        "grad norm",
        "std in",
        "std out",
        "BN gap",
        "SN mean w",
        "SN var w",
    ]:
        out.add_column(short(key), no_wrap=True)
    for _, row in table.iterrows():
        sn = [
            f"{row[f'sn_{kind}_in']:.2f}/{row[f'sn_{kind}_ln']:.2f}/{row[f'sn_{kind}_bn']:.2f}"
            if not math.isnan(row[f"sn_{kind}_in"])
            else "-"
            for kind in ("mean", "var")
        ]
        out.add_row(
            *(str(row[k]) for k in keys),
            str(row["unit"]),
            row["sublayer"],
            _fmt(row["grad_norm"], 4),
            _fmt(row["in_std"]),
            _fmt(row["out_std"]),
            _fmt(row["gap"], 4),
            *sn,
        )
    return out
