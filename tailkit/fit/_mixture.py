"""
The two-part latency model: a lognormal body plus a rare, slower transient tail.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import special, stats

from tailkit.fit._types import Interval


__all__ = ["TransientTailFit", "fit_transient_tail"]

_Array = npt.NDArray[np.float64]

MIN_CALLS = 50  # below this many usable calls (or a fifth of it finished) nothing is fitted
BIC_GAIN_MIN = 10.0  # a BIC difference above 10 is "very strong" evidence (Kass & Raftery)
TAIL_SHARE_MAX = 0.5  # a slower part holding half the calls is a second mode, not a tail
TAIL_SCALE_MIN = 1.5  # a slower part closer than 1.5x the body's median is its own spread

_STARTS = (0.01, 0.05, 0.15)
_SCOUT_ITERATIONS = 25
_BINS = 1024
_MAX_ITERATIONS = 400
_TOLERANCE = 1e-6  # log-likelihood gain per iteration, in nats, below which EM has converged
_MIN_WEIGHT = 1e-9
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
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
    y_obs, y_cens = _log_ages(latency_s, censored_at_s)
    if max_n < MIN_CALLS:
        msg = f"max_n must be at least {MIN_CALLS}, got {max_n}"
        raise ValueError(msg)
    if not 0.0 < level < 1.0:
        msg = f"level must be between 0 and 1, got {level}"
        raise ValueError(msg)
    y_obs, y_cens = _subsample(y_obs, y_cens, max_n=max_n, seed=seed)
    n, n_cens = y_obs.size + y_cens.size, y_cens.size
    if n < MIN_CALLS or y_obs.size < MIN_CALLS // 5:
        return _too_few(n, n_cens, level)

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
    # Speed: beyond 1,024 calls, log ages are grouped into 1,024 equal-width bins, each
    # represented by its count and the mean of its members, so an iteration costs the same
    # at any n. The bin width (range/1024) stays at a quarter of the smallest sigma allowed.
    # Guards: sigma never drops below 5% of the pooled spread (a part may not collapse onto
    # a few tied values, which makes the likelihood unbounded), and no mean passes the
    # largest age seen by more than twice the pooled spread (a tail whose calls were all
    # cut would otherwise drift to infinity; its share still converges, its median cannot).
    # EM finds local maxima, so three starts (tail share 1%, 5%, 15%, seeded from the top
    # of the data) each run a short scout; only the best one runs on to convergence. The
    # single lognormal is the same EM with one part, so both BICs use one likelihood.
    pooled = np.concatenate([y_obs, y_cens])
    spread = float(np.std(pooled))
    data = _Data(*_group(y_obs), *_group(y_cens))
    floor = max(0.05 * spread, 4.0 * float(np.ptp(pooled)) / _BINS, 1e-3)
    cap = float(np.max(pooled)) + 2.0 * spread

    one = _Params(np.array([float(np.mean(pooled))]), np.array([max(spread, floor)]), np.ones(1))
    one, ll_one = _em(one, data, floor=floor, cap=cap, max_iter=_MAX_ITERATIONS)
    scouts = [
        _em(_start(pooled, share, floor), data, floor=floor, cap=cap, max_iter=_SCOUT_ITERATIONS)
        for share in _STARTS
    ]
    best = max(scouts, key=lambda s: s[1])[0]
    two, ll_two = _em(best, data, floor=floor, cap=cap, max_iter=_MAX_ITERATIONS)

    body, tail = np.argsort(two.mu)
    share = float(two.weight[tail])
    scale = math.exp(float(two.mu[tail] - two.mu[body]))
    bic_gain = 2.0 * (ll_two - ll_one) - 3.0 * math.log(n)
    interval = _share_interval(two, int(body), int(tail), data, level)
    real = bic_gain > BIC_GAIN_MIN and share < TAIL_SHARE_MAX and scale > TAIL_SCALE_MIN
    return TransientTailFit(
        body_mu=float(two.mu[body]),
        body_sigma=float(two.sigma[body]),
        tail_share=share,
        tail_share_interval=interval,
        tail_mu=float(two.mu[tail]),
        tail_sigma=float(two.sigma[tail]),
        tail_scale=scale,
        n=n,
        n_censored=n_cens,
        bic_gain=bic_gain,
        has_transient_tail=real,
        verdict=_verdict(real=real, bic_gain=bic_gain, share=share, scale=scale),
    )


@dataclass(frozen=True, slots=True)
class _Params:
    """
    Strictly private: one mixture state (per-part arrays).
    """

    mu: _Array
    sigma: _Array
    weight: _Array


@dataclass(frozen=True, slots=True)
class _Data:
    """
    Strictly private: log ages of finished and of cut calls, grouped, with their counts.
    """

    y_obs: _Array
    n_obs: _Array
    y_cens: _Array
    n_cens: _Array


def _log_ages(
    latency_s: npt.ArrayLike, censored_at_s: npt.ArrayLike | None
) -> tuple[_Array, _Array]:
    """
    Split the input into log latencies of finished calls and log ages of censored ones.
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
    return np.log(x[done]), np.log(c[cut])


