"""A ladder's plan (normbench.sweeps.ladder runs it): one size axis (``model.width``,
``model.depth``, or the unique training data ``data.train_samples``) over two or more rungs,
each rung the preset's grid at that size with its step budget set by the budget rule, and
what each rung costs.

The budget rule: ``train.tokens_per_param=R`` sets each rung's ``train.max_steps`` to
ceil(R x N / tokens per step), N the non-embedding parameters with the output head kept (not
Kaplan et al.'s N, which drops the head: normbench.experiment.budget names each count) of the
rung's model as the grid's first job builds it, so that every
rung sits in the same data regime and every group of a rung trains the same steps (an equal
budget, which a tuned comparison needs: a norm's own parameters, DyT's alpha or a QK-norm's
gains, would move N by well under 1% and the steps with it). Without the rule every rung
trains the grid's own ``train.max_steps``. A data ladder holds the model fixed: its rungs
differ in the unique data, which the fixed steps repeat as epochs. A ladder has at least
``MIN_RUNGS`` rungs (a trend is fitted through them), and a rung whose estimated time is
beyond ``MAX_RUNG_HOURS`` on one worker is refused before its grid is composed.

With width, the MLP's width follows (``model.mlp_ratio`` x width); the heads stay at
``model.heads``, their dimension width / heads growing (a width that the heads do not divide
is refused as any config is), unless ``--ladder-head-dim D`` (a preset's ``head_dim``) keeps
the head dimension and sets each rung's heads to width / D. Pure planning: nothing here
trains or reads the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from normbench.core.errors import UsageError
from normbench.core.keys import shown
from normbench.data.datasets import split_sizes
from normbench.experiment.budget import COUNT, RULE_KEY, Size, size_of, tokens_per_param
from normbench.experiment.probe import compose_checked
from normbench.sweeps import grid as grids
from normbench.sweeps import search, tuned_plan
from normbench.sweeps.grid import Sweep
from normbench.sweeps.presets import load_preset

SIZE_KEYS = ("model.width", "model.depth", "data.train_samples")
# Estimated training throughput, FLOP/s of 6·N·D per worker, and a fixed cost per step (the
# optimiser's and Python's, what 6·N·D leaves out at these sizes; assumed): on the CPU from
# the qk_norm preset's measurement (width 64, depth 4, pysource, 400 steps of 16 x 64 bytes:
# 6·N·D = 3.7e11 with N = 150,656, about 28 s a run on one thread, 26 s of it past the steps'
# fixed cost); on a GPU assumed (fp32 at a fifth of an H100's TF32 peak), not measured. An
# estimate, said so wherever it is shown.
FLOPS_PER_S = {"cpu": 1.4e10, "cuda": 1.0e14 / 5}
SECONDS_PER_STEP = {"cpu": 0.004, "cuda": 0.002}
SECONDS_PER_RUN = 2.0  # a run's start, data and evaluations (assumed)
# The fewest rungs: the report's scaling fit (normbench.report.scaling) draws a trend through
# the rungs, and two points fit any curve of its family exactly, leaving nothing to judge
MIN_RUNGS = 3
# A rung estimated beyond this on one worker is refused (about six weeks; the largest shipped
# rung, ladder_lm_gpu's width 512, is about 6 h on a GPU): a typo's width or budget is
# refused in one line instead of planned at millions of hours
MAX_RUNG_HOURS = 1000


@dataclass(frozen=True)
class LadderSpec:
    """What the user asked for: the axis, its values (smallest first), the budget rule and
    how many of the smallest rungs are tuned (0: every rung)."""

    key: str
    values: list[str]
    tokens_per_param: float | None
    transfer: int = 0
    head_dim: int | None = None  # a width ladder's heads = width / head_dim (None: fixed heads)

    def record(self) -> dict:
        """The record's ``ladder`` head: what the report picks its scaling axis from."""
        rule = (
            {RULE_KEY: self.tokens_per_param, "count": COUNT, "counted_on": "the grid's first job"}
            if self.tokens_per_param is not None
            else None
        )
        return {"key": self.key, "values": self.values, "rule": rule, "head_dim": self.head_dim}

    def overrides(self, value: str, transformer: bool = True) -> list[str]:
        """A rung's own overrides: its size, and its heads where they follow the width; on the
        shipped Transformer also muP's base head size, the ladder's (nulled unless muP), so
        that muP's attention scale is the base model's at every rung (normbench.layers.mup)."""
        if not self.head_dim:
            return [f"{self.key}={value}"]
        heads = [f"model.heads={int(value) // self.head_dim}"]
        base = [f"model.base_head_dim={self.head_dim}"] if transformer else []
        return [f"{self.key}={value}", *heads, *base]


