"""
Observed figures with their 95 % intervals: rates, ratios and quantiles.

Each figure a ledger yields is an `Estimate`: the value, an interval, the number of units it
was computed from and the method. Rates (misses per run, hedged calls per step call) get the
exact binomial (Clopper-Pearson) interval; extra attempts per first attempt, a count over an
exposure, get the exact Poisson (Garwood) interval on the count, divided by the first attempts;
quantiles get the distribution-free order-statistic interval (Hahn-Meeker), or Kaplan-Meier's
when some units never finished (`tailkit.fit.empirical_quantiles`).

`Estimate` is tailkit's one figure-with-an-interval (`tailkit.estimate`); each one made here
carries the level it was read at. The point value of a quantile of units that all finished is
the plain sample quantile by the ``"linear"`` method (type 7, `tailkit.fit.quantile`'s default,
what ``tailkit stats`` prints); with unfinished units it is Kaplan-Meier's, which no plain
sample quantile can give.

In a check's JSON an estimate keeps the five keys ``docs/check.md`` documents (`estimate_json`):
its level is the document's ``level`` (or the ``judged.level`` beside it), stated once there
rather than on every figure.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailkit.estimate import LEVEL, Estimate


__all__ = [
    "CLOPPER_PEARSON",
    "GARWOOD",
    "NO_DATA",
    "Durations",
    "at_level",
    "estimate_json",
    "no_data",
    "observed_quantiles",
    "rate",
    "ratio",
]

CLOPPER_PEARSON = "Clopper-Pearson"
GARWOOD = "Poisson (Garwood)"
NO_DATA = "no data"


@dataclass(frozen=True, slots=True)
class Durations:
    """
    The durations a quantile was read from, kept so its interval can be read at another level.

    Args:
        finished_s: Seconds of the units that finished.
        unfinished_s: Seconds each unit that never finished (cut, failed, gave up) was seen
            running: its duration is more than that.
    """

    finished_s: tuple[float, ...] = ()
    unfinished_s: tuple[float, ...] = ()

    def quantile(self, q: float, *, level: float = LEVEL) -> Estimate:
        """
        The ``q`` quantile by the CDF with its interval at ``level`` (see `observed_quantiles`).
        """
        (found,) = observed_quantiles(self.finished_s, self.unfinished_s, (q,), level=level)
        return found


def at_level(
    est: Estimate, level: float, durations: Durations | None = None, q: float = 0.5
) -> Estimate:
    """
    The same figure with its interval at another confidence level.

    A rate or a ratio is read again from its count (``value * n``); a quantile from the
    ``durations`` it was read from (its ``q``); an estimate of nothing stays as it is.

    Args:
        est: The estimate, as `rate`, `ratio` or `observed_quantiles` made it.
        level: The confidence level wanted.
        durations: For a quantile, its units' durations (``None``: keep the interval).
        q: For a quantile, which one (``0.99`` is p99).

    Returns:
        The estimate at ``level``; ``est`` itself when it cannot be read again.
    """
    if est.n <= 0 or est.method == NO_DATA:
        return est
    if est.method == CLOPPER_PEARSON:
        return rate(round(est.value * est.n), est.n, level=level)
    if est.method == GARWOOD:
        return ratio(round(est.value * est.n), est.n, level=level)
    if durations is None:
        return est
    return durations.quantile(q, level=level)


def estimate_json(est: Estimate) -> dict[str, Any]:
    """
    ``{"value", "low", "high", "n", "method"}``: an estimate in a check's JSON.

    ``high: None`` means unbounded above; ``value: None`` with ``n > 0`` means hidden by units
    that never finished (the figure is more than ``low``). The level is left out: the
    document states it once (see the module docstring).
    """
    found = est.as_dict()
    del found["level"]
    return found


def no_data() -> Estimate:
    """
    The estimate of a figure nothing was observed for.
    """
    return Estimate(math.nan, 0.0, math.inf, 0, NO_DATA)


def rate(k: int, n: int, *, level: float = LEVEL) -> Estimate:
    """
    ``k`` of ``n`` as a share, with its exact binomial (Clopper-Pearson) interval.

    Args:
        k: Units with the property (e.g. missed runs).
        n: Units in all.
        level: Confidence level of the interval.

    Returns:
        The share ``k / n`` in [0, 1]; `no_data` when ``n`` is 0.
    """
    if n <= 0:
        return no_data()
    from scipy import stats

    alpha = 1.0 - level
    low = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2.0, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1.0 - alpha / 2.0, k + 1, n - k))
    return Estimate(k / n, low, high, n, CLOPPER_PEARSON, level)


def ratio(k: int, exposure: int, *, level: float = LEVEL) -> Estimate:
    """
    ``k`` events per unit of ``exposure``, with the exact Poisson (Garwood) interval.

    The count ``k`` (e.g. extra attempts) is taken as Poisson; its exact interval
    ``[chi2(a/2; 2k) / 2, chi2(1 - a/2; 2k + 2) / 2]`` with ``a = 1 - level`` is divided by the
    exposure (e.g. first attempts). It is a little narrow when events cluster in runs (a run
    that hedges one step often hedges another), and it stays informative at ``k = 0``, where
    a bootstrap over runs collapses to a point.

    Args:
        k: Events counted.
        exposure: Units they happened over.
        level: Confidence level of the interval.

    Returns:
        The ratio ``k / exposure``; `no_data` when ``exposure`` is 0.
    """
    if exposure <= 0:
        return no_data()
    from scipy import stats

    alpha = 1.0 - level
    low = 0.0 if k == 0 else float(stats.chi2.ppf(alpha / 2.0, 2 * k)) / 2.0
    high = float(stats.chi2.ppf(1.0 - alpha / 2.0, 2 * k + 2)) / 2.0
    return Estimate(k / exposure, low / exposure, high / exposure, exposure, GARWOOD, level)


def observed_quantiles(
    finished_s: Sequence[float],
    unfinished_s: Sequence[float],
    qs: Sequence[float],
    *,
    level: float = LEVEL,
) -> tuple[Estimate, ...]:
    """
    Quantiles of a duration where some units never finished.

    A unit that never finished (a run or step the deadline cut) is right-censored at the last
    instant it was seen: its true duration is longer. Without such
    units the quantile and its interval are order statistics (Hahn-Meeker); with them,
    Kaplan-Meier's.

    Args:
        finished_s: Durations in seconds of the units that finished.
        unfinished_s: Seconds each unfinished unit was seen running.
        qs: Quantiles by the CDF (``0.99`` is p99).
        level: Confidence level of the intervals.

    Returns:
        One estimate per quantile; `no_data` for each when there are no units.
    """
    n = len(finished_s) + len(unfinished_s)
    if n == 0:
        return tuple(no_data() for _ in qs)
    from tailkit.fit import empirical_quantiles

    latency = [*finished_s, *([math.nan] * len(unfinished_s))]
    censored = [*([math.nan] * len(finished_s)), *unfinished_s] if unfinished_s else None
    found = empirical_quantiles(latency, qs=qs, censored_at_s=censored, level=level)
    return tuple(
        Estimate(e.value, e.interval.low, e.interval.high, e.n, e.method, level) for e in found
    )
