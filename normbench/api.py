"""normbench's public API. Names here keep their meaning across versions; the rest of normbench
may change (docs/design.md lists them).

Configs and models:

- ``compose(overrides)``: the validated, resolved config of one run, as ``normbench run
  --cfg`` shows it (a plain dict); bad input raises ``UsageError`` with the CLI's one line.
- ``build_model(overrides)``: the model exactly as ``normbench run`` builds it at that seed,
  before training. Two configs that differ in the norm share every other initial weight.

Your norm: ``Norm(num_features, layout, **options)``, an ``nn.Module`` whose
``forward(x, mask=None, cond=None)`` takes channels (N, C, *S) or tokens (N, T, D) with a
padding mask (N, T), True at real tokens, and returns x's shape and dtype. Subclass ``Norm``
to have your statistics computed in float32 under bf16/fp16 autocast (override
``normalize(x, mask, cond)``); ``masked_moments`` and ``feature_view`` are the helpers the
shipped norms use. ``normbench check-norm`` tells whether a norm keeps the contract.

Your model: ``build(cfg, make_norm, input_shape, num_classes, **your_keys)`` returns an
``nn.Module`` with ``forward(x, mask=None) -> logits (N, num_classes)``. ``make_norm(width,
layout)`` builds the run's norm (``NormFactory``); ``ResidualUnit`` places it around any
sublayer as the run's placement (``cfg["placement"]["name"]``, one of ``PLACEMENTS``) says.
``make_norm`` here is the other spelling, a shipped norm by name:
``make_norm("groupnorm", 64, "channels", groups=8)``. The placements ``lns`` and ``mix``
need each unit's block: ``ResidualUnit(..., layer=l, layers=L)`` (l from 1), and mix its
``post_fraction=cfg["placement"]["post_fraction"]``.

Your attention: ``QKNorm(head_dim, "layernorm" | "rmsnorm")`` is QK-norm as normbench's
Transformer applies it (``q, k = qk_norm(q, k)`` on (N, heads, T, head_dim), before the
dot product); give your builder a ``qk_norm: str = "none"`` parameter and it becomes the
``model.qk_norm`` key. A sublayer with a method ``largest_logit(x, mask=None) -> float``
has its largest attention logit recorded by ``diagnostics=true``; ``max_attention_logit(q,
k, mask, causal)`` computes it from queries and keys.

Runs as pandas DataFrames (for a notebook; docs/notebook.md). Each takes a runs directory and
filters in the command line's grammar (``runs(".", "norm=batchnorm,groupnorm", "seed=0")``;
as on the command line, a first argument with ``=`` is a filter of ``./runs``); a bad filter
raises ``UsageError`` with the CLI's one line; runs skipped as unreadable are warnings.

- ``runs(runs_dir="runs", *filters, sweep=None, tag=None)``: one row per run: ``run_id``,
  ``status``, every config key that varies among them (``norm.name``, ...), ``seed``, the
  summary metrics (``final_val_acc``, ``wall_s``, ...), ``code_hash`` and ``tags``.
- ``metrics(...)``: the same runs' metrics.parquet in long format: one row per run and logged
  step, with ``run_id``, the varying keys and ``seed`` in front.
- ``diagnostics(...)``: the diagnosed runs' diagnostics.parquet (``diagnostics=true``) in long
  format: one row per run, diagnosed step and residual unit (kurtosis, largest activation,
  attention sink, gradient norms, ...), with ``run_id``, the varying keys and ``seed`` in front.
- ``report(runs_dir="runs", *filters, **options)``: the tables of ``normbench report --format
  json`` by name (``convergence``, ``batch_sensitivity``, ...) and ``sections``; the options are
  the report's flags (``REPORT_OPTIONS``: ``alpha=0.1``, ``by="norm.name"``, ``sweep=...``).
- ``learning_curves(runs_dir="runs", *filters, x=None, **options)``: the report's learning-curve
  figure of each section (matplotlib Figures).

Names are imported when first used, so ``import normbench.api`` does not import torch until a
name that needs it is asked for; the DataFrame functions never do.
"""

from __future__ import annotations

import importlib
import math
import numbers
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.core.errors import StoreError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure
    from torch import nn

    from normbench.report.pipeline import Built

# name -> the module that defines it (imported on first use)
_LAZY = {
    "LAYOUTS": "normbench.layers.norms",
    "Norm": "normbench.layers.norms",
    "NormFactory": "normbench.layers.norms",
    "feature_view": "normbench.layers.norms",
    "make_norm": "normbench.layers.norms",
    "masked_moments": "normbench.layers.norms",
    "NEEDS_FINAL_NORM": "normbench.layers.models",
    "PLACEMENTS": "normbench.layers.models",
    "QKNorm": "normbench.layers.models",
    "ResidualUnit": "normbench.layers.models",
    "final_norm": "normbench.layers.models",
    "max_attention_logit": "normbench.layers.models",
}

