"""
The two-part latency model: a lognormal body plus a rare, slower transient tail.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import special, stats

from tailkit.fit._types import Interval


__all__ = ["TransientTailFit", "fit_transient_tail", "fit_transient_tails"]

_Array = npt.NDArray[np.float64]

MIN_CALLS = 50  # below this many usable calls (or a fifth of it finished) nothing is fitted
BIC_GAIN_MIN = 10.0  # a BIC difference above 10 is "very strong" evidence (Kass & Raftery)
TAIL_SHARE_MAX = 0.5  # a slower part holding half the calls is a second mode, not a tail
TAIL_SCALE_MIN = 1.5  # a slower part closer than 1.5x the body's median is its own spread

_STARTS = (0.01, 0.05, 0.15)
_SCOUT_ITERATIONS = 25
_BINS = 256
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
    data = _stack(todo)
    ranges = np.array([float(np.ptp(p)) for p in pooled])
    floor = np.maximum(np.maximum(0.05 * spread, 4.0 * ranges / _BINS), 1e-3)
    cap = np.array([float(np.max(p)) for p in pooled]) + 2.0 * spread
    rows = len(todo)
    mean = np.array([[float(np.mean(p))] for p in pooled])
    one = _Params(mean, np.maximum(spread, floor)[:, None], np.ones((rows, 1)))
    one, ll_one = _em(one, data, floor=floor, cap=cap, max_iter=_MAX_ITERATIONS)
    per_row = [_starts(p, f) for p, f in zip(pooled, floor, strict=True)]
    starts = _Params(*(np.array([s[j][k] for j in range(len(_STARTS)) for s in per_row])
                       for k in range(3)))  # fmt: skip
    tiled = np.tile(np.arange(rows), len(_STARTS))
    scouts, ll_scout = _em(
        starts, data.take(tiled), floor=floor[tiled], cap=cap[tiled], max_iter=_SCOUT_ITERATIONS
    )
    best = np.argmax(ll_scout.reshape(len(_STARTS), rows), axis=0) * rows + np.arange(rows)
    best_start = _Params(scouts.mu[best], scouts.sigma[best], scouts.weight[best])
    two, ll_two = _em(best_start, data, floor=floor, cap=cap, max_iter=_MAX_ITERATIONS)

    order = np.argsort(two.mu, axis=1, kind="stable")
    body, tail = order[:, 0], order[:, 1]
    intervals = _share_intervals(two, body, tail, data, level)
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


@dataclass(frozen=True, slots=True)
class _Params:
    """
    Strictly private: mixture states, one row per sample, one column per part.
    """

    mu: _Array
    sigma: _Array
    weight: _Array


@dataclass(frozen=True, slots=True)
class _Data:
    """
    Strictly private: grouped log ages of finished and cut calls, counts; a row per sample.
    """

    y_obs: _Array
    n_obs: _Array
    y_cens: _Array
    n_cens: _Array

    def take(self, rows: npt.NDArray[np.intp]) -> _Data:
        """
        The rows ``rows``.
        """
        return _Data(self.y_obs[rows], self.n_obs[rows], self.y_cens[rows], self.n_cens[rows])


def _stack(todo: list[tuple[_Array, _Array]]) -> _Data:
    """
    Each sample's groups (`_group`) padded to a common width with zero counts at its first age.
    """
    parts = []
    for side in (0, 1):
        groups = [_group(pair[side]) for pair in todo]
        y = np.array([[np.concatenate(p)[0]] for p in todo]).repeat(
            max(g.size for g, _ in groups), axis=1
        )
        n = np.zeros(y.shape)
        for i, (g, c) in enumerate(groups):
            y[i, : g.size], n[i, : c.size] = g, c
        parts += [y, n]
    return _Data(*parts)


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


def _starts(pooled: _Array, floor: float) -> list[tuple[_Array, _Array, _Array]]:
    """
    Starting states: the top share (each of `_STARTS`) of the data as the tail, the rest as body.

    Means and spreads of both come from running sums of the sorted, centred data.
    """
    ordered = np.sort(pooled) - np.mean(pooled)
    s1 = np.concatenate([[0.0], np.cumsum(ordered)])
    s2 = np.concatenate([[0.0], np.cumsum(ordered * ordered)])
    n, centre = ordered.size, float(np.mean(pooled))
    out = []
    for share in _STARTS:
        k = min(max(2, round(share * n)), n - 2)
        mean = np.array([s1[n - k] / (n - k), (s1[n] - s1[n - k]) / k])
        square = np.array([s2[n - k] / (n - k), (s2[n] - s2[n - k]) / k])
        sd = np.sqrt(np.maximum(square - mean * mean, 0.0))
        out.append((mean + centre, np.maximum(sd, floor), np.array([1.0 - k / n, k / n])))
    return out


def _em(
    p: _Params, d: _Data, *, floor: _Array, cap: _Array, max_iter: int
) -> tuple[_Params, _Array]:
    """
    Run censored-data EM from ``p`` on every row; return the last states and log-likelihoods.

    A row stops when its log-likelihood gains less than `_TOLERANCE`, or after ``max_iter``
    M-steps; it then leaves the matrix, so the other rows never change its result.
    """
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    mu, sigma, weight = p.mu.copy(), p.sigma.copy(), p.weight.copy()
    previous, final = np.full(n.size, -math.inf), np.empty(n.size)
    active, sub = np.arange(n.size), d
    for _ in range(max_iter):
        if active.size == 0:
            break
        r_obs, r_cens, ll, m1, m2 = _e_step(mu[active], sigma[active], weight[active], sub)
        done = ll - previous[active] < _TOLERANCE
        final[active[done]] = ll[done]
        previous[active] = ll
        r_obs, r_cens = r_obs * sub.n_obs[:, None, :], r_cens * sub.n_cens[:, None, :]
        mass = np.maximum(r_obs.sum(axis=2) + r_cens.sum(axis=2), 1e-300)
        new_mu = np.einsum("rkb,rb->rk", r_obs, sub.y_obs) + (r_cens * m1).sum(axis=2)
        new_mu = np.minimum(new_mu / mass, cap[active, None])
        dev_obs = (sub.y_obs[:, None, :] - new_mu[:, :, None]) ** 2
        dev_cens = m2 - 2.0 * new_mu[:, :, None] * m1 + new_mu[:, :, None] ** 2
        var = ((r_obs * dev_obs).sum(axis=2) + (r_cens * dev_cens).sum(axis=2)) / mass
        new_weight = np.maximum(mass / n[active, None], _MIN_WEIGHT)
        go = active[~done]
        mu[go] = new_mu[~done]
        sigma[go] = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor[active, None])[~done]
        weight[go] = (new_weight / new_weight.sum(axis=1, keepdims=True))[~done]
        if done.any():
            active, sub = go, d.take(go)
    if active.size:
        final[active] = _e_step(mu[active], sigma[active], weight[active], sub)[2]
    return _Params(mu, sigma, weight), final


def _e_step(
    mu: _Array, sigma: _Array, weight: _Array, d: _Data
) -> tuple[_Array, _Array, _Array, _Array, _Array]:
    """
    Responsibilities, log-likelihoods, and the truncated moments E[y], E[y^2] of cut calls.
    """
    mu_, sd_ = mu[:, :, None], sigma[:, :, None]
    log_w = np.log(weight)[:, :, None]
    z = (d.y_obs[:, None, :] - mu_) / sd_
    log_obs = (log_w - np.log(sd_) - _LOG_SQRT_2PI) - 0.5 * z * z
    a = (d.y_cens[:, None, :] - mu_) / sd_
    log_sf = special.log_ndtr(-a)
    ll_obs, r_obs = _posterior(log_obs)
    ll_cens, r_cens = _posterior(log_w + log_sf)
    mills = np.exp(-0.5 * a * a - _LOG_SQRT_2PI - log_sf)
    m1 = mu_ + sd_ * mills
    m2 = mu_ * mu_ + 2.0 * mu_ * sd_ * mills + sd_ * sd_ * (1.0 + a * mills)
    ll = np.einsum("rb,rb->r", ll_obs, d.n_obs) + np.einsum("rb,rb->r", ll_cens, d.n_cens)
    return r_obs, r_cens, ll, m1, m2


def _posterior(parts: _Array) -> tuple[_Array, _Array]:
    """
    Per group, from the log densities of its parts (axis 1): log-likelihood, responsibilities.
    """
    if parts.shape[1] == 1:
        return parts[:, 0], np.ones_like(parts)
    # by hand rather than np.logaddexp: numpy's exp is vectorized, its log and logaddexp slow
    top = np.maximum(parts[:, 0], parts[:, 1])
    each = np.exp(parts - top[:, None, :])
    total = each[:, 0] + each[:, 1]
    return top + np.log(total), each / total[:, None, :]


def _share_intervals(
    p: _Params, body: npt.NDArray[np.intp], tail: npt.NDArray[np.intp], d: _Data, level: float
) -> list[Interval]:
    """
    Wald intervals of the tail share on the logit scale, from the observed information.

    The information is minus the Hessian of the log-likelihood in (logit share, body mu,
    log body sigma, tail mu, log tail sigma), by central differences of the analytic score.
    If that is not (numerically) positive definite (no separate tail: the share is not
    identified), the outer product of per-call scores stands in; failing that, (0, 1).
    """
    rows = np.arange(body.size)
    theta = np.column_stack([
        np.log(p.weight[rows, tail] / p.weight[rows, body]), p.mu[rows, body],
        np.log(p.sigma[rows, body]), p.mu[rows, tail], np.log(p.sigma[rows, tail]),
    ])  # fmt: skip
    counts = np.concatenate([d.n_obs, d.n_cens], axis=1)
    step = 1e-5
    hessian = np.empty((body.size, 5, 5))
    for j in range(5):
        e = np.zeros(5)
        e[j] = step
        up, down = _scores(theta + e, d), _scores(theta - e, d)
        hessian[:, :, j] = np.einsum("rb,rbk->rk", counts, up - down) / (2.0 * step)
    scores = _scores(theta, d)
    outer = np.einsum("rbk,rbl->rkl", scores, scores * counts[:, :, None])
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    out = [Interval(0.0, 1.0, level)] * body.size
    left = np.ones(body.size, dtype=bool)
    for info in (-(hessian + hessian.transpose(0, 2, 1)) / 2.0, outer):
        usable = left & np.all(np.isfinite(info), axis=(1, 2))
        eigenvalues, vectors = np.linalg.eigh(np.where(usable[:, None, None], info, np.eye(5)))
        usable &= eigenvalues[:, 0] > 1e-12 * eigenvalues[:, -1]
        usable &= 1e-12 * eigenvalues[:, -1] > 0.0
        safe = np.where(usable[:, None], eigenvalues, 1.0)
        se = np.sqrt(np.sum(vectors[:, 0, :] ** 2 / safe, axis=1))
        for i in np.flatnonzero(usable):
            low, high = special.expit([theta[i, 0] - z * se[i], theta[i, 0] + z * se[i]])
            out[i] = Interval(float(low), float(high), level)
        left &= ~usable
    return out


def _scores(theta: _Array, d: _Data) -> _Array:
    """
    Per-group scores (one call's), shape (rows, groups, 5), of the log-likelihood at ``theta``.
    """
    share = special.expit(theta[:, 0])
    mu, sigma = theta[:, [1, 3]], np.exp(theta[:, [2, 4]])
    r_obs, r_cens, _, _, _ = _e_step(mu, sigma, np.column_stack([1.0 - share, share]), d)
    z = (d.y_obs[:, None, :] - mu[:, :, None]) / sigma[:, :, None]
    a = (d.y_cens[:, None, :] - mu[:, :, None]) / sigma[:, :, None]
    mills = np.exp(-0.5 * a * a - _LOG_SQRT_2PI - special.log_ndtr(-a))
    d_mu = np.concatenate([r_obs * z, r_cens * mills], axis=2) / sigma[:, :, None]
    d_log_sigma = np.concatenate([r_obs * (z * z - 1.0), r_cens * mills * a], axis=2)
    d_eta = np.concatenate([r_obs[:, 1], r_cens[:, 1]], axis=1) - share[:, None]
    return np.stack([d_eta, d_mu[:, 0], d_log_sigma[:, 0], d_mu[:, 1], d_log_sigma[:, 1]], axis=2)


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
