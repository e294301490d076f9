"""A Report as text: rich tables for the terminal, markdown, CSV and JSON.

Formatting only: the numbers come from normbench.tables. Every table carries a caption with
its method; ``±`` means the half-width of a 95% confidence interval everywhere. CSV and JSON
are tidy: one row per group, the section's setting keys as columns, numbers as numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.core.text import escape_markdown, plain
from normbench.report.tables import Method, Report, Section, label

TABLES = (
    "convergence",
    "batch_sensitivity",
    "precision",
    "lr_stability",
    "depth_stability",
    "diagnostics_init",
    "diagnostics",
)
JSON_ONLY = ("values",)  # lists: JSON keeps them, CSV and markdown do not
DIAGNOSTICS_WHEN = {  # the diagnostics tables, and the step each one shows
    "diagnostics_init": "at initialisation (step 0, before any update)",
    "diagnostics": "at the last evaluation",
}
VERDICT_STYLE = {
    "reference": "bold green",
    "equivalent": "green",
    "worse": "red",
    "inconclusive": "yellow",
    "sensitive": "red",
    "insensitive": "green",
}


def cell(value):
    """A stored value as a rich cell: escaped, and never read as rich markup."""
    from rich.text import Text

    return Text(plain(label(value)))


HEADERS = {  # column headers for the long key names that tables often group by
    "norm.ghost_batch": "ghost",
    "model.weight_std": "WS",
    "train.warmup_steps": "warmup",
    "train.max_steps": "steps",
    "norm.fp32_stats": "fp32 stats",
}


def short(key: str) -> str:
    """Column headers: norm.name -> norm, norm.ghost_batch -> ghost, train.lr -> lr."""
    if key in HEADERS:
        return HEADERS[key]
    return key.split(".")[0] if key.endswith(".name") else key.split(".")[-1]


def settings_text(values: dict) -> str:
    """``model=cnn data=mnist1d train.max_steps=600``: keys as overrides write them."""
    return " ".join(f"{key.removesuffix('.name')}={label(value)}" for key, value in values.items())


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def count(value) -> str:
    """A parameter count as people say it: 834, 8.3k, 1.2M."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    for suffix, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    return str(int(value))


def with_ci(mean: float, half: float, digits: int = 3) -> str:
    return fmt(mean, digits) + ("" if math.isnan(half) else f"±{fmt(half, digits)}")


def interval(low: float, high: float, digits: int = 3) -> str:
    if math.isnan(low):
        return "-"
    return f"[{low:+.{digits}f}, {high:+.{digits}f}]"


# ---------------------------------------------------------------------------------- captions
def convergence_caption(section: Section, method: Method) -> str:
    metric = section.metric
    split = "test" if method.test else "validation"
    better = "highest" if metric.higher_is_better else "lowest"
    alpha = (
        f"alpha {method.alpha} split over {method.looks} looks ({method.alpha_per_look:.4g} each)"
        if method.looks > 1
        else f"alpha {method.alpha}"
    )
    return (
        f"Verdicts on {split} {metric.name.split('_')[1]} against the best group (the "
        f"{better} mean with 2+ results): worse = Games-Howell p < alpha; equivalent = "
        f"within ±{method.margin} by TOST, Holm-adjusted; otherwise inconclusive; {alpha}. "
        "± is a 95% CI; Δ best: difference to the best ± its 95% CI; n: results; params: "
        "trainable parameters (a difference may come from capacity); target: median steps to "
        "target, seeds that reached it; d/f: diverged/failed runs."
    )


def batch_caption(table: pd.DataFrame, section: Section, method: Method) -> str:
    reference = int(table["reference_batch"].iloc[0])
    return (
        f"Batch sensitivity: mean {section.metric.label} per per-device batch; drop = how much "
        f"worse the smallest batch is than batch {reference} ± its 95% CI; sensitive = "
        f"one-sided Welch p < alpha, insensitive = within ±{method.margin} by TOST, both "
        f"Holm-adjusted over the rows; alpha {method.alpha_per_look:.4g}."
    )


