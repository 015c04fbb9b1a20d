"""
Distribution-free quantiles of latency with exact or Kaplan-Meier confidence intervals.
"""

from __future__ import annotations

import functools
import math

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from numpy.typing import ArrayLike, NDArray

from tailkit.estimate import Estimate


__all__ = [
    "QuantileEstimate",
    "empirical_quantiles",
    "min_calls_for_quantile",
    "quantile_warning",
]

ORDER_STATISTICS = "order statistics"
KAPLAN_MEIER = "Kaplan-Meier"

# KM survival values are cumulative products; 1 - 50/100 may come out as 0.5000000000000001.
_KM_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """
    One quantile of latency, with its confidence interval.

    Args:
        q: The quantile by the CDF (``0.99`` is p99).
        value: The estimate in seconds; ``math.inf`` when censoring hides it (the Kaplan-Meier
            curve never reaches ``q``: the quantile lies beyond the last observed time).
        interval: Confidence interval in seconds; ``high`` is ``math.inf`` and ``low`` is ``0.0``
            when the data cannot bound that side (too few calls, or too much censoring).
        n: Calls used, censored ones included.
        method: ``"order statistics"`` or ``"Kaplan-Meier"``.
    """

    q: float
    value: float
    interval: Estimate
    n: int
    method: str


