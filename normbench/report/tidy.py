"""The report as tidy tables (one row per group, the section's setting keys as columns,
numbers as numbers): CSV and JSON, and the text each --format writes (markdown from
normbench.report.markdown).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd

from normbench.core.errors import UsageError
from normbench.report.base import Report
from normbench.report.markdown import markdown
from normbench.report.text import JSON_ONLY, TABLES, check_table


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
    with warnings.catch_warnings():
        # pandas 2.1-2.3 warn that a column all NA in one section (a diverged group's scores)
        # will one day count towards the dtype: the values are the same either way
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)
        frame = pd.concat(frames, ignore_index=True)
    return frame[setting + [c for c in frame.columns if c not in setting]]


def chosen_tables(report: Report, only: str | None) -> dict[str, pd.DataFrame]:
    """The tables this report has (or the one ``--table`` names, refused when absent)."""
    present = {name: t for name in TABLES if (t := tidy(report, name)) is not None}
    if report.scaling is not None:
        scaling = report.scaling
        present = {"scaling": scaling.table, "scaling_rungs": scaling.rungs, **present}
    if report.across is not None:
        present = {"across": report.across.table, **present}
    check_table(report, only)
    if only is None:
        return present
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
    if report.scaling is not None and only in (None, "scaling", "scaling_rungs"):
        payload["scaling_method"] = scaling_method(report)
    payload.update(
        sections=section_records(report),
        method={
            "alpha": report.method.alpha,
            "margin": report.method.margin,
            "diverged": report.method.diverged,
            "looks": len(report.method.fractions) or 1,
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


def scaling_method(report: Report) -> dict:
    """How the scaling section was computed (JSON's ``scaling_method``)."""
    from normbench.report import scaling
    from normbench.report.scaling_section import caption

    result = report.scaling
    return {
        "key": result.key,
        "loss": result.loss,
        "count": result.count,
        "compute": (
            "6 N D: N the count named, D = steps x batch_size x tokens per example "
            "(normbench.experiment.budget.positions, the ladder plan's rule)"
        ),
        "bootstrap": scaling.BOOTSTRAP,
        "ci_level": 1 - 2 * report.method.level,
        "trend_margin": scaling.TREND_MARGIN,
        "trend_alpha": report.method.level,
        "trend_min_rungs": scaling.MIN_TREND_RUNGS,
        "extrapolated": list(scaling.EXTRAPOLATED),
        "window": scaling.WINDOW,
        "reference_named": result.named,
        "notes": result.notes,
        "caption": caption(result, report.method),
    }


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


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