def _subsample(y_obs: _Array, y_cens: _Array, *, max_n: int, seed: int) -> tuple[_Array, _Array]:
    """
    Keep at most ``max_n`` calls, the same ones for the same input and seed.
    """
    n = y_obs.size + y_cens.size
    if n <= max_n:
        return y_obs, y_cens
    keep = np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))
    return y_obs[keep[keep < y_obs.size]], y_cens[keep[keep >= y_obs.size] - y_obs.size]


def _group(y: _Array) -> tuple[_Array, _Array]:
    """
    Group log ages into `_BINS` equal-width bins (mean of members, count); small inputs as is.
    """
    if y.size <= _BINS or np.ptp(y) == 0.0:
        return y, np.ones(y.size)
    low, width = float(np.min(y)), float(np.ptp(y)) / _BINS
    index = np.minimum(((y - low) / width).astype(np.int64), _BINS - 1)
    counts = np.bincount(index, minlength=_BINS).astype(np.float64)
    sums = np.bincount(index, weights=y, minlength=_BINS)
    used = counts > 0
    return sums[used] / counts[used], counts[used]


def _start(pooled: _Array, share: float, floor: float) -> _Params:
    """
    A starting state: the top ``share`` of the data as the tail, the rest as the body.
    """
    ordered = np.sort(pooled)
    k = min(max(2, round(share * ordered.size)), ordered.size - 2)
    low, high = ordered[:-k], ordered[-k:]
    return _Params(
        mu=np.array([np.mean(low), np.mean(high)]),
        sigma=np.maximum(np.array([np.std(low), np.std(high)]), floor),
        weight=np.array([1.0 - k / ordered.size, k / ordered.size]),
    )


def _em(p: _Params, d: _Data, *, floor: float, cap: float, max_iter: int) -> tuple[_Params, float]:
    """
    Run censored-data EM from ``p``; return the last state and its log-likelihood.
    """
    n = d.n_obs.sum() + d.n_cens.sum()
    mu, sigma, weight = p.mu, p.sigma, p.weight
    previous = -math.inf
    for _ in range(max_iter):
        r_obs, r_cens, ll, m1, m2 = _e_step(mu, sigma, weight, d)
        if ll - previous < _TOLERANCE:
            break
        previous = ll
        r_obs, r_cens = r_obs * d.n_obs, r_cens * d.n_cens
        mass = np.maximum(r_obs.sum(axis=1) + r_cens.sum(axis=1), 1e-300)
        mu = np.minimum((r_obs @ d.y_obs + (r_cens * m1).sum(axis=1)) / mass, cap)
        dev_obs = (d.y_obs[None, :] - mu[:, None]) ** 2
        dev_cens = m2 - 2.0 * mu[:, None] * m1 + mu[:, None] ** 2
        var = ((r_obs * dev_obs).sum(axis=1) + (r_cens * dev_cens).sum(axis=1)) / mass
        sigma = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor)
        weight = np.maximum(mass / n, _MIN_WEIGHT)
        weight /= weight.sum()
    else:
        ll = _e_step(mu, sigma, weight, d)[2]
    return _Params(mu, sigma, weight), ll


