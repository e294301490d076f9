"""The report's domain: the metric a section's verdicts are about, the method (alpha, margin,
reference, looks) they are reached by, a section and a report. Every question module, renderer,
study and sweep speaks in these; how runs become labels, groups and results is kept beside them
(normbench.report.labels, normbench.report.grouping, normbench.report.results), so that a
reader of the types meets no pandas arithmetic.

The question modules (convergence, batch, precision, stability, diagnostics) compute their
tables from grouped runs through normbench.report.stats; normbench.report.sections puts the
tables into sections; the renderers (terminal, markdown, tidy, html) turn them into text.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normbench.core.errors import UsageError
from normbench.experiment.compose import parse_overrides
from normbench.report import sequential

LEARNED_MARGIN = 0.05  # a final metric within 5% of chance counts as chance (Metric.learned)


@dataclass(frozen=True)
class Metric:
    """The number a section's verdicts are about."""

    name: str  # val_acc | val_bpb
    higher_is_better: bool

    @property
    def column(self) -> str:
        return f"final_{self.name}"

    @property
    def test_column(self) -> str:
        return self.name.replace("val_", "test_")

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    def chance(self, num_classes: float) -> float:
        """The metric of a model that learned nothing: accuracy 1/classes; bits per symbol
        of the uniform prediction, log2(classes)."""
        return 1 / num_classes if self.higher_is_better else math.log2(num_classes)

    def learned(self, value: float | np.ndarray, chance: float | np.ndarray) -> bool | np.ndarray:
        """Whether a final metric is clear of chance: by 5% of the way from chance to perfect
        for accuracy (1.0), by 5% of chance for bits per byte (perfect is 0). Numbers or
        arrays of them."""
        if self.higher_is_better:
            return value >= chance + LEARNED_MARGIN * (1 - chance)
        return value <= (1 - LEARNED_MARGIN) * chance

    def score(self, values: np.ndarray) -> np.ndarray:
        """Values oriented so that higher is better (what normbench.report.stats expects)."""
        return values if self.higher_is_better else -values


ACCURACY = Metric("val_acc", higher_is_better=True)
BITS_PER_BYTE = Metric("val_bpb", higher_is_better=False)


@dataclass(frozen=True)
class Method:
    """How verdicts are reached: error rate, margin, diverged runs, the reference, repeated
    looks."""

    alpha: float = 0.05
    margin: float = 0.01
    diverged: str = "chance"  # chance | exclude
    reference_batch: int | None = None
    test: bool = False  # verdicts on the test split (set when --best-over chose on validation)
    reference: tuple[str, ...] = ()  # --reference KEY=VALUE ...: the group named before looking
    # where ``reference`` came from, as its errors name it: typed, or a sweep's record
    reference_origin: str = "--reference"
    # --until-decided: the information fraction of each look the design can take, the look
    # this report is, and how alpha was spent over them (normbench.report.sequential.SPENDING;
    # a record of an earlier version names its own: normbench.store.upgrade)
    fractions: tuple[float, ...] = ()
    look: int = 1
    spending: str = sequential.SPENDING

    @property
    def level(self) -> float:
        """The alpha of this look: alpha itself for a report of a fixed design."""
        if self.fractions:
            return sequential.look_alpha(self.alpha, self.fractions, self.look, self.spending)
        return self.alpha

    @property
    def sequential(self) -> bool:
        return bool(self.fractions)

    @classmethod
    def from_options(
        cls,
        alpha: float,
        margin: float,
        reference_batch: int | None = None,
        diverged: str = "chance",
        reference: list[str] | tuple[str, ...] = (),
    ) -> Method:
        """The report's options (``--alpha``, ``--margin``, ...), each refused in one line when
        out of range."""
        if not 0 < alpha < 0.5:
            raise UsageError(f"--alpha {alpha}: valid: a number strictly between 0 and 0.5")
        if not (margin > 0 and math.isfinite(margin)):
            raise UsageError(f"--margin {margin}: valid: a positive number (in the metric's units)")
        if reference_batch is not None and reference_batch < 1:
            raise UsageError(f"--reference-batch {reference_batch}: valid: a per-device batch >= 1")
        if diverged not in ("chance", "exclude"):
            raise UsageError(f"--diverged {diverged}: valid: chance, exclude")
        return cls(alpha, margin, diverged, reference_batch, reference=parse_reference(reference))

    def with_(self, **changes) -> Method:
        return dataclasses.replace(self, **changes)


def parse_reference(given: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``--reference norm=layernorm`` (repeatable, or several KEY=VALUE in one argument):
    each a plain KEY=VALUE in override syntax, one value per key."""
    items = [item for text in given for item in text.split()]
    if not items:  # Hydra's parser costs 0.3 s to import: not for the default report
        return ()
    for override in parse_overrides(items):
        if override.is_sweep_override() or override.is_delete() or override.is_add():
            raise UsageError(
                f"--reference {override.input_line}: one KEY=VALUE per key, naming one group "
                "(e.g. --reference norm=layernorm)"
            )
    keys = [item.split("=", 1)[0] for item in items]
    if len(set(keys)) < len(keys):
        raise UsageError(f"--reference {' '.join(items)}: a key is given twice")
    return tuple(items)


@dataclass
class Section:
    """The runs of one setting and their tables."""

    setting: dict[str, object]  # the setting keys that split the report (empty: one section)
    fixed: dict[str, object]  # headline keys constant over the section
    keys: list[str]  # grouping keys
    metric: Metric
    tables: dict[str, pd.DataFrame | None]
    notes: list[str] = field(default_factory=list)
    runs: pd.DataFrame | None = None


@dataclass
class Report:
    sections: list[Section]
    method: Method
    counts: dict[str, int]
    warnings: list[str]
    best_over: str | None = None
    across: object | None = None  # normbench.report.across.Across, with --across
    scaling: object | None = None  # normbench.report.scaling_section.Scaling, with --scaling
