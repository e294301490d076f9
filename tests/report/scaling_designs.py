"""Simulated ladders with known truth for normbench.report.scaling's simulation tests
(tests/report/test_scaling_simulation.py) and the table in docs/statistics.md: each design
gives true loss curves for a reference and its groups; a ladder draws each seed's loss as
the curve at the rung's compute plus normal seed noise.

The shipped ladder's compute: ladder_lm's five widths (16 to 64, 20 tokens per non-embedding
parameter), C = 6 N D from docs/findings.md's rung table. Its LayerNorm curve falls from
3.46 to 2.29 bits per byte, its seeds' standard deviation is about 0.035 (8 seeds a rung),
its local log-log slope steepens from 0.056 to 0.131, and a power law with a floor misses its
rung means by 74x their seed variance (issue 58)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from normbench.report import scaling

SHIPPED = 6.0 * np.array(
    [8832 * 177152, 16192 * 324608, 25600 * 512000, 50560 * 1011712, 83712 * 1674240],
    dtype=float,
)
UNEVEN = SHIPPED[0] * np.array([1.0, 1.4, 6.0, 8.0, 89.0])  # ratios 1.4, 4.3, 1.3, 11


def power(floor: float, scale: float, exponent: float, c0: float = SHIPPED[0]) -> Callable:
    """L(C) = floor + scale (C / c0)^-exponent."""
    return lambda c: floor + scale * (np.asarray(c) / c0) ** -exponent


def shifted(curve: Callable, multiplier: float) -> Callable:
    """A group whose multiplier against ``curve`` is ``multiplier`` at every compute: it
    reaches at C the loss the reference reaches at multiplier x C."""
    return lambda c: curve(multiplier * np.asarray(c))


def bent(c0: float = SHIPPED[0], top: float = SHIPPED[-1]) -> Callable:
    """ln L = a + b t + c t^2 (t = ln(C / c0), straight below c0 so that it falls
    everywhere) whose log-log slope steepens from 0.056 to 0.131 over the shipped ladder
    and that falls from 3.46 bits per byte (ladder_lm's LayerNorm)."""
    b, c = -0.056, -(0.131 - 0.056) / (2 * math.log(top / c0))

    def curve(compute):
        t = np.log(np.asarray(compute) / c0)
        return np.exp(math.log(3.46) + b * t + c * np.maximum(t, 0) ** 2)

    return curve


def wiggled(curve: Callable, size: float, c0: float = SHIPPED[0]) -> Callable:
    """``curve`` times 1 + size sin(ln(C / c0) / 1.5): a smooth departure from any power law
    (one that stays monotone for size below about 0.1 at these slopes)."""
    return lambda c: curve(c) * (1 + size * np.sin(np.log(np.asarray(c) / c0) / 1.5))


@dataclass
class Design:
    """A ladder with known curves: ``curves[0]`` the reference's."""

    name: str
    compute: np.ndarray
    curves: list[Callable]
    seeds: int
    sd: float
    constant: bool  # whether every group's true multiplier is constant along compute

    def draw(self, rng: np.random.Generator) -> list[list[scaling.Cell]]:
        """One ladder: each seed's loss, curve plus normal noise of sd ``sd``."""
        noise = self.sd * rng.standard_normal((len(self.curves), len(self.compute), self.seeds))
        return [
            [
                scaling.Cell(c, np.arange(self.seeds), curve(c) + noise[g, r])
                for r, c in enumerate(self.compute)
            ]
            for g, curve in enumerate(self.curves)
        ]

    def truth(self) -> np.ndarray:
        """log10 of each group's true multiplier at each rung (G, R): the compute at which the
        reference's curve reaches the group's loss, over the group's compute (brentq in
        ln C within e^30 of the group's compute)."""
        reference = self.curves[0]
        out = np.empty((len(self.curves), len(self.compute)))
        for g, curve in enumerate(self.curves):
            for r, c in enumerate(self.compute):
                low, high = math.log(c) - 30, math.log(c) + 30
                found = optimize.brentq(
                    lambda x, y: float(reference(math.exp(x))) - y, low, high, args=(curve(c),)
                )
                out[g, r] = (found - math.log(c)) / math.log(10)
        return out


def designs() -> list[Design]:
    """The simulation table's designs (docs/statistics.md)."""
    floor_one = power(1.0, 2.46, 0.144)  # the shipped LayerNorm's fall with a floor of 1 bpb
    bend = bent()
    misfit = wiggled(bend, 0.05)
    return [
        Design(
            "designed: converging group (top 0.95), higher-floor group (top 0.33)",
            SHIPPED,
            [
                power(1.0, 2.46, 0.144),
                power(1.0, 2.718, 0.1646),
                power(1.2229, 2.46, 0.144),
            ],
            4,
            0.02,
            False,
        ),
        Design(
            "floor 1, multiplier 0.3", SHIPPED, [floor_one, shifted(floor_one, 0.3)], 8, 0.035, True
        ),
        Design(
            "floors differ by group", SHIPPED, [floor_one, power(1.2, 2.2, 0.16)], 8, 0.035, False
        ),
        Design(
            "bends like the real ladder, multiplier 0.3",
            SHIPPED,
            [bend, shifted(bend, 0.3)],
            8,
            0.035,
            True,
        ),
        Design(
            "misfit of the real ladder's size, multiplier 0.3",
            SHIPPED,
            [misfit, shifted(misfit, 0.3)],
            8,
            0.035,
            True,
        ),
        Design(
            "uneven compute ratios, multiplier 0.3",
            UNEVEN,
            [floor_one, shifted(floor_one, 0.3)],
            3,
            0.035,
            True,
        ),
    ]