def caption_of(name: str, table: pd.DataFrame, section: Section, method: Method) -> str:
    if name == "convergence":
        return convergence_caption(section, method)
    if name == "batch_sensitivity":
        return batch_caption(table, section, method)
    if name in ("lr_stability", "depth_stability"):
        return stability_caption(section, table["axis"].iloc[0])
    return precision_caption(section, method)


def precision_caption(section: Section, method: Method) -> str:
    return (
        f"Precision: mean {section.metric.label} per precision ± 95% CI (div = diverged runs "
        f"of all runs); vs fp32: the change ± its 95% CI, worse = one-sided Welch p < alpha, "
        f"equivalent = within ±{method.margin} by TOST, both Holm-adjusted over every cell; "
        f"alpha {method.alpha_per_look:.4g}."
    )


# ------------------------------------------------------------------------------------ rich
def rich_renderables(report: Report, only: str | None = None) -> list:
    """Headers, tables and notes for the terminal, section by section."""
    from rich.text import Text

    out = []
    for section in report.sections:
        if section.setting:
            out.append(Text(f"\n== {settings_text(section.setting)} ==", style="bold"))
        if section.fixed:
            out.append(Text(f"fixed: {settings_text(section.fixed)}", style="dim"))
        for name, render in RICH_TABLES.items():
            if (only is None or only == name) and section.tables.get(name) is not None:
                out.extend(caption_below(render(section, report.method)))
        out.extend(Text(f"note: {note}", style="dim") for note in section.notes)
    return out


def caption_below(table) -> list:
    """The table, then its caption as text of its own: wrapped at the terminal's width rather
    than the table's (rich crops a caption wider than its table)."""
    from rich.text import Text

    caption, table.caption = table.caption, None
    return [table, Text(caption, style="dim")] if caption else [table]


def _table(caption: str):
    from rich import box
    from rich.table import Table

    # One space between columns (collapsed padding): a table of ten columns fits 100.
    return Table(
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )


def key_columns(table, keys: list[str], data: pd.DataFrame) -> None:
    """Grouping-key columns as wide as their longest value (names are never truncated; a
    very long one folds onto a second line)."""
    for key in keys:
        longest = max([len(short(key)), *(len(label(v)) for v in data[key])])
        table.add_column(short(key), min_width=min(longest, 24), overflow="fold")


