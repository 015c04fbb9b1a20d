"""
Latency net of call size: a robust regression on token counts, and the tail left beyond it.

A call that is slow because it is big is slow again when retried; a call that is slow beyond
what its size predicts is slowed by something a fresh attempt may not meet. This module
splits the two: `size_model` regresses log latency on log token counts, `residual_tail`
measures the share of calls slower than the body of same-size calls can explain.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import stats

from tailkit.estimate import Estimate
from tailkit.fit._quantiles import KaplanMeier


__all__ = ["ResidualTail", "SizeModel", "residual_tail", "size_model"]

_Array = npt.NDArray[np.float64]

HUBER_K = 1.345  # 95 % efficiency at the normal, bounded influence of slow outliers (Huber 1981)
IRLS_STEPS = 30
FIT_MAX_N = 20_000  # the regression fits on a seeded subsample of at most this many calls
KNOWN_SHARE = 0.8  # a token count is used when at least 80 % of finished calls have one
MIN_LOG_SPREAD = 0.05  # and its log varies by more than this (5 %): else size cannot matter
TAIL_Z = 3.0  # a residual tail call lies 3 body spreads beyond a same-size call's median ...
TAIL_FLOOR = math.log(1.25)  # ... and at least 1.25x slower: slower than that is material
MIN_TAIL_SHARE = 0.005  # a tail is material: its share's low end at least 0.5 % of calls (at
# large n, less is significant too, and says nothing a fresh attempt would change)
TAIL_SHARE_MAX = 0.2  # beyond this the body's slow side is skewed: no separate tail to tell
NULL_SLACK = 2.5  # the threshold's standard errors the null share allows for (see residual_tail)
_MAD = 1.4826  # MAD x 1.4826 estimates a normal sigma
_SHARE = "Kaplan-Meier share less the body's"


@dataclass(frozen=True, slots=True)
class SizeModel:
    """
    Log latency regressed on log token counts, robustly (Huber M-estimation).

    Returned by `size_model` -- do not instantiate directly.

    Args:
        features: The token counts used, of ``("output", "input")``; empty when neither is
            known for most calls or neither varies.
        n: Finished calls the regression describes (it is fitted on a seeded subsample of
            at most 20,000 of them).
        r2: Share of the spread of log latency that size explains: ``1 - (s_res / s_raw)^2``
            with robust (MAD) scales, so a transient tail does not count as spread; NaN
            without features.
        p_value: F-test of "size explains nothing" on the Huber-weighted fit; NaN without
            features.
        elasticity: d log latency / d log output tokens at the median call (NaN without
            output tokens): 1.0 means twice the tokens take twice the time.
        predicted: Predicted log latency of every call given to `size_model`, in input order
            (a call with an unknown count is predicted at the median count).
    """

    features: tuple[str, ...]
    n: int
    r2: float
    p_value: float
    elasticity: float
    predicted: _Array

    @property
    def explains(self) -> bool:
        """
        Size explains a real share of the spread: ``p_value < 0.01`` and ``r2 >= 0.2``.
        """
        return bool(self.p_value < 0.01 and self.r2 >= 0.2)


def size_model(
    log_latency: _Array, finished: npt.NDArray[np.bool_], tokens: dict[str, _Array]
) -> SizeModel:
    """
    Fit log latency on ``log1p(tokens)`` and its square, for each usable token count.

    Args:
        log_latency: Log seconds of every call (cut calls: anything, they are not fitted).
        finished: Which calls finished (only those are fitted).
        tokens: ``{"output": counts, "input": counts}``, aligned, NaN where unknown.

    Returns:
        The fit; with no usable count, ``features`` is empty and every call is predicted at
        the finished calls' median.
    """
    y = log_latency[finished]
    columns, names = [], []
    for name, counts in tokens.items():
        x = np.log1p(np.where(np.asarray(counts, dtype=np.float64) >= 0, counts, np.nan))
        known = np.isfinite(x)
        if known[finished].mean() < KNOWN_SHARE or np.std(x[finished & known]) < MIN_LOG_SPREAD:
            continue
        x = np.where(known, x, float(np.median(x[finished & known])))
        x = x - float(np.median(x[finished]))
        columns += [x, x * x]
        names.append(name)
    if not names or y.size < 2 * len(columns) + 10:
        centre = float(np.median(y)) if y.size else math.nan
        nan = math.nan
        return SizeModel((), int(y.size), nan, nan, nan, np.full(log_latency.shape, centre))
    design = np.column_stack([np.ones(log_latency.size), *columns])
    # A handful of coefficients is pinned down by 20,000 calls: fit on a seeded subsample.
    fit_x, fit_y = design[finished], y
    if y.size > FIT_MAX_N:
        keep = np.sort(np.random.default_rng(0).choice(y.size, size=FIT_MAX_N, replace=False))
        fit_x, fit_y = fit_x[keep], fit_y[keep]
    beta, weights = _huber(fit_x, fit_y)
    predicted = design @ beta
    residual = y - predicted[finished]
    r2 = 1.0 - (_mad(residual) / max(_mad(y), 1e-12)) ** 2
    p = _f_test(fit_x, fit_y, weights, beta)
    elasticity = float(beta[1]) if names[0] == "output" else math.nan
    return SizeModel(tuple(names), int(y.size), float(r2), p, elasticity, predicted)


def _mad(x: _Array) -> float:
    centred = x - _median(x.copy())
    return _MAD * _median(np.abs(centred, out=centred))


def _median(scratch: _Array) -> float:
    """
    ``np.median`` of a 1-D array, bit for bit, partitioning ``scratch`` in place.
    """
    # np.median partitions a copy of its input; here the caller's scratch array is reused.
    # As np.median, the last place is partitioned too: NaNs sort last, and mean a NaN median.
    half = scratch.size // 2
    middle = (half,) if scratch.size % 2 else (half - 1, half)
    scratch.partition((*middle, scratch.size - 1))
    if np.isnan(scratch[-1]):
        return math.nan
    return float(np.mean(scratch[middle[0] : half + 1]))


def _huber(x: _Array, y: _Array) -> tuple[_Array, _Array]:
    """
    Huber M-estimate by iteratively reweighted least squares; the coefficients and weights.
    """
    weights = np.ones(y.size)
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    for _ in range(IRLS_STEPS):
        residual = y - x @ beta
        scale = max(_mad(residual), 1e-9)
        weights = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(residual), 1e-300))
        root = np.sqrt(weights)
        new = np.linalg.lstsq(x * root[:, None], y * root, rcond=None)[0]
        if np.max(np.abs(new - beta)) < 1e-8:
            beta = new
            break
        beta = new
    return np.asarray(beta, dtype=np.float64), np.asarray(weights, dtype=np.float64)


def _f_test(x: _Array, y: _Array, weights: _Array, beta: _Array) -> float:
    """
    p-value of "every size coefficient is zero", on the final weights.
    """
    mean = float(np.average(y, weights=weights))
    rss0 = float(np.sum(weights * (y - mean) ** 2))
    rss1 = float(np.sum(weights * (y - x @ beta) ** 2))
    extra, rest = x.shape[1] - 1, y.size - x.shape[1]
    if rest <= 0 or rss1 <= 0.0:
        return 0.0 if rss1 <= 0.0 < rss0 else math.nan
    f = ((rss0 - rss1) / extra) / (rss1 / rest)
    return float(stats.f.sf(f, extra, rest))


@dataclass(frozen=True, slots=True)
class ResidualTail:
    """
    The calls slower than the body of same-size calls explains.

    Returned by `residual_tail` -- do not instantiate directly.

    Args:
        body_median: Median log residual of the body (the calls size explains).
        body_sigma: Log-scale spread of the body, from its fast side (robust to the tail).
        threshold: Log residual beyond which a call is in the tail: ``TAIL_Z`` body spreads
            and at least ``TAIL_FLOOR`` beyond the body's median.
        beyond: Share of calls beyond the threshold (Kaplan-Meier when calls were cut).
        body_beyond: Share of the body itself expected beyond it (normal body).
        null_beyond: What the body alone could show beyond it, allowing for the error in the
            estimated threshold: the test's null share.
        share: Excess share, ``beyond - body_beyond`` (at least 0): the residual tail.
        share_interval: Its interval, minus ``body_beyond``: Clopper-Pearson; the upper end
            on the share beyond (Greenwood's variance as the effective size when calls were
            cut), the lower end on the finished calls beyond.
        present: The share beyond is significantly above ``null_beyond`` (its one-sided
            lower bound at ``alpha``, from finished calls beyond the threshold, lies above
            it), the excess is material (the low end of ``share_interval`` at least
            ``MIN_TAIL_SHARE``, 0.5 % of calls: at large n a negligible excess is significant
            too, and a point estimate alone is one or two slow calls in a small sample) and a
            minority (at most ``TAIL_SHARE_MAX``).
        skewed: Significant, but more than ``TAIL_SHARE_MAX`` of calls: the body's slow side
            is heavier than a lognormal's, and no separate tail can be told from it.
        scale: Median slow-down of the tail calls against a same-size call of the body.
        in_tail: Per call (input order), beyond the threshold (cut calls: cut beyond it).
    """

    body_median: float
    body_sigma: float
    threshold: float
    beyond: float
    body_beyond: float
    null_beyond: float
    share: float
    share_interval: Estimate
    present: bool
    skewed: bool
    scale: float
    in_tail: npt.NDArray[np.bool_]


def residual_tail(
    residual: _Array,
    cut: npt.NDArray[np.bool_],
    *,
    level: float,
    alpha: float | None = None,
    floor: float = TAIL_FLOOR,
) -> ResidualTail:
    """
    Find the share of calls beyond the body of same-size calls.

    The body is taken as normal on the log scale (lognormal latency). A transient tail
    contaminates its slow side only, so the body's median and spread are read off the fast
    side: with a share ``e`` of calls in the tail, the body's quantile ``u`` is the sample's
    quantile ``u (1 - e)``; ``e`` is re-estimated three times. The threshold is the larger
    of ``TAIL_Z`` spreads and a 1.25x slow-down. Under the body alone, the share beyond it is
    ``body_beyond``; the threshold itself is estimated with standard error about
    ``sqrt(pi/2 + z^2 / 2 ...) sigma / sqrt(n)``, so the null share allows ``NULL_SLACK`` of
    those. A tail is present when the share beyond is significantly above that null.

    Args:
        residual: Log residual of every call: log latency (cut calls: log cut age) minus the
            size model's prediction.
        cut: Which calls were cut (their residual is a lower bound).
        level: Confidence level of ``share_interval``.
        alpha: One-sided significance of the test (``(1 - level) / 2`` by default: the
            interval's low end); smaller when one verdict runs several such tests.
        floor: The least log slow-down that counts (``log(1.25)``): a tail call must be
            materially slower, however tight the body.
    """
    n = residual.size
    curve = _Curve.of(residual, cut)
    share = 0.0
    for _ in range(3):
        median = curve.quantile(0.5 * (1.0 - share))
        sigma = max(median - curve.quantile(0.158655 * (1.0 - share)), 1e-6)
        threshold = median + max(TAIL_Z * sigma, floor)
        beyond, variance = curve.beyond(threshold)
        z = (threshold - median) / sigma
        body_beyond = (1.0 - share) * float(stats.norm.sf(z))
        share = min(max(beyond - body_beyond, 0.0), 0.5)
    se_z = math.sqrt(math.pi / 2.0 + 1.2 * z * z) / math.sqrt(max(n, 1))
    null_beyond = float(stats.norm.sf(z - NULL_SLACK * se_z))
    # The estimate and the upper end count cut calls as Kaplan-Meier does; the lower end,
    # and the test, only finished calls beyond the threshold (a call cut below it is no
    # evidence of one beyond it, though the curve carries its mass there).
    high = _share_interval(beyond, variance, n, level)[1]
    seen = int(np.count_nonzero((residual > threshold) & ~cut))
    low = _share_interval(seen / n, 0.0, n, level)[0] if n else 0.0
    test_low = low
    if alpha is not None:
        test_low = _share_interval(seen / n, 0.0, n, 1.0 - 2.0 * alpha)[0] if n else 0.0
    in_tail = residual > threshold
    slow = residual[in_tail] - median
    excess = max(beyond - body_beyond, 0.0)
    excess_low = max(low - body_beyond, 0.0)
    return ResidualTail(
        body_median=median,
        body_sigma=sigma,
        threshold=threshold,
        beyond=beyond,
        body_beyond=body_beyond,
        null_beyond=null_beyond,
        share=excess,
        share_interval=Estimate(excess, excess_low, max(high - body_beyond, 0.0), n, _SHARE, level),
        present=bool(
            test_low > null_beyond and excess_low >= MIN_TAIL_SHARE and excess <= TAIL_SHARE_MAX
        ),
        skewed=bool(test_low > null_beyond and excess > TAIL_SHARE_MAX),
        scale=float(math.exp(np.median(slow))) if slow.size else math.nan,
        in_tail=in_tail,
    )


@dataclass(frozen=True, slots=True)
class _Curve:
    """
    Strictly private: the residuals sorted once, or, with cut calls, their Kaplan-Meier curve.
    """

    t: _Array  # sorted residuals, or the curve's distinct times
    km: KaplanMeier | None

    @classmethod
    def of(cls, residual: _Array, cut: npt.NDArray[np.bool_]) -> _Curve:
        if not cut.any():
            return cls(np.sort(residual), None)
        km = KaplanMeier.fit(residual[~cut], residual[cut])
        return cls(km.times, km)

    def quantile(self, q: float) -> float:
        """
        Quantile ``q`` by the CDF: numpy's linear rule, or the curve's first time at ``1 - q``.
        """
        if self.km is None:
            position = q * (self.t.size - 1)
            low = math.floor(position)
            high = min(low + 1, self.t.size - 1)
            return float(self.t[low] + (position - low) * (self.t[high] - self.t[low]))
        i = int(np.searchsorted(-self.km.survival, -(1.0 - q), side="left"))
        return float(self.t[min(i, self.t.size - 1)])

    def beyond(self, at: float) -> tuple[float, float]:
        """
        Share of calls beyond ``at`` and its variance (binomial; Greenwood's with cuts).
        """
        if self.km is None:
            share = 1.0 - np.searchsorted(self.t, at, side="right") / self.t.size
            return float(share), float(share * (1.0 - share) / self.t.size)
        i = int(np.searchsorted(self.t, at, side="right")) - 1
        if i < 0:
            return 1.0, 0.0
        s = float(self.km.survival[i])
        return s, (s * s * float(self.km.greenwood[i]) if s > 0.0 else 0.0)


def _share_interval(share: float, variance: float, n: int, level: float) -> tuple[float, float]:
    """
    Clopper-Pearson interval of a share, at Greenwood's effective size when calls were cut.
    """
    size = n
    if variance > 0.0 and 0.0 < share < 1.0:
        size = min(n, max(int(share * (1.0 - share) / variance), 1))
    k = share * size
    tail = (1.0 - level) / 2.0
    low = float(stats.beta.ppf(tail, k, size - k + 1)) if k > 0 else 0.0
    high = float(stats.beta.ppf(1.0 - tail, k + 1, size - k)) if k < size else 1.0
    return low, high
