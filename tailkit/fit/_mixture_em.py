"""
EM for a two-part normal mixture on log latency, many samples at once, cut calls included.

Strictly private to `tailkit.fit._mixture`. Each sample is a row of a padded matrix of grouped
log ages; every row iterates until its own log-likelihood stops improving, then leaves.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import special, stats

from tailkit.fit._types import Interval


_Array = npt.NDArray[np.float64]

STARTS = (0.01, 0.05, 0.15)
SCOUT_ITERATIONS = 25
BINS = 256
MAX_ITERATIONS = 400
TOLERANCE = 1e-6  # log-likelihood gain per iteration, in nats, below which EM has converged
MIN_WEIGHT = 1e-9
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, slots=True)
class Params:
    """
    Strictly private: mixture states, one row per sample, one column per part.
    """

    mu: _Array
    sigma: _Array
    weight: _Array


@dataclass(frozen=True, slots=True)
class Data:
    """
    Strictly private: grouped log ages of finished and cut calls, counts; a row per sample.
    """

    y_obs: _Array
    n_obs: _Array
    y_cens: _Array
    n_cens: _Array

    def take(self, rows: npt.NDArray[np.intp]) -> Data:
        """
        The rows ``rows``.
        """
        return Data(self.y_obs[rows], self.n_obs[rows], self.y_cens[rows], self.n_cens[rows])


def stack(todo: list[tuple[_Array, _Array]]) -> Data:
    """
    Each sample's groups (`group_ages`) padded to a common width with zero counts at its first age.
    """
    parts = []
    for side in (0, 1):
        groups = [group_ages(pair[side]) for pair in todo]
        y = np.array([[np.concatenate(p)[0]] for p in todo]).repeat(
            max(g.size for g, _ in groups), axis=1
        )
        n = np.zeros(y.shape)
        for i, (g, c) in enumerate(groups):
            y[i, : g.size], n[i, : c.size] = g, c
        parts += [y, n]
    return Data(*parts)


def group_ages(y: _Array) -> tuple[_Array, _Array]:
    """
    Group log ages into `BINS` equal-width bins (mean of members, count); small inputs as is.
    """
    if y.size <= BINS or np.ptp(y) == 0.0:
        return y, np.ones(y.size)
    low, width = float(np.min(y)), float(np.ptp(y)) / BINS
    index = np.minimum(((y - low) / width).astype(np.int64), BINS - 1)
    counts = np.bincount(index, minlength=BINS).astype(np.float64)
    sums = np.bincount(index, weights=y, minlength=BINS)
    used = counts > 0
    return sums[used] / counts[used], counts[used]


def starts_for(pooled: _Array, floor: float) -> list[tuple[_Array, _Array, _Array]]:
    """
    Starting states: the top share (each of `STARTS`) of the data as the tail, the rest as body.

    Means and spreads of both come from running sums of the sorted, centred data.
    """
    ordered = np.sort(pooled) - np.mean(pooled)
    s1 = np.concatenate([[0.0], np.cumsum(ordered)])
    s2 = np.concatenate([[0.0], np.cumsum(ordered * ordered)])
    n, centre = ordered.size, float(np.mean(pooled))
    out = []
    for share in STARTS:
        k = min(max(2, round(share * n)), n - 2)
        mean = np.array([s1[n - k] / (n - k), (s1[n] - s1[n - k]) / k])
        square = np.array([s2[n - k] / (n - k), (s2[n] - s2[n - k]) / k])
        sd = np.sqrt(np.maximum(square - mean * mean, 0.0))
        out.append((mean + centre, np.maximum(sd, floor), np.array([1.0 - k / n, k / n])))
    return out


def em(p: Params, d: Data, *, floor: _Array, cap: _Array, max_iter: int) -> tuple[Params, _Array]:
    """
    Run censored-data EM from ``p`` on every row; return the last states and log-likelihoods.

    A row stops when its log-likelihood gains less than `TOLERANCE`, or after ``max_iter``
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
        done = ll - previous[active] < TOLERANCE
        final[active[done]] = ll[done]
        previous[active] = ll
        r_obs, r_cens = r_obs * sub.n_obs[:, None, :], r_cens * sub.n_cens[:, None, :]
        mass = np.maximum(r_obs.sum(axis=2) + r_cens.sum(axis=2), 1e-300)
        new_mu = np.einsum("rkb,rb->rk", r_obs, sub.y_obs) + (r_cens * m1).sum(axis=2)
        new_mu = np.minimum(new_mu / mass, cap[active, None])
        dev_obs = (sub.y_obs[:, None, :] - new_mu[:, :, None]) ** 2
        dev_cens = m2 - 2.0 * new_mu[:, :, None] * m1 + new_mu[:, :, None] ** 2
        var = ((r_obs * dev_obs).sum(axis=2) + (r_cens * dev_cens).sum(axis=2)) / mass
        new_weight = np.maximum(mass / n[active, None], MIN_WEIGHT)
        go = active[~done]
        mu[go] = new_mu[~done]
        sigma[go] = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor[active, None])[~done]
        weight[go] = (new_weight / new_weight.sum(axis=1, keepdims=True))[~done]
        if done.any():
            active, sub = go, d.take(go)
    if active.size:
        final[active] = _e_step(mu[active], sigma[active], weight[active], sub)[2]
    return Params(mu, sigma, weight), final


def _e_step(
    mu: _Array, sigma: _Array, weight: _Array, d: Data
) -> tuple[_Array, _Array, _Array, _Array, _Array]:
    """
    Responsibilities, log-likelihoods, and the truncated moments E[y], E[y^2] of cut calls.
    """
    mu_, sd_ = mu[:, :, None], sigma[:, :, None]
    log_w = np.log(weight)[:, :, None]
    z = (d.y_obs[:, None, :] - mu_) / sd_
    log_obs = (log_w - np.log(sd_) - LOG_SQRT_2PI) - 0.5 * z * z
    a = (d.y_cens[:, None, :] - mu_) / sd_
    log_sf = special.log_ndtr(-a)
    ll_obs, r_obs = _posterior(log_obs)
    ll_cens, r_cens = _posterior(log_w + log_sf)
    mills = np.exp(-0.5 * a * a - LOG_SQRT_2PI - log_sf)
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


def share_intervals(
    p: Params, body: npt.NDArray[np.intp], tail: npt.NDArray[np.intp], d: Data, level: float
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


def _scores(theta: _Array, d: Data) -> _Array:
    """
    Per-group scores (one call's), shape (rows, groups, 5), of the log-likelihood at ``theta``.
    """
    share = special.expit(theta[:, 0])
    mu, sigma = theta[:, [1, 3]], np.exp(theta[:, [2, 4]])
    r_obs, r_cens, _, _, _ = _e_step(mu, sigma, np.column_stack([1.0 - share, share]), d)
    z = (d.y_obs[:, None, :] - mu[:, :, None]) / sigma[:, :, None]
    a = (d.y_cens[:, None, :] - mu[:, :, None]) / sigma[:, :, None]
    mills = np.exp(-0.5 * a * a - LOG_SQRT_2PI - special.log_ndtr(-a))
    d_mu = np.concatenate([r_obs * z, r_cens * mills], axis=2) / sigma[:, :, None]
    d_log_sigma = np.concatenate([r_obs * (z * z - 1.0), r_cens * mills * a], axis=2)
    d_eta = np.concatenate([r_obs[:, 1], r_cens[:, 1]], axis=1) - share[:, None]
    return np.stack([d_eta, d_mu[:, 0], d_log_sigma[:, 0], d_mu[:, 1], d_log_sigma[:, 1]], axis=2)
