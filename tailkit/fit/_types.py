"""
Small value types shared by the fits.
"""

from __future__ import annotations

import math

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Interval:
    """
    A confidence interval.

    Args:
        low: Lower bound (``-math.inf`` or ``0.0`` when unbounded below, as documented by the
            function that returns it).
        high: Upper bound (``math.inf`` when the data cannot bound it, e.g. a p99 from 50 calls).
        level: Confidence level, e.g. ``0.95``.
    """

    low: float
    high: float
    level: float = 0.95

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int | float) and self.low <= value <= self.high

    @property
    def bounded(self) -> bool:
        """
        True when both ends are finite.
        """
        return math.isfinite(self.low) and math.isfinite(self.high)