def split_censored(
    latency_s: ArrayLike, censored_at_s: ArrayLike | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """
    Split calls into observed latencies and right-censoring times, validating both.

    A call is censored when its ``censored_at_s`` is finite; its latency entry is then ignored.
    An uncensored call with a NaN latency is dropped.

    Args:
        latency_s: Latency of each call in seconds.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            NaN or ``math.inf`` for a call that was not cut; ``None`` when no call was cut.

    Returns:
        The observed latencies and the censoring times, both 1-D float arrays in input order.

    Raises:
        ValueError: The arrays are not 1-D or not aligned, a latency is negative or infinite,
            or a censoring time is negative.
    """
    x = np.asarray(latency_s, dtype=np.float64)
    if x.ndim != 1:
        msg = f"latency_s must be a 1-D array of seconds, got shape {x.shape}"
        raise ValueError(msg)
    if censored_at_s is None:
        observed = x[~np.isnan(x)]
        censored = np.empty(0, dtype=np.float64)
    else:
        c = np.asarray(censored_at_s, dtype=np.float64)
        if c.shape != x.shape:
            msg = (
                f"censored_at_s must be aligned with latency_s: got {c.size} entries "
                f"for {x.size} calls"
            )
            raise ValueError(msg)
        cut = np.isfinite(c)
        censored = c[cut]
        observed = x[~cut]
        observed = observed[~np.isnan(observed)]
        if censored.size and censored.min() < 0:
            msg = f"censored_at_s must be non-negative, got {float(censored.min())!r}"
            raise ValueError(msg)
    bad = ~np.isfinite(observed) | (observed < 0)
    if bad.any():
        value = float(observed[bad][0])
        msg = (
            f"latency_s must be finite and non-negative, got {value!r}; a call that never "
            "finished belongs in censored_at_s"
        )
        raise ValueError(msg)
    return observed, censored


def check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        msg = f"level must be between 0 and 1 (e.g. 0.95), got {level!r}"
        raise ValueError(msg)
    return 1.0 - level


def _check_qs(qs: Sequence[float]) -> NDArray[np.float64]:
    q = np.asarray(qs, dtype=np.float64).reshape(-1)
    bad = ~((q > 0.0) & (q < 1.0))
    if bad.any():
        msg = f"qs must be quantiles by the CDF strictly between 0 and 1 (0.99 is p99), got {qs!r}"
        raise ValueError(msg)
    return q


def _upper_rank(
    n: int | NDArray[np.int64], q: float | NDArray[np.float64], alpha: float
) -> NDArray[np.int64]:
    # 1-based rank u of the upper bound x_(u): the smallest u with P(B <= u - 1) >= 1 - alpha/2,
    # B ~ Binomial(n, q) the number of calls below the true quantile. u > n means unbounded.
    from scipy import stats

    ranks = stats.binom.ppf(1.0 - alpha / 2.0, n, q)
    return np.asarray(ranks, dtype=np.int64) + 1


def _order_statistic_quantiles(
    x: NDArray[np.float64], q: NDArray[np.float64], alpha: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    x = np.sort(x)
    value, low, high = sorted_quantiles(x, np.zeros(1, np.int64), np.array([x.size]), q, alpha)
    return value[0], low[0], high[0]


@dataclass(frozen=True, slots=True)
class OrderStatisticRanks:
    """
    Which order statistics of ``n`` sorted calls give each quantile and its interval.

    Arrays of shape (samples, q). 0-based indexes into each sorted sample: ``below`` and
    ``above`` bracket the type-7 point estimate, which is ``gamma`` of the way from one to the
    other; ``low`` and ``high`` are the interval's ends, -1 (``low``) or ``n`` (``high``) when
    the sample cannot bound that side. Every index is in ``0 .. n - 1`` otherwise.
    """

    n: NDArray[np.int64]
    below: NDArray[np.int64]
    above: NDArray[np.int64]
    gamma: NDArray[np.float64]
    low: NDArray[np.int64]
    high: NDArray[np.int64]

    @classmethod
    def of(
        cls, sizes: NDArray[np.int64], q: NDArray[np.float64], alpha: float
    ) -> OrderStatisticRanks:
        """
        The ranks for samples of ``sizes`` calls (none empty), quantiles ``q``, level 1 - alpha.

        One call for every sample is far cheaper than one per sample (about 30 ms for 1,600
        sizes against 1 ms each: the binomial quantiles of all of them are one array call);
        `take` then gives a sample's row.
        """
        # Hahn & Meeker (1991, §5.2): with B ~ Binomial(n, q) the number of calls at or below
        # the true q-quantile xi, P(x_(l) <= xi < x_(u)) = P(l <= B <= u - 1) for continuous
        # latency. Taking l = the alpha/2 binomial quantile and u = 1 + the (1 - alpha/2)
        # quantile makes each tail miss with probability at most alpha/2, so the coverage is at
        # least 1 - alpha whatever the distribution. Ranks outside 1..n mean the sample cannot
        # bound that side. The same ranks come out of
        # scipy.stats.quantile_test(...).confidence_interval(), but this way the ranks of all
        # samples and q are one array call.
        from scipy import stats

        n = np.asarray(sizes, dtype=np.int64)[:, None]
        at = (n - 1) * q[None, :]
        below = np.floor(at)
        gamma = at - below
        # both ends' binomial quantiles in one call, once per distinct size
        distinct, back = np.unique(n[:, 0], return_inverse=True)
        ends = np.array([alpha / 2.0, 1.0 - alpha / 2.0])[:, None, None]
        found = stats.binom.ppf(ends, distinct[:, None], q[None, :])
        low_rank, high_rank = np.asarray(found, dtype=np.int64)[:, back.reshape(-1)]
        high_rank = high_rank + 1  # as `_upper_rank`
        return cls(
            n=np.broadcast_to(n, gamma.shape).copy(),
            below=below.astype(np.int64),
            above=np.minimum(below.astype(np.int64) + 1, n - 1),
            gamma=gamma,
            low=np.where(low_rank >= 1, np.clip(low_rank - 1, 0, n - 1), -1),
            high=np.where(high_rank <= n, np.clip(high_rank - 1, 0, n - 1), n),
        )

    def take(self, rows: NDArray[np.intp] | slice) -> OrderStatisticRanks:
        """
        The ranks of the samples ``rows`` only (``rows=[i]``: sample ``i``'s, shape (1, q)).
        """
        return OrderStatisticRanks(
            n=self.n[rows], below=self.below[rows], above=self.above[rows],
            gamma=self.gamma[rows], low=self.low[rows], high=self.high[rows],
        )  # fmt: skip

    def quantiles(
        self,
        x_below: NDArray[np.float64],
        x_above: NDArray[np.float64],
        x_low: NDArray[np.float64],
        x_high: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """
        Value, low and high from the order statistics at ``below``, ``above``, ``low``, ``high``.

        Entries of ``x_low`` / ``x_high`` where the side is unbounded are ignored.
        """
        # At tiny n or low levels the rank interval can miss the type-7 point estimate (which
        # interpolates between neighbours); it is widened to contain it. The point estimate is
        # numpy's default "linear" = type 7 = DuckDB quantile_cont, computed as numpy does.
        value = _lerp(x_below, x_above, self.gamma)
        low = np.where(self.low >= 0, x_low, 0.0)
        high = np.where(self.high < self.n, x_high, math.inf)
        return value, np.minimum(low, value), np.maximum(high, value)


def sorted_quantiles(
    x: NDArray[np.float64],
    starts: NDArray[np.int64],
    sizes: NDArray[np.int64],
    q: NDArray[np.float64],
    alpha: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """
    Order-statistic quantiles of many sorted samples: value, low and high, each (samples, q).

    Sample ``i`` is ``x[starts[i] : starts[i] + sizes[i]]``, sorted ascending, none empty.
    The ranks are `OrderStatisticRanks` (np.quantile would partition every sample again).
    """
    ranks = OrderStatisticRanks.of(sizes, q, alpha)
    first = starts[:, None]

    def at(index: NDArray[np.int64]) -> NDArray[np.float64]:
        return x[first + np.clip(index, 0, ranks.n - 1)]

    return ranks.quantiles(at(ranks.below), at(ranks.above), at(ranks.low), at(ranks.high))


def _first_at_or_below(
    curve: NDArray[np.float64], threshold: NDArray[np.float64]
) -> NDArray[np.int64]:
    # Index of the first point where a survival curve is <= threshold (len(curve) when never).
    # The running minimum turns "first point at or below" into a search in a sorted array.
    running = -np.minimum.accumulate(curve)
    return np.searchsorted(running, -(threshold + _KM_TOLERANCE), side="left").astype(np.int64)


@dataclass(frozen=True, slots=True)
class KaplanMeier:
    """
    Strictly private: a Kaplan-Meier curve at each distinct time, events and cuts alike.

    ``survival[i]`` is S(times[i]) (right-continuous), ``greenwood[i]`` the running sum of
    ``d / (r (r - d))`` (infinite once the curve reaches 0), ``at_risk`` and ``events`` the
    r and d of each time. A cut at the same time as an event is still at risk for it.
    """

    times: NDArray[np.float64]
    survival: NDArray[np.float64]
    greenwood: NDArray[np.float64]
    at_risk: NDArray[np.float64]
    events: NDArray[np.float64]

    @classmethod
    def fit(cls, observed: NDArray[np.float64], censored: NDArray[np.float64]) -> KaplanMeier:
        """
        The curve of completed latencies ``observed`` and cut ages ``censored`` (seconds).
        """
        # The same numbers as scipy.stats.ecdf on CensoredData (a test checks), in one sort.
        values = np.concatenate([observed, censored])
        died = np.concatenate([np.ones(observed.size), np.zeros(censored.size)])
        order = np.argsort(values, kind="stable")
        t, died = values[order], died[order]
        gap = np.diff(t) > 0
        first = np.concatenate([[True], gap])
        last = np.concatenate([gap, [True]])
        at_risk = np.arange(t.size, 0, -1, dtype=np.float64)[first]
        events = np.diff(np.cumsum(died)[last], prepend=0.0)
        with np.errstate(divide="ignore"):
            greenwood = np.cumsum(events / (at_risk * (at_risk - events)))
        survival = np.cumprod((at_risk - events) / at_risk)
        return cls(t[first], survival, greenwood, at_risk, events)

    def band(self, level: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """
        The pointwise log-log band (Greenwood variance), ``(low, high)`` at each time.

        Where it is undefined (S = 1 before the first completed call; S = 0 after the last)
        it is ``low = high = 1`` and ``low = 0, high = 1``: nothing claims more than the data
        show, so a curve that ends at zero never by itself bounds a quantile from above.
        """
        from scipy import special

        s = self.survival
        inner = (s > 0.0) & (s < 1.0)
        safe = np.where(inner, s, 0.5)
        log_s = np.log(safe)
        se = np.sqrt(np.where(inner, self.greenwood, 0.0)) / -log_s
        z = float(special.ndtri(0.5 + level / 2.0))
        low = np.exp(log_s * np.exp(z * se))
        high = np.exp(log_s * np.exp(-z * se))
        return np.where(inner, low, np.where(s >= 1.0, 1.0, 0.0)), np.where(inner, high, 1.0)

    def quantiles(
        self, q: NDArray[np.float64], level: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """
        Value, low and high of each quantile ``q`` (see `empirical_quantiles`).
        """
        # The q-quantile is the first time with S(t) <= 1 - q; where S sits at exactly 1 - q
        # until the next completed call, the midpoint of the two (R's survival::quantile and
        # the sample median of even n, so one cut does not move the median by half a gap).
        # The interval inverts the band (Brookmeyer & Crowley 1982): the quantile is plausibly
        # at t while 1 - q lies inside the band there, so it runs from the first t with
        # S_lo(t) <= 1 - q to the first t with S_hi(t) <= 1 - q. When even S_lo stays above
        # 1 - q, every observed time is too early: the bound is the last.
        s_lo, s_hi = self.band(level)
        times, target, m = self.times, 1.0 - q, self.times.size
        padded = np.append(times, math.inf)
        at = _first_at_or_below(self.survival, target)
        below = _first_at_or_below(self.survival, target - 2.0 * _KM_TOLERANCE)
        flat = (at < m) & (below < m) & (below > at)
        value = np.where(flat, (padded[at] + padded[np.minimum(below, m)]) / 2.0, padded[at])
        at_low = _first_at_or_below(s_lo, target)
        low = np.where(at_low < m, padded[np.minimum(at_low, m)], times[-1])
        high = padded[_first_at_or_below(s_hi, target)]
        return value, np.minimum(low, value), np.maximum(high, value)


def _kaplan_meier_quantiles(
    observed: NDArray[np.float64],
    censored: NDArray[np.float64],
    q: NDArray[np.float64],
    level: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    return KaplanMeier.fit(observed, censored).quantiles(q, level)


def empirical_quantiles(
    latency_s: ArrayLike,
    *,
    qs: Sequence[float] = (0.5, 0.9, 0.95, 0.99),
    censored_at_s: ArrayLike | None = None,
    level: float = 0.95,
) -> tuple[QuantileEstimate, ...]:
    """
    Distribution-free quantiles of latency with confidence intervals.

    Without censoring: the sample quantile of numpy's default ``"linear"`` method (type 7, the
    same number as DuckDB ``quantile_cont``) and the exact order-statistic interval
    ``[x_(l), x_(u)]`` with binomial ranks (Hahn-Meeker). With censored calls: the Kaplan-Meier
    quantile, with the interval from inverting the Kaplan-Meier confidence band (log-log,
    Greenwood). A call cut at the same age as a call that finished was still running when that
    one finished. The Kaplan-Meier quantile is the first time where the survival curve is at
    or below ``1 - q``, or, where it sits at exactly ``1 - q`` until the next finished call,
    the midpoint of the two (as R's ``survival`` package): so cutting a call above the median
    leaves the median of an even sample where numpy puts it. Elsewhere, with no call cut below
    it, the Kaplan-Meier quantile is the inverted-CDF sample quantile (type 1), which differs
    from the type 7 of uncensored samples by less than the gap between two neighbouring
    latencies (the p99 of 1,000 lognormal calls with sigma 0.8: 1.6 % on average).

    Args:
        latency_s: Latency of each call in seconds; NaN for an uncensored call drops it.
        qs: Quantiles by the CDF (``0.99`` is p99), each strictly between 0 and 1.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            the call's true latency is larger, and its ``latency_s`` entry is ignored. NaN for
            calls that were not cut. ``None``: no call was cut.
        level: Confidence level of the intervals.

    Returns:
        One estimate per entry of ``qs``, in the same order; monotone in ``q``. A side the data
        cannot bound is ``0.0`` (low) or ``math.inf`` (high); a quantile hidden by censoring
        has ``value == math.inf`` (report it as "more than ``interval.low``").

    Raises:
        ValueError: No calls, a quantile outside (0, 1), a level outside (0, 1), or invalid
            latencies (see ``split_censored``).
    """
    alpha = check_level(level)
    q = _check_qs(qs)
    observed, censored = split_censored(latency_s, censored_at_s)
    n = observed.size + censored.size
    if n == 0:
        msg = "latency_s has no calls to take quantiles of (empty, or all NaN)"
        raise ValueError(msg)
    if q.size == 0:
        return ()
    if censored.size:
        method = KAPLAN_MEIER
        value, low, high = _kaplan_meier_quantiles(observed, censored, q, level)
    else:
        method = ORDER_STATISTICS
        value, low, high = _order_statistic_quantiles(observed, q, alpha)
    return tuple(
        QuantileEstimate(
            q=float(qi),
            value=float(v),
            interval=Estimate(float(v), float(lo), float(hi), n, method, level),
            n=n,
            method=method,
        )
        for qi, v, lo, hi in zip(q, value, low, high, strict=True)
    )


@functools.lru_cache(maxsize=64)
def min_calls_for_quantile(q: float, *, level: float = 0.95) -> int:
    """
    Fewest calls for which the order-statistic interval of quantile ``q`` is bounded above.

    The highest rank the interval can use is the maximum, x_(n); it is a valid upper bound when
    the chance that all n calls fall below the true quantile is at most the tail ``(1-level)/2``
    that the two-sided interval allows: ``q**n <= (1 - level) / 2``, so
    ``n = ceil(log((1 - level) / 2) / log(q))``. For p99 at 95 %: 0.99**367 = 0.02501 > 0.025
    but 0.99**368 = 0.02476, so **368 calls** (0.99**n <= 0.05 for a one-sided bound would
    need 299). p95 needs 72, p90 needs 36, p50 needs 6, p99.9 needs 3,688.

    Args:
        q: Quantile by the CDF (``0.99`` is p99), strictly between 0 and 1.
        level: Two-sided confidence level.

    Returns:
        The smallest n, consistent with the ranks `empirical_quantiles` uses.

    Raises:
        ValueError: ``q`` or ``level`` outside (0, 1).
    """
    alpha = check_level(level)
    q = float(_check_qs([q])[0])
    n = max(1, math.ceil(math.log(alpha / 2.0) / math.log(q)))
    # The closed form can be one off at the boundary in floating point: settle it with the very
    # binomial ranks the intervals use.
    while int(_upper_rank(n, q, alpha)) > n:
        n += 1
    while n > 1 and int(_upper_rank(n - 1, q, alpha)) <= n - 1:
        n -= 1
    return n


def label(q: float) -> str:
    return f"p{round(q * 100.0, 6):g}"


def quantile_warning(n: int, q: float = 0.99, *, level: float = 0.95) -> str | None:
    """
    A warning when ``n`` uncensored calls cannot bound quantile ``q`` from above, else ``None``.

    It counts calls only: with cut calls, and for p99/p50, use `tail_warning`.

    Args:
        n: Number of calls.
        q: Quantile by the CDF (``0.99`` is p99).
        level: Two-sided confidence level.

    Returns:
        For example ``"p99 from 120 calls is not bounded above: it needs at least 368 calls"``.

    Raises:
        ValueError: ``n`` negative, or ``q`` or ``level`` outside (0, 1).
    """
    if n < 0:
        msg = f"n must be a number of calls (>= 0), got {n!r}"
        raise ValueError(msg)
    needed = min_calls_for_quantile(q, level=level)
    if n >= needed:
        return None
    return f"{label(q)} from {n} calls is not bounded above: it needs at least {needed} calls"


QUANTILE_METHODS = ("linear", "inverted_cdf", "lower", "higher", "nearest")
"""The sample-quantile definitions `quantile` knows, named as numpy names them."""


def quantile(
    values: ArrayLike, q: float, *, method: str = "linear", presorted: bool = False
) -> float:
    """
    The ``q`` sample quantile of ``values``: the one quantile function of tailkit.

    ``"linear"`` (the default) is Hyndman and Fan's type 7, numpy's default and DuckDB's
    ``quantile_cont``: the number `tailkit stats` prints, the cutoff grid `calibrate` searches
    and the quantiles `replay` compares all use it, so a p95 is one number everywhere.
    ``"inverted_cdf"`` (type 1) is the smallest value whose empirical CDF reaches ``q``.

    Args:
        values: The sample (any order unless ``presorted``); must not be empty.
        q: The probability, in [0, 1].
        method: One of `QUANTILE_METHODS`.
        presorted: ``values`` is already sorted ascending (read in O(1), not partitioned).

    Returns:
        The quantile, a float.

    Raises:
        ValueError: ``values`` is empty, ``q`` is outside [0, 1], or ``method`` is unknown.
    """
    if method not in QUANTILE_METHODS:
        msg = f"unknown quantile method {method!r}: use one of {', '.join(QUANTILE_METHODS)}"
        raise ValueError(msg)
    if not 0.0 <= q <= 1.0:
        msg = f"quantile probability {q!r} is outside [0, 1]"
        raise ValueError(msg)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        msg = "the quantile of an empty sample is undefined"
        raise ValueError(msg)
    if not presorted:
        return float(np.quantile(x, q, method=method))  # type: ignore[call-overload]
    n = x.size
    if method == "inverted_cdf":
        return float(x[min(max(math.ceil(q * n) - 1, 0), n - 1)])
    h = (n - 1) * q
    below = min(math.floor(h), n - 1)
    if method == "lower":
        return float(x[below])
    above = min(below + 1, n - 1)
    if method == "higher":
        return float(x[above if h > below else below])
    if method == "nearest":
        return float(x[int(np.round(h))])
    return float(_lerp(x[below], x[above], h - below))


def _lerp(
    below: NDArray[np.float64] | np.float64,
    above: NDArray[np.float64] | np.float64,
    gamma: NDArray[np.float64] | float,
) -> NDArray[np.float64]:
    # numpy's type-7 interpolation, step for step: from the nearer neighbour, so that the
    # quantile of a sorted sample here is np.quantile's to the last bit
    diff = above - below
    return np.asarray(np.where(gamma >= 0.5, above - diff * (1.0 - gamma), below + diff * gamma))
