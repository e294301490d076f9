"""What one config key accepts, and how a bad value is shown in a one-line error.

A ``Key`` is a pure value checker: the experiment's schema is a table of them, and the plugin
registry makes them from a plugin's signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# A key without a default (a plugin parameter that has none): OmegaConf's mandatory value.
REQUIRED = "???"


def shown(value: Any, limit: int = 40) -> str:
    """A value as an error message shows it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Key:
    """What one config key accepts."""

    kind: type
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False

    def describe(self) -> str:
        if self.choices:
            return ", ".join(self.choices)
        text = {
            int: "an integer",
            float: "a finite number",
            bool: "true or false",
            str: "a string",
        }
        bounds = ""
        if self.minimum is not None and self.maximum is not None:
            bounds = f" from {self.minimum} to {self.maximum}"
        elif self.minimum is not None:
            bounds = f" >= {self.minimum}"
        elif self.maximum is not None:
            bounds = f" <= {self.maximum}"
        return text[self.kind] + bounds + (" or null" if self.nullable else "")

    def check(self, value: Any) -> Any:
        """The value converted to ``kind``; raises ValueError when it does not fit."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError
        elif self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
        elif self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError
            try:
                value = float(value)
            except OverflowError:  # an integer of hundreds of digits
                raise ValueError from None
            if not math.isfinite(value):  # NaN passes every bound check: refuse it here
                raise ValueError
        elif not isinstance(value, str) or (self.choices and value not in self.choices):
            raise ValueError
        if self.minimum is not None and value < self.minimum:
            raise ValueError
        if self.maximum is not None and value > self.maximum:
            raise ValueError
        return value
