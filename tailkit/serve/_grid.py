"""
A route's latency as a quantile grid: what `profile_from_stats` replays.

A stats row gives a handful of quantiles of the total latency (p50, p90, p95, p99) and of the
time to first token (p50, p99), measured with cut calls as right-censored. A parametric model
fitted to them (a lognormal TTFT, a decode speed and an output length, as `ModelProfile` draws)
misses them wherever the route is not lognormal: benchmark routes with fixed output lengths
spread far less than any length model adds, and routes whose tail is a mixture (a few TTFT
spikes far beyond the body) have a p99 no single sigma reaches. So the replay draws from the
measured quantiles themselves. `QuantileCurve` runs through every known quantile, log-linear
in the normal score between them (exact for a lognormal between any two); below the first
known quantile it spreads as the row's lognormal fit says, past the last one it continues the
last segment, no steeper than the curve's average. `grid` evaluates a curve at ``GRID_SIZE``
evenly spaced probabilities. The replay takes the total and the TTFT at the same
probabilities (the slow total gets the slow TTFT: the table holds no joint information) as an
`Outcomes` table a request draws from uniformly, so each known quantile is replayed to within
one grid step plus sampling noise.
"""

from __future__ import annotations

import bisect
import math

from dataclasses import dataclass
from statistics import NormalDist


__all__ = ["GRID_SIZE", "QuantileCurve", "grid"]

GRID_SIZE = 1000
"""Entries per stats row: probabilities ``(i + 0.5) / GRID_SIZE``."""

_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class QuantileCurve:
    """
    A quantile function through known quantiles, log-linear in the normal score between them.

    Args:
        points: ``(probability, seconds)`` pairs, probabilities strictly between 0 and 1,
            seconds > 0; at least one. Out of order or decreasing values are sorted and made
            non-decreasing.
        low_sigma: Log-scale spread per unit of normal score below the first known quantile
            (the row's lognormal ``sigma``); ``None``: that of the first segment, or 0 with a
            single point.
    """

    points: tuple[tuple[float, float], ...]
    low_sigma: float | None = None

    def __call__(self, p: float) -> float:
        """
        The quantile at probability ``p`` (0 < p < 1), in seconds.
        """
        zs, logs = self._knots()
        z = _NORMAL.inv_cdf(p)
        if z <= zs[0]:
            slope = self._low_slope(zs, logs)
            return math.exp(logs[0] + slope * (z - zs[0]))
        i = bisect.bisect_left(zs, z)
        if i == len(zs):
            return math.exp(logs[-1] + self._high_slope(zs, logs) * (z - zs[-1]))
        return math.exp(logs[i - 1] + _slope(zs, logs, i - 1) * (z - zs[i - 1]))

    def _knots(self) -> tuple[list[float], list[float]]:
        zs: list[float] = []
        logs: list[float] = []
        for p, seconds in sorted(self.points):
            z, value = _NORMAL.inv_cdf(p), math.log(seconds)
            if zs and z == zs[-1]:
                continue
            zs.append(z)
            logs.append(max(value, logs[-1]) if logs else value)
        return zs, logs

    def _high_slope(self, zs: list[float], logs: list[float]) -> float:
        # The last segment goes on, but no steeper than the average from the first known
        # quantile: past a p99 that a few spikes set (p95 2 s, p99 54 s), a segment that steep
        # would reach thousands of seconds in the top per mille.
        if len(zs) == 1:
            return self._low_slope(zs, logs)
        average = (logs[-1] - logs[0]) / (zs[-1] - zs[0])
        return min(_slope(zs, logs, len(zs) - 2), average)

    def _low_slope(self, zs: list[float], logs: list[float]) -> float:
        if self.low_sigma is not None:
            return max(self.low_sigma, 0.0)
        return _slope(zs, logs, 0) if len(zs) > 1 else 0.0


def _slope(zs: list[float], logs: list[float], i: int) -> float:
    return (logs[i + 1] - logs[i]) / (zs[i + 1] - zs[i])


def grid(curve: QuantileCurve, size: int = GRID_SIZE) -> list[float]:
    """
    ``curve`` at the probabilities ``(i + 0.5) / size``, ``i = 0 … size - 1``: non-decreasing.
    """
    return [curve((i + 0.5) / size) for i in range(size)]