@dataclass
class Rung:
    """One rung: its value, its grid (steps set), its size and data facts, and its tuned
    comparison's plan when the sweep tunes (None: a plain grid)."""

    value: str
    grid: Sweep
    size: Size
    steps: int
    train_size: int  # samples in the (subset of the) train split
    batch_size: int
    device: str
    tuned: tuned_plan.TunedDesign | None = None
    tunes: bool = False  # tuned here; a rung with a plan that does not tune takes a choice

    @property
    def tokens(self) -> int:
        return self.steps * self.size.tokens_per_step

    @property
    def tokens_per_param(self) -> float:
        """Per parameter of the rule's count (non-embedding, output head included)."""
        return self.tokens / self.size.non_embedding

    @property
    def epochs(self) -> float:
        """Passes over the unique training data (> 1: the data repeats)."""
        return self.steps * self.batch_size / self.train_size

    @property
    def runs(self) -> int:
        """Runs this rung trains at most, tuning included."""
        return self.tuned.runs if self.tuned and self.tunes else len(self.grid.jobs)

    def steps_trained(self) -> int:
        """Steps this rung trains at most: every tuning rung's, one step beyond an edge per
        tuned key, and the confirmation (or the plain grid, or the runs at a choice taken)."""
        if self.tuned is None or not self.tunes:
            return len(self.grid.jobs) * self.steps
        plan = self.tuned
        seeds = len(plan.tuning_seeds)
        tuning = sum(plan.steps_of(g) for g in plan.groups)
        beyond = sum(len(g.keys) * seeds * g.max_steps for g in plan.groups) if plan.extend else 0
        return tuning + beyond + len(self.grid.jobs) * self.steps

    def seconds(self) -> float:
        """Estimated seconds on one worker for all this rung trains."""
        per_step = seconds_per_step(self.size, self.device)
        return self.steps_trained() * per_step + self.runs * SECONDS_PER_RUN

    def record(self, tuned: bool) -> dict:
        """The record's rung: the parameters under each count (total; non-embedding with the
        output head, the rule's N; without it, Kaplan's N) and tokens per parameter under
        each, ``tokens_per_param`` the rule's."""
        per_count = self.size.tokens_per_param(self.tokens)
        return {
            "value": self.value,
            "steps": self.steps,
            "parameters": self.size.parameters,
            "parameters_non_embedding": self.size.non_embedding,
            "parameters_non_embedding_no_head": self.size.non_embedding_no_head,
            "tokens": self.tokens,
            "tokens_per_param": round(self.tokens_per_param, 3),
            "tokens_per_param_by_count": {
                name: None if ratio is None else round(ratio, 3)
                for name, ratio in per_count.items()
            },
            "epochs": round(self.epochs, 3),
            "flops": self.size.flops(self.steps),
            "tuned": tuned,
        }


@dataclass
class LadderPlan:
    spec: LadderSpec
    name: str
    version: int | None
    rungs: list[Rung]
    notes: list[str] = field(default_factory=list)

    @property
    def tuned_rungs(self) -> int:
        """How many of the smallest rungs tune (all of them unless transferring)."""
        return sum(rung.tunes for rung in self.rungs)

    def record(self) -> dict:
        head = self.spec.record()
        head["transfer"] = (
            {"tuned_rungs": [r.value for r in self.rungs if r.tunes]}
            if self.spec.transfer
            else None
        )
        head["rungs"] = [rung.record(rung.tunes) for rung in self.rungs]
        return head


