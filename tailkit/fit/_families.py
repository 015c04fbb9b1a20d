"""
Maximum-likelihood fits of the families latency is compared against.

Weibull and log-logistic by Newton's method in a concave parameterization, all groups at once;
gamma by its shape equation (cut calls: by a general optimizer).
"""

from __future__ import annotations

import math

import numpy as np

from numpy.typing import NDArray

from tailkit.errors import TailkitError


_Array = NDArray[np.float64]
_NEWTON_TOLERANCE = 1e-10  # half the Newton decrement, in nats, at which a fit has converged


def shape_terms(family: str, u: _Array, *, cut: bool) -> tuple[_Array, _Array, _Array]:
    # log density g (or log survival G for a cut call) of a standardized log latency u, and its
    # first two derivatives. Weibull: u = k (log x - log scale) is Gumbel-min, density
    # e^(u - e^u), survival e^(-e^u). Log-logistic: u is logistic. Both are log-concave.
    with np.errstate(over="ignore", invalid="ignore"):
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
    b = np.full(rows, math.pi / math.sqrt(6.0 if family == "weibull" else 3.0))
    theta = np.column_stack([np.full(rows, 0.5772156649 if family == "weibull" else 0.0), b])

    def evaluate(theta: _Array) -> tuple[_Array, _Array, _Array]:
        value, grad, hess = np.log(theta[:, 1]) * n_obs, np.zeros((rows, 2)), np.zeros((rows, 3))
        grad[:, 1] = n_obs / theta[:, 1]
        hess[:, 2] = -n_obs / theta[:, 1] ** 2
        for cut, (y, w) in enumerate(data):
            g, g1, g2 = shape_terms(family, theta[:, 1:] * y - theta[:, :1], cut=bool(cut))
            g1, g2 = g1 * w, g2 * w
            value += np.where(w > 0.0, g, 0.0).sum(axis=1)
            grad += np.column_stack([-g1.sum(axis=1), (g1 * y).sum(axis=1)])
            hess += np.column_stack(
                [g2.sum(axis=1), -(g2 * y).sum(axis=1), (g2 * y * y).sum(axis=1)]
            )
        return value, grad, hess

    value, grad, hess = evaluate(theta)
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
            with np.errstate(invalid="ignore", divide="ignore"):
                new = evaluate(trial)  # a step past scale 0 is refused just below
            ok = pending & (trial[:, 1] > 0.0) & (new[0] >= value + 1e-4 * t * rise)
            theta[ok], value[ok], grad[ok], hess[ok] = trial[ok], new[0][ok], new[1][ok], new[2][ok]
            pending &= ~ok
            if not pending.any():
                break
            t[pending] /= 2.0
        active &= ~pending
    m = centre + spread * theta[:, 0] / theta[:, 1]
    s = spread / theta[:, 1]
    value -= n_obs * np.log(spread) + np.array([y.sum() for y in ys])
    return np.column_stack([m, s, np.where(np.isfinite(value) & np.isfinite(s), value, np.nan)])


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
