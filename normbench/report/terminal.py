"""The report for the terminal: rich tables, each with its caption below, section by
section (html.py turns the same tables into HTML). Each table is laid out for the width it is
printed at (normbench.report.table_layout's ``fit``): every row one line, the columns that
do not fit left out in a stated order and named in the caption; the cost table is rendered in
normbench.report.cost_terminal. Formatting only: the numbers come from the question modules,
the captions from normbench.report.text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from normbench.core.text import plain
from normbench.report.activations_terminal import activations_rich, has_activations
from normbench.report.base import Method, Report, Section
from normbench.report.cost_terminal import cost_rich
from normbench.report.labels import label
from normbench.report.stats import ONE_RUN
from normbench.report.table_layout import (
    VERDICT_STYLE,
    Column,
    caption_below,
    cell,
    fit,
    key_cells,
    key_columns,
    new_table,
)
from normbench.report.text import (
    DIAGNOSTICS_WHEN,
    across_caption,
    across_title,
    batch_caption,
    batch_sizes,
    bounded_ci,
    check_table,
    convergence_caption,
    count,
    diagnostics_caption,
    fmt,
    narrow,
    precision_caption,
    settings_text,
    short,
    stability_caption,
    table_loss,
    target_header,
    with_ci,
)


def rich_renderables(report: Report, only: str | None = None) -> list:
    """Headers, tables and notes for the terminal, section by section; each table laid out
    for the width it is printed at (Fitted). ``only``: the one table --table names, refused
    in one line when this report has none of that name."""
    from rich.text import Text

    check_table(report, only)
    out, legends = [], set()  # a legend printed once: later tables say "as above"
    for section in report.sections:
        if section.setting:
            out.append(Text(f"\n== {settings_text(section.setting)} ==", style="bold"))
        if section.fixed:
            out.append(Text(f"fixed: {settings_text(section.fixed)}", style="dim"))
        out.extend(Text(f"note: {note}", style="dim") for note in section.notes)
        for name, render in RICH_TABLES.items():
            if (only is None or only == name) and section.tables.get(name) is not None:
                out.append(Fitted(render, section, report.method, legends))
    if report.across is not None and only in (None, "across"):
        out.append(Text(f"\n== across {across_title(report.across)} ==", style="bold"))
        out.extend(caption_below(across_rich(report.across, report.method)))
    if report.scaling is not None and only in (None, "scaling"):
        out.append(Text(f"\n== scaling along {report.scaling.key} ==", style="bold"))
        out.append(FittedScaling(report.scaling, report.method))
        out.extend(Text(f"note: {note}", style="dim") for note in report.scaling.notes)
    return out


@dataclass
class FittedScaling:
    """The scaling table laid out for the width it is printed at, its caption below."""

    result: object  # normbench.report.scaling_section.Scaling
    method: Method

    def __rich_console__(self, console, options):
        yield from caption_below(scaling_rich(self.result, self.method, options.max_width))


def _times(value: float, digits: int = 2) -> str:
    """A multiplier: 1.85, 12.3, inf."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "0"
    return f"{value:.{digits}g}" if value >= 100 else f"{value:.{digits}f}"