def parse(
    given: str | None,
    transfer: int | None,
    preset: str | None,
    overrides: list[str],
    head_dim: int | None = None,
):
    """The ladder asked for, or None: ``--ladder KEY=v1,v2,...`` (else the preset's
    ``ladder:``), ``--ladder-transfer N`` and ``--ladder-head-dim D`` (else the preset's
    ``transfer`` and ``head_dim``), and the budget rule from the overrides
    (``train.tokens_per_param=R``, else the preset's). Returns (spec or None, the overrides
    without the rule). Refused in one line: a key that is not a size, fewer than MIN_RUNGS
    rungs, an empty value or one that is not a positive integer in ASCII digits, a rule with a
    fixed train.max_steps, a head dimension that does not divide every width."""
    block = dict(load_preset(preset).get("ladder") or {}) if preset else {}
    rule_given = [o for o in overrides if o.partition("=")[0].lstrip("+~") == RULE_KEY]
    rest = [o for o in overrides if o not in rule_given]
    if given is None and not block:
        stray = [*rule_given]
        stray += [f"--ladder-transfer {transfer}"] if transfer else []
        stray += [f"--ladder-head-dim {head_dim}"] if head_dim is not None else []
        if stray:
            raise UsageError(
                f"{stray[0]}: a ladder's setting; valid: with --ladder KEY=v1,v2,... (one of "
                f"{', '.join(SIZE_KEYS)}) or a preset's ladder:"
            )
        return None, overrides
    where = "--ladder" if given is not None else f"sweep preset {preset}, ladder:"
    text = given if given is not None else f"{block.get('key')}={block.get('values')}"
    key, _, values_text = text.partition("=")
    if key not in SIZE_KEYS:
        raise UsageError(
            f"{where} {shown(key)}: not a size axis; valid: {', '.join(SIZE_KEYS)} (each rung's "
            "budget follows its size)"
        )
    inner = values_text.strip().strip("[]").strip()
    values = [v.strip() for v in inner.split(",")]
    if not inner:
        raise UsageError(f"{where} {shown(text)}: no values; valid: e.g. {key}=16,32,64")
    if "" in values:
        raise UsageError(
            f"{where} {shown(text)}: an empty value between commas; valid: positive integers "
            f"separated by single commas, e.g. {key}=16,32,64"
        )
    # ASCII digits only: str.isdigit() holds for '²' and '٨' too, which int() or Hydra refuse
    bad = [v for v in values if not (v.isascii() and v.isdigit() and int(v) > 0)]
    if bad:
        raise UsageError(
            f"{where} {shown(text)}: {shown(bad[0])} is not a positive integer; valid: positive "
            f"integers in the digits 0-9, e.g. {key}=16,32,64"
        )
    if len(set(map(int, values))) < len(values):
        raise UsageError(f"{where} {shown(text)}: a value given twice; valid: distinct values")
    if len(values) < MIN_RUNGS:
        few = "one rung is no ladder" if len(values) == 1 else f"{len(values)} rungs fit no trend"
        raise UsageError(
            f"{where} {shown(text)}: {few}; valid: {MIN_RUNGS} or more values (the report fits "
            f"a curve through the rungs), e.g. {key}=16,32,64"
        )
    if any(o.partition("=")[0] == key for o in rest):
        raise UsageError(
            f"{key}: the ladder's axis, also given as an override; valid: one of them "
            f"(--ladder {key}=...)"
        )
    rule_text = rule_given[-1].partition("=")[2] if rule_given else block.get("tokens_per_param")
    rule = tokens_per_param(str(rule_text), where) if rule_text is not None else None
    if rule is not None and any(o.startswith("train.max_steps=") for o in rest):
        raise UsageError(
            f"{RULE_KEY} and train.max_steps: give one (the rule sets each rung's steps)"
        )
    rungs = transfer if transfer is not None else block.get("transfer", "0")
    if not str(rungs).isdigit() or not 0 <= int(rungs) < len(values):
        option = "--ladder-transfer " if transfer is not None else f"{where} transfer: "
        raise UsageError(
            f"{option}{rungs}: valid: 0 (tune every rung) to {len(values) - 1} "
            "(the smallest rungs tuned, the rest trained at their choice)"
        )
    ordered = sorted(values, key=int)
    heads = _head_dim(head_dim, block.get("head_dim"), key, ordered, rest, where)
    return LadderSpec(key, ordered, rule, int(rungs), heads), rest


