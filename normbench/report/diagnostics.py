"""The diagnostics tables (`report --diagnostics`): per group and residual unit, gradient
norms, activation scales, logits, SwitchNorm weights and activation statistics (kurtosis,
largest |x|, attention sink) read from runs' diagnostics.parquet,
at initialisation and at the last evaluation; the per-sublayer depth helpers the studies use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from normbench.core.errors import StoreError, UsageError
from normbench.core.files import read_parquet
from normbench.core.text import plain
from normbench.report.base import Report
from normbench.report.labels import labels
from normbench.store.rundir import DIAGNOSTICS_COLUMNS, LATER_DIAGNOSTICS, MAX_BYTES

# The columns every diagnosed run has (the later ones are NaN for an older run).
UNIVERSAL = tuple(
    c for c in DIAGNOSTICS_COLUMNS if c not in (*LATER_DIAGNOSTICS, "depth", "in_mean", "out_mean")
)
MAX_DIAGNOSTIC_ROWS = 1_000_000


def diagnostics_table(
    runs: pd.DataFrame,
    keys: list[str],
    runs_dir: Path,
    at: str = "last",
    skipped: list[str] | None = None,
) -> pd.DataFrame | None:
    """Per group and residual unit, at each run's last diagnosed step (``at="last"``) or at
    initialisation (``at="first"``: step 0, the first batch before any update), averaged over
    seeds: the sublayer's gradient norm, the activation std entering and leaving the norm, the
    RMS of the residual stream the unit leaves, its largest attention logit, the mean log Z
    of the output logits (one per run and step: the same in every unit's row), the train-mode
    minus eval-mode validation accuracy (BatchNorm, SwitchNorm), SwitchNorm's mixing weights,
    and the activation statistics on the fixed evaluation batch (excess kurtosis and largest
    |x| of the stream the unit leaves and of its sublayer's output, the attention sink:
    normbench.training.activations); ``layer`` numbers the units of each sublayer type
    (attention, mlp, conv) so that depth profiles compare like with like. Runs diagnosed
    before normbench recorded the stream, logits and log Z (0.3) or the activation statistics
    (0.6) show NaN there. None when no selected run was trained with diagnostics=true. A
    diagnostics file that cannot be read (a FIFO, garbage, another kind of file) is left out
    and named in ``skipped``."""
    frames = []
    for rid in runs["run_id"]:
        try:
            frame = read_parquet(
                runs_dir / rid / "diagnostics.parquet",
                MAX_BYTES["diagnostics.parquet"],
                MAX_DIAGNOSTIC_ROWS,
                numeric=tuple(c for c in UNIVERSAL + LATER_DIAGNOSTICS if c != "sublayer"),
                required=UNIVERSAL,
                root=runs_dir,
            )
        except FileNotFoundError:
            continue  # trained without diagnostics=true
        except (OSError, StoreError) as err:
            if skipped is not None:
                reason = str(err) if isinstance(err, StoreError) else err.strerror
                skipped.append(f"diagnostics: skipped {rid}: {plain(str(reason))}")
            continue
        if frame.empty:
            continue
        frame = frame.assign(**{c: math.nan for c in LATER_DIAGNOSTICS if c not in frame})
        step = frame["step"].max() if at == "last" else frame["step"].min()
        frames.append(frame[frame["step"] == step].assign(run_id=rid))
    if not frames:
        return None
    labelled = runs[["run_id", *keys]].assign(**{k: labels(runs[k]) for k in keys})
    merged = pd.concat(frames).merge(labelled, on="run_id")
    merged["gap"] = merged["train_mode_val_acc"] - merged["eval_mode_val_acc"]
    columns = [
        "step",
        "grad_norm",
        "in_std",
        "out_std",
        *LATER_DIAGNOSTICS,
        "gap",
        "sn_mean_in",
        "sn_mean_ln",
        "sn_mean_bn",
        "sn_var_in",
        "sn_var_ln",
        "sn_var_bn",
    ]
    table = merged.groupby([*keys, "unit", "sublayer"], sort=True)[columns].mean().reset_index()
    table = table.assign(seeds=merged.groupby([*keys, "unit"]).size().to_numpy())
    return by_sublayer(table, keys)


def by_sublayer(frame: pd.DataFrame, keys: Sequence[str] = ("step",)) -> pd.DataFrame:
    """Diagnostics rows (one per unit) with each unit's place among the units of its own
    sublayer type: ``layer`` (0 for the first attention unit, the first MLP unit, ...) and
    ``layer_depth`` (0 to 1), within each group of ``keys`` (a step, a run, a report group)."""
    units = frame.groupby([*keys, "sublayer"])["unit"]
    layer = units.rank(method="dense").astype(int) - 1
    last = units.transform("nunique") - 1
    return frame.assign(layer=layer, layer_depth=layer / last.clip(lower=1))


def last_over_first(
    frame: pd.DataFrame, keys: Sequence[str] = ("step",), column: str = "grad_norm"
) -> pd.DataFrame:
    """Per group of ``keys`` and sublayer type, ``column`` of the deepest unit over that of the
    shallowest unit of the same type: Xiong et al.'s gradient growth over depth, like with
    like. One row per group and type, the ratio in ``{column}_last_over_first``."""
    ordered = frame.sort_values("unit").groupby([*keys, "sublayer"])[column]
    ratio = ordered.agg(lambda values: values.iloc[-1] / values.iloc[0])
    return ratio.rename(f"{column}_last_over_first").reset_index()


def attach_diagnostics(result: Report, runs_dir: Path) -> None:
    """``--diagnostics``: each section's diagnostics tables at initialisation and at the last
    evaluation; refused when no selected run recorded diagnostics. A run whose diagnostics
    could not be read is named in the report's warnings."""
    found, skipped = False, []
    for section in result.sections:
        for name, at in (("diagnostics_init", "first"), ("diagnostics", "last")):
            section.tables[name] = diagnostics_table(
                section.runs, section.keys, runs_dir, at, skipped if at == "last" else None
            )
        found = found or section.tables["diagnostics"] is not None
    result.warnings.extend(skipped)
    if not found:
        reason = f" that could be read ({len(skipped)} skipped)" if skipped else ""
        raise UsageError(
            f"--diagnostics: none of these runs was trained with diagnostics=true{reason}"
        )
