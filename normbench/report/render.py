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
    "across",
    "convergence",
    "batch_sensitivity",
    "precision",
    "lr_stability",
    "depth_stability",
    "diagnostics_init",
    "diagnostics",
)
JSON_ONLY = ("values", "lr_sensitivity_values")  # lists: JSON keeps them, CSV, markdown not
DIAGNOSTICS_WHEN = {  # the diagnostics tables, and the step each one shows
    "diagnostics_init": "at initialisation (step 0, before any update)",
    "diagnostics": "at the last evaluation",
}
VERDICT_STYLE = {
    "reference": "bold green",
    "better": "bold blue",
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
    """``0.910 ±0.025``: the space lets a narrow terminal wrap the interval under the mean."""
    return fmt(mean, digits) + ("" if math.isnan(half) else f" ±{fmt(half, digits)}")


def interval(low: float, high: float, digits: int = 3) -> str:
    if math.isnan(low):
        return "-"
    return f"[{low:+.{digits}f}, {high:+.{digits}f}]"


# ---------------------------------------------------------------------------------- captions
def alpha_text(method: Method) -> str:
    """``alpha 0.05``, or for a sweep run until decided the share of alpha this look spent."""
    if method.fractions:
        return (
            f"alpha {method.alpha} spent over {len(method.fractions)} looks (O'Brien-Fleming "
            f"type), {method.level:.4g} at look {method.look}"
        )
    if method.looks > 1:
        return f"alpha {method.alpha} split over {method.looks} looks ({method.level:.4g} each)"
    return f"alpha {method.alpha}"


def ci_percent(method: Method) -> str:
    """The level of the intervals next to a verdict: 1 - 2 alpha, the equivalence test's."""
    return f"{100 * (1 - 2 * method.level):.4g}%"


def convergence_caption(section: Section, method: Method) -> str:
    metric = section.metric
    split = "test" if method.test else "validation"
    what = f"Verdicts on {split} {metric.name.split('_')[1]}"
    tests = "each pair's t test, paired by seed where the seeds match (else Welch, marked unpaired)"
    if method.reference:
        against = (
            f"{what} against the reference {' '.join(method.reference)} (named before "
            f"looking): better or worse = {tests}, Holm-adjusted over the comparisons with the "
            "reference, p < alpha"
        )
        delta = "Δ ref: difference to the reference"
    else:
        better = "highest" if metric.higher_is_better else "lowest"
        against = (
            f"{what} against the best group (the {better} mean with 2+ results, chosen after "
            f"looking): worse = {tests}, Holm-adjusted over every pair of groups, p < alpha"
        )
        delta = "Δ best: difference to the best"
    return (
        f"{against}; equivalent = within ±{method.margin} by TOST, Holm-adjusted; otherwise "
        f"inconclusive; {alpha_text(method)}. ± is a 95% CI; {delta} ± its "
        f"{ci_percent(method)} CI (1 - 2 alpha: the TOST interval, inside ±{method.margin} "
        "when equivalent); n: results; params: trainable parameters (a difference may come "
        "from capacity); target: median steps to target, seeds that reached it; d/f: "
        "diverged/failed runs."
    )


def batch_caption(table: pd.DataFrame, section: Section, method: Method) -> str:
    reference = int(table["reference_batch"].iloc[0])
    return (
        f"Batch sensitivity: mean {section.metric.label} per per-device batch; drop = how much "
        f"worse the smallest batch is than batch {reference} ± its {ci_percent(method)} CI "
        "(1 - 2 alpha); sensitive = one-sided t test (paired by seed where the seeds match) "
        f"p < alpha, insensitive = within ±{method.margin} by TOST, both Holm-adjusted over "
        f"the rows; {alpha_text(method)}."
    )


def caption_of(name: str, table: pd.DataFrame, section: Section, method: Method) -> str:
    if name == "convergence":
        return convergence_caption(section, method)
    if name == "batch_sensitivity":
        return batch_caption(table, section, method)
    if name in ("lr_stability", "depth_stability"):
        return stability_caption(section, table["axis"].iloc[0], sensitivity_loss(table))
    return precision_caption(section, method)


def precision_caption(section: Section, method: Method) -> str:
    return (
        f"Precision: mean {section.metric.label} per precision ± 95% CI (div = diverged runs "
        f"of all runs); vs fp32: the change ± its {ci_percent(method)} CI (1 - 2 alpha), "
        "worse = one-sided t test (paired by seed where the seeds match) p < alpha, "
        f"equivalent = within ±{method.margin} by TOST, both Holm-adjusted over every cell; "
        f"{alpha_text(method)}."
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
    if report.across is not None and only in (None, "across"):
        out.append(Text(f"\n== across {across_title(report.across)} ==", style="bold"))
        out.extend(caption_below(across_rich(report.across, report.method)))
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

    # One space between columns (the box's blank separator, no padding): a table of eleven
    # columns fits 80; intervals wrap under their means when it must.
    return Table(
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        pad_edge=False,
    )


def key_columns(table, keys: list[str], data: pd.DataFrame) -> None:
    """Grouping-key columns as wide as their longest value, up to 24 characters (a longer
    name folds onto a second line, never truncated). Fixed widths: when a table must narrow,
    the intervals wrap under their numbers first."""
    for key in keys:
        longest = max([len(short(key)), *(len(label(v)) for v in data[key])])
        if longest <= 24:  # fixed: a narrow table wraps its intervals, never its names
            table.add_column(short(key), width=longest, no_wrap=True)
        else:
            table.add_column(short(key), min_width=24, overflow="fold")


def convergence_rich(section: Section, method: Method):
    from rich.text import Text

    data = section.tables["convergence"]
    metric = section.metric
    caption = convergence_caption(section, method)
    if len({v for v in data["parameters"] if v is not None}) == 1:
        caption += f" Every group has {count(data['parameters'].dropna().iloc[0])} parameters."
    table = _table(caption)
    key_columns(table, section.keys, data)
    against = "reference" if "diff_vs_reference" in data else "best"
    delta = "Δ ref" if against == "reference" else "Δ best"
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column(metric.label, justify="right")  # "0.910 ±0.025" wraps when narrow
    table.add_column(metric.test_column.split("_")[0], justify="right", no_wrap=True)
    table.add_column(delta, justify="right")
    counts = {v for v in data["parameters"] if v is not None}
    shows_params = len(counts) > 1  # one count for every group goes in the caption
    if shows_params:
        table.add_column("params", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("target", justify="right")  # gives way on a narrow terminal
    table.add_column("d/f", justify="right")
    for _, row in data.iterrows():
        marks = [f"{row['mixed']} mixed"] * bool(row["mixed"])
        marks += ["unpaired"] * (row["reason"] == "unpaired (Welch)")
        verdict = row["verdict"] + (f" ({', '.join(marks)})" if marks else "")
        value = row[f"diff_vs_{against}"]
        diff = (
            "-"
            if row["verdict"] == "reference" or math.isnan(value)
            else f"{value:+.3f}"
            + (
                ""
                if math.isnan(row["diff_ci_low"])
                else f" ±{(row['diff_ci_high'] - row['diff_ci_low']) / 2:.3f}"
            )
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
    table.add_column("drop", justify="right")
    table.add_column("verdict")  # its reason wraps: "sensitive (paired by seed)"
    for _, row in data.iterrows():
        drop = (
            "-"
            if math.isnan(row["drop"])
            else f"{row['drop']:+.3f} ±{(row['drop_ci_high'] - row['drop_ci_low']) / 2:.3f}"
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
        table.add_column(precision, justify="right")
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
                shown = "-" if math.isnan(delta) else f"{delta:+.3f} ±{half:.3f} "
                cells.append(Text(shown + str(word), style=VERDICT_STYLE.get(word, "")))
        table.add_row(*(cell(row[k]) for k in row_keys), *cells)
    return table


def stability_caption(section: Section, axis: str, loss: str | None = None) -> str:
    what = "learning rate" if axis == "train.lr" else "depth"
    sensitivity = (
        f" LR sens. = Wortsman et al.'s LR sensitivity in final {loss.replace('_', ' ')}: per "
        "seed, the mean over the learning rates of the loss (capped at the loss at "
        "initialisation; a diverged run counts there) less the best rate's; mean ± 95% "
        "interval over seeds with a result at every rate (n). Lower: less sensitive. verdict: "
        "each row's LR sensitivity against the reference row (--reference on these keys, "
        "else the least sensitive), paired by seed as the convergence verdicts are."
        if loss
        else ""
    )
    return (
        f"Stability: mean final {section.metric.label} of finished runs per {what}, and how "
        f"many seeds trained (finished, no divergence, clear of chance by 5%: chance is "
        f"{'the unigram solution' if not section.metric.higher_is_better else '1 / classes'}); "
        f"largest = the largest {what} at which every seed trained, with the metric there."
        + sensitivity
    )


def sensitivity_loss(table: pd.DataFrame) -> str | None:
    """The loss a stability table's LR sensitivity is in; None when it has none (depth)."""
    return table["lr_sensitivity_loss"].iloc[0] if "lr_sensitivity" in table else None


def stability_rich(name: str):
    """The rich renderer of a stability table (lr_stability or depth_stability)."""

    def rich(section: Section, method: Method):
        from rich.text import Text

        data = section.tables[name]
        axis = data["axis"].iloc[0]
        values = [c.removesuffix("_mean") for c in data.columns if c.endswith("_mean")]
        row_keys = [k for k in data.columns if k in section.keys]
        loss = sensitivity_loss(data)
        table = _table(stability_caption(section, axis, loss))
        key_columns(table, row_keys, data)
        # a rate's cell is its mean over the seeds that trained, and how many did, one above
        # the other: six rates, the LR sensitivity and its verdict fit 80 columns
        for value in values:
            table.add_column(f"{short(axis)}=\n{value}", justify="right", no_wrap=True)
        table.add_column("largest", justify="right", no_wrap=True)
        table.add_column(section.metric.label, justify="right", no_wrap=True)
        if loss:
            table.add_column("LR sens. (n)", justify="right", min_width=6)
        judged = "lr_sensitivity_verdict" in data
        if judged:
            table.add_column("verdict", overflow="fold", min_width=9)
        for _, row in data.iterrows():
            sensitivity = (
                [
                    f"{with_ci(row['lr_sensitivity'], row['lr_sensitivity_ci95'])} "
                    f"({row['lr_sensitivity_seeds']})"
                ]
                if loss
                else []
            )
            if judged:
                word = row["lr_sensitivity_verdict"]
                sensitivity.append(Text(word, style=VERDICT_STYLE.get(word, "")))
            table.add_row(
                *(cell(row[k]) for k in row_keys),
                *(f"{fmt(row[f'{v}_mean'])}\n{row[f'{v}_trained']}" for v in values),
                "none" if row["largest_stable"] is None else label(row["largest_stable"]),
                fmt(row["metric_there"]),
                *sensitivity,
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
    if report.across is not None:
        present = {"across": report.across.table, **present}
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
    if report.across is not None and only in (None, "across"):
        blocks.append(f"## Across {escape_markdown(across_title(report.across))}")
        blocks.append(to_markdown(report.across.table))
        blocks.append(escape_markdown(across_caption(report.across, report.method)))
    return "\n\n".join(blocks) + "\n"


def section_records(report: Report) -> list[dict]:
    """Per section: its setting, the keys held fixed, the grouping keys, the metric and the
    notes (JSON's ``sections``, normbench.api.report's ``sections`` table)."""
    return [
        {
            "setting": section.setting,
            "fixed": section.fixed,
            "grouped_by": section.keys,
            "metric": section.metric.name,
            "higher_is_better": section.metric.higher_is_better,
            "notes": section.notes,
        }
        for section in report.sections
    ]


def to_json(report: Report, only: str | None) -> str:
    payload = {
        name: json.loads(frame.to_json(orient="records"))
        for name, frame in chosen_tables(report, only).items()
    }
    if report.across is not None:
        payload["across_tasks"] = report.across.tasks
        payload["across_reference"] = report.across.reference
    payload.update(
        sections=section_records(report),
        method={
            "alpha": report.method.alpha,
            "margin": report.method.margin,
            "diverged": report.method.diverged,
            "looks": len(report.method.fractions) or report.method.looks,
            "look": report.method.look,
            "alpha_this_look": report.method.level,
            "ci_level": 1 - 2 * report.method.level,
            "reference": " ".join(report.method.reference) or None,
            "verdict_split": "test" if report.method.test else "validation",
            "worse": (
                "t test of the pair, paired by seed where the seeds match (else Welch); Holm "
                "over the k - 1 comparisons with a named reference, over every pair of groups "
                "against the best"
            ),
            "equivalent": "TOST within the margin, paired where possible, Holm-adjusted",
            "batch": "one-sided t (sensitive) and TOST (insensitive), paired, Holm over rows",
            "interval": "group means: 95% Student-t; differences: 1 - 2 alpha (the TOST's)",
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
    activation std into and out of its norm, residual-stream RMS, largest attention logit, log
    Z, BN train-eval gap, SwitchNorm weights."""
    out = _table(
        f"Diagnostics {when} (mean over seeds): gradient norm of each unit's sublayer "
        "weights, activation std into and out of its norm, RMS of the residual stream it "
        "leaves, its largest attention logit (q.k/sqrt(d) after QK-norm, before the softmax), "
        "the mean log Z of the output logits (one per run: the same in every row), train-mode "
        "minus eval-mode val accuracy (batch-statistics norms), SwitchNorm weights IN/LN/BN. "
        "Compare units of one sublayer type: layer counts them."
    )
    key_columns(out, keys, table)
    names = ("unit", "sublayer", "layer", "grad norm", "std in", "std out", "rms out")
    for name in (*names, "max logit", "log Z", "BN gap"):
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
            fmt(row["resid_rms"]),
            fmt(row["max_logit"], 2),
            fmt(row["log_z"], 2),
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


# ----------------------------------------------------------------------------- across tasks
def across_title(result) -> str:
    """``data: 3 tasks (data=digits, data=mnist1d, data=pysource)``."""
    keys = ",".join(k.removesuffix(".name") for k in result.keys)
    return f"{keys}: {len(result.tasks)} tasks ({', '.join(result.tasks)})"


def across_caption(result, method: Method) -> str:
    chosen = "named before looking" if result.named else "the highest IQM, chosen after looking"
    cost = "steps" if result.profile_x == "steps" else "seconds"
    return (
        f"Across tasks, against the reference {result.reference} ({chosen}). P(>ref): the "
        "probability that a run of the group beats a run of the reference in a task (Mann-"
        "Whitney U / nm, ties 1/2), averaged over the tasks both are in; IQM: interquartile "
        "mean of every run's score normalized per task (0 at chance, 1 at the task's best "
        "group mean); both with a 95% stratified-bootstrap interval (each group's runs "
        "resampled within each task, the tasks fixed: it says nothing about other tasks). "
        "b/e/w/i: tasks where the section's verdict (paired by seed, "
        f"{alpha_text(method)}) is better/equivalent/worse/inconclusive; profile: the area "
        f"under the performance profile up to 4x the best group's {cost} to target (1: the "
        "fastest everywhere; a run that never reaches the target counts as infinite); missing: "
        "tasks without the group (they count as not reaching the target)."
    )


def across_rich(result, method: Method):
    from rich.text import Text

    data = result.table
    table = _table(across_caption(result, method))
    key_columns(table, result.group_keys, data)
    table.add_column("tasks", justify="right", no_wrap=True)
    table.add_column("P(>ref)", justify="right")
    table.add_column("IQM", justify="right")
    table.add_column("b/e/w/i", justify="right", no_wrap=True)
    table.add_column("profile", justify="right", no_wrap=True)
    table.add_column("missing")
    for _, row in data.iterrows():
        poi = (
            "ref"
            if math.isnan(row["poi"])
            else f"{row['poi']:.2f} [{row['poi_ci_low']:.2f}, {row['poi_ci_high']:.2f}]"
        )
        iqm = (
            "-"
            if math.isnan(row["iqm"])
            else f"{row['iqm']:.3f} [{row['iqm_ci_low']:.3f}, {row['iqm_ci_high']:.3f}]"
        )
        counts = "/".join(
            str(int(row[w])) for w in ("better", "equivalent", "worse", "inconclusive")
        )
        table.add_row(
            *(cell(row[k]) for k in result.group_keys),
            str(int(row["tasks"])),
            poi,
            iqm,
            counts,
            f"{row['profile_score']:.2f}",
            Text(plain(row["missing"]) or "-", style="dim"),
        )
    return table