def _head_dim(given, in_preset, key: str, widths: list[str], rest: list[str], where: str):
    """The head dimension a width ladder keeps (its heads = width / head_dim), or None."""
    option = "--ladder-head-dim" if given is not None else f"{where} head_dim:"
    text = str(given) if given is not None else in_preset
    if text is None:
        return None
    if key != "model.width":
        raise UsageError(
            f"{option} {text}: heads follow a width ladder only; valid: --ladder model.width=..."
        )
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{option} {text}: valid: a positive integer that divides every width")
    uneven = [w for w in widths if int(w) % int(text)]
    if uneven:
        raise UsageError(
            f"{option} {text}: model.width={uneven[0]} is not a multiple of it; valid: a "
            f"divisor of every width ({', '.join(widths)})"
        )
    for set_by_ladder in ("model.heads", "model.base_head_dim"):
        if any(o.partition("=")[0] == set_by_ladder for o in rest):
            raise UsageError(
                f"{option} {text} and {set_by_ladder}: give one (the ladder sets the heads, and "
                "muP's base head size to the ladder's)"
            )
    return int(text)


def refuse_tuned_axis(
    spec: LadderSpec, space: dict[str, search.Values], given: list[str], preset: str | None
) -> None:
    """A tuned key that the ladder sets at each rung (its axis, and the heads and whatever
    else follows a width ladder's head dimension) is refused in one line: tuned, every rung
    would train at the tuned values and the rungs would collapse into one. ``given``: the
    ``--tune`` texts, to name where the key came from (else ``preset``'s ``tune:``)."""
    ladder_keys = [o.partition("=")[0] for o in spec.overrides(spec.values[0])]
    for key in space:
        if key not in ladder_keys:
            continue
        by_option = any(text.partition("=")[0].strip() == key for text in given)
        where = "--tune" if by_option else f"sweep preset {preset}, tune:"
        ladder = f"{spec.key}={','.join(spec.values)}"
        what = (
            f"the ladder's axis ({ladder})"
            if key == spec.key
            else f"set at each rung by the ladder ({ladder}, head dimension {spec.head_dim})"
        )
        raise UsageError(
            f"{where} {key}: {what}, not tunable (every rung would train at the tuned "
            "values); valid: tune other keys, e.g. train.lr"
        )


