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

from tailkit.fit._types import Interval


__all__ = [
    "QuantileEstimate",
    "empirical_quantiles",
    "min_calls_for_quantile",
    "quantile_warning",
    "tail_warning",
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
    interval: Interval
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


def _check_level(level: float) -> float:
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
    """
    # Hahn & Meeker (1991, §5.2): with B ~ Binomial(n, q) the number of calls at or below the
    # true q-quantile xi, P(x_(l) <= xi < x_(u)) = P(l <= B <= u - 1) for continuous latency.
    # Taking l = the alpha/2 binomial quantile and u = 1 + the (1 - alpha/2) quantile makes each
    # tail miss with probability at most alpha/2, so the coverage is at least 1 - alpha whatever
    # the distribution. Ranks outside 1..n mean the sample cannot bound that side. The same
    # ranks come out of scipy.stats.quantile_test(...).confidence_interval(), but this way the
    # ranks of all samples and q are one array call. At tiny n or low levels the rank interval
    # can miss the type-7 point estimate (which interpolates between neighbours); it is widened
    # to contain it. The point estimate is numpy's default "linear" = type 7 = DuckDB
    # quantile_cont, computed as numpy does (np.quantile would partition every sample again).
    from scipy import stats

    n, first = sizes[:, None], starts[:, None]
    at = (n - 1) * q[None, :]
    below = np.floor(at)
    gamma = at - below
    lo = x[first + below.astype(np.int64)]
    hi = x[first + np.minimum(below.astype(np.int64) + 1, n - 1)]
    diff = hi - lo
    value = np.where(gamma >= 0.5, hi - diff * (1.0 - gamma), lo + diff * gamma)
    low_rank = np.asarray(stats.binom.ppf(alpha / 2.0, n, q), dtype=np.int64)
    high_rank = _upper_rank(n, q, alpha)
    low = np.where(low_rank >= 1, x[first + np.clip(low_rank - 1, 0, n - 1)], 0.0)
    high = np.where(high_rank <= n, x[first + np.clip(high_rank - 1, 0, n - 1)], math.inf)
    return value, np.minimum(low, value), np.maximum(high, value)


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
    alpha = _check_level(level)
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
            interval=Interval(float(lo), float(hi), level),
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
    alpha = _check_level(level)
    q = float(_check_qs([q])[0])
    n = max(1, math.ceil(math.log(alpha / 2.0) / math.log(q)))
    # The closed form can be one off at the boundary in floating point: settle it with the very
    # binomial ranks the intervals use.
    while int(_upper_rank(n, q, alpha)) > n:
        n += 1
    while n > 1 and int(_upper_rank(n - 1, q, alpha)) <= n - 1:
        n -= 1
    return n


def _label(q: float) -> str:
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
    return f"{_label(q)} from {n} calls is not bounded above: it needs at least {needed} calls"


# The tail warning. A p99's upper end is unbounded for one of two reasons: too few calls (no
# order statistic is high enough: 368 calls at 95 %), or cut calls (the Kaplan-Meier band never
# gets down to 1 %). The table also shows p99/p50 with each end at (1 + level) / 2, so that the
# ratio's interval holds at ``level``; that takes more calls (437 at 95 %). The warning fires
# when either upper end is unbounded and says what would bound it.
#
# With cut calls, "what would bound it" comes from the curve itself. Calls like these -- the
# same latencies and the same cuts, m times over -- keep S(t) and divide Greenwood's sum G(t)
# by m, and the log-log band's upper end drops to 1 - q at t as soon as
# z^2 G(t) / m <= (L log(L / L_q))^2, with L = -log S(t) and L_q = -log(1 - q). More calls also
# fill in each step of the curve: after a share u of the d events of a step with r at risk,
# S = S_before (1 - u d / r) and G = G_before + u d / (r (r - u d)). The smallest m over a grid
# of u in every step, times n, is the number of calls reported; never fewer than a curve without
# cuts needs (538 at 95 %: the band is wider than the order statistics' interval). It errs low:
# the curve cannot show the cuts beyond its own end, which only add. Measured at 1,000 calls
# with exponential cut ages (11 % cut) it says ~1,100-1,600 where half of fresh samples are
# bounded at ~1,600 calls, and with hedge cuts ~6,000-16,000 where that takes ~40,000. Without
# cuts, S = k / n at the (n - k)-th latency and G = 1 / k - 1 / n exactly, so the largest k that
# bounds the quantile says how far every call must be followed: "no cut before" that quantile,
# which then bounds it for certain.
_STEP_GRID = np.arange(1, 65) / 64.0


def _bounding_rank(n: int, q: float, z: float) -> int:
    # Largest k < (1 - q) n whose uncensored curve, S = k / n, bounds quantile q; 0 if none.
    k = np.arange(1, math.ceil((1.0 - q) * n), dtype=np.float64)
    k = k[k < (1.0 - q) * n]
    room = np.log(n / k) * np.log(np.log(n / k) / -math.log(1.0 - q))
    ok = z * z * (1.0 / k - 1.0 / n) <= room**2
    return int(k[ok].max()) if ok.any() else 0


@functools.lru_cache(maxsize=16)
def _uncut_calls(q: float, z: float) -> int:
    # Fewest calls, none cut, whose Kaplan-Meier band bounds quantile q (538 for p99 at 95 %).
    n = min_calls_for_quantile(q)
    while _bounding_rank(n, q, z) == 0:
        n += 1
    return n


def _what_bounds(km: KaplanMeier, n: int, q: float, level: float) -> tuple[int, int]:
    # (about how many calls cut like these would bound quantile q, the largest k of "none cut
    # before the (n - k)-th latency", 0 when these n calls are too few even uncut).
    from scipy import special

    target, z = 1.0 - q, float(special.ndtri(0.5 + level / 2.0))
    steps = np.flatnonzero((km.events > 0) & (km.survival < target))
    s_before = np.concatenate([[1.0], km.survival])[steps]
    g_before = np.concatenate([[0.0], km.greenwood])[steps]
    r, share = km.at_risk[steps, None], _STEP_GRID[None, :] * km.events[steps, None]
    s = s_before[:, None] * (1.0 - share / r)
    inside = (s > 0.0) & (s < target * (1.0 - 1e-9))
    s = np.where(inside, s, target / 2.0)
    with np.errstate(divide="ignore"):
        g = g_before[:, None] + share / (r * (r - share))
    room = -np.log(s) * np.log(np.log(s) / math.log(target))
    needed = np.where(inside & np.isfinite(g), z * z * g / room**2, math.inf)
    scale = float(needed.min()) if needed.size else math.inf
    floor = _uncut_calls(q, z)
    # these n calls do not bound it, whatever the filled-in steps suggest
    calls = max(math.ceil(scale * n) if math.isfinite(scale) else 0, floor, n + 1)
    return calls, _bounding_rank(n, q, z)


def _seconds(x: float) -> str:
    return f"{x:,.0f} s" if x >= 100.0 else f"{x:.3g} s"


def tail_warning(
    latency_s: ArrayLike, *, censored_at_s: ArrayLike | None = None, level: float = 0.95
) -> str | None:
    """
    A warning when the p99's upper end, or p99/p50's, is unbounded, saying what would bound it.

    The ends are those of `empirical_quantiles`: the p99's at ``level``, p99/p50's from the
    p99 and p50 each at ``(1 + level) / 2`` (so that the ratio's interval holds at ``level``).
    Without cut calls only the number of calls matters (368 for the p99, 437 for p99/p50 at
    95 %). With cut calls the Kaplan-Meier band decides (538 calls at the least, none cut), and
    the warning counts the calls cut before the p99, estimates from the curve the fewest calls
    cut like these that could bound it (an estimate that errs low), and names the
    quantile before which no call may be cut for these calls to bound it.

    Args:
        latency_s: Latency of each call in seconds; NaN for an uncensored call drops it.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            NaN for calls that were not cut; ``None`` when no call was cut.
        level: Confidence level of the intervals.

    Returns:
        ``None`` when both upper ends are bounded, else one line, for example
        ``"p99 from 120 calls is not bounded above: it needs at least 368 calls (p99/p50:
        437)"``, ``"p99/p50's upper end is unbounded: it needs at least 437 calls, this group
        has 400 (each end at 97.5%)"`` or ``"p99's upper end is unbounded: 100 of 1,000
        calls were cut before 61.6 s, the p99 (100 cut in all); bounding it takes at least
        ~5,800 calls cut like these, or no cut before the p99.6 (at least 61.6 s)"``; when cut
        calls hide the p99 itself, ``"p99 is hidden by cut calls (125 cut in all): 3 of 1,000
        calls were cut after the last finished one (30.9 s), so the survival curve stops at
        2.4%, above the p99's 1%; only calls followed past the p99 (more than 30.9 s) can bound
        it"``.

    Raises:
        ValueError: ``level`` outside (0, 1), or invalid latencies (see ``split_censored``).
    """
    from scipy import special

    _check_level(level)
    wide = (1.0 + level) / 2.0
    observed, censored = split_censored(latency_s, censored_at_s)
    n = observed.size + censored.size
    if censored.size == 0:
        p99 = min_calls_for_quantile(0.99, level=level)
        ratio = max(min_calls_for_quantile(0.99, level=wide), min_calls_for_quantile(0.5))
        if n < p99:
            return (
                f"p99 from {n:,} calls is not bounded above: it needs at least {p99:,} calls "
                f"(p99/p50: {ratio:,})"
            )
        if n < ratio:
            return (
                f"p99/p50's upper end is unbounded: it needs at least {ratio:,} calls, this "
                f"group has {n:,} (each end at {wide:.1%})"
            )
        return None
    km = KaplanMeier.fit(observed, censored)
    value, p99_low, p99_high = (float(a[0]) for a in km.quantiles(np.array([0.99]), level))
    _, low, high = km.quantiles(np.array([0.5, 0.99]), wide)
    if math.isfinite(p99_high) and math.isfinite(float(high[1])) and float(low[0]) > 0.0:
        return None
    subject, at = ("p99", level) if math.isinf(p99_high) else ("p99/p50", wide)
    cut_in_all = f"{censored.size:,} cut in all"
    floor = _uncut_calls(0.99, float(special.ndtri(0.5 + at / 2.0)))
    if math.isinf(value):
        also = f" (and at least {floor:,} calls)" if n < floor else ""
        if observed.size == 0:
            return f"p99 is hidden by cut calls: none of {n:,} calls finished{also}"
        last = float(observed.max())
        after = int(np.count_nonzero(censored >= last))
        return (
            f"p99 is hidden by cut calls ({cut_in_all}): {after:,} of {n:,} calls were cut "
            f"after the last finished one ({_seconds(last)}), so the survival curve stops at "
            f"{float(km.survival[-1]):.1%}, above the p99's 1%; only calls followed past the "
            f"p99 (more than {_seconds(p99_low)}) can bound it{also}"
        )
    before = int(np.count_nonzero(censored < value))
    calls, rank = _what_bounds(km, n, 0.99, at)
    if calls == floor:
        shown = f"{calls:,}"
    else:  # two significant digits, rounded up, as "at least" promises
        unit = 10 ** max(len(str(calls)) - 2, 0)
        shown = f"~{-(-calls // unit) * unit:,}"
    remedy = f"bounding it takes at least {shown} calls cut like these"
    if rank:
        # follow every call to the (n - rank)-th latency, named by its quantile rounded up
        follow = math.ceil(1000.0 * (1.0 - rank / n)) / 1000.0
        (far,) = km.quantiles(np.array([follow]), level)[0]
        # at the end of the curve the quantile is only known to be at least that far out
        end = float(km.times[-1])
        where = f"at least {_seconds(end)}" if far >= end else _seconds(far)
        remedy += f", or no cut before the {_label(follow)} ({where})"
    wide_note = f" (each end at {wide:.1%})" if subject == "p99/p50" else ""
    return (
        f"{subject}'s upper end is unbounded{wide_note}: {before:,} of {n:,} calls were cut "
        f"before {_seconds(value)}, the p99 ({cut_in_all}); {remedy}"
    )