def scaling_rich(result, method: Method, width: int | None = None):
    """Per group of each ladder: its exponent, E, the multiplier against the reference at
    the top rung and extrapolated, the trend and the crossing; at a narrow width the
    extrapolated multipliers, the crossing and E give way, named in the caption."""
    from normbench.report import scaling
    from normbench.report.scaling_section import caption

    rows = [row for _, row in result.table.iterrows()]
    setting = [
        k for k in result.table.columns if k in {k for s in result.ladders for k in s.setting}
    ]

    def ci(row, name: str, show=_times) -> str:
        return f"{show(row[name])} [{show(row[name + '_ci_low'])}, {show(row[name + '_ci_high'])}]"

    def exponent(row) -> str:
        return ci(row, "exponent", lambda v: fmt(v, 3))

    def top(row) -> str:
        kind = row["multiplier_top_kind"]
        if kind != scaling.MEASURED:
            return ("> " if kind == scaling.ABOVE else "< ") + _times(row["multiplier_top"])
        low, high = _times(row["multiplier_ci_low"]), _times(row["multiplier_ci_high"])
        return f"{_times(row['multiplier_top'])} [{low}, {high}]"

    def beyond(row, name: str) -> str:
        return "n/e" if row[name + "_kind"] == scaling.NOT_ESTIMABLE else ci(row, name)

    def crossing(row) -> str:
        if row["trend"] == "reference":
            return "-"
        if row["crossing_kind"] == scaling.NOT_ESTIMABLE:
            return "n/e"
        if math.isnan(row["crossing"]):
            return "no"
        return f"{row['crossing']:.2g}"

    def form(row) -> str:
        return f"{row['form']} p={fmt(row['lack_of_fit_p'], 2)}"

    columns = [
        *key_cells(setting, result.table),
        Column("group", [cell(r["group"]) for r in rows], justify="left", key=True),
        Column("x ref top", [top(r) for r in rows], wraps=True),
        Column("trend", [r["trend"] for r in rows], justify="left"),
        Column("fit", [form(r) for r in rows], wraps=True),
        Column("alpha", [exponent(r) for r in rows], wraps=True),
        Column("E", [fmt(r["E"]) + ("*" if r["E_shared"] else "") for r in rows]),
        Column("x ref@10x", [beyond(r, "multiplier_10x") for r in rows], wraps=True),
        Column("x ref@100x", [beyond(r, "multiplier_100x") for r in rows], wraps=True),
        Column("cross", [crossing(r) for r in rows]),
    ]
    return fit(
        columns,
        ["x ref@100x", "x ref@10x", "cross", "E", "alpha", "fit"],
        width,
        lambda left_out: (
            caption(result, method)
            + " fit: the form and this group's lack-of-fit p; alpha: its local log-log "
            + "exponent at the top rung; E: its floor (*: shared by the groups). "
            + "; ".join(sorted({r["form_why"] for r in rows}))
            + "."
            + narrow(left_out)
        ),
    )


@dataclass
class Fitted:
    """A section's table built when it is printed, for the width it is printed at (a
    terminal's, or COLUMNS when piped), then its caption below it."""

    render: Callable
    section: Section
    method: Method
    legends: set[str]  # the captions printed so far: one printed again reads "as above"

    def __rich_console__(self, console, options):
        from rich.text import Text

        table, *caption = caption_below(self.render(self.section, self.method, options.max_width))
        yield table
        for text in caption:
            if text.plain in self.legends:
                yield Text("legend: as under the same table above", style="dim")
            else:
                self.legends.add(text.plain)
                yield text


def convergence_rich(section: Section, method: Method, width: int | None = None):
    """The convergence table: per group its results, mean and 95% CI, test mean, difference
    to the reference or best group ± its (1 - 2 alpha) CI, parameters (when they differ),
    verdict, steps to target, diverged/failed runs and each verdict's reason; at a narrow
    width reason, params, target, test and d/f give way in that order, and the caption says
    which did."""
    from rich.text import Text

    data = section.tables["convergence"]
    metric = section.metric
    against = "reference" if "diff_vs_reference" in data else "best"
    counts = {v for v in data["parameters"] if v is not None}
    shows_params = len(counts) > 1  # one count for every group goes in the caption
    means = [
        bounded_ci(m, h, metric)
        for m, h in zip(data[f"{metric.name}_mean"], data[f"{metric.name}_ci95"], strict=True)
    ]
    verdicts, diffs = [], []
    for _, row in data.iterrows():
        marks = [f"{row['mixed']} mixed"] * bool(row["mixed"])
        marks += ["unpaired"] * (row["reason"] == "unpaired (Welch)")
        marks += [ONE_RUN] * (row["reason"] == ONE_RUN)  # "-" alone would read as missing
        verdict = row["verdict"] + (f" ({', '.join(marks)})" if marks else "")
        verdicts.append(Text(verdict, style=VERDICT_STYLE.get(row["verdict"], "")))
        value = row[f"diff_vs_{against}"]
        diffs.append(
            "-"
            if row["verdict"] == "reference" or math.isnan(value)
            else f"{value:+.3f}"
            + (
                ""
                if math.isnan(row["diff_ci_low"])
                else f" ±{(row['diff_ci_high'] - row['diff_ci_low']) / 2:.3f}"
            )
        )
    test = metric.test_column.split("_")[0]
    delta = "Δ ref" if against == "reference" else "Δ best"
    target = target_header(section)
    columns = [
        *key_cells(section.keys, data),
        Column("n", [str(v) for v in data["results"]]),
        Column(metric.label, [shown for shown, _ in means], wraps=True),
        Column(test, [fmt(v) for v in data[f"{metric.test_column}_mean"]]),
        Column(delta, diffs, wraps=True),
        *([Column("params", [count(v) for v in data["parameters"]])] if shows_params else []),
        Column("verdict", verdicts, justify="left"),
        Column(
            target,
            [
                f"{fmt(s, 0)} {r}/{n}"
                for s, r, n in zip(
                    data["steps_to_target"], data["reached_target"], data["n"], strict=True
                )
            ],
        ),
        Column("d/f", [f"{d}/{f}" for d, f in zip(data["diverged"], data["failed"], strict=True)]),
        Column("reason", [cell(r if r != ONE_RUN else "") for r in data["reason"]], "left"),
    ]
    names = {"n": "n", test: "test", delta: "delta", "params": "params", target: "target"}
    names |= {"d/f": "d/f", "reason": "reason"}

    def caption(left_out: tuple[str, ...]) -> str:
        shown = tuple(
            names[c.header] for c in columns if c.header in names and c.header not in left_out
        )
        text = convergence_caption(
            section, method, shown, left_out, clipped=any(clip for _, clip in means)
        )
        if len(counts) == 1:
            text += f" Every group has {count(next(iter(counts)))} parameters."
        return text

    return fit(columns, ["reason", "params", target, test, "d/f"], width, caption)


