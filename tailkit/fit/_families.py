"""
Maximum-likelihood fits of the families latency is compared against.

Weibull, log-logistic and (for the bootstrap of the censored test) lognormal by Newton's method in
a concave parameterization, all samples at once; gamma by its shape equation (cut calls: by a
general optimizer); the score test of the lognormal inside the generalized gamma.
"""

from __future__ import annotations

import math

import numpy as np

from numpy.typing import NDArray

from tailkit.errors import TailkitError


_Array = NDArray[np.float64]
_NEWTON_TOLERANCE = 1e-10  # half the Newton decrement, in nats, at which a fit has converged
_BLOCK_VALUES = 1 << 16  # values (rows x calls) of one block of `fit_location_scale`


def shape_terms(family: str, u: _Array, *, cut: bool) -> tuple[_Array, _Array, _Array]:
    # log density g (or log survival G for a cut call) of a standardized log latency u, and its
    # first two derivatives. Weibull: u = k (log x - log scale) is Gumbel-min, density
    # e^(u - e^u), survival e^(-e^u). Log-logistic: u is logistic. Normal (the lognormal):
    # u is standard normal, with hazard h = phi / Q. All three are log-concave.
    from scipy import special

    with np.errstate(over="ignore", invalid="ignore"):
        if family == "normal":
            if cut:
                log_q = special.log_ndtr(-u)
                h = np.exp(-0.5 * u * u - 0.5 * math.log(2.0 * math.pi) - log_q)
                return log_q, -h, -h * (h - u)
            return -0.5 * u * u - 0.5 * math.log(2.0 * math.pi), -u, np.full(u.shape, -1.0)
        if family == "weibull":
            e = np.exp(u)
            return (-e, -e, -e) if cut else (u - e, 1.0 - e, -e)
        e = np.exp(-np.abs(u))
        curve = -e / (1.0 + e) ** 2
        if cut:
            up = np.where(u > 0.0, 1.0, e) / (1.0 + e)  # expit(u)
            return -(np.maximum(u, 0.0) + np.log1p(e)), -up, curve
        return -np.abs(u) - 2.0 * np.log1p(e), -np.sign(u) * (1.0 - e) / (1.0 + e), 2.0 * curve