def design(
    spec: LadderSpec,
    preset: str | None,
    overrides: list[str],
    max_runs: int,
    space: dict[str, search.Values],
    tuning: tuple[int, int, int | None, bool],
    name: str | None,
) -> LadderPlan:
    """Every rung planned, smallest first: its grid at the rung's size and steps, checked
    (each job composed), and its tuned comparison's plan when ``space`` is given (``tuning``:
    tuning seeds, eta, trials, extend)."""
    rungs: list[Rung] = []
    runs_left = max_runs
    if spec.transfer and not space:
        raise UsageError(
            f"--ladder-transfer {spec.transfer}: nothing is tuned; valid: with --tune KEY=... "
            "or a preset's tune:"
        )
    job = grids.grid_overrides(preset, overrides, max_runs)[1][0]
    chosen = [o.partition("=")[2] for o in job if o.partition("=")[0] == "model"]
    transformer = chosen[-1:] in ([], ["transformer"])  # the model with muP's base head size
    for value in spec.values:
        at = [*overrides, *spec.overrides(value, transformer)]
        first = grids.grid_overrides(preset, at, max_runs)[1][0]
        cfg, size = _first(first, spec.key, value)
        rule = spec.tokens_per_param
        wanted = size.steps_for(rule) if rule else cfg["train"]["max_steps"]
        if wanted is None:
            raise UsageError(
                f"--ladder: the budget is in steps; valid: {RULE_KEY}=R or train.max_steps "
                "(found train.epochs)"
            )
        _bound(spec, value, size, wanted * seconds_per_step(size, cfg["device"]), "one run")
        steps = math.ceil(wanted)
        given = [o for o in at if o.partition("=")[0].lstrip("+~") != "train.max_steps"]
        grid = grids.expand(preset, [*given, f"train.max_steps={steps}"], max_runs)
        grid.name = name or grid.name
        tuned = tuned_plan.design(grid, space, *tuning) if space else None
        train = split_sizes(cfg["data"])["train"]
        tunes = tuned is not None and (not spec.transfer or len(rungs) < spec.transfer)
        facts = (train, cfg["batch_size"], cfg["device"])
        rung = Rung(value, grid, size, steps, *facts, tuned, tunes)
        _bound(spec, value, size, rung.seconds(), f"its {rung.runs} runs")
        rungs.append(rung)
        runs_left -= rung.runs
        if runs_left < 0:
            raise UsageError(
                f"--ladder: the ladder trains more than --max-runs {max_runs:,} runs by rung "
                f"{spec.key}={value}; valid: fewer rungs or values, or a larger --max-runs"
            )
    return LadderPlan(spec, rungs[0].grid.name, rungs[0].grid.version, rungs, _notes(rungs))


def seconds_per_step(size: Size, device: str) -> float:
    """Estimated seconds of one optimiser step on one worker (the module's rates)."""
    kind = "cuda" if device == "cuda" else "cpu"
    return size.flops(1) / FLOPS_PER_S[kind] + SECONDS_PER_STEP[kind]


def _bound(spec: LadderSpec, value: str, size: Size, seconds: float, what: str) -> None:
    """Refuse a rung estimated beyond MAX_RUNG_HOURS on one worker (``what``: one run of it,
    before its grid is composed, or all it trains)."""
    if math.isfinite(seconds) and seconds <= MAX_RUNG_HOURS * 3600:
        return
    rule = spec.tokens_per_param
    budget = f"{RULE_KEY} than {rule:g}" if rule else "train.max_steps"
    raise UsageError(
        f"--ladder rung {spec.key}={value}: {what} is estimated at {estimate_text(seconds)} on "
        f"one worker ({size.non_embedding:.3g} non-embedding parameters), beyond the "
        f"{MAX_RUNG_HOURS:,} h a rung may take; valid: a smaller {spec.key} or a smaller "
        f"{budget}"
    )


def _first(overrides: list[str], key: str, value: str) -> tuple[dict, Size]:
    """The rung's first job, composed, and its size (what the budget rule counts)."""
    try:
        cfg = compose_checked(overrides)
        return cfg, size_of(cfg)
    except UsageError as err:
        raise UsageError(f"--ladder rung {key}={value}: {err}") from None


def _notes(rungs: list[Rung]) -> list[str]:
    """What a reader of the plan should know: rungs whose warm-up is most of their steps."""
    notes = []
    for rung in rungs:
        warmup = rung.grid.jobs[0].cfg["train"]["warmup_steps"]
        if warmup * 2 > rung.steps:
            notes.append(
                f"rung {rung.value}: warm-up {warmup} of {rung.steps} steps (more than half)"
            )
    return notes


def estimate_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3.6e5:
        return f"{seconds / 3600:.1f} h"
    if seconds < 3.6e7:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 3600:.2g} h" if math.isfinite(seconds) else "more hours than a float holds"
