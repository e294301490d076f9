"""A registered claim tested as its own family, and the label rule that reads it.

Each comparison of the claim is a paired difference, group minus reference, oriented so that
higher is better (normbench.report.stats.difference), and is tested twice, one-sided, by the
outcome the claim predicts (t = the difference's distance to the boundary over its se):

- *better*: for, H0 diff <= 0; against, H0 diff >= +margin (shown to gain less than matters);
- *worse*: for, H0 diff >= 0; against, H0 diff <= -margin (shown to lose less than matters);
- *not worse* (non-inferiority): for, H0 diff <= -margin; against, H0 diff >= -margin (shown
  worse by more than the margin), so that it can be refuted;
- *equivalent*: for, TOST within +-margin (Schuirmann 1987); against, H0 |diff| <= margin
  (either one-sided test beyond the margin, twice the smaller p).

Holm's correction runs over the claim's comparisons only, once over the *for* tests and once
over the *against* tests (Holm 1979). A comparison is decided against when its adjusted
*against* p is below alpha, for when its *for* p is, undecided otherwise. The label rule: *Not
reproduced* when one comparison is decided against; *Reproduced* when every one is decided for;
*Inconclusive* otherwise. So a false *Not reproduced* (the claim true at every margin's edge)
and a false *Reproduced* (one prediction false at its null's edge) each happen at most alpha of
the time (tests/studies/test_family.py simulates both).

A trend comparison (``scaling: KEY``: the group's gap to the reference along a ladder) is
decided by its trend verdict (normbench.report.scaling.trend_verdict, read from the scaling
report's row or a study's own measure): for when the verdict is the one predicted, against
when it is another of shrinking, growing or constant, undecided when inconclusive; the same
label rule reads it. Its error rate is the trend verdict's (at most alpha each way), with no
Holm step: a claim of one trend comparison is a family of one.

A claim registered after the earliest run it reads is shown *exploratory*, never labelled.
A claim registered before its runs but after a pilot of the same design
(normbench.studies.pilots) is labelled by the same rule under other words, *Pilot confirmed*
or *Pilot not confirmed* (or *Inconclusive*), never *Reproduced*: its registration fixed the
test, margin and seeds before fresh seeds were run, so the error rates hold for those runs,
but the prediction was written knowing the pilot's outcome, so a confirmation repeats the
project's own pilot rather than reproducing the claim independently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime

import pandas as pd

from normbench.report import scaling, stats
from normbench.report.base import Method
from normbench.report.labels import label
from normbench.report.results import metric_of, resolution, scored, seeded_results
from normbench.studies.pilots import pilot_of
from normbench.studies.registry import TRENDS, Claim, Comparison, Registration, registration

LABELS = {True: "Reproduced", False: "Not reproduced", None: "Inconclusive"}
PILOTED = {True: "Pilot confirmed", False: "Pilot not confirmed", None: "Inconclusive"}
EXPLORATORY = "Exploratory"
RULE = (
    "Label rule (registered with the claim): each comparison tested one-sided for and against "
    "its prediction, Holm within the claim's comparisons; *Reproduced*: every comparison decided "
    "for; *Not reproduced*: one decided against; *Inconclusive*: otherwise. A claim registered "
    "after its runs began is *exploratory*, never labelled; one registered after a pilot of "
    "the same design is *Pilot confirmed* or *Pilot not confirmed* (or *Inconclusive*), never "
    "*Reproduced*."
)


@dataclass(frozen=True)
class Tested:
    """One comparison's outcome: its paired difference (None: no test, ``why``), the
    Holm-adjusted p-values for and against the prediction, and the decision."""

    name: str
    predicted: str
    difference: stats.Difference | None
    p_for: float = math.nan
    p_against: float = math.nan
    decided: bool | None = None  # True: for, False: against, None: undecided
    why: str = ""
    censored: str = ""  # why a test was not made on censored values (``censor``)

    def text(self, alpha: float) -> str:
        """``name: predicted P, decided for|against|undecided (diff [90% CI], p ...)``."""
        found = {True: "decided for", False: "decided against", None: "undecided"}[self.decided]
        if self.difference is None:
            return f"{self.name}: predicted {self.predicted}, {found} ({self.why})"
        low, high = stats.interval(self.difference, alpha)
        tests = f"Holm p for {self.p_for:.2g}, against {self.p_against:.2g}"
        if self.censored:
            made = f"Holm p for {self.p_for:.2g}" if math.isfinite(self.p_for) else "no test"
            tests = f"{made}; {self.censored}"
        return (
            f"{self.name}: predicted {self.predicted}, {found} ({self.difference.diff:+.3g} "
            f"[{low:+.3g}, {high:+.3g}], {ci_level(alpha)} CI, {self.difference.how}; {tests})"
        )


def ci_level(alpha: float) -> str:
    return f"{100 * (1 - 2 * alpha):g}%"


def one_sided(d: stats.Difference, predicted: str, margin: float) -> tuple[float, float]:
    """The unadjusted p-values (for, against) of the module docstring's tests."""
    from scipy import special

    if not d.known_noise:
        return 1.0, 1.0

    def above(boundary: float) -> float:  # H0 diff <= boundary
        return float(special.stdtr(d.df, -(d.diff - boundary) / d.se))

    def below(boundary: float) -> float:  # H0 diff >= boundary
        return float(special.stdtr(d.df, (d.diff - boundary) / d.se))

    if predicted == "better":
        return above(0.0), below(margin)
    if predicted == "worse":
        return below(0.0), above(-margin)
    if predicted == "not worse":
        return above(-margin), below(-margin)
    if predicted != "equivalent":  # a trend is decided by the scaling report, not here
        raise ValueError(f"predicted {predicted!r}: not a paired comparison's prediction")
    outside = min(1.0, 2 * min(above(margin), below(-margin)))
    return stats.p_within(d, margin), outside