def fit_location_scale(family: str, ys: list[_Array], cuts: list[_Array]) -> _Array:
    # Weibull and log-logistic latencies are location-scale families in log latency y: with
    # u = (y - m) / s a completed call adds g(u) - log s - y (the -y turns the density of log x
    # into the density of x), a cut call G(u). In (a, b) = (m / s, 1 / s) -- u = b y - a --
    # that log-likelihood is concave for log-concave g and G (Burridge 1981), so Newton's
    # method with step halving finds the maximum from any start. All samples run together as
    # rows of zero-padded matrices, on log latency standardized by the completed calls' mean
    # and sd, from the moment estimates; each row stops when half its Newton decrement is below
    # 1e-10 nats. Returns one row per sample: m, s and the log-likelihood, NaN if it failed.
    rows = len(ys)
    centre = np.array([y.mean() for y in ys])
    spread = np.array([y.std() for y in ys])
    data = []
    for parts in (ys, cuts):
        width = max(1, *(p.size for p in parts))
        y, w = np.zeros((rows, width)), np.zeros((rows, width))
        for i, p in enumerate(parts):
            y[i, : p.size], w[i, : p.size] = (p - centre[i]) / spread[i], 1.0
        data.append((y, w))
    n_obs = np.array([y.size for y in ys], dtype=np.float64)
    start = {"weibull": (0.5772156649, math.pi / math.sqrt(6.0)), "normal": (0.0, 1.0)}
    a0, b0 = start.get(family, (0.0, math.pi / math.sqrt(3.0)))
    theta = np.column_stack([np.full(rows, a0), np.full(rows, b0)])

    def evaluate(theta: _Array, rows_at: NDArray[np.intp]) -> tuple[_Array, _Array, _Array]:
        # the rows ``rows_at`` at ``theta`` (one line per row), a few rows at a time so that a
        # block's arrays stay in the CPU cache; each row's sums are as over the whole matrix
        size = rows_at.size
        value, grad, hess = np.empty(size), np.empty((size, 2)), np.empty((size, 3))
        for first in range(0, size, block):
            at = slice(first, first + block)
            found = _evaluate(
                family, theta[at], [(y[rows_at[at]], w[rows_at[at]]) for y, w in data]
            )
            value[at], grad[at], hess[at] = found
        return value, grad, hess

    block = max(1, _BLOCK_VALUES // sum(y.shape[1] for y, _ in data))
    everyone = np.arange(rows)
    value, grad, hess = evaluate(theta, everyone)
    active = np.isfinite(value)
    for _ in range(100):
        det = hess[:, 0] * hess[:, 2] - hess[:, 1] ** 2
        step = np.column_stack([
            hess[:, 1] * grad[:, 1] - hess[:, 2] * grad[:, 0],
            hess[:, 1] * grad[:, 0] - hess[:, 0] * grad[:, 1],
        ]) / np.where(det > 0.0, det, np.nan)[:, None]  # fmt: skip
        rise = np.einsum("rk,rk->r", grad, step)
        active &= np.isfinite(rise) & (rise > 2.0 * _NEWTON_TOLERANCE)
        if not active.any():
            break
        t, pending = np.ones(rows), active.copy()
        for _ in range(60):
            trial = theta + t[:, None] * step
            # only the rows still searching are evaluated: the others' values are not used
            at = np.flatnonzero(pending)
            with np.errstate(invalid="ignore", divide="ignore"):
                new = evaluate(trial[at], at)  # a step past scale 0 is refused just below
            took = (trial[at, 1] > 0.0) & (new[0] >= value[at] + 1e-4 * t[at] * rise[at])
            ok = at[took]
            theta[ok], value[ok], grad[ok], hess[ok] = (
                trial[ok],
                new[0][took],
                new[1][took],
                new[2][took],
            )
            pending[ok] = False
            if not pending.any():
                break
            t[pending] /= 2.0
        active &= ~pending
    m = centre + spread * theta[:, 0] / theta[:, 1]
    s = spread / theta[:, 1]
    value -= n_obs * np.log(spread) + np.array([y.sum() for y in ys])
    return np.column_stack([m, s, np.where(np.isfinite(value) & np.isfinite(s), value, np.nan)])


def _evaluate(
    family: str, theta: _Array, data: list[tuple[_Array, _Array]]
) -> tuple[_Array, _Array, _Array]:
    # log-likelihood, gradient and Hessian (aa, ab, bb) in (a, b) of each row of ``data``
    n_obs = data[0][1].sum(axis=1)
    value, grad, hess = (
        np.log(theta[:, 1]) * n_obs,
        np.zeros((theta.shape[0], 2)),
        np.zeros((theta.shape[0], 3)),
    )
    grad[:, 1] = n_obs / theta[:, 1]
    hess[:, 2] = -n_obs / theta[:, 1] ** 2
    for cut, (y, w) in enumerate(data):
        g, g1, g2 = shape_terms(family, theta[:, 1:] * y - theta[:, :1], cut=bool(cut))
        g1, g2 = g1 * w, g2 * w
        value += np.where(w > 0.0, g, 0.0).sum(axis=1)
        grad += np.column_stack([-g1.sum(axis=1), (g1 * y).sum(axis=1)])
        hess += np.column_stack([g2.sum(axis=1), -(g2 * y).sum(axis=1), (g2 * y * y).sum(axis=1)])
    return value, grad, hess


def gamma_shape(gap: _Array) -> _Array:
    # Without censoring the gamma scale profiles out (scale = mean / a) and a solves
    # log a - digamma(a) = log mean - mean log, by Newton from Minka's (2002) closed form.
    from scipy import special

    a = (3.0 - gap + np.sqrt((gap - 3.0) ** 2 + 24.0 * gap)) / (12.0 * gap)
    active = np.ones(a.size, dtype=bool)
    for _ in range(50):
        step = (np.log(a) - special.digamma(a) - gap) / (1.0 / a - special.polygamma(1, a))
        a = np.where(active, np.maximum(a - step, a / 10.0), a)
        active &= np.abs(step) >= 1e-12 * a
        if not active.any():
            break
    return a


def fit_gamma(x: _Array, log_x: _Array, x_cut: _Array, a: float) -> tuple[float, float, float]:
    # ``a`` is the uncensored fit's shape. With censoring the survival term log Q(a, c / scale)
    # has no handy derivative in a, so L-BFGS-B runs on (log a, log scale) with numerical
    # gradients from the uncensored fit.
    from scipy import optimize, special

    mean = float(x.mean())

    def loglik(a: float, scale: float) -> float:
        with np.errstate(divide="ignore"):
            tail = np.log(special.gammaincc(a, x_cut / scale)).sum() if x_cut.size else 0.0
        return float(
            (a - 1.0) * log_x.sum()
            - x.sum() / scale
            - x.size * (special.gammaln(a) + a * math.log(scale))
            + tail
        )

    if x_cut.size == 0:
        scale = mean / a
        return float(a), scale, loglik(a, scale)
    n_all = x.size + x_cut.size

    def negative(theta: _Array) -> float:
        value = loglik(math.exp(theta[0]), math.exp(theta[1]))
        return -value / n_all if math.isfinite(value) else math.inf

    result = optimize.minimize(
        negative, np.array([math.log(a), math.log(mean / a)]), method="L-BFGS-B"
    )
    if not math.isfinite(float(result.fun)):
        msg = "the gamma fit did not converge"
        raise TailkitError(msg)
    a, scale = math.exp(float(result.x[0])), math.exp(float(result.x[1]))
    return a, scale, loglik(a, scale)


def _padded(parts: list[_Array]) -> tuple[_Array, _Array]:
    # Ragged samples as rows of a zero-padded matrix, and the matrix of weights (1 = real).
    width = max(1, *(p.size for p in parts))
    values, weights = np.zeros((len(parts), width)), np.zeros((len(parts), width))
    for i, p in enumerate(parts):
        values[i, : p.size], weights[i, : p.size] = p, 1.0
    return values, weights


def gengamma_scores(ys: list[_Array], cuts: list[_Array], mu: _Array, sigma: _Array) -> _Array:
    """
    Score statistic of each sample's lognormal fit ``(mu, sigma)`` inside the generalized gamma.

    ``ys[i]`` is the log latency of sample i's finished calls, ``cuts[i]`` that of its cut
    ages. Each statistic is chi-square with 1 degree of freedom for large samples; NaN where the
    observed information is not positive definite.
    """
    # The generalized gamma (Prentice 1974) has a third parameter Q: with g = Q**-2,
    # g exp(Q w) is gamma(g) distributed for the standardized log latency w. Q = 0 is the
    # lognormal, Q = 1 the Weibull, Q = sigma the gamma, Q < 0 log latency skewed to the right
    # (a slow tail); the family is regular at Q = 0, inside its range. Rao's score test of
    # Q = 0 needs only the lognormal fit: the score U and observed information J of
    # (location, log scale, Q) at Q = 0, and U' J^-1 U is chi-square with 1 degree of freedom
    # whatever the censoring (it is asymptotically the likelihood-ratio test, without fitting
    # the generalized gamma). At Q = 0 a finished call's log density is, to second order,
    # -w^2/2 - Q w^3/6 - Q^2 (w^4/24 + 1/12) - log sigma - log(2 pi)/2; a cut call's log
    # survival log S(c) has, with the normal hazard h = phi(c) / Q(c) and the tail moments of
    # the normal, d/dQ = -(c^2 + 2) h / 6, d/dc d/dQ = h c^3/6 - h^2 (c^2 + 2)/6 and
    # d2/dQ2 = h (c^5 + 2 c^3 + 6 c)/36 - ((c^2 + 2) h/6)^2. Location and log scale enter
    # through w = (y - location) / scale. It tests the skew of log latency only: a shape
    # symmetric in logs (the log-logistic) is not what it looks for.
    from scipy import special

    (y, done), (y_cut, cut) = _padded(ys), _padded(cuts)
    w, c = (y - mu[:, None]) / sigma[:, None], (y_cut - mu[:, None]) / sigma[:, None]
    h = np.exp(-0.5 * c * c - 0.5 * math.log(2.0 * math.pi) - special.log_ndtr(-c))
    # first and second derivatives in w and Q, finished calls then cut ones
    d_w = np.hstack([-w * done, -h * cut])
    d_ww = np.hstack([-done, -h * (h - c) * cut])
    d_q = np.hstack([-(w**3) / 6.0 * done, -(c * c + 2.0) * h / 6.0 * cut])
    d_wq = np.hstack([-(w**2) / 2.0 * done, (h * c**3 - h * h * (c * c + 2.0)) / 6.0 * cut])
    d_qq = np.hstack([
        -(w**4 / 12.0 + 1.0 / 6.0) * done,
        (h * (c**5 + 2.0 * c**3 + 6.0 * c) / 36.0 - ((c * c + 2.0) * h / 6.0) ** 2) * cut,
    ])  # fmt: skip
    v = np.hstack([w, c])
    score = np.stack([-d_w.sum(1), -(v * d_w).sum(1) - done.sum(1), d_q.sum(1)], axis=1)
    info = np.empty((len(ys), 3, 3))
    entries = {
        (0, 0): d_ww, (0, 1): v * d_ww + d_w, (0, 2): -d_wq,
        (1, 1): v * v * d_ww + v * d_w, (1, 2): -v * d_wq, (2, 2): d_qq,
    }  # fmt: skip
    for (i, j), terms in entries.items():
        info[:, i, j] = info[:, j, i] = -terms.sum(1)
    usable = np.all(np.isfinite(info), axis=(1, 2))
    info[~usable] = np.eye(3)
    usable &= np.all(np.linalg.eigvalsh(info) > 0.0, axis=1)
    info[~usable] = np.eye(3)
    statistic = np.einsum("ri,ri->r", score, np.linalg.solve(info, score[:, :, None])[:, :, 0])
    return np.where(usable, statistic, np.nan)
