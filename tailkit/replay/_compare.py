"""
Predicted against observed: each figure with the observed 95 % interval, and a verdict.

An observed figure is a `tailkit.estimate.Estimate`, read from the side's ledger by
`tailkit.check.observe` exactly as a production ledger is read.

A figure *agrees* when its prediction lies inside the observed figure's 95 % interval, or
within 15 % of it, or when the prediction's own interval (the sample's uncertainty, where the
prediction has one) overlaps the observed interval. Runs the deadline cut are censored there
(as `tailkit check` reads them), so an observed quantile they hide is "more than" a bound,
which a prediction beyond that bound agrees with.
"""

from __future__ import annotations

import math

from collections.abc import Mapping

from tailkit.estimate import Estimate


__all__ = ["FIGURES", "RELATIVE_SLACK", "agrees", "verdicts"]

FIGURES = ("miss_rate", "p50_s", "p99_s", "extra_attempts")
RELATIVE_SLACK = 0.15  # a prediction within 15 % of the observation agrees


def agrees(
    predicted: float, observed: Estimate, interval: tuple[float, float] | None = None
) -> bool:
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
    observed: Mapping[str, Estimate],
    intervals: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, bool]:
    """
    Per figure, whether the prediction agrees with the observation.
    """
    return {
        name: agrees(predicted[name], observed[name], (intervals or {}).get(name))
        for name in FIGURES
    }