def decide_family(
    pairs: list[tuple[stats.Results, stats.Results]],
    predicted: list[str],
    names: list[str],
    margin: float,
    alpha: float,
    resolutions: list[float] | None = None,
) -> list[Tested]:
    """Each comparison (group, reference results, higher better) tested as the module says,
    Holm over this family only."""
    differences: list[stats.Difference | None] = []
    whys = []
    resolutions = resolutions or [0.0] * len(pairs)
    for (group, reference), step in zip(pairs, resolutions, strict=True):
        if len(group) < 2 or len(reference) < 2:
            differences.append(None)
            whys.append(f"{len(group)} result(s), the reference {len(reference)}; needs 2 each")
        else:
            differences.append(stats.difference(group, reference, step))
            whys.append("")
    raw = [
        (math.nan, math.nan) if d is None else one_sided(d, p, margin)
        for d, p in zip(differences, predicted, strict=True)
    ]
    p_for = stats.holm([r[0] for r in raw])
    p_against = stats.holm([r[1] for r in raw])
    tested = []
    for i, d in enumerate(differences):
        decided = None
        if d is not None and p_against[i] < alpha:
            decided = False
        elif d is not None and p_for[i] < alpha:
            decided = True
        tested.append(Tested(names[i], predicted[i], d, p_for[i], p_against[i], decided, whys[i]))
    return tested


def censor(tested: Tested, group: int, reference: int, bound: str) -> Tested:
    """A comparison on a measure capped at ``bound`` (a grid's top: a seed there has a lower
    bound, not a value), with ``group`` and ``reference`` seeds at the cap, higher better.
    A group's capped seeds make each difference a lower bound: the test *for* "better" stays
    valid (conservative), the test *against* cannot be made (the true difference may be
    larger), so the comparison is never decided against on them. A reference at the cap
    bounds its differences on neither side where the group is at the cap too, and a
    prediction other than *better* needs the side that is not bounded: no test."""
    if not group and not reference:
        return tested
    if reference or tested.predicted != "better":
        said = (
            f"no test: the reference at {bound}, the grid's top, in {reference} seed(s), the "
            f"group in {group}: their values are lower bounds, and the difference is not "
            f"bounded on the side a prediction of {tested.predicted} needs"
        )
        return replace(tested, p_for=math.nan, p_against=math.nan, decided=None, censored=said)
    said = (
        f"against not tested: the group at {bound}, the grid's top, in {group} seed(s), whose "
        "values are lower bounds (censored): the difference may be larger, so it can be "
        "decided for but not against"
    )
    decided = True if tested.decided else None
    return replace(tested, p_against=math.nan, decided=decided, censored=said)


