"""The activation statistics of ``report --diagnostics`` as a table of their own, per group and
residual unit (normbench.training.activations records them): excess kurtosis and largest
|x| of each sublayer's output and of the residual stream each unit leaves, and the attention
sink. They are columns of the diagnostics table (normbench.report.diagnostics), which JSON,
CSV and the notebook API carry whole; here they get a table that fits 80 columns beside the
one that shows gradients and norm statistics.
"""

from __future__ import annotations

import pandas as pd

from normbench.report.table_layout import Column, fit, key_cells
from normbench.report.text import fmt, narrow
from normbench.store.rundir import ACTIVATION_DIAGNOSTICS


def has_activations(table: pd.DataFrame) -> bool:
    """Whether any run of a diagnostics table recorded activation statistics (runs diagnosed
    before normbench 0.6 have NaN there)."""
    present = [c for c in ACTIVATION_DIAGNOSTICS if c in table]
    return bool(present) and bool(table[present].notna().to_numpy().any())


def activations_caption(when: str) -> str:
    """The activation table's caption; ``when``: DIAGNOSTICS_WHEN's words for its step."""
    return (
        f"Activations {when} (mean over seeds), on a fixed evaluation batch (the first 64 "
        "validation samples, eval mode): excess kurtosis (Fisher's m4/m2^2 - 3 over each "
        "sample's values, averaged over samples; 0 for a Gaussian) and largest |x| of the "
        "sublayer's output (out) and of the residual stream the unit leaves (stream); sink: "
        "the attention weight on the first token, averaged over heads and queries after the "
        "first. docs/diagnostics.md says how each is computed."
    )


def activations_rich(table: pd.DataFrame, keys: list[str], when: str, width: int | None = None):
    """Per unit: its sublayer type and place among units of that type, then kurtosis and
    largest |x| of its output and of the stream it leaves, and its attention sink. At a
    narrow ``width`` the sink gives way first when no unit has one (the CNN), then the layer,
    the sink and the stream's kurtosis and largest |x|; the output's always stay."""
    rows = [row for _, row in table.iterrows()]

    def numbers(column: str, digits: int) -> list[str]:
        return [fmt(float(r[column]), digits) for r in rows]

    columns = [
        *key_cells(keys, table),
        Column("unit", [str(r["unit"]) for r in rows]),
        Column("sublayer", [r["sublayer"] for r in rows], justify="left"),
        Column("layer", [str(r["layer"]) for r in rows]),
        Column("kurt out", numbers("sublayer_kurtosis", 2)),
        Column("max|out|", numbers("sublayer_max_abs", 2)),
        Column("kurt stream", numbers("resid_kurtosis", 2)),
        Column("max|stream|", numbers("resid_max_abs", 2)),
        Column("sink", numbers("attn_sink", 3)),
    ]
    empty = ["sink"] if table["attn_sink"].isna().all() else []
    optional = [*empty, "layer", "sink", "kurt stream", "max|stream|"]
    return fit(
        columns,
        list(dict.fromkeys(optional)),
        width,
        lambda left_out: activations_caption(when) + narrow(left_out),
    )
