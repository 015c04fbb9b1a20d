"""
Predicted against observed: each figure with the observed 95 % interval, and a verdict.

A figure *agrees* when its prediction lies inside the observed figure's 95 % interval, or
within 15 % of it, or when the prediction's own interval (the sample's uncertainty, where the
prediction has one) overlaps the observed interval. Run quantiles are compared as the executor
sees runs: a run is cut at its deadline, so a predicted quantile beyond the deadline is the
deadline.
"""

from __future__ import annotations

import math

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailkit.fit import empirical_quantiles


__all__ = ["FIGURES", "RELATIVE_SLACK", "Figure", "agrees", "observed_figures", "rate_interval"]

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


def rate_interval(hits: int, n: int, *, level: float = LEVEL) -> tuple[float, float]:
    """
    The exact (Clopper-Pearson) interval of a rate of ``hits`` in ``n``.
    """
    from scipy import stats

    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - level
    low = 0.0 if hits == 0 else float(stats.beta.ppf(alpha / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - alpha / 2, hits + 1, n - hits))
    return low, high


def _extra_interval(extras: int, firsts: int) -> tuple[float, float]:
    """
    Extra attempts per first attempt: a Poisson interval on the count, over the firsts.
    """
    from scipy import stats

    if firsts == 0:
        return 0.0, math.inf
    alpha = 1.0 - LEVEL
    low = 0.0 if extras == 0 else float(stats.chi2.ppf(alpha / 2, 2 * extras)) / 2
    high = float(stats.chi2.ppf(1 - alpha / 2, 2 * extras + 2)) / 2
    return low / firsts, high / firsts


def observed_figures(
    elapsed_s: Sequence[float], missed: Sequence[bool], extras: int, firsts: int
) -> dict[str, Figure]:
    """
    The four figures of a side, each with its 95 % interval.

    Args:
        elapsed_s: Each run's end-to-end seconds.
        missed: Per run, whether it missed.
        extras: Extra attempts started at cutoffs.
        firsts: First attempts.
    """
    n = len(elapsed_s)
    misses = sum(missed)
    low, high = rate_interval(misses, n)
    out = {"miss_rate": Figure(misses / n if n else math.nan, low, high, n)}
    p50, p99 = empirical_quantiles(np.asarray(elapsed_s, dtype=np.float64), qs=(0.5, 0.99))
    for name, q in (("p50_s", p50), ("p99_s", p99)):
        out[name] = Figure(q.value, q.interval.low, q.interval.high, n)
    low, high = _extra_interval(extras, firsts)
    out["extra_attempts"] = Figure(extras / firsts if firsts else math.nan, low, high, firsts)
    return out


def agrees(predicted: float, observed: Figure, interval: tuple[float, float] | None = None) -> bool:
    """
    Whether a prediction agrees with an observation (see the module docstring).
    """
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
