"""What every output format shares: the report's table names in the order shown, number
formats, column headers for long key names, and each table's caption (its method in words).
``±`` means the half-width of a 95% confidence interval everywhere.
"""

from __future__ import annotations

import math

import pandas as pd

from normbench.core.errors import UsageError
from normbench.core.suggest import did_you_mean
from normbench.report import TABLE_NAMES
from normbench.report.base import Method, Metric, Report, Section
from normbench.report.labels import label
from normbench.report.stats import COMMON_SEEDS_NOTE
from normbench.store.upgrade import EVEN_SPLIT

TABLES = tuple(name for name in TABLE_NAMES if name != "tuning")  # a report's, not a sweep's
JSON_ONLY = ("values", "lr_sensitivity_values")  # lists: JSON keeps them, CSV, markdown not
DIAGNOSTICS_WHEN = {  # the diagnostics tables, and the step each one shows
    "diagnostics_init": "at initialisation (step 0, before any update)",
    "diagnostics": "at the last evaluation",
}


def table_names(report: Report) -> list[str]:
    """The tables this report has, in TABLES' order."""
    names = [n for n in TABLES if any(s.tables.get(n) is not None for s in report.sections)]
    scaling = ["scaling", "scaling_rungs"] if report.scaling is not None else []
    return (["across"] if report.across is not None else []) + scaling + names


NOT_TUNED = "--table tuning: not a tuned sweep's report; valid: --sweep NAME of a sweep --tune"


def check_table_name(only: str | None) -> None:
    """``--table NAME`` names one of normbench's tables (with the one a typo most likely
    meant): checked before any run is read, so that a typo costs no report."""
    if only is not None and only not in TABLE_NAMES:
        raise UsageError(
            f"--table {only}: no such table{did_you_mean(only, TABLE_NAMES)}; valid: "
            f"{', '.join(TABLE_NAMES)}"
        )


def check_table(report: Report, only: str | None) -> None:
    """``--table NAME``: refused in one line when NAME is no table of normbench's, or none
    of this report's, with the valid choices."""
    if only is None:
        return
    check_table_name(only)
    if only == "tuning":  # asked of a report that has no tuned sweep (one that has is shown)
        raise UsageError(NOT_TUNED)
    present = table_names(report)
    if only not in present:
        raise UsageError(
            f"--table {only}: this selection has no {only} table (the key it compares does "
            f"not vary); valid here: {', '.join(present)}"
        )


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
    """``model=cnn data=mnist1d train.max_steps=600``: keys as overrides write them; a key
    these runs do not have (``-``: the data set takes no such option) is left out."""
    return " ".join(
        f"{key.removesuffix('.name')}={label(value)}"
        for key, value in values.items()
        if label(value) != "-"
    )


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


def alpha_text(method: Method) -> str:
    """``alpha 0.05``, or for a sweep run until decided the share of alpha this look spent."""
    looks = len(method.fractions)
    if method.spending == EVEN_SPLIT and looks:
        return f"alpha {method.alpha} split over {looks} looks ({method.level:.4g} each)"
    if looks:
        return (
            f"alpha {method.alpha} spent over {looks} looks "
            f"({method.spending}), {method.level:.4g} at look {method.look}"
        )
    return f"alpha {method.alpha}"


def ci_percent(method: Method) -> str:
    """The level of the intervals next to a verdict: 1 - 2 alpha, the equivalence test's."""
    return f"{100 * (1 - 2 * method.level):.4g}%"


UNADJUSTED = (
    " Intervals are per comparison, not adjusted; the verdicts are Holm-adjusted, so an "
    "interval clear of 0 (or inside ±{margin}) can stand beside an inconclusive verdict."
)
CLIPPED = " An accuracy's interval that would pass 0 or 1 is shown clipped, as [low, high]."


def bounded_interval(mean: float, half: float, metric: Metric) -> tuple[float, float]:
    """The interval mean ± half, clipped to [0, 1] for an accuracy (no accuracy lies outside;
    a t interval of a few noisy seeds can pass either end). Bits per byte are not clipped."""
    if not metric.higher_is_better:
        return mean - half, mean + half
    return max(0.0, mean - half), min(1.0, mean + half)


def bounded_ci(mean: float, half: float, metric: Metric) -> tuple[str, bool]:
    """``0.910 ±0.025``, or for an accuracy whose interval would pass 0 or 1 the interval
    clipped to [0, 1] (``0.627 [0.068, 1.000]``: no accuracy lies outside); whether it was
    clipped. Bits per byte are unbounded above and keep ``±``."""
    if not metric.higher_is_better or math.isnan(half) or 0 <= mean - half <= mean + half <= 1:
        return with_ci(mean, half), False
    low, high = bounded_interval(mean, half, metric)
    return f"{fmt(mean)} [{low:.3f}, {high:.3f}]", True


