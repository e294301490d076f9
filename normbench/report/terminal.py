"""The report for the terminal: rich tables, each with its caption below, section by
section (html.py turns the same tables into HTML). Formatting only: the numbers come from the
question modules, the captions from normbench.report.text.
"""

from __future__ import annotations

import math

import pandas as pd

from normbench.core.text import plain
from normbench.report.base import Method, Report, Section, label
from normbench.report.text import (
    across_caption,
    across_title,
    batch_caption,
    batch_sizes,
    convergence_caption,
    count,
    fmt,
    precision_caption,
    settings_text,
    short,
    stability_caption,
    table_loss,
    with_ci,
)

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


def stability_rich(name: str):
    """The rich renderer of a stability table (lr_stability or depth_stability)."""

    def rich(section: Section, method: Method):
        from rich.text import Text

        data = section.tables[name]
        axis = data["axis"].iloc[0]
        values = [c.removesuffix("_mean") for c in data.columns if c.endswith("_mean")]
        row_keys = [k for k in data.columns if k in section.keys]
        loss = table_loss(data)
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


RICH_TABLES = {  # the report's tables in the order they are shown, and their renderers
    "convergence": convergence_rich,
    "batch_sensitivity": batch_rich,
    "precision": precision_rich,
    "lr_stability": stability_rich("lr_stability"),
    "depth_stability": stability_rich("depth_stability"),
}


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