__all__ = [
    "REPORT_OPTIONS",
    "StoreError",
    "UsageError",
    "build_model",
    "compose",
    "diagnostics",
    "learning_curves",
    "metrics",
    "report",
    "runs",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'normbench.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def compose(overrides: Iterable[str] = ()) -> dict:
    """The resolved config of one run, validated (and its plugins probed) as ``normbench run``
    does; a ``UsageError`` carries the CLI's one-line message."""
    from normbench.experiment.probe import compose_checked

    return compose_checked(list(overrides))


def build_model(overrides: Iterable[str] = ()) -> nn.Module:
    """The model ``normbench run OVERRIDES`` trains, as it is before the first step: built at
    the run's seed (``seed=``, default 0) for its data's shape, on the CPU, in training mode.
    The caller's torch random state is left as it was."""
    import torch

    from normbench.data.datasets import describe
    from normbench.layers.models import seeded_model

    cfg = compose(overrides)
    data = describe(cfg["data"])
    with torch.random.fork_rng(devices=[]):
        return seeded_model(cfg, data.input_shape, data.num_classes, data.vocab_size)


# ------------------------------------------------------------------------------ runs as data
def runs(
    runs_dir: str | Path = "runs", *filters: str, sweep: str | None = None, tag: str | None = None
) -> pd.DataFrame:
    """One row per run (sorted by run id): run id, status, the config keys that vary among
    the runs, the seed, the summary metrics, the code fingerprint and the tags. ``sweep``:
    only the runs of that sweep's latest record (``a,b``: several); ``tag``: only runs with it.
    """
    from normbench.store.catalog import SUMMARY_FIELDS

    _, table, keys = _selected(runs_dir, filters, sweep, tag)
    return table.reindex(
        columns=["run_id", "status", *keys, "seed", *SUMMARY_FIELDS, "code_hash", "tags"]
    )


def metrics(
    runs_dir: str | Path = "runs", *filters: str, sweep: str | None = None, tag: str | None = None
) -> pd.DataFrame:
    """The runs' metrics.parquet in long format, one row per run and logged step: run id, the
    config keys that vary, the seed, then ``step``, ``epoch``, ``samples``, ``elapsed_s``,
    ``lr``, ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``, ``val_bpb``, ``grad_norm``
    (NaN where a step did not log a column: validation between evaluations). A run that has
    logged nothing yet has no rows; one whose file is refused is a warning."""
    import pandas as pd

    from normbench.store.reading import unreadable
    from normbench.store.rundir import METRIC_COLUMNS, RunDir

    where, table, keys = _selected(runs_dir, filters, sweep, tag)
    # a config key named like a metric column (a plugin's top-level `step`) is `config.step`:
    # it must not overwrite the logged values
    renamed = {k: f"config.{k}" for k in keys if k in METRIC_COLUMNS}
    table = table.rename(columns=renamed)
    front = ["run_id", *(renamed.get(k, k) for k in keys), "seed"]
    frames = []
    for run in table.reindex(columns=front).to_dict("records"):
        try:
            logged = RunDir(where, run["run_id"]).read_metrics()
        except FileNotFoundError:
            continue
        except (OSError, StoreError) as err:
            warnings.warn(f"skipped {run['run_id']}: {unreadable(err)}", stacklevel=2)
            continue
        frames.append(logged.reindex(columns=list(METRIC_COLUMNS)).assign(**run))
    columns = [*front, *METRIC_COLUMNS]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def diagnostics(
    runs_dir: str | Path = "runs", *filters: str, sweep: str | None = None, tag: str | None = None
) -> pd.DataFrame:
    """The runs' diagnostics.parquet (``diagnostics=true``) in long format, one row per run,
    diagnosed step (0: initialisation) and residual unit: run id, the config keys that vary,
    the seed, then ``DIAGNOSTICS_COLUMNS`` (``step``, ``unit``, ``sublayer``, ``grad_norm``,
    ..., the activation statistics ``resid_kurtosis``, ``resid_max_abs``,
    ``sublayer_kurtosis``, ``sublayer_max_abs``, ``attn_sink``; docs/diagnostics.md), NaN
    where a run diagnosed by an older normbench did not record a column. A run trained
    without diagnostics has no rows; one whose file is refused is a warning."""
    import pandas as pd

    from normbench.core.files import read_parquet
    from normbench.report.diagnostics import MAX_DIAGNOSTIC_ROWS, UNIVERSAL
    from normbench.store.reading import unreadable
    from normbench.store.rundir import DIAGNOSTICS_COLUMNS, MAX_BYTES

    where, table, keys = _selected(runs_dir, filters, sweep, tag)
    renamed = {k: f"config.{k}" for k in keys if k in DIAGNOSTICS_COLUMNS}
    table = table.rename(columns=renamed)
    front = ["run_id", *(renamed.get(k, k) for k in keys), "seed"]
    frames = []
    for run in table.reindex(columns=front).to_dict("records"):
        try:
            recorded = read_parquet(
                where / run["run_id"] / "diagnostics.parquet",
                MAX_BYTES["diagnostics.parquet"],
                MAX_DIAGNOSTIC_ROWS,
                numeric=tuple(c for c in DIAGNOSTICS_COLUMNS if c != "sublayer"),
                required=UNIVERSAL,
                root=where,
            )
        except FileNotFoundError:
            continue
        except (OSError, StoreError) as err:
            warnings.warn(f"skipped {run['run_id']}: {unreadable(err)}", stacklevel=2)
            continue
        frames.append(recorded.reindex(columns=list(DIAGNOSTICS_COLUMNS)).assign(**run))
    columns = [*front, *DIAGNOSTICS_COLUMNS]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


@dataclass(frozen=True)
class ReportOption:
    """A keyword of ``report``: the ``normbench report`` flag it stands for, and the step of
    the command that takes it (``select``: catalog.select_runs, ``method``:
    report.base.Method.from_options, ``build``: report.sections.build, ``across``:
    report.across.across, ``scaling``: report.scaling_section.build, ``cost``:
    report.cost_target.attach_to_target, ``output``: diagnostics and ``--table``), under which
    parameter name, with which default."""

    flag: str
    step: str
    parameter: str
    default: Any = None
    parse: Callable[[Any], Any] | None = None  # a value as the command line's parsing makes it


def _number(name: str) -> Callable[[Any], float]:
    """A number keyword (``margin=0.02``), refused in one line as the flag would be."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UsageError(f"report option {name}={value!r}: valid: a number")
        return value

    return parse


def _integer(name: str) -> Callable[[Any], int]:
    """An integer keyword (``reference_batch=32``)."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise UsageError(f"report option {name}={value!r}: valid: an integer")
        return value

    return parse


def _finite(name: str) -> Callable[[Any], float]:
    """A finite number keyword (``target=0.9``), refused in one line as the flag would be."""
    number = _number(name)

    def parse(value: Any) -> float:
        if not math.isfinite(number(value)):
            raise UsageError(
                f"report option {name}={value!r}: valid: a finite value of the section's metric"
            )
        return value

    return parse


def _comma_list(value: str | list[str]) -> list[str]:
    return value.split(",") if isinstance(value, str) else list(value)


def _space_list(value: str | list[str]) -> list[str]:
    """``reference="norm=layernorm placement=pre"`` or a list, as repeated flags give."""
    return value.split() if isinstance(value, str) else list(value)


# report()'s keywords: one line per flag of `normbench report` that changes what it computes
# (--format, --out, --plots, --html and --x change only how it is shown).
REPORT_OPTIONS = {
    "sweep": ReportOption("--sweep", "select", "sweep"),
    "tag": ReportOption("--tag", "select", "tag"),
    "alpha": ReportOption("--alpha", "method", "alpha", 0.05, parse=_number("alpha")),
    "margin": ReportOption("--margin", "method", "margin", 0.01, parse=_number("margin")),
    "reference": ReportOption("--reference", "method", "reference", (), parse=_space_list),
    "reference_batch": ReportOption(
        "--reference-batch", "method", "reference_batch", parse=_integer("reference_batch")
    ),
    "diverged": ReportOption("--diverged", "method", "diverged", "chance"),
    "by": ReportOption("--by", "build", "by", parse=_comma_list),
    "best_over": ReportOption("--best-over", "build", "best_over_key"),
    "across": ReportOption("--across", "across", "keys", parse=_comma_list),
    "profile": ReportOption("--profile", "across", "profile_x", "steps"),
    "scaling": ReportOption("--scaling", "scaling", "key"),
    "diagnostics": ReportOption("--diagnostics", "output", "diagnostics", False),
    "table": ReportOption("--table", "output", "only"),
    "target": ReportOption("--target", "cost", "target", parse=_finite("target")),
}


def report(runs_dir: str | Path = "runs", *filters: str, **options: Any) -> dict[str, pd.DataFrame]:
    """The tables ``normbench report RUNS_DIR FILTERS --format json`` computes, as DataFrames
    by name (those this selection has, or the one ``table=`` names), and ``sections``: per
    section its setting, fixed keys, grouping keys, metric and notes. ``options`` are the
    report's flags by name (``REPORT_OPTIONS``; ``by`` takes ``"a,b"`` or a list); an unknown
    one raises ``UsageError`` listing them."""
    import pandas as pd

    from normbench.report.tidy import chosen_tables, section_records

    built, _, output = _report(runs_dir, filters, options)
    result, tuned = built.report, built.tuning
    if tuned and output["only"] == "tuning":
        return {"tuning": tuned.table}
    tables = chosen_tables(result, output["only"])
    extra = {"tuning": tuned.table} if tuned else {}
    return {**extra, **tables, "sections": pd.DataFrame(section_records(result))}


def learning_curves(
    runs_dir: str | Path = "runs", *filters: str, x: str | None = None, **options: Any
) -> list[Figure]:
    """The report's learning curves, one matplotlib Figure per section (``normbench report
    --plots``' learning_curves PNGs): training loss and the validation metric against
    ``x`` (steps, samples, epochs or time), mean and band over seeds per group. ``options``
    as for ``report``."""
    from normbench.report.plots import check_x
    from normbench.report.plots import learning_curves as draw

    check_x(x)
    built, where, _ = _report(runs_dir, filters, options)
    figures = [draw(section, where, x) for section in built.report.sections]
    return [figure for figure in figures if figure is not None]


def _where(runs_dir: str | Path, filters: Iterable[str]) -> tuple[Path, list[str]]:
    """The command line's grammar, [RUNS_DIR] [FILTER ...]: a first argument with ``=`` is a
    filter, of ./runs."""
    if isinstance(runs_dir, str) and "=" in runs_dir:
        return Path("runs"), [runs_dir, *filters]
    return Path(runs_dir), list(filters)


def _warn(messages: list[str]) -> None:
    """The selection's warnings (runs skipped as unreadable), attributed to the caller of
    runs, metrics, report or learning_curves."""
    for message in messages:
        warnings.warn(message, stacklevel=4)


def _selected(
    runs_dir: str | Path, filters: Iterable[str], sweep: str | None, tag: str | None
) -> tuple[Path, pd.DataFrame, list[str]]:
    """The runs directory, the selected runs sorted by id, and the config keys that vary among
    them; a column no run lacks gets its values' dtype (int64 seeds), others keep None."""
    from normbench.report.grouping import varying_keys
    from normbench.store.catalog import select_runs

    where, filters = _where(runs_dir, filters)
    selection, _, _ = select_runs(where, filters, sweep, tag)
    _warn(selection.warnings)
    table = selection.runs
    if table.empty:
        return where, table, []
    table = table.sort_values("run_id", ignore_index=True)
    keys = varying_keys(table)
    for key in ("run_id", "status", *keys, "seed"):
        if table[key].notna().all():
            table[key] = table[key].infer_objects()
    return where, table, keys


def _report(
    runs_dir: str | Path, filters: Iterable[str], options: dict[str, Any]
) -> tuple[Built, Path, dict[str, Any]]:
    """The report ``normbench report`` builds for these options (the same pipeline,
    normbench.report.pipeline), its runs directory, and the output options (``diagnostics``,
    ``only``). Warnings are raised as Python warnings, attributed to the caller."""
    from normbench.core.suggest import did_you_mean
    from normbench.report.base import Method
    from normbench.report.pipeline import Request, build_report
    from normbench.report.text import check_table_name

    unknown = sorted(set(options) - set(REPORT_OPTIONS))
    if unknown:
        raise UsageError(
            f"report option {unknown[0]}: not an option of normbench report"
            f"{did_you_mean(unknown[0], REPORT_OPTIONS)}; valid: " + ", ".join(REPORT_OPTIONS)
        )
    check_table_name(options.get("table"))
    steps: dict[str, dict[str, Any]] = {
        "select": {},
        "method": {},
        "build": {},
        "across": {},
        "scaling": {},
        "cost": {},
        "output": {},
    }
    for name, option in REPORT_OPTIONS.items():
        value = options.get(name, option.default)
        if value is not None and option.parse is not None:
            value = option.parse(value)
        steps[option.step][option.parameter] = value
    if options.get("profile") is not None and not steps["across"]["keys"]:
        raise UsageError(
            f"--profile {options['profile']}: for the table across workloads; add --across"
        )
    where, filters = _where(runs_dir, filters)
    request = Request(
        where,
        tuple(filters),
        steps["select"]["sweep"],
        steps["select"]["tag"],
        by=tuple(steps["build"]["by"] or ()),
        best_over=steps["build"]["best_over_key"],
        method=Method.from_options(**steps["method"]),
        across=tuple(steps["across"]["keys"] or ()),
        profile=steps["across"]["profile_x"],
        diagnostics=steps["output"]["diagnostics"],
        scaling=steps["scaling"]["key"],
        target=steps["cost"]["target"],
        to_target=steps["output"]["only"] in (None, "cost"),
    )
    messages: list[str] = []  # runs skipped, a tuned comparison's notes: raised as warnings

    def keep(message: str, kind: str) -> None:
        if kind in ("selection", "tuning"):
            messages.append(message)

    built = build_report(request, warn=keep)
    _warn(messages)
    return built, where, steps["output"]