def _e_step(
    mu: _Array, sigma: _Array, weight: _Array, d: _Data
) -> tuple[_Array, _Array, float, _Array, _Array]:
    """
    Responsibilities, log-likelihood, and the truncated moments E[y], E[y^2] of cut calls.
    """
    mu_, sd_ = mu[:, None], sigma[:, None]
    log_w = np.log(weight)[:, None]
    z = (d.y_obs[None, :] - mu_) / sd_
    log_obs = log_w - np.log(sd_) - 0.5 * z * z - _LOG_SQRT_2PI
    a = (d.y_cens[None, :] - mu_) / sd_
    log_sf = special.log_ndtr(-a)
    log_cens = log_w + log_sf
    ll_obs = np.logaddexp.reduce(log_obs, axis=0)
    ll_cens = np.logaddexp.reduce(log_cens, axis=0)
    mills = np.exp(-0.5 * a * a - _LOG_SQRT_2PI - log_sf)
    m1 = mu_ + sd_ * mills
    m2 = mu_ * mu_ + 2.0 * mu_ * sd_ * mills + sd_ * sd_ * (1.0 + a * mills)
    ll = float(ll_obs @ d.n_obs + ll_cens @ d.n_cens)
    return np.exp(log_obs - ll_obs), np.exp(log_cens - ll_cens), ll, m1, m2


def _share_interval(p: _Params, body: int, tail: int, d: _Data, level: float) -> Interval:
    """
    Wald interval of the tail share on the logit scale, from the observed information.

    The information is minus the Hessian of the log-likelihood in (logit share, body mu,
    log body sigma, tail mu, log tail sigma), by central differences of the analytic score.
    If that is not (numerically) positive definite (no separate tail: the share is not
    identified), the outer product of per-call scores stands in; failing that, (0, 1).
    """
    theta = np.array([
        math.log(p.weight[tail] / p.weight[body]),
        p.mu[body], math.log(p.sigma[body]), p.mu[tail], math.log(p.sigma[tail]),
    ])  # fmt: skip
    counts = np.concatenate([d.n_obs, d.n_cens])
    step = 1e-5
    hessian = np.empty((5, 5))
    for j in range(5):
        e = np.zeros(5)
        e[j] = step
        up, down = _scores(theta + e, d), _scores(theta - e, d)
        hessian[:, j] = counts @ (up - down) / (2.0 * step)
    scores = _scores(theta, d)
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    for info in (-(hessian + hessian.T) / 2.0, scores.T @ (scores * counts[:, None])):
        if not np.all(np.isfinite(info)):
            continue
        eigenvalues, vectors = np.linalg.eigh(info)
        if eigenvalues[0] > 1e-12 * eigenvalues[-1] > 0.0:
            se = math.sqrt(float(np.sum(vectors[0] ** 2 / eigenvalues)))
            low, high = special.expit([theta[0] - z * se, theta[0] + z * se])
            return Interval(float(low), float(high), level)
    return Interval(0.0, 1.0, level)


def _scores(theta: _Array, d: _Data) -> _Array:
    """
    Per-group score (one call's) of the mixture log-likelihood at ``theta``.
    """
    share = float(special.expit(theta[0]))
    mu = np.array([theta[1], theta[3]])
    sigma = np.exp(np.array([theta[2], theta[4]]))
    r_obs, r_cens, _, _, _ = _e_step(mu, sigma, np.array([1.0 - share, share]), d)
    z = (d.y_obs[None, :] - mu[:, None]) / sigma[:, None]
    a = (d.y_cens[None, :] - mu[:, None]) / sigma[:, None]
    mills = np.exp(-0.5 * a * a - _LOG_SQRT_2PI - special.log_ndtr(-a))
    d_mu = np.concatenate([r_obs * z, r_cens * mills], axis=1) / sigma[:, None]
    d_log_sigma = np.concatenate([r_obs * (z * z - 1.0), r_cens * mills * a], axis=1)
    d_eta = np.concatenate([r_obs[1], r_cens[1]]) - share
    return np.column_stack([d_eta, d_mu[0], d_log_sigma[0], d_mu[1], d_log_sigma[1]])


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
