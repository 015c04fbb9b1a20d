"""
Is the tail work-driven (it grows with call size) or transient (it comes in bursts in time)?
"""

from __future__ import annotations

import itertools
import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import stats


__all__ = ["TailGrowth", "TimeClustering", "tail_growth", "time_clustering"]

MIN_BUCKETS = 3  # below this no correlation is computed
EXACT_UP_TO = 8  # up to this many buckets the Spearman p-value is exact (all permutations)
RANK_TREND_BUCKETS = 5  # with fewer, no exact two-sided p-value can reach 0.05
MIN_START_TIMES = 50
MIN_EXPECTED = 5.0  # Cochran's rule for the chi-square approximation
ALPHA = 0.05
_RHO = "\u03c1"  # the Greek letter rho


@dataclass(frozen=True, slots=True)
class TailGrowth:
    """
    Whether the within-bucket tail ratio p99/p50 grows with the size of the call.

    Returned by `tail_growth` -- do not instantiate directly.

    Args:
        n_buckets: Buckets used (enough calls, a finite positive ratio).
        spearman_rho: Rank correlation of ratio with bucket order (NaN with fewer than 3
            buckets, or when either is constant).
        p_value: Two-sided p-value of ``spearman_rho``: exact over all orderings up to 8
            buckets, scipy's t approximation beyond.
        slope_per_bucket: Change in ``log(p99/p50)`` per bucket step, least squares weighted
            by each bucket's calls.
        grows: ``spearman_rho > 0`` and ``p_value < 0.05``.
        verdict: One plain sentence for a report.
    """

    n_buckets: int
    spearman_rho: float
    p_value: float
    slope_per_bucket: float
    grows: bool
    verdict: str


@dataclass(frozen=True, slots=True)
class TimeClustering:
    """
    Whether tail calls bunch up in time beyond what the load explains.

    Returned by `time_clustering` -- do not instantiate directly.

    Args:
        n: Calls with a known start time.
        n_tail: Of those, tail calls.
        window_s: Width of the time windows, in seconds.
        dispersion: Pearson chi-square of tail counts per window (sparse windows pooled,
            see `time_clustering`) over its degrees of freedom: about 1 when tail calls
            follow the load, above 1 when they bunch up.
        p_value: One-sided p-value of that excess (NaN when it cannot be tested).
        clustered: ``p_value < 0.05``.
        verdict: One plain sentence for a report.
    """

    n: int
    n_tail: int
    window_s: float
    dispersion: float
    p_value: float
    clustered: bool
    verdict: str


