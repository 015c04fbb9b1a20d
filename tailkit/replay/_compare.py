"""
Predicted against observed: each figure with the observed 95 % interval, and a verdict.

A figure *agrees* when its prediction lies inside the observed figure's 95 % interval, or
within 15 % of it, or when the prediction's own interval (the sample's uncertainty, where the
prediction has one) overlaps the observed interval. Runs the deadline cut are censored there
(as `tailkit check` reads them), so an observed quantile they hide is "more than" a bound,
which a prediction beyond that bound agrees with.
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


__all__ = ["FIGURES", "RELATIVE_SLACK", "Figure", "agrees", "verdicts"]

FIGURES = ("miss_rate", "p50_s", "p99_s", "extra_attempts")
RELATIVE_SLACK = 0.15  # a prediction within 15 % of the observation agrees
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Figure:
    """
    One observed figure with its interval.

    Args:
        value: The observed value.
        low: Lower end of its 95 % interval.
        high: Upper end (``inf`` when the sample cannot bound it).
        n: Observations behind it.
    """

    value: float
    low: float
    high: float
    n: int

    def to_json(self) -> dict[str, Any]:
        """
        ``{"value", "low", "high", "n"}`` (``null`` for an unbounded end).
        """

        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "value": finite(self.value),
            "low": finite(self.low),
            "high": finite(self.high),
            "n": self.n,
        }


def agrees(predicted: float, observed: Figure, interval: tuple[float, float] | None = None) -> bool:
    """
    Whether a prediction agrees with an observation (see the module docstring).
    """
    if math.isinf(observed.value):  # hidden by runs the deadline cut: "more than low"
        return predicted >= observed.low
    if not math.isfinite(predicted) or not math.isfinite(observed.value):
        return predicted == observed.value
    if observed.low <= predicted <= observed.high:
        return True
    scale = max(abs(predicted), abs(observed.value))
    if abs(predicted - observed.value) <= RELATIVE_SLACK * scale:
        return True
    return interval is not None and interval[0] <= observed.high and observed.low <= interval[1]


def verdicts(
    predicted: Mapping[str, float],
    observed: Mapping[str, Figure],
    intervals: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, bool]:
    """
    Per figure, whether the prediction agrees with the observation.
    """
    return {
        name: agrees(predicted[name], observed[name], (intervals or {}).get(name))
        for name in FIGURES
    }
