"""
A figure with its interval: the one shape every estimate, prediction and observation takes.

A quantile from calls, a predicted miss rate, an observed p99 from ledgers: each is a value
with the interval that says how far to trust it, at a stated confidence level, computed from
``n`` units by a named method. Standard library only, so that every layer can speak it.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any


__all__ = ["LEVEL", "Estimate"]

LEVEL = 0.95
"""The confidence level of every interval tailkit states unless asked for another."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """
    A value and its confidence interval (``low <= value <= high`` when the value is known).

    Args:
        value: The point estimate; ``math.nan`` when there is none (no data, or an interval
            given on its own), ``math.inf`` for a figure known only to be above ``low``.
        low: Lower end of the interval (``-math.inf`` or ``0.0`` when nothing bounds it below).
        high: Upper end; ``math.inf`` when the data cannot bound it (a p99 from 50 calls).
        n: Units it was computed from (calls, runs, first attempts); 0 when not counted.
        method: How the interval was computed (``order statistics``, ``Clopper-Pearson``,
            ``bootstrap``, ...); empty when not stated.
        level: The interval's confidence level.
    """

    value: float
    low: float
    high: float
    n: int = 0
    method: str = ""
    level: float = LEVEL

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int | float) and self.low <= value <= self.high

    @property
    def bounds(self) -> tuple[float, float]:
        """
        ``(low, high)``.
        """
        return (self.low, self.high)

    @property
    def bounded(self) -> bool:
        """
        True when both ends of the interval are finite.
        """
        return math.isfinite(self.low) and math.isfinite(self.high)

    def overlaps(self, other: Estimate) -> bool:
        """
        True when the two intervals share at least one point.
        """
        return self.low <= other.high and other.low <= self.high

    def as_dict(self) -> dict[str, Any]:
        """
        JSON-ready values: a value or bound that is not a finite number is ``None``.
        """
        return {
            "value": _finite(self.value),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "n": self.n,
            "method": self.method,
            "level": self.level,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
