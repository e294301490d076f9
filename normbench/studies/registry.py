"""The claims findings test, as registered data: one YAML file per claim under
normbench/studies/registered/ (``<id>.yaml``), read here and nowhere written in Python.

One file per claim, not one file of all claims, so that git's history of a file is the history
of one claim: its registration is the commit that last changed its file (``registration``),
with no parsing of line ranges, and editing one claim never re-registers another.

A claim names its source, what it says, the study whose sweep it reads, the metric and split,
the margin, and its comparisons: each a group against a reference (setting filters,
``KEY=VALUE``) with the predicted outcome (better, worse, not worse, equivalent), or, with
``scaling: KEY`` (a ladder's size key), the trend of the group's gap to the reference along
that ladder (shrinking, growing, constant: normbench.studies.family reads it from the scaling
report's trend verdict, or a study's own measure's). A claim about one rung of a ladder is a
paired comparison whose filters name the rung (``data.train_samples=64000``). Its seed count
comes with the power calculation that justifies it (``power``): the effect the paper reports, in
standard deviations of the paired per-seed difference, and the power that count reaches.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path

import yaml

from normbench.core.errors import UsageError
from normbench.core.files import YAML_LIMIT, read_bytes

REGISTERED = Path(__file__).parent / "registered"
PREDICTED = ("better", "worse", "not worse", "equivalent")
TRENDS = ("shrinking", "growing", "constant")  # a trend comparison's (``scaling: KEY``)
SPLITS = ("val", "test")
FIELDS = {
    "source",
    "says",
    "study",
    "metric",
    "split",
    "margin",
    "alpha",
    "reference",
    "comparisons",
    "seeds",
    "power",
    "measure",
}
POWER_FIELDS = {"effect", "basis", "target"}


@dataclass(frozen=True)
class Comparison:
    """One comparison a claim makes: ``group`` against ``reference`` (filters KEY=VALUE on the
    study's runs, or group names of a study's own measure), and the outcome it predicts; with
    ``scaling`` (a ladder's size key) the trend of the group's gap to the reference along it."""

    name: str
    group: tuple[str, ...]
    reference: tuple[str, ...]
    predicted: str
    scaling: str = ""  # empty: a paired comparison; else a trend along this key (TRENDS)


@dataclass(frozen=True)
class Claim:
    """A registered claim (see the module's docstring); ``path``: its file."""

    id: str
    source: str
    says: str
    study: str
    metric: str  # accuracy | bpb | a study's own measure (``measure`` says what it is)
    split: str  # val | test
    margin: float
    alpha: float
    comparisons: tuple[Comparison, ...]
    seeds: int
    effect: float  # the effect the power calculation assumes, in sd of the paired difference
    basis: str  # where that effect comes from
    target: float  # the power the seed count must reach
    measure: str
    path: Path

    def power(self) -> float:
        """The power of each comparison at the registered seed count (``power``)."""
        return power(self.seeds, self.effect, self.alpha, len(self.comparisons), self.hardest())

    def hardest(self) -> str:
        """The hardest prediction to establish, for the power calculation: an equivalence
        needs both of its one-sided tests."""
        return "equivalent" if any(c.predicted == "equivalent" for c in self.comparisons) else ""

    def seeds_needed(self) -> int:
        """The fewest seeds whose power reaches ``target`` (2 at least: a paired t needs 2)."""
        return seeds_for(
            self.effect, self.alpha, len(self.comparisons), self.target, self.hardest()
        )

    def digest(self) -> str:
        """The claim's content hash (SHA-256 of its file's bytes): a sweep record keeps it when
        the study's sweep starts, so a later edit of the claim shows."""
        return hashlib.sha256(read_bytes(self.path, YAML_LIMIT)).hexdigest()[:16]


def power(n: int, effect: float, alpha: float, comparisons: int, predicted: str = "") -> float:
    """Power of a one-sided paired t test with ``n`` pairs at level alpha / comparisons (Holm's
    first step, Bonferroni's level: each comparison's power under Holm is at least this), when
    the true mean difference lies ``effect`` standard deviations of the per-seed differences
    beyond the null's boundary:

        power = 1 - F_nct(t_{1 - a, n - 1}; df = n - 1, nc = effect * sqrt(n))

    (the noncentral t, Cohen 1988 ch. 2; G*Power's "difference between two dependent means";
    scipy.stats.nct). An equivalence (TOST) needs both one-sided tests, each at that distance
    from its margin: its power is at least 1 - 2 (1 - power) (Bonferroni's inequality)."""
    from scipy import stats

    if n < 2:
        return 0.0
    level = alpha / comparisons
    critical = stats.t.ppf(1 - level, n - 1)
    one_sided = float(stats.nct.sf(critical, n - 1, effect * math.sqrt(n)))
    return max(0.0, 1 - 2 * (1 - one_sided)) if predicted == "equivalent" else one_sided


def seeds_for(effect: float, alpha: float, comparisons: int, target: float, predicted="") -> int:
    """The fewest seeds (2 to 1000) whose ``power`` reaches ``target``."""
    for n in range(2, 1001):
        if power(n, effect, alpha, comparisons, predicted) >= target:
            return n
    return 1000


# -------------------------------------------------------------------------------- reading
def _filters(value: object, where: str) -> tuple[str, ...]:
    """A group's filters: a list of KEY=VALUE strings (or one such string)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and "=" in i for i in items):
        raise UsageError(f"{where}: {value!r}: a list of KEY=VALUE filters")
    return tuple(items)


def _number(raw: dict, key: str, where: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(f"{where}: {key} {value!r}: a positive number")
    return float(value)


def read_claim(path: Path) -> Claim:
    """One claim file, checked: each error names the file, the key, the value and the valid
    choices."""
    where = f"{path.name}"
    try:
        raw = yaml.safe_load(read_bytes(path, YAML_LIMIT).decode())
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", "") or err).split())
        raise UsageError(
            f"{where}: not a YAML mapping ({problem}); quote a text with ': '"
        ) from None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: a mapping of {', '.join(sorted(FIELDS))}")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise UsageError(
            f"{where}: {unknown[0]}: not a claim's key; valid: {', '.join(sorted(FIELDS))}"
        )
    split = raw.get("split", "val")
    if split not in SPLITS:
        raise UsageError(f"{where}: split {split!r}: valid: {', '.join(SPLITS)}")
    default_reference = raw.get("reference")
    comparisons = []
    for index, item in enumerate(raw.get("comparisons") or []):
        at = f"{where}: comparisons[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise UsageError(f"{at}: a mapping with name, group, reference, predicted")
        scaling = item.get("scaling", "")
        if not isinstance(scaling, str) or (scaling and "=" in scaling):
            raise UsageError(f"{at}: scaling {scaling!r}: a ladder's size key, e.g. model.width")
        choices, of = (TRENDS, f" for a trend (scaling {scaling})") if scaling else (PREDICTED, "")
        if item.get("predicted") not in choices:
            raise UsageError(
                f"{at}: predicted {item.get('predicted')!r}: valid{of}: {', '.join(choices)}"
            )
        reference = item.get("reference", default_reference)
        comparisons.append(
            Comparison(
                item["name"],
                _filters(item.get("group"), f"{at}: group"),
                _filters(reference, f"{at}: reference"),
                item["predicted"],
                scaling,
            )
        )
    if not comparisons:
        raise UsageError(f"{where}: comparisons: at least one")
    trends = sum(bool(c.scaling) for c in comparisons)
    if trends and len(comparisons) > 1:  # a trend is decided alone: no Holm over trends
        raise UsageError(
            f"{where}: comparisons: {trends} trend(s) among {len(comparisons)}; valid: one "
            "trend comparison (scaling: KEY) alone, or paired comparisons only"
        )
    power_of = raw.get("power")
    if not isinstance(power_of, dict) or set(power_of) != POWER_FIELDS:
        raise UsageError(f"{where}: power: a mapping of {', '.join(sorted(POWER_FIELDS))}")
    seeds = raw.get("seeds")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise UsageError(f"{where}: seeds {seeds!r}: an integer, 2 or more")
    for key in ("source", "says", "study", "metric"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise UsageError(f"{where}: {key}: a non-empty text")
    return Claim(
        id=path.stem,
        source=raw["source"].strip(),
        says=" ".join(raw["says"].split()),
        study=raw["study"],
        metric=raw["metric"],
        split=split,
        margin=_number(raw, "margin", where),
        alpha=_number(raw, "alpha", where, 0.05),
        comparisons=tuple(comparisons),
        seeds=seeds,
        effect=_number(power_of, "effect", f"{where}: power"),
        basis=" ".join(str(power_of["basis"]).split()),
        target=_number(power_of, "target", f"{where}: power"),
        measure=" ".join(str(raw.get("measure", "")).split()),
        path=path,
    )


@cache
def claims(folder: Path = REGISTERED) -> dict[str, Claim]:
    """Every registered claim of ``folder``, by id."""
    return {path.stem: read_claim(path) for path in sorted(folder.glob("*.yaml"))}


def claim(claim_id: str, folder: Path = REGISTERED) -> Claim:
    found = claims(folder)
    if claim_id not in found:
        raise UsageError(f"claim {claim_id!r}: not registered; valid: {', '.join(found)}")
    return found[claim_id]


def of_study(study: str, folder: Path = REGISTERED) -> list[Claim]:
    return [c for c in claims(folder).values() if c.study == study]


def seeds_of(study: str, folder: Path = REGISTERED) -> int | None:
    """The seeds a study's sweep trains: the most any of its registered claims needs."""
    counts = [c.seeds for c in of_study(study, folder)]
    return max(counts) if counts else None


# --------------------------------------------------------------------------- registration
@dataclass(frozen=True)
class Registration:
    """When a claim was registered: the commit that last changed its file and that commit's
    time; none (``commit`` empty) outside a git checkout, for a file never committed, or one
    with uncommitted changes (``why`` says which)."""

    commit: str
    when: datetime | None
    why: str = ""

    def text(self) -> str:
        if self.when is None:
            return f"not registered ({self.why})"
        return f"registered at {self.commit[:7]}, {self.when.isoformat(timespec='minutes')}"


def registration(path: Path) -> Registration:
    """The commit that last changed ``path`` (git log -1), with its committer date: the time
    the claim's current text entered the history. Uncommitted changes count as no
    registration: what the findings would test is not what was registered."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=path.parent, capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise OSError(done.stderr.strip() or f"git {args[0]} failed")
        return done.stdout.strip()

    try:
        changed = git("status", "--porcelain", "--", path.name)
        last = git("log", "-1", "--format=%H %cI", "--", path.name)
    except (OSError, subprocess.SubprocessError) as err:
        return Registration("", None, f"no git history: {str(err).splitlines()[0][:80]}")
    if changed:
        return Registration("", None, "uncommitted changes to its file")
    if not last:
        return Registration("", None, "its file was never committed")
    commit, when = last.split(" ", 1)
    return Registration(commit, datetime.fromisoformat(when))
