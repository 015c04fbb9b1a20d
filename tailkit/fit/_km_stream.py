"""
Kaplan-Meier quantiles of a sample read in sorted chunks, in memory that does not grow with it.
"""

# `KaplanMeier.quantiles` needs, per quantile and curve (the estimate and both ends of its
# band), only the first time at which that curve is at or below a threshold; the curves are
# running products and sums over the distinct times in ascending order. So a group whose
# distinct times arrive sorted, in chunks, needs as state only the running product, the running
# sum, the calls seen and, per threshold, whether it was crossed and where. Each chunk's
# product and sum start from the previous chunk's last value (prepended, so the arithmetic
# is numpy's sequential cumprod / cumsum on the whole curve, operation for operation): the
# quantiles come out bit for bit those of `KaplanMeier.fit(...).quantiles(...)` (a test checks).

from __future__ import annotations

import math

import numpy as np

from numpy.typing import NDArray

from tailkit.fit._quantiles import _KM_TOLERANCE, KaplanMeier


class KaplanMeierStream:
    """
    Quantiles of one group's Kaplan-Meier curve, fed its distinct times in ascending order.

    Args:
        total: Every call of the group, finished and cut (the number at risk at the start).
        q: Quantiles by the CDF (``0.99`` is p99).
        level: Confidence level of the intervals.
    """

    def __init__(self, total: int, q: NDArray[np.float64], level: float) -> None:
        self._total = total
        self._q = np.asarray(q, dtype=np.float64)
        self._level = level
        target = 1.0 - self._q
        # thresholds as `_first_at_or_below` forms them: curve <= threshold + tolerance
        self._at = target + _KM_TOLERANCE
        self._below = (target - 2.0 * _KM_TOLERANCE) + _KM_TOLERANCE
        k = self._q.size
        # first time at or below, per threshold: estimate (at, below), band low, band high
        self._found = np.full((4, k), math.nan)
        self._seen = 0
        self._survival = 1.0
        self._greenwood = 0.0
        self._last = math.nan

    def add(
        self, times: NDArray[np.float64], events: NDArray[np.int64], cuts: NDArray[np.int64]
    ) -> None:
        """
        The next distinct times (ascending, after every earlier one) with their events and cuts.
        """
        if times.size == 0:
            return
        d = events.astype(np.float64)
        both = events + cuts
        before = self._seen + np.concatenate([[0], np.cumsum(both)[:-1]])
        at_risk = (self._total - before).astype(np.float64)
        self._seen += int(both.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = (at_risk - d) / at_risk
            term = d / (at_risk * (at_risk - d))
        survival = np.cumprod(np.concatenate([[self._survival], factor]))[1:]
        greenwood = np.cumsum(np.concatenate([[self._greenwood], term]))[1:]
        self._survival, self._greenwood = float(survival[-1]), float(greenwood[-1])
        self._last = float(times[-1])
        curve = KaplanMeier(times, survival, greenwood, at_risk, d)
        s_lo, s_hi = curve.band(self._level)
        found = self._found
        for row, values, limits in (
            (0, survival, self._at),
            (1, survival, self._below),
            (2, s_lo, self._at),
            (3, s_hi, self._at),
        ):
            for j in np.flatnonzero(np.isnan(found[row])):
                hit = np.flatnonzero(values <= limits[j])
                if hit.size:
                    found[row, j] = times[hit[0]]

    def quantiles(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """
        Value, low and high of each quantile, as `KaplanMeier.quantiles` gives them.
        """
        at, below, low, high = (np.where(np.isnan(r), math.inf, r) for r in self._found)
        flat = np.isfinite(at) & np.isfinite(below) & (below > at)
        value = np.where(flat, (at + below) / 2.0, at)
        low = np.where(np.isfinite(low), low, self._last)
        return value, np.minimum(low, value), np.maximum(high, value)