def tail_growth(
    bucket_order: npt.ArrayLike, ratio: npt.ArrayLike, n: npt.ArrayLike, *, min_calls: int = 200
) -> TailGrowth:
    """
    Test whether the tail ratio p99/p50 grows from smaller to larger calls.

    A tail that comes from the work itself (long prompts, long answers) grows with the call:
    a hedge would be just as slow. Failing to find growth is not evidence of the opposite:
    with six buckets a rank test needs rho >= 0.886, and a bucket's ratio reflects its width.
    `tail_kind` answers the question by conditioning on each call's size instead.

    Args:
        bucket_order: Position of each bucket on the size axis (0, 1, 2, ...; any increasing
            numbers work).
        ratio: p99/p50 of total latency within each bucket; NaN where unknown.
        n: Calls in each bucket.
        min_calls: Buckets with fewer calls are left out: their p99 is too noisy.

    Returns:
        The rank correlation, its p-value, the weighted slope and a verdict.

    Raises:
        ValueError: The three arrays differ in length.
    """
    order = np.asarray(bucket_order, dtype=np.float64).ravel()
    r = np.asarray(ratio, dtype=np.float64).ravel()
    calls = np.asarray(n, dtype=np.float64).ravel()
    if not order.shape == r.shape == calls.shape:
        msg = (
            f"bucket_order, ratio and n must have one entry per bucket, "
            f"got {order.size}, {r.size} and {calls.size}"
        )
        raise ValueError(msg)
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(order) & np.isfinite(r) & (r > 0.0) & (calls >= min_calls)
    order, log_r, calls = order[keep], np.log(r[keep]), calls[keep]
    k = int(order.size)
    rho = p = slope = math.nan
    if k >= MIN_BUCKETS and np.ptp(order) > 0.0:
        mean_x = np.average(order, weights=calls)
        mean_y = np.average(log_r, weights=calls)
        dx = order - mean_x
        slope = float(np.sum(calls * dx * (log_r - mean_y)) / np.sum(calls * dx * dx))
        if np.ptp(log_r) > 0.0:
            rho, p = _spearman(order, log_r)
    grows = rho > 0.0 and p < ALPHA
    if grows:
        verdict = (
            f"the tail ratio grows with call size ({_RHO}={rho:.2f}): the tail is work-driven, "
            "a parallel attempt would be slow too"
        )
    elif k < RANK_TREND_BUCKETS:
        verdict = (
            f"too few buckets to tell ({k} with {min_calls}+ calls; "
            f"a size trend needs {RANK_TREND_BUCKETS})"
        )
    else:
        rho_text = f"{_RHO}={rho:.2f}" if math.isfinite(rho) else "a flat ratio"
        verdict = (
            f"no significant growth of the tail ratio with call size ({rho_text}): that alone "
            "says nothing about whether a fresh attempt escapes the tail (see tail_kind)"
        )
    return TailGrowth(
        n_buckets=k,
        spearman_rho=rho,
        p_value=p,
        slope_per_bucket=slope,
        grows=bool(grows),
        verdict=verdict,
    )


def _spearman(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> tuple[float, float]:
    """
    Spearman's rho and its two-sided p-value; exact for small samples.

    scipy's p-value comes from a t approximation, which calls three perfectly ordered
    buckets significant (p = 0). Up to `EXACT_UP_TO` buckets every ordering of the ranks is
    enumerated instead (8! = 40,320 rows), which is what a rank test means at that size.
    """
    result = stats.spearmanr(x, y)
    rho = float(result.statistic)
    if x.size > EXACT_UP_TO:
        return rho, float(result.pvalue)
    rx = stats.rankdata(x) - (x.size + 1) / 2.0
    ry = stats.rankdata(y) - (y.size + 1) / 2.0
    orderings = np.array(list(itertools.permutations(range(y.size))))
    rhos = (ry[orderings] @ rx) / math.sqrt(float(rx @ rx) * float(ry @ ry))
    return rho, float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))