def batch_rich(section: Section, method: Method, width: int | None = None):
    """The batch-sensitivity table: per group the mean at each per-device batch, the drop of
    the smallest against the reference ± its (1 - 2 alpha) CI and the verdict with its reason;
    at a narrow width the reason, then the batches between the smallest and the reference,
    give way."""
    from rich.text import Text

    data = section.tables["batch_sensitivity"]
    sizes = batch_sizes(data)
    row_keys = [k for k in data.columns if k in section.keys]
    drops = [  # a norm that ignores the batch: one set of runs, nothing measured
        "same runs"
        if row["reason"] == "same runs"
        else "-"
        if math.isnan(row["drop"])
        else f"{row['drop']:+.3f} ±{(row['drop_ci_high'] - row['drop_ci_low']) / 2:.3f}"
        for _, row in data.iterrows()
    ]
    verdicts = [Text(v, style=VERDICT_STYLE.get(v, "")) for v in data["verdict"]]
    reasons = [f"({r})" if r else "" for r in data["reason"]]
    columns = [
        *key_cells(row_keys, data),
        *(Column(f"b{s}", [fmt(v) for v in data[f"b{s}_mean"]]) for s in sizes),
        Column("drop", drops),
        Column("verdict", verdicts, justify="left"),
        Column("reason", reasons, justify="left"),
    ]
    reference = int(data["reference_batch"].iloc[0])
    between = [f"b{s}" for s in sizes[1:] if s != reference]
    return fit(
        columns,
        ["reason", *reversed(between)],
        width,
        lambda left_out: batch_caption(data, section, method, left_out),
    )


def precision_rich(section: Section, method: Method, width: int | None = None):
    """The precision table: per group the mean ± 95% CI at each precision (and its diverged
    runs), and each lower precision's change against fp32 ± its (1 - 2 alpha) CI with its
    verdict; at a narrow width the lower precisions' means give way (their change stays)."""
    from rich.text import Text

    data = section.tables["precision"]
    metric = section.metric
    precisions = [p for p in ("fp32", "bf16", "fp16") if f"{p}_mean" in data]
    row_keys = [k for k in data.columns if k in section.keys]
    columns, clipped = [*key_cells(row_keys, data)], set()
    for p in precisions:
        means = []
        for _, row in data.iterrows():
            shown, clip = bounded_ci(row[f"{p}_mean"], row[f"{p}_ci95"], metric)
            clipped |= {p} if clip else set()
            diverged = row[f"{p}_diverged"]
            means.append(shown + (f" div {diverged}/{row[f'{p}_n']}" if diverged else ""))
        columns.append(Column(p, means, wraps=True))
        if p == "fp32":
            continue
        changes = []
        for _, row in data.iterrows():
            delta = row.get(f"{p}_delta", math.nan)
            half = (
                row.get(f"{p}_delta_ci_high", math.nan) - row.get(f"{p}_delta_ci_low", math.nan)
            ) / 2
            word = row.get(f"{p}_verdict", "-")
            shown = "-" if math.isnan(delta) else f"{delta:+.3f} ±{half:.3f} "
            changes.append(Text(shown + str(word), style=VERDICT_STYLE.get(word, "")))
        columns.append(Column(f"{p} vs fp32", changes, justify="left", wraps=True))
    return fit(
        columns,
        list(reversed(precisions[1:])),
        width,
        lambda left_out: precision_caption(section, method, left_out, bool(clipped - {*left_out})),
    )


