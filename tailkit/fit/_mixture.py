"""
The two-part latency model: a lognormal body plus a rare, slower transient tail.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.fit._mixture_em import (
    BINS,
    MAX_ITERATIONS,
    SCOUT_ITERATIONS,
    STARTS,
    Params,
    em,
    share_intervals,
    stack,
    starts_for,
)
from tailkit.fit._types import Interval


__all__ = ["TransientTailFit", "fit_transient_tail", "fit_transient_tails"]

_Array = npt.NDArray[np.float64]

MIN_CALLS = 50  # below this many usable calls (or a fifth of it finished) nothing is fitted
BIC_GAIN_MIN = 10.0  # a BIC difference above 10 is "very strong" evidence (Kass & Raftery)
TAIL_SHARE_MAX = 0.5  # a slower part holding half the calls is a second mode, not a tail
TAIL_SCALE_MIN = 1.5  # a slower part closer than 1.5x the body's median is its own spread

_TIMES = "\u00d7"  # the multiplication sign, as in "6.2x slower"


@dataclass(frozen=True, slots=True)
class TransientTailFit:
    """
    A lognormal body plus a transient tail, fitted to latencies.

    ``mu`` and ``sigma`` are on the natural-log scale of seconds: a part's median is
    ``exp(mu)`` seconds. Returned by `fit_transient_tail` -- do not instantiate directly.

    Args:
        body_mu: Log-scale mean of the body (the faster part).
        body_sigma: Log-scale standard deviation of the body.
        tail_share: Share of calls in the tail part, 0..1.
        tail_share_interval: Wald interval of ``tail_share`` (on the logit scale, from the
            observed information); ``Interval(0, 1)`` when the information is singular.
        tail_mu: Log-scale mean of the tail part (always ``>= body_mu``).
        tail_sigma: Log-scale standard deviation of the tail part.
        tail_scale: Median of the tail part / median of the body. When (nearly) every tail
            call was cut, the tail's median is not identified; it is then held at most
            ``exp(2 * pooled log spread)`` beyond the largest age seen, and is only a guess.
        n: Calls the fit used (at most ``max_n``), censored ones included.
        n_censored: Of those, calls cut before they finished.
        bic_gain: BIC(single lognormal) - BIC(mixture); above 0 favours the mixture.
        has_transient_tail: ``bic_gain > 10`` and ``tail_share < 0.5`` and
            ``tail_scale > 1.5``.
        verdict: One plain sentence for a report.
    """

    body_mu: float
    body_sigma: float
    tail_share: float
    tail_share_interval: Interval
    tail_mu: float
    tail_sigma: float
    tail_scale: float
    n: int
    n_censored: int
    bic_gain: float
    has_transient_tail: bool
    verdict: str


def fit_transient_tail(
    latency_s: npt.ArrayLike,
    *,
    censored_at_s: npt.ArrayLike | None = None,
    max_n: int = 20_000,
    seed: int = 0,
    level: float = 0.95,
) -> TransientTailFit:
    """
    Fit a lognormal body plus a transient tail, and say whether the tail is real.

    Args:
        latency_s: Latency of each call in seconds. NaN where unknown; ignored where the call
            was censored.
        censored_at_s: Aligned with ``latency_s``: the age in seconds at which a call was cut
            (its true latency is longer), NaN or inf where it finished. ``None``: no call was
            cut. Cuts at age 0 or less say nothing and are dropped.
        max_n: Fit at most this many calls. Larger inputs are subsampled without replacement,
            deterministically from ``seed``; the interval then reflects the subsample.
        seed: Seed of the subsample.
        level: Confidence level of ``tail_share_interval``.

    Returns:
        The fit. With fewer than 50 usable calls, or fewer than 10 uncensored, every estimate
        is NaN and ``has_transient_tail`` is False.

    Raises:
        ValueError: The arrays differ in length, a finished call has a latency of 0 s or
            less, or ``max_n`` / ``level`` are out of range.
    """
    return fit_transient_tails([(latency_s, censored_at_s)], max_n=max_n, seed=seed, level=level)[0]


def fit_transient_tails(
    samples: Sequence[tuple[npt.ArrayLike, npt.ArrayLike | None]],
    *,
    max_n: int = 20_000,
    seed: int = 0,
    level: float = 0.95,
) -> list[TransientTailFit]:
    """
    `fit_transient_tail` of many ``(latency_s, censored_at_s)`` samples, one fit each, in order.

    Each fit is the one `fit_transient_tail` gives for its sample alone (up to rounding); all
    samples iterate together as one matrix, far cheaper than one at a time. Raises as it does.
    """
    if max_n < MIN_CALLS:
        msg = f"max_n must be at least {MIN_CALLS}, got {max_n}"
        raise ValueError(msg)
    if not 0.0 < level < 1.0:
        msg = f"level must be between 0 and 1, got {level}"
        raise ValueError(msg)
    out: list[TransientTailFit | None] = []
    todo: list[tuple[_Array, _Array]] = []
    for latency_s, censored_at_s in samples:
        # subsample first: the same calls either way, and only those need a log
        kept = _subsample(*_ages(latency_s, censored_at_s), max_n=max_n, seed=seed)
        y_obs, y_cens = np.log(kept[0]), np.log(kept[1])
        n = y_obs.size + y_cens.size
        small = n < MIN_CALLS or y_obs.size < MIN_CALLS // 5
        out.append(_too_few(n, y_cens.size, level) if small else None)
        if not small:
            todo.append((y_obs, y_cens))
    fits = iter(_fit_many(todo, level) if todo else [])
    return [fit if fit is not None else next(fits) for fit in out]


def _fit_many(todo: list[tuple[_Array, _Array]], level: float) -> list[TransientTailFit]:
    """
    The mixture fit of samples with enough calls (log ages of finished and of cut calls).
    """
    # Mixture EM, essay.
    #
    # On log seconds the model is a two-component normal mixture. EM alternates two steps:
    # (E) each call's responsibility r_k, the posterior chance it came from part k; (M) each
    # part's weight, mean and variance as responsibility-weighted moments. A call cut at age
    # c only tells us log latency > log c, so it contributes pi_k S_k(c) (S the normal
    # survival) to the likelihood, and in the M-step its unseen log latency enters through
    # the moments of the normal truncated below at log c: E[y] = mu + sigma lambda and
    # E[(y - mu)^2] = sigma^2 (1 + a lambda), with a = (log c - mu)/sigma and lambda the
    # inverse Mills ratio. That is the exact EM for censored normal mixtures, not a patch.
    # Speed: beyond 256 calls, log ages are grouped into 256 equal-width bins, each stood for
    # by its count and the mean of its members, so an iteration costs the same at any n; the
    # bin width (range/256) stays at a quarter of the smallest sigma allowed. Many samples
    # (a table's groups) are the rows of one zero-padded matrix; a row that has converged
    # leaves it, so each keeps its own stopping rule and does not depend on the others.
    # Guards: sigma never drops below 5% of the pooled spread (a part may not collapse onto
    # a few tied values, which makes the likelihood unbounded), and no mean passes the
    # largest age seen by more than twice the pooled spread (a tail whose calls were all
    # cut would otherwise drift to infinity; its share still converges, its median cannot).
    # EM finds local maxima, so three starts (tail share 1%, 5%, 15%, seeded from the top
    # of the data) each run a short scout; only the best one runs on to convergence. The
    # single lognormal is the same EM with one part, so both BICs use one likelihood.
    pooled = [np.concatenate(pair) for pair in todo]
    spread = np.array([float(np.std(p)) for p in pooled])
    data = stack(todo)
    ranges = np.array([float(np.ptp(p)) for p in pooled])
    floor = np.maximum(np.maximum(0.05 * spread, 4.0 * ranges / BINS), 1e-3)
    cap = np.array([float(np.max(p)) for p in pooled]) + 2.0 * spread
    rows = len(todo)
    mean = np.array([[float(np.mean(p))] for p in pooled])
    one = Params(mean, np.maximum(spread, floor)[:, None], np.ones((rows, 1)))
    one, ll_one = em(one, data, floor=floor, cap=cap, max_iter=MAX_ITERATIONS)
    per_row = [starts_for(p, f) for p, f in zip(pooled, floor, strict=True)]
    starts = Params(*(np.array([s[j][k] for j in range(len(STARTS)) for s in per_row])
                       for k in range(3)))  # fmt: skip
    tiled = np.tile(np.arange(rows), len(STARTS))
    scouts, ll_scout = em(
        starts, data.take(tiled), floor=floor[tiled], cap=cap[tiled], max_iter=SCOUT_ITERATIONS
    )
    best = np.argmax(ll_scout.reshape(len(STARTS), rows), axis=0) * rows + np.arange(rows)
    best_start = Params(scouts.mu[best], scouts.sigma[best], scouts.weight[best])
    two, ll_two = em(best_start, data, floor=floor, cap=cap, max_iter=MAX_ITERATIONS)

    order = np.argsort(two.mu, axis=1, kind="stable")
    body, tail = order[:, 0], order[:, 1]
    intervals = share_intervals(two, body, tail, data, level)
    fits = []
    for i, (y_obs, y_cens) in enumerate(todo):
        n, b, t = y_obs.size + y_cens.size, body[i], tail[i]
        share = float(two.weight[i, t])
        scale = math.exp(float(two.mu[i, t] - two.mu[i, b]))
        bic_gain = 2.0 * float(ll_two[i] - ll_one[i]) - 3.0 * math.log(n)
        real = bic_gain > BIC_GAIN_MIN and share < TAIL_SHARE_MAX and scale > TAIL_SCALE_MIN
        fits.append(TransientTailFit(
            body_mu=float(two.mu[i, b]), body_sigma=float(two.sigma[i, b]), tail_share=share,
            tail_share_interval=intervals[i], tail_mu=float(two.mu[i, t]),
            tail_sigma=float(two.sigma[i, t]), tail_scale=scale, n=n, n_censored=y_cens.size,
            bic_gain=bic_gain, has_transient_tail=real,
            verdict=_verdict(real=real, bic_gain=bic_gain, share=share, scale=scale),
        ))  # fmt: skip
    return fits


def _ages(latency_s: npt.ArrayLike, censored_at_s: npt.ArrayLike | None) -> tuple[_Array, _Array]:
    """
    Split the input into latencies of finished calls and ages of censored ones.
    """
    x = np.asarray(latency_s, dtype=np.float64).ravel()
    c = np.full(x.shape, np.nan)
    if censored_at_s is not None:
        c = np.asarray(censored_at_s, dtype=np.float64).ravel()
        if c.shape != x.shape:
            msg = (
                f"censored_at_s has {c.size} entries but latency_s has {x.size}: "
                "pass one entry per call (NaN where the call finished)"
            )
            raise ValueError(msg)
    cut = np.isfinite(c)
    done = ~cut & np.isfinite(x)
    if np.any(x[done] <= 0.0):
        msg = (
            f"latency_s must be positive for finished calls, got {np.min(x[done])}: "
            "drop those calls or floor them at the clock's resolution"
        )
        raise ValueError(msg)
    cut &= c > 0.0
    return x[done], c[cut]


def _subsample(y_obs: _Array, y_cens: _Array, *, max_n: int, seed: int) -> tuple[_Array, _Array]:
    """
    Keep at most ``max_n`` calls, the same ones for the same input and seed.
    """
    n = y_obs.size + y_cens.size
    if n <= max_n:
        return y_obs, y_cens
    keep = np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))
    return y_obs[keep[keep < y_obs.size]], y_cens[keep[keep >= y_obs.size] - y_obs.size]


def _verdict(*, real: bool, bic_gain: float, share: float, scale: float) -> str:
    """
    One sentence a report can print as is.
    """
    if real:
        slower = f"{scale:.1f}{_TIMES} slower than the body"
        return f"{share:.1%} of calls fall in a transient tail {slower}: a fresh attempt escapes it"
    if bic_gain <= BIC_GAIN_MIN:
        return "no separate tail: slow calls are the body's own spread"
    if share >= TAIL_SHARE_MAX:
        return f"two modes, but the slower holds {share:.0%} of calls: a second mode, not a tail"
    only = f"the slower part is only {scale:.1f}{_TIMES} the body"
    return f"no separate tail: {only}, slow calls are the body's own spread"


def _too_few(n: int, n_censored: int, level: float) -> TransientTailFit:
    """
    The result for an input too small to fit five parameters.
    """
    nan, finished = math.nan, n - n_censored
    return TransientTailFit(
        body_mu=nan, body_sigma=nan, tail_share=nan, tail_share_interval=Interval(0, 1, level),
        tail_mu=nan, tail_sigma=nan, tail_scale=nan, n=n, n_censored=n_censored, bic_gain=nan,
        has_transient_tail=False,
        verdict=f"too few calls to look for a transient tail (n={n}, {finished} finished; "
        f"need {MIN_CALLS}, {MIN_CALLS // 5} finished)",
    )  # fmt: skip