def label_of(tested: list[Tested]) -> bool | None:
    """The label rule: False (Not reproduced), True (Reproduced), None (Inconclusive)."""
    decisions = [t.decided for t in tested]
    if False in decisions:
        return False
    return True if decisions and all(decisions) else None


# ------------------------------------------------------------------------ trend comparisons
def trend_tested(comparison: Comparison, trend: scaling.Trend | None, unit: str) -> Tested:
    """A trend comparison decided by its trend verdict (the module docstring); ``trend``: the
    verdict with its slope and interval (None: no trend computed), ``unit``: the slope's."""
    if trend is None:
        return Tested(comparison.name, comparison.predicted, None, why="no trend computed")
    decided = trend.verdict == comparison.predicted if trend.verdict in TRENDS else None
    slope = (
        f"slope {trend.slope:+.3g} [{trend.low:+.3g}, {trend.high:+.3g}] {unit}"
        if math.isfinite(trend.slope)
        else f"no slope: {trend.why or 'not computed'}"
    )
    why = f"trend {trend.verdict}, {slope} along {comparison.scaling}"
    return Tested(comparison.name, comparison.predicted, None, decided=decided, why=why)


def scaling_tested(claim: Claim, table: pd.DataFrame) -> list[Tested]:
    """Each trend comparison of ``claim`` read from a scaling report's group rows
    (normbench.report.scaling_section's ``table``): the row of the group its filters name
    against the reference its filters name (a filter matches a setting column, or a
    ``key=value`` word of the row's group name, ``.name`` dropped as the report drops it)."""
    tested = []
    for comparison in claim.comparisons:
        found = table[_names(table, comparison.group, "group")]
        found = found[_names(found, comparison.reference, "reference")]
        trend = None
        if len(found) == 1:
            row = found.iloc[0]
            slope = (row["trend_slope"], row["trend_ci_low"], row["trend_ci_high"])
            why = str(row.get("trend_why") or "")
            trend = scaling.Trend(*map(float, slope), verdict=str(row["trend"]), why=why)
        unit = "log10 compute multiplier per decade of compute"
        tested.append(trend_tested(comparison, trend, unit))
    return tested


def _names(table: pd.DataFrame, filters: tuple[str, ...], column: str) -> pd.Series:
    """The rows of a scaling table whose ``column`` (group or reference) every filter names."""
    mask = pd.Series(True, index=table.index)
    for item in filters:
        key, value = item.split("=", 1)
        if key in table.columns:
            mask &= table[key].map(label) == value
        else:
            word = f"{key.removesuffix('.name')}={value}"
            mask &= table[column].map(lambda name, w=word: w in str(name).split(" ")).astype(bool)
    return mask


# ------------------------------------------------------------------ the claim on its runs
def group_runs(runs: pd.DataFrame, filters: tuple[str, ...]) -> pd.DataFrame:
    """The runs matching every KEY=VALUE filter (values compared as report labels)."""
    mask = pd.Series(True, index=runs.index)
    for item in filters:
        key, value = item.split("=", 1)
        if key not in runs:
            return runs.iloc[:0]
        mask &= runs[key].map(label) == value
    return runs[mask]