def stability_rich(name: str):
    """The rich renderer of a stability table (lr_stability or depth_stability)."""

    def rich(section: Section, method: Method, width: int | None = None):
        from rich.text import Text

        data = section.tables[name]
        axis = data["axis"].iloc[0]
        values = [c.removesuffix("_mean") for c in data.columns if c.endswith("_mean")]
        row_keys = [k for k in data.columns if k in section.keys]
        loss = table_loss(data)
        table = new_table(stability_caption(section, axis, loss))
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
                largest_text(row),
                fmt(row["metric_there"]),
                *sensitivity,
            )
        return table

    return rich


def largest_text(row) -> str:
    """The largest stable value, "≥ v" when no value the group tried failed (a lower bound)."""
    if row["largest_stable"] is None:
        return "none"
    bound = "≥ " if row.get("largest_stable_is_bound") is True else ""
    return bound + label(row["largest_stable"])


RICH_TABLES = {  # the report's tables in the order they are shown, and their renderers
    "convergence": convergence_rich,
    "batch_sensitivity": batch_rich,
    "precision": precision_rich,
    "lr_stability": stability_rich("lr_stability"),
    "depth_stability": stability_rich("depth_stability"),
    "cost": cost_rich,
}


def rich_tables(section: Section, method: Method) -> list[tuple[str, object]]:
    """The section's tables at no width limit, every column (what the HTML and the markdown
    show), each with its caption; diagnostics last."""
    found = [
        (name, build(section, method))
        for name, build in RICH_TABLES.items()
        if section.tables.get(name) is not None
    ]
    return found + diagnostics_tables(section)


def diagnostics_tables(section: Section, width: int | None = None) -> list[tuple[str, object]]:
    """The section's diagnostics tables (``--diagnostics``), at initialisation and at the last
    evaluation, each followed by its activation statistics (``activations_init``,
    ``activations``) where a run recorded them."""
    found = []
    for name, when in DIAGNOSTICS_WHEN.items():
        table = section.tables.get(name)
        if table is None:
            continue
        found.append((name, diagnostics_rich(table, section.keys, when, width)))
        if has_activations(table):
            shown = activations_rich(table, section.keys, when, width)
            found.append((name.replace("diagnostics", "activations"), shown))
    return found


def diagnostics_rich(table: pd.DataFrame, keys: list[str], when: str, width: int | None = None):
    """Per unit: its sublayer type and place among units of that type, gradient norm,
    activation std into and out of its norm, residual-stream RMS, largest attention logit, log
    Z, BN train-eval gap, SwitchNorm weights. At a narrow ``width`` the columns no unit has a
    value in give way first, then the BN gap, log Z, largest logit and the stds."""
    rows = [row for _, row in table.iterrows()]

    def sn(kind: str) -> list[str]:
        return [
            f"{r[f'sn_{kind}_in']:.2f}/{r[f'sn_{kind}_ln']:.2f}/{r[f'sn_{kind}_bn']:.2f}"
            if not math.isnan(r[f"sn_{kind}_in"])
            else "-"
            for r in rows
        ]

    columns = [
        *key_cells(keys, table),
        Column("unit", [str(r["unit"]) for r in rows]),
        Column("sublayer", [r["sublayer"] for r in rows], justify="left"),
        Column("layer", [str(r["layer"]) for r in rows]),
        Column("grad norm", [fmt(r["grad_norm"], 4) for r in rows]),
        Column("std in", [fmt(r["in_std"]) for r in rows]),
        Column("std out", [fmt(r["out_std"]) for r in rows]),
        Column("rms out", [fmt(r["resid_rms"]) for r in rows]),
        Column("max logit", [fmt(r["max_logit"], 2) for r in rows]),
        Column("log Z", [fmt(r["log_z"], 2) for r in rows]),
        Column("BN gap", [fmt(r["gap"], 4) for r in rows]),
    ]
    if table["sn_mean_in"].notna().any():
        columns += [Column("SN mean w", sn("mean"), justify="left")]
        columns += [Column("SN var w", sn("var"), justify="left")]
    given = ("rms out", "max logit", "log Z", "BN gap")
    empty = [c.header for c in columns if c.header in given and set(c.cells) == {"-"}]
    optional = [*empty, "BN gap", "log Z", "max logit", "std out", "std in", "rms out"]
    return fit(
        columns,
        list(dict.fromkeys(optional)),
        width,
        lambda left_out: diagnostics_caption(when) + narrow(left_out),
    )


def across_rich(result, method: Method):
    from rich.text import Text

    data = result.table
    table = new_table(across_caption(result, method))
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
