"""A tuned key's search space (normbench.sweeps.tuned): a list of values, or an interval for a
continuous key in Hydra's sweep syntax, as hydra-optuna-sweeper writes it:
``train.lr=interval(1e-4,1e-1)``, ``train.lr=tag(log,interval(1e-4,1e-1))`` (log-uniform).

A group with an interval in its space draws its candidates, as many as the budget gives every
group, with Optuna's quasi-Monte Carlo sampler (a scrambled Sobol sequence: even coverage of
the box with few points, Bergstra and Bengio 2012's argument for random over grid search,
improved). The sampler is seeded by the group, so that the draw is fixed: a resumed sweep
draws the same candidates, whose run ids it then finds complete. Values are kept to three
significant digits, so that a candidate is a plain override and its run id reads back. The
draw is not adaptive (no TPE): successive halving prunes, and an adaptive sampler's choices
would depend on results a resume has to recompute in the same order.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

from normbench.core.errors import UsageError


@dataclass(frozen=True)
class Interval:
    """A continuous key's range, uniform or log-uniform."""

    low: float
    high: float
    log: bool

    def __str__(self) -> str:
        inner = f"interval({self.low:g},{self.high:g})"
        return f"tag(log,{inner})" if self.log else inner


Values = list[str] | Interval


def values_of(key: str, override, option: str = "--tune") -> Values:
    """An override's values: a list (``a,b,c``, ``range(...)``, ``choice(...)``), or an
    Interval; refused in one line when the interval is empty or, log-uniform, not positive,
    and for ``glob()``, which lists a config group's options (it needs Hydra's config loader,
    and a tuned key takes values). ``option``: where the key was given, for the error."""
    from hydra.core.override_parser.types import Glob, IntervalSweep

    value = override.value()
    text = override.input_line.partition("=")[2]
    if isinstance(value, Glob):
        raise UsageError(
            f"{option} {key}={text}: glob() chooses config files, not values to tune; valid: "
            "v1,v2,..., range(), choice(), interval(LOW,HIGH), tag(log,interval(LOW,HIGH))"
        )
    if not isinstance(value, IntervalSweep):
        if override.is_sweep_override():
            return list(override.sweep_string_iterator())
        return [override.get_value_element_as_str()]
    low, high, log = float(value.start), float(value.end), "log" in value.tags
    unknown = set(value.tags) - {"log"}
    if unknown or not low < high or (log and low <= 0):
        raise UsageError(
            f"{option} {key}={text}: valid: interval(LOW,HIGH) "
            "with LOW < HIGH, or tag(log,interval(LOW,HIGH)) with 0 < LOW"
        )
    return Interval(low, high, log)


def draw(space: dict[str, Values], count: int, seed_text: str) -> list[tuple[str, ...]]:
    """``count`` candidates from a space with an interval: each a tuple of KEY=VALUE, drawn by
    Optuna's QMCSampler (scrambled Sobol; a listed key sampled uniformly among its values),
    seeded by ``seed_text``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:4], "big")
    distributions = {
        key: optuna.distributions.FloatDistribution(values.low, values.high, log=values.log)
        if isinstance(values, Interval)
        else optuna.distributions.CategoricalDistribution(values)
        for key, values in space.items()
    }
    with warnings.catch_warnings():  # QMCSampler is marked experimental; listed keys
        warnings.simplefilter("ignore")  # go to its independent sampler, which it notes
        sampler = optuna.samplers.QMCSampler(
            qmc_type="sobol",
            scramble=True,
            seed=seed,
            independent_sampler=optuna.samplers.RandomSampler(seed=seed),
        )
        study = optuna.create_study(sampler=sampler)
        drawn, seen = [], set()
        for _ in range(count * 20):  # rounding to 3 digits can repeat a point: draw again
            trial = study.ask(distributions)
            study.tell(trial, 0.0)  # the value is not used: the draw is not adaptive
            candidate = tuple(
                f"{key}={_short(value) if isinstance(space[key], Interval) else value}"
                for key, value in trial.params.items()
            )
            if candidate not in seen:
                seen.add(candidate)
                drawn.append(candidate)
            if len(drawn) == count:
                break
    return drawn


def _short(value: float) -> str:
    """Three significant digits, written as Hydra reads a float back (1e-3, 0.0316)."""
    return f"{float(f'{value:.3g}')!r}"