def convergence_rich(section: Section, method: Method):
    from rich.text import Text

    data = section.tables["convergence"]
    metric = section.metric
    caption = convergence_caption(section, method)
    if len({v for v in data["parameters"] if v is not None}) == 1:
        caption += f" Every group has {count(data['parameters'].dropna().iloc[0])} parameters."
    table = _table(caption)
    key_columns(table, section.keys, data)
    for name in ("n", metric.label, metric.test_column.split("_")[0], "Δ best"):
        table.add_column(name, justify="right", no_wrap=True)
    counts = {v for v in data["parameters"] if v is not None}
    shows_params = len(counts) > 1  # one count for every group goes in the caption
    if shows_params:
        table.add_column("params", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("target", justify="right")  # gives way on a narrow terminal
    table.add_column("d/f", justify="right")
    for _, row in data.iterrows():
        verdict = row["verdict"] + (f" ({row['mixed']} mixed)" if row["mixed"] else "")
        diff = (
            "-"
            if row["verdict"] == "reference" or math.isnan(row["diff_vs_best"])
            else f"{row['diff_vs_best']:+.3f}±{(row['diff_ci_high'] - row['diff_ci_low']) / 2:.3f}"
        )
        table.add_row(
            *(cell(row[k]) for k in section.keys),
            str(row["results"]),
            with_ci(row[f"{metric.name}_mean"], row[f"{metric.name}_ci95"]),
            fmt(row[f"{metric.test_column}_mean"]),
            diff,
            *([count(row["parameters"])] if shows_params else []),
            Text(verdict, style=VERDICT_STYLE.get(row["verdict"], "")),
            f"{fmt(row['steps_to_target'], 0)} {row['reached_target']}/{row['n']}",
            f"{row['diverged']}/{row['failed']}",
        )
    return table


def batch_rich(section: Section, method: Method):
    from rich.text import Text

    data = section.tables["batch_sensitivity"]
    sizes = batch_sizes(data)
    row_keys = [k for k in data.columns if k in section.keys]
    table = _table(batch_caption(data, section, method))
    key_columns(table, row_keys, data)
    for size in sizes:
        table.add_column(f"b{size}", justify="right", no_wrap=True)
    table.add_column("drop", justify="right", no_wrap=True)
    table.add_column("verdict")  # its reason wraps: "sensitive (paired by seed)"
    for _, row in data.iterrows():
        drop = (
            "-"
            if math.isnan(row["drop"])
            else f"{row['drop']:+.3f}±{(row['drop_ci_high'] - row['drop_ci_low']) / 2:.3f}"
        )
        word = row["verdict"] + (f" ({row['reason']})" if row["reason"] else "")
        table.add_row(
            *(cell(row[k]) for k in row_keys),
            *(fmt(row[f"b{s}_mean"]) for s in sizes),
            drop,
            Text(word, style=VERDICT_STYLE.get(row["verdict"], "")),
        )
    return table


def precision_rich(section: Section, method: Method):
    from rich.text import Text

    data = section.tables["precision"]
    precisions = [p for p in ("fp32", "bf16", "fp16") if f"{p}_mean" in data]
    row_keys = [k for k in data.columns if k in section.keys]
    table = _table(precision_caption(section, method))
    key_columns(table, row_keys, data)
    for precision in precisions:
        table.add_column(precision, justify="right", no_wrap=True)
        if precision != "fp32":
            table.add_column(f"{precision} vs fp32")  # "+0.001±0.002 inconclusive" wraps
    for _, row in data.iterrows():
        cells = []
        for p in precisions:
            diverged = row[f"{p}_diverged"]
            cells.append(
                with_ci(row[f"{p}_mean"], row[f"{p}_ci95"])
                + (f" div {diverged}/{row[f'{p}_n']}" if diverged else "")
            )
            if p != "fp32":
                delta = row.get(f"{p}_delta", math.nan)
                half = (
                    row.get(f"{p}_delta_ci_high", math.nan) - row.get(f"{p}_delta_ci_low", math.nan)
                ) / 2
                word = row.get(f"{p}_verdict", "-")
                shown = "-" if math.isnan(delta) else f"{delta:+.3f}±{half:.3f} "
                cells.append(Text(shown + str(word), style=VERDICT_STYLE.get(word, "")))
        table.add_row(*(cell(row[k]) for k in row_keys), *cells)
    return table


def stability_caption(section: Section, axis: str) -> str:
    what = "learning rate" if axis == "train.lr" else "depth"
    return (
        f"Stability: mean final {section.metric.label} of finished runs per {what}, and how "
        f"many seeds trained (finished, no divergence, clear of chance by 5%: chance is "
        f"{'the unigram solution' if not section.metric.higher_is_better else '1 / classes'}); "
        f"largest = the largest {what} at which every seed trained, with the metric there."
    )


def stability_rich(name: str):
    """The rich renderer of a stability table (lr_stability or depth_stability)."""

    def rich(section: Section, method: Method):
        data = section.tables[name]
        axis = data["axis"].iloc[0]
        values = [c.removesuffix("_mean") for c in data.columns if c.endswith("_mean")]
        row_keys = [k for k in data.columns if k in section.keys]
        table = _table(stability_caption(section, axis))
        key_columns(table, row_keys, data)
        for value in values:
            table.add_column(f"{short(axis)}={value}", justify="right", no_wrap=True)
        table.add_column("largest", justify="right", no_wrap=True)
        table.add_column(section.metric.label, justify="right", no_wrap=True)
        for _, row in data.iterrows():
            table.add_row(
                *(cell(row[k]) for k in row_keys),
                *(f"{fmt(row[f'{v}_mean'])} {row[f'{v}_trained']}" for v in values),
                "none" if row["largest_stable"] is None else label(row["largest_stable"]),
                fmt(row["metric_there"]),
            )
        return table

    return rich


def batch_sizes(table: pd.DataFrame) -> list[int]:
    return sorted(int(c[1:-5]) for c in table.columns if c.startswith("b") and c.endswith("_mean"))


RICH_TABLES = {  # the report's tables in the order they are shown, and their renderers
    "convergence": convergence_rich,
    "batch_sensitivity": batch_rich,
    "precision": precision_rich,
    "lr_stability": stability_rich("lr_stability"),
    "depth_stability": stability_rich("depth_stability"),
}


# ---------------------------------------------------------------------------- tidy formats
def tidy(report: Report, name: str) -> pd.DataFrame | None:
    """One table over every section: the section's setting keys as leading columns."""
    frames = [
        section.tables[name].assign(
            **{k: [v] * len(section.tables[name]) for k, v in section.setting.items()}
        )
        for section in report.sections
        if section.tables.get(name) is not None
    ]
    if not frames:
        return None
    setting = list(report.sections[0].setting)
    frame = pd.concat(frames, ignore_index=True)
    return frame[setting + [c for c in frame.columns if c not in setting]]


def chosen_tables(report: Report, only: str | None) -> dict[str, pd.DataFrame]:
    """The tables this report has (or the one ``--table`` names, refused when absent)."""
    present = {name: t for name in TABLES if (t := tidy(report, name)) is not None}
    if only is None:
        return present
    if only not in TABLES:
        raise UsageError(f"--table {only}: valid: {', '.join(TABLES)}")
    if only not in present:
        raise UsageError(
            f"--table {only}: this selection has no {only} table (the key it compares does "
            f"not vary); valid here: {', '.join(present)}"
        )
    return {only: present[only]}


def to_csv(frame: pd.DataFrame) -> str:
    """CSV with formula injection defused: a text cell starting with = + - @ is prefixed with
    a quote, as OWASP advises, so a spreadsheet shows it instead of evaluating it."""
    safe = frame.drop(columns=[c for c in JSON_ONLY if c in frame])
    for column in safe.columns:
        if safe[column].dtype == object or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(
                lambda v: "'" + v if isinstance(v, str) and v[:1] in ("=", "+", "-", "@") else v
            )
    return safe.to_csv(index=False)


def to_markdown(frame: pd.DataFrame) -> str:
    """A pipe table (GitHub markdown) of a frame, numbers rounded to 4 places, every header
    and cell escaped (a stored name is text, never markup or HTML)."""
    frame = frame.drop(columns=[c for c in JSON_ONLY if c in frame])
    header = "| " + " | ".join(escape_markdown(str(c)) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    cells = (
        [escape_markdown(fmt(v, 4) if isinstance(v, float) else label(v)) for v in row]
        for row in frame.itertuples(index=False)
    )
    body = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join([header, rule, *body])


def markdown(report: Report, only: str | None) -> str:
    """The report as GitHub markdown: per section a heading, the settings held fixed, each
    table with its caption, the notes; every stored value escaped (``escape_markdown``)."""
    blocks = []
    for section in report.sections:
        if section.setting:
            blocks.append(f"## {escape_markdown(settings_text(section.setting))}")
        if section.fixed:
            blocks.append(f"Fixed: {escape_markdown(settings_text(section.fixed))}")
        for name in TABLES:
            table = section.tables.get(name)
            if table is None or (only and only != name):
                continue
            caption = caption_of(name, table, section, report.method)
            blocks.append(f"### {name.replace('_', ' ').capitalize()}\n\n{to_markdown(table)}")
            blocks.append(escape_markdown(caption))
        blocks.extend(f"Note: {escape_markdown(note)}" for note in section.notes)
    return "\n\n".join(blocks) + "\n"


def to_json(report: Report, only: str | None) -> str:
    payload = {
        name: json.loads(frame.to_json(orient="records"))
        for name, frame in chosen_tables(report, only).items()
    }
    payload.update(
        sections=[
            {
                "setting": section.setting,
                "fixed": section.fixed,
                "grouped_by": section.keys,
                "metric": section.metric.name,
                "higher_is_better": section.metric.higher_is_better,
                "notes": section.notes,
            }
            for section in report.sections
        ],
        method={
            "alpha": report.method.alpha,
            "margin": report.method.margin,
            "diverged": report.method.diverged,
            "looks": report.method.looks,
            "alpha_per_look": report.method.alpha_per_look,
            "verdict_split": "test" if report.method.test else "validation",
            "worse": "Games-Howell (studentized range of Welch t) against the best",
            "equivalent": "TOST (two one-sided Welch tests) within the margin, Holm-adjusted",
            "batch": "one-sided Welch (sensitive) and TOST (insensitive), Holm over rows",
            "interval": "95% Student-t / Welch",
        },
        statuses=report.counts,
        warnings=report.warnings,
        best_over=report.best_over,
    )
    return json.dumps(payload, indent=2, default=_json_default) + "\n"


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def diagnostics_rich(table: pd.DataFrame, keys: list[str], when: str):
    """Per unit: its sublayer type and place among units of that type, gradient norm,
    activation std into and out of its norm, BN train-eval gap, SwitchNorm weights."""
    out = _table(
        f"Diagnostics {when} (mean over seeds): gradient norm of each unit's sublayer "
        "weights, activation std into and out of its norm, train-mode minus eval-mode val "
        "accuracy (batch-statistics norms), SwitchNorm weights IN/LN/BN. Compare units of one "
        "sublayer type: layer counts them."
    )
    key_columns(out, keys, table)
    for name in ("unit", "sublayer", "layer", "grad norm", "std in", "std out", "BN gap"):
        out.add_column(name, justify="right" if name != "sublayer" else "left", no_wrap=True)
    switch = table["sn_mean_in"].notna().any()
    if switch:
        out.add_column("SN mean w", no_wrap=True)
        out.add_column("SN var w", no_wrap=True)
    for _, row in table.iterrows():
        sn = [
            f"{row[f'sn_{kind}_in']:.2f}/{row[f'sn_{kind}_ln']:.2f}/{row[f'sn_{kind}_bn']:.2f}"
            if not math.isnan(row[f"sn_{kind}_in"])
            else "-"
            for kind in ("mean", "var")
        ]
        out.add_row(
            *(cell(row[k]) for k in keys),
            str(row["unit"]),
            row["sublayer"],
            str(row["layer"]),
            fmt(row["grad_norm"], 4),
            fmt(row["in_std"]),
            fmt(row["out_std"]),
            fmt(row["gap"], 4),
            *(sn if switch else []),
        )
    return out


def as_text(result: Report, fmt: str, table: str | None, out: Path | None) -> str | dict:
    """The report as text: a string for stdout, or {path: text} when writing ``--out``. CSV
    holds one table: several go to one file each (FILE-NAME.csv), or --table picks one."""

    if fmt == "markdown":
        text = markdown(result, table)
    elif fmt == "json":
        text = to_json(result, table)
    else:
        chosen = chosen_tables(result, table)
        if len(chosen) > 1 and out is None:
            raise UsageError(
                f"--format csv: this report has {len(chosen)} tables; pick one with --table "
                f"({', '.join(chosen)}) or write one file each with --out FILE.csv"
            )
        if out is not None and len(chosen) > 1:
            return {
                out.with_name(f"{out.stem}-{name}{out.suffix or '.csv'}"): to_csv(frame)
                for name, frame in chosen.items()
            }
        text = to_csv(next(iter(chosen.values())))
    return text if out is None else {out: text}