def results_of(
    claim: Claim, runs: pd.DataFrame
) -> tuple[list[tuple[stats.Results, stats.Results]], list[float]]:
    """Per comparison, the group's and the reference's per-seed results on the claim's split,
    higher better (a diverged run at chance, as the report counts it), and the metric's
    resolution there; each comparison reads its own metric (a claim may span workloads)."""
    pairs, resolutions = [], []
    for comparison in claim.comparisons:
        group, reference = (group_runs(runs, f) for f in (comparison.group, comparison.reference))
        both = pd.concat([group, reference])
        if both.empty:
            pairs.append(({}, {}))
            resolutions.append(0.0)
            continue
        metric, test = metric_of(both), claim.split == "test"
        column = metric.test_column if test else metric.column
        pairs.append(
            tuple(
                scored(seeded_results(p, column, metric, Method()), metric)
                for p in (group, reference)
            )
        )
        resolutions.append(resolution(both, metric, test))
    return pairs, resolutions


def decide_claim(
    claim: Claim,
    pairs: list[tuple[stats.Results, stats.Results]],
    resolutions: list[float] | None = None,
) -> list[Tested]:
    """The claim's comparisons, decided as its own family."""
    return decide_family(
        pairs,
        [c.predicted for c in claim.comparisons],
        [c.name for c in claim.comparisons],
        claim.margin,
        claim.alpha,
        resolutions,
    )


def span(runs: pd.DataFrame) -> tuple[datetime | None, datetime | None]:
    """The earliest and latest start time (meta.json's ``started``) of the runs."""
    times = [parse_time(t) for t in runs.get("started", pd.Series(dtype=object))]
    times = [t for t in times if t is not None]
    return (min(times), max(times)) if times else (None, None)


def parse_time(value: object) -> datetime | None:
    """An ISO time with its zone (a time without one is no time here: it cannot be ordered
    against a commit's)."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def labelled(found: Registration, earliest: datetime | None) -> bool:
    """Whether a claim may be labelled: registered, and before the earliest run it reads."""
    return found.when is not None and earliest is not None and found.when < earliest


def order_text(found: Registration, runs: pd.DataFrame) -> str:
    """'registered at <commit, date>, runs from <date> to <date>'."""
    first, last = span(runs)
    when = (
        "no run with a start time"
        if first is None
        else f"runs from {first.isoformat(timespec='minutes')} to "
        f"{last.isoformat(timespec='minutes')}"
    )
    return f"{found.text()}, {when}"


def claim_lines(claim: Claim, runs: pd.DataFrame, tested: list[Tested] | None = None) -> str:
    """A claim's paragraph: its label (or *exploratory*), what it says and where from, its
    comparisons as tested, its registration and its runs' dates, its seeds and their power.
    ``tested``: the outcome of a study's own measure; by default the claim's metric on
    ``runs``."""
    if tested is None:
        tested = decide_claim(claim, *results_of(claim, runs))
    found = registration(claim.path)
    first, _ = span(runs)
    pilot = pilot_of(claim.id)
    words = PILOTED if pilot else LABELS
    word = words[label_of(tested)] if labelled(found, first) else EXPLORATORY
    comparisons = "; ".join(t.text(claim.alpha) for t in tested)
    trend = any(c.scaling for c in claim.comparisons)
    what = "at one rung, a stand-in: the trend's own power is not computed" if trend else ""
    return (
        f"**{word}.** {claim.source} (claim `{claim.id}`): {claim.says} {comparisons}. "
        f"Family: these {len(tested)} comparison(s), alpha {claim.alpha:g}, margin "
        f"{claim.margin:g}; {order_text(found, runs)}. Seeds: {claim.seeds} "
        f"registered, power {claim.power():.2f}{' ' + what if what else ''} for an effect of "
        f"{claim.effect:g} sd "
        f"({claim.basis})." + (f" {pilot_text(pilot)}" if pilot else "")
    )


def pilot_text(pilot: str) -> str:
    """What a registration written after a pilot of the same design does and does not
    guarantee (the module docstring)."""
    return (
        f"Registered after a pilot of the same design ({pilot}). What the registration "
        "guarantees: the measure, the test, the margin, the seeds and the label rule were "
        "fixed before these runs, on fresh seeds, so the error rates above hold for them. What "
        "it does not: the prediction and the grid were written knowing the pilot's outcome, so "
        "this repeats the project's own pilot; it is not an independent reproduction of the "
        "claim, and a grid chosen after the pilot may be one where the prediction could hardly "
        "fail."
    )