def convergence_method(section: Section, method: Method) -> str:
    """How the convergence verdicts are reached, in one sentence (every format's caption)."""
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
    else:
        against = (
            f"{what} against the best group (ahead of the most others pair by pair, over the "
            f"seeds each pair shares; 2+ results; chosen after looking): worse, or better for a "
            f"group above it = {tests}, Holm-adjusted over every pair of groups, p < alpha"
        )
    table = section.tables.get("convergence")
    common = table is not None and table.attrs.get("common_only", False)
    return (
        f"{against}; equivalent = within ±{method.margin} by TOST, Holm-adjusted; otherwise "
        f"inconclusive; {alpha_text(method)}." + (f" {COMMON_SEEDS_NOTE}." if common else "")
    )


def convergence_caption(
    section: Section,
    method: Method,
    shown: tuple[str, ...] = ("n", "test", "delta", "params", "target", "d/f"),
    left_out: tuple[str, ...] = (),
    clipped: bool = False,
) -> str:
    """The terminal's convergence caption: the method, then the columns ``shown`` (the
    terminal's names; params only where the groups' counts differ), the columns a narrow
    terminal ``left_out``, and what the intervals beside the verdicts are."""
    delta = (
        "Δ ref: difference to the reference"
        if method.reference
        else "Δ best: difference to the best"
    )
    glossary = {
        "n": "n: results (one per seed)",
        "test": f"{section.metric.test_column.split('_')[0]}: mean on the test split",
        "delta": f"{delta} ± its {ci_percent(method)} CI (1 - 2 alpha: the TOST interval, "
        f"inside ±{method.margin} when equivalent)",
        "params": "params: trainable parameters (a difference may come from capacity)",
        "target": f"{target_header(section)}: median steps until {target_text(section)}, and "
        "runs that reached it",
        "d/f": "d/f: diverged/failed runs",
        "reason": "reason: how each verdict was reached (paired by seed or Welch), or why none was",
    }
    columns = "; ".join(glossary[c] for c in shown if c in glossary)
    return (
        f"{convergence_method(section, method)} ± is a 95% CI; {columns}."
        + UNADJUSTED.format(margin=method.margin)
        + (CLIPPED if clipped else "")
        + narrow(left_out)
    )


def target_header(section: Section) -> str:
    """The header of the convergence table's steps-to-target column: ``to 0.85``, the value
    its steps count to (``target`` said neither what nor to what; ``steps to 0.85`` would
    cost the reason column at 100 columns), ``to target`` where the runs have several
    targets (the caption names them)."""
    runs = section.runs
    if runs is None or runs.empty or "target.value" not in runs:
        return "to target"
    values = set(runs["target.value"])
    return f"to {label(next(iter(values)))}" if len(values) == 1 else "to target"


def target_text(section: Section) -> str:
    """The target the convergence table's ``target`` column counts steps to, as the trainer
    tests it (the first evaluation with val acc >= value, a loss or bpb <= value): ``target``
    alone told a reader neither the metric nor the value. Runs of several targets are said to
    be so, with the keys that hold them."""
    runs = section.runs
    columns = ("target.metric", "target.value")
    if runs is None or runs.empty or any(c not in runs for c in columns):
        return "target (target.metric, target.value)"
    pairs = set(zip(runs["target.metric"], runs["target.value"], strict=True))
    if len(pairs) != 1:
        return "each run's target (target.metric, target.value differ between runs)"
    ((metric, value),) = pairs
    comparison = ">=" if metric == "val_acc" else "<="
    return (
        f"{str(metric).replace('_', ' ')} {comparison} {label(value)} (target.metric, target.value)"
    )


def narrow(left_out: tuple[str, ...]) -> str:
    """What a terminal too narrow for a table's every column left out, and where to see it."""
    if not left_out:
        return ""
    return (
        f" Left out at this width: {', '.join(left_out)} (a wider terminal, or --format json, "
        "has every column)."
    )


def batch_caption(
    table: pd.DataFrame,
    section: Section,
    method: Method,
    left_out: tuple[str, ...] = (),
) -> str:
    reference = int(table["reference_batch"].iloc[0])
    return (
        f"Batch sensitivity: mean {section.metric.label} per per-device batch; drop = how much "
        f"worse the smallest batch is than batch {reference} ± its {ci_percent(method)} CI "
        "(1 - 2 alpha); sensitive = one-sided t test (paired by seed where the seeds match) "
        f"p < alpha, insensitive = within ±{method.margin} by TOST, both Holm-adjusted over "
        f"the rows; {alpha_text(method)}."
        + " One pre-specified contrast per row: fewer comparisons than the convergence "
        "table's, so a smaller difference can be decided here."
        + UNADJUSTED.format(margin=method.margin)
        + narrow(left_out)
    )