def time_clustering(
    started_at_s: npt.ArrayLike, is_tail: npt.ArrayLike, *, window_s: float = 60.0
) -> TimeClustering:
    """
    Test whether tail calls cluster in time beyond what the load explains.

    Provider incidents and rate-limit bursts make slow calls arrive together; a tail that
    does that is transient. Each window of ``window_s`` seconds that holds calls gets its
    share of tail calls, ``expected = calls in window x overall tail share``.

    The test is Pearson's chi-square for homogeneity of the 2 x W table (tail or not, by
    window), ``X2 = sum((tail - expected)^2 / (expected (1 - share)))``, against
    ``scipy.stats.chi2`` on ``W - 1`` degrees of freedom; ``dispersion = X2 / (W - 1)``
    (the index of dispersion of tail counts, with the load taken out). Only windows that
    hold calls count. The chi-square law needs expected counts of about 5 (Cochran): with
    sparse windows X2 keeps its mean but its variance grows, and independent tails come out
    "clustered" (a quarter of the time at 3 calls a window and a 1% tail). So consecutive
    windows are pooled, in time order, until each pool expects at least 5 tail calls (and
    5 others); a short last pool joins the one before. Dense data keeps its windows; sparse
    data is tested at the coarser scale it can support.

    Args:
        started_at_s: Start time of each call, epoch seconds; NaN where unknown.
        is_tail: Aligned flags: the call is in the tail (e.g. above its bucket's p95).
        window_s: Width of a time window, in seconds.

    Returns:
        The dispersion, its p-value and a verdict. With fewer than 50 known start times the
        verdict starts with "no start times" and the p-value is NaN.

    Raises:
        ValueError: The arrays differ in length, or ``window_s`` is not positive.
    """
    t = np.asarray(started_at_s, dtype=np.float64).ravel()
    tail = np.asarray(is_tail, dtype=bool).ravel()
    if t.shape != tail.shape:
        msg = f"started_at_s has {t.size} entries but is_tail has {tail.size}: pass one per call"
        raise ValueError(msg)
    if not window_s > 0.0:
        msg = f"window_s must be positive, got {window_s}"
        raise ValueError(msg)
    known = np.isfinite(t)
    t, tail = t[known], tail[known]
    n, n_tail = int(t.size), int(tail.sum())

    def untestable(verdict: str) -> TimeClustering:
        return TimeClustering(n, n_tail, window_s, math.nan, math.nan, False, verdict)

    if n < MIN_START_TIMES:
        return untestable(f"no start times ({n} calls have one; {MIN_START_TIMES} needed)")
    if n_tail in (0, n):
        return untestable(
            f"{'no' if n_tail == 0 else 'every'} call is in the tail: nothing to place"
        )
    _, window = np.unique(np.floor((t - t.min()) / window_s), return_inverse=True)
    if window.max() == 0:
        return untestable(f"all calls started within one {window_s:g} s window: nothing to compare")
    share = n_tail / n
    calls, tails = _pool(window, tail, share)
    if calls.size < 2:
        return untestable(f"too few tail calls ({n_tail}) to compare time windows")
    x2 = float(np.sum((tails - calls * share) ** 2 / (calls * share * (1.0 - share))))
    dispersion = x2 / (calls.size - 1)
    p = float(stats.chi2.sf(x2, calls.size - 1))
    clustered = p < ALPHA
    if clustered:
        verdict = (
            f"tail calls cluster in time (dispersion {dispersion:.1f}, p={p:.2g}): "
            "slow spells such as provider incidents or rate-limit bursts"
        )
    else:
        verdict = (
            f"tail calls are spread over time as the load predicts "
            f"(dispersion {dispersion:.1f}, p={p:.2g})"
        )
    return TimeClustering(n, n_tail, window_s, dispersion, p, clustered, verdict)


def _pool(
    window: npt.NDArray[np.intp], tail: npt.NDArray[np.bool_], share: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """
    Calls and tail calls per pool of consecutive windows that expects 5+ of each kind.
    """
    calls = np.bincount(window).astype(np.float64)
    expected = calls * min(share, 1.0 - share)
    pool = np.empty(calls.size, dtype=np.int64)
    # Greedy: a pool takes windows until its expected count reaches MIN_EXPECTED. A pool's
    # running sum is a cumsum from its first window (numpy accumulates in order, as a loop
    # would, so the pools are the same to the bit); the span looked at doubles until it fills.
    current, filled, start = 0, 0.0, 0
    span = 2 * int(MIN_EXPECTED / max(float(np.mean(expected)), 1e-12)) + 16 if calls.size else 0
    while start < calls.size:
        sums = np.cumsum(expected[start : start + span])
        full = np.flatnonzero(sums >= MIN_EXPECTED)
        if full.size:
            end = start + int(full[0]) + 1
            pool[start:end] = current
            current, filled, start = current + 1, 0.0, end
        elif start + span >= calls.size:
            pool[start:] = current
            filled, start = float(sums[-1]), calls.size
        else:
            span *= 2
    if filled > 0.0 and current > 0:
        pool[pool == current] = current - 1
    per_call = pool[window]
    pooled_calls = np.bincount(per_call).astype(np.float64)
    return pooled_calls, np.bincount(per_call, weights=tail.astype(np.float64)).astype(np.float64)