def cost_caption(table: pd.DataFrame, method: Method, left_out: tuple[str, ...] = ()) -> str:
    """The cost table's caption: what each column measures, and how its verdict is reached."""
    from normbench.report.cost import EQUIVALENT_RATIO, LOAD_SPREAD

    against = "the reference group" if table.attrs.get("against") == "reference" else "the fastest"
    return (
        "Cost: FLOPs per step = matrix products, convolutions and attention of one step's "
        "forward and backward (elementwise work, the norms' own included, excluded); saved = "
        "bytes saved for backward in one step; peak = CUDA peak allocated memory; step = "
        "geometric mean of the seeds' median step times [95% CI]; ex/s = examples per second. "
        f"vs {against}: step-time ratio, paired by seed [{ci_percent(method)} CI]; faster or "
        "slower = two-sided t test on the log ratios, equivalent = within "
        f"{EQUIVALENT_RATIO}x by TOST, both Holm-adjusted; {alpha_text(method)}. Only runs on "
        f"one host whose load per CPU (1-minute load average over CPUs) lies within "
        f"{LOAD_SPREAD} of each other are compared; otherwise 'not compared' says why."
        + to_target_caption(table, method)
        + narrow(left_out)
    )


def to_target_caption(table: pd.DataFrame, method: Method) -> str:
    """The cost table's time and FLOPs to target, said (normbench.report.cost_target): the
    target and where it came from, and how the ratios' intervals are computed."""
    if "target" not in table:
        return ""
    origin = table.attrs.get("target_origin", "--target")
    target = table.attrs.get("target", math.nan)
    return (
        f" to target = training time (evaluation excluded) until the first logged evaluation "
        f"reaching {target:.4g} ({origin}; no interpolation), geometric "
        "mean over seeds [95% CI]; 'not reached k/n': k of n seeds never reached it (censored:"
        " no time and no ratio is given); FLOPs to target = that step times FLOPs per step; "
        "time and FLOPs vs the reference: ratio paired by seed (Welch where seeds differ) "
        f"[{ci_percent(method)} CI], intervals only, no verdict; a time ratio only where the "
        "step times compare."
    )


def precision_caption(
    section: Section, method: Method, left_out: tuple[str, ...] = (), clipped: bool = False
) -> str:
    return (
        f"Precision: mean {section.metric.label} per precision ± 95% CI (div = diverged runs "
        f"of all runs); vs fp32: the change ± its {ci_percent(method)} CI (1 - 2 alpha), "
        "worse = one-sided t test (paired by seed where the seeds match) p < alpha, "
        f"equivalent = within ±{method.margin} by TOST, both Holm-adjusted over every cell; "
        f"{alpha_text(method)}."
        + UNADJUSTED.format(margin=method.margin)
        + (CLIPPED if clipped else "")
        + narrow(left_out)
    )


def stability_caption(section: Section, axis: str, loss: str | None = None) -> str:
    """A stability table's caption."""
    return _stability_caption(section, axis, loss)


def _stability_caption(section: Section, axis: str, loss: str | None) -> str:
    what = "learning rate" if axis == "train.lr" else "depth"
    sensitivity = (
        f" LR sens. = Wortsman et al.'s LR sensitivity in final {loss.replace('_', ' ')}: per "
        "seed, the mean over the learning rates every row was tried at (at least two, else "
        "-) of the loss (capped at the loss at "
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
        f"largest = the largest {what} at which every seed trained, with the metric there "
        f"(≥: no {what} tried failed, so the limit is above it)." + sensitivity
    )


def diagnostics_caption(when: str) -> str:
    """A diagnostics table's caption; ``when``: DIAGNOSTICS_WHEN's words for its step."""
    return (
        f"Diagnostics {when} (mean over seeds): gradient norm of each unit's sublayer "
        "weights, activation std into and out of its norm, RMS of the residual stream it "
        "leaves, its largest attention logit (q.k/sqrt(d) after QK-norm, before the softmax), "
        "the mean log Z of the output logits (one per run: the same in every row), train-mode "
        "minus eval-mode val accuracy (batch-statistics norms), SwitchNorm weights IN/LN/BN. "
        "Compare units of one sublayer type: layer counts them."
    )


def table_loss(table: pd.DataFrame) -> str | None:
    """The loss a stability table's LR sensitivity is in; None when it has none (depth)."""
    return table["lr_sensitivity_loss"].iloc[0] if "lr_sensitivity" in table else None


def batch_sizes(table: pd.DataFrame) -> list[int]:
    return sorted(int(c[1:-5]) for c in table.columns if c.startswith("b") and c.endswith("_mean"))


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
