"""
EM for a two-part normal mixture on log latency, many samples at once, cut calls included.

Strictly private to `tailkit.fit._mixture`. Each sample is a row of a padded matrix of grouped
log ages; every row iterates until its own log-likelihood stops improving, then leaves. Also
the starts EM runs from and the shape rules (tail, fast minority) its solutions are read by.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import special


_Array = npt.NDArray[np.float64]
_BoolArray = npt.NDArray[np.bool_]

# Starting splits: (share of calls, from the top?) -- the slowest 1%, 5%, 15% of calls
# as a tail, and the fastest 2%, 10% as a fast part, so that both a slow minority and a fast
# one (cache hits) are among the local maxima EM can reach.
STARTS = ((0.01, True), (0.05, True), (0.15, True), (0.02, False), (0.10, False))
SCOUT_ITERATIONS = 25
BINS = 256
MAX_ITERATIONS = 400
TOLERANCE = 1e-6  # log-likelihood gain per iteration, in nats, below which EM has converged
MIN_WEIGHT = 1e-9
BLOCK = 128  # rows of one EM block (see `em`)
# A transient tail is a minority: at most a quarter of calls. Beyond that the slower part
# holds the upper quartile, p75 itself: it is how the service usually runs (a second mode:
# another route, model or size class), not an excursion that a fresh attempt escapes.
TAIL_SHARE_MAX = 0.25
Z_SEPARATION = 2.326  # the tail's median beyond the body's p99 (the normal's 0.99 quantile)
# At most 20% of the tail below the body's median (the normal's 0.80 quantile): the tail is
# slower, not merely wider. Real stalls (a 2.5-15x delay on ~4% of calls) fit as tails of log
# spread up to 0.8 at 2.5-3.5x, 1.0-1.5 tail spreads from the body; a wide part centred on the
# body (outliers both ways) sits at 0.4.
Z_REACH = 0.8416
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

    def take(self, rows: npt.NDArray[np.intp] | slice) -> Data:
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


def split_start(d: Data, share: _Array, *, top: bool, floor: _Array) -> Params:
    """
    A starting state per row: its slowest (``top``) or fastest ``share`` of calls as one part.

    Cut calls count at their age. Parts are in order of their means; each gets the weighted
    mean and spread of its calls (a group on the split counts in part to each), the spread
    at least ``floor``, and a weight of its share (at least 2 calls, at most all but 2).
    """
    y = np.concatenate([d.y_obs, d.y_cens], axis=1)
    order = np.argsort(y, axis=1, kind="stable")
    y = np.take_along_axis(y, order, axis=1)
    count = np.take_along_axis(np.concatenate([d.n_obs, d.n_cens], axis=1), order, axis=1)
    n = count.sum(axis=1, keepdims=True)
    k = np.clip(share[:, None] * n, 2.0, n - 2.0)
    before = np.cumsum(count, axis=1) - count  # calls below each group
    passed = n - before - count if top else before  # calls on the split part's far side
    split = count * np.clip((k - passed) / np.maximum(count, 1e-300), 0.0, 1.0)
    parts = (count - split, split) if top else (split, count - split)
    mean = np.column_stack([(p * y).sum(axis=1) / p.sum(axis=1) for p in parts])
    var = np.column_stack([
        (p * (y - m[:, None]) ** 2).sum(axis=1) / p.sum(axis=1)
        for p, m in zip(parts, mean.T, strict=True)
    ])  # fmt: skip
    weight = np.column_stack([p.sum(axis=1) for p in parts]) / n
    return Params(mean, np.maximum(np.sqrt(var), floor[:, None]), weight)


def em(
    p: Params,
    d: Data,
    *,
    floor: _Array,
    cap: _Array,
    max_iter: int,
    free_weight: bool = True,
) -> tuple[Params, _Array]:
    """
    Run censored-data EM from ``p`` on every row; return the last states and log-likelihoods.

    A row stops when its log-likelihood gains less than `TOLERANCE`, or after ``max_iter``
    M-steps; it then leaves the matrix, so the other rows never change its result. With
    ``free_weight=False`` the weights stay as given: the EM of the profile likelihood at a
    fixed share (the M-step of the other parameters does not involve the weights).
    """
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    mu, sigma, weight = p.mu.copy(), p.sigma.copy(), p.weight.copy()
    previous, final = np.full(n.size, -math.inf), np.empty(n.size)
    active, sub = np.arange(n.size), d
    for _ in range(max_iter):
        if active.size == 0:
            break
        # Rows are independent, so a step runs on blocks of `BLOCK` active rows: a block's
        # working arrays stay in the CPU cache through the E- and M-step, where one matrix
        # of every row would stream from memory at each of the step's array operations.
        steps = []
        for at in _blocks(active.size):
            rows = active[at]
            state = Params(mu[rows], sigma[rows], weight[rows])
            steps.append(_step(state, sub.take(at), n[rows], floor=floor[rows], cap=cap[rows]))
        ll, new_mu, new_sigma, new_weight = (np.concatenate(x) for x in zip(*steps, strict=True))
        done = ll - previous[active] < TOLERANCE
        final[active[done]] = ll[done]
        previous[active] = ll
        go = active[~done]
        mu[go], sigma[go] = new_mu[~done], new_sigma[~done]
        if free_weight:
            weight[go] = new_weight[~done]
        if done.any():
            active, sub = go, d.take(go)
    if active.size:
        last = Params(mu[active], sigma[active], weight[active])
        final[active] = _step(last, sub, n[active], floor=floor[active], cap=cap[active])[0]
    return Params(mu, sigma, weight), final


def _blocks(size: int) -> list[slice]:
    """
    Consecutive positions ``0 .. size - 1`` in runs of at most `BLOCK`.
    """
    return [slice(i, min(i + BLOCK, size)) for i in range(0, size, BLOCK)]


def _step(
    p: Params, d: Data, n: _Array, *, floor: _Array, cap: _Array
) -> tuple[_Array, _Array, _Array, _Array]:
    """
    One E- and M-step: the log-likelihood at ``p``, and the next means, spreads, weights.
    """
    # Part by part on contiguous (row, group) arrays: an operation broadcast over rows and
    # parts at once, or on a part's strided slice of a (row, part, group) array, runs ~3x
    # slower. Each sum keeps the order of terms of the (row, part, group) form.
    ll, r_obs = _e_finished(p, d)
    for part in r_obs:
        np.multiply(part, d.n_obs, out=part)
    mass = np.column_stack([r.sum(axis=1) for r in r_obs])
    new_mu = np.column_stack([np.einsum("rb,rb->r", r, d.y_obs) for r in r_obs])
    cut = d.y_cens.shape[1] > 0
    if cut:
        r_cens, ll_cens, m1, m2 = _e_cut(p, d)
        ll += ll_cens
        r_cens *= d.n_cens[:, None, :]
        mass += r_cens.sum(axis=2)
        new_mu += (r_cens * m1).sum(axis=2)
    else:
        ll += 0.0
    mass = np.maximum(mass, 1e-300)
    new_mu = np.minimum(new_mu / mass, cap[:, None])
    var = np.empty(mass.shape)
    for k, r in enumerate(r_obs):
        dev = np.subtract(d.y_obs, new_mu[:, k, None])
        np.square(dev, out=dev)
        dev *= r
        var[:, k] = dev.sum(axis=1)
    if cut:
        dev_cens = m2 - 2.0 * new_mu[:, :, None] * m1 + new_mu[:, :, None] ** 2
        var += (r_cens * dev_cens).sum(axis=2)
    var /= mass
    new_weight = np.maximum(mass / n[:, None], MIN_WEIGHT)
    new_sigma = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor[:, None])
    return ll, new_mu, new_sigma, new_weight / new_weight.sum(axis=1, keepdims=True)


def _e_finished(p: Params, d: Data) -> tuple[_Array, list[_Array]]:
    """
    Finished calls: the log-likelihoods, and each part's responsibilities (`_posterior`).
    """
    head = np.log(p.weight) - np.log(p.sigma) - LOG_SQRT_2PI
    parts = []
    for k in range(p.mu.shape[1]):
        z = np.subtract(d.y_obs, p.mu[:, k, None])
        z /= p.sigma[:, k, None]
        np.square(z, out=z)
        z *= 0.5
        parts.append(np.subtract(head[:, k, None], z, out=z))
    if len(parts) == 1:
        return np.einsum("rb,rb->r", parts[0], d.n_obs), [np.ones(parts[0].shape)]
    first, second = parts
    top = np.maximum(first, second)
    # the likelier part's term is exp(0) = 1, so one exp (of the other's) serves both
    each = np.minimum(first, second)
    each -= top
    np.exp(each, out=each)
    total = each + 1.0
    lead = np.greater_equal(first, second)
    alone, along = np.divide(1.0, total), np.divide(each, total)
    r = [np.where(lead, alone, along), np.where(lead, along, alone)]
    top += np.log(total, out=total)
    return np.einsum("rb,rb->r", top, d.n_obs), r


def _e_cut(p: Params, d: Data) -> tuple[_Array, _Array, _Array, _Array]:
    """
    Cut calls: responsibilities, log-likelihoods, truncated moments E[y], E[y^2].
    """
    mu_, sd_ = p.mu[:, :, None], p.sigma[:, :, None]
    a = (d.y_cens[:, None, :] - mu_) / sd_
    log_sf = special.log_ndtr(-a)
    ll_cens, r_cens = _posterior(np.log(p.weight)[:, :, None] + log_sf)
    mills = np.exp(-0.5 * a * a - LOG_SQRT_2PI - log_sf)
    m1 = mu_ + sd_ * mills
    m2 = mu_ * mu_ + 2.0 * mu_ * sd_ * mills + sd_ * sd_ * (1.0 + a * mills)
    return r_cens, np.einsum("rb,rb->r", ll_cens, d.n_cens), m1, m2


def _posterior(parts: _Array) -> tuple[_Array, _Array]:
    """
    Per group, from the log densities of its parts (axis 1): log-likelihood, responsibilities.
    """
    if parts.shape[1] == 1:
        return parts[:, 0], np.ones_like(parts)
    # by hand rather than np.logaddexp: numpy's exp is vectorized, its log and logaddexp slow.
    # The likelier part's term is exp(0) = 1, so one exp (of the other's) serves both.
    first, second = parts[:, 0], parts[:, 1]
    top = np.maximum(first, second)
    other = np.minimum(first, second)
    other -= top
    each = np.exp(other, out=other)
    total = each + 1.0
    r = np.empty_like(parts)
    lead = first >= second
    np.divide(1.0, total, out=r[:, 0])
    np.divide(each, total, out=r[:, 1])
    np.copyto(r[:, 0], r[:, 1], where=~lead)
    np.copyto(r[:, 1], np.divide(1.0, total, out=each), where=~lead)
    return top + np.log(total), r


def solutions(
    starts: Params, tiled: npt.NDArray[np.intp], data: Data, *, floor: _Array, cap: _Array
) -> tuple[Params, _Array]:
    """
    EM from every start (start j of row i at ``j * rows + i``), parts in order of their means.

    Every start runs a short scout; per row, only the likeliest scout and the likeliest of
    each shape (tail, slower minority, fast minority) run on to convergence. The others keep
    their scout state and a log-likelihood of ``-inf``.
    """
    rows = floor.size
    k = tiled.size // rows
    scout, ll_scout = em(
        starts, data.take(tiled), floor=floor[tiled], cap=cap[tiled], max_iter=SCOUT_ITERATIONS
    )
    scout = by_mean(scout)
    ll_scout = ll_scout.reshape(k, rows)
    kinds = [np.argmax(ll_scout, axis=0)]
    kinds += [best(ll_scout, x.reshape(k, rows)) for x in shapes(scout)]
    go = np.unique(np.concatenate([j * rows + np.arange(rows) for j in kinds]))
    start = Params(scout.mu[go], scout.sigma[go], scout.weight[go])
    two, ll_two = em(
        start, data.take(tiled[go]), floor=floor[tiled[go]], cap=cap[tiled[go]],
        max_iter=MAX_ITERATIONS,
    )  # fmt: skip
    two = by_mean(two)
    scout.mu[go], scout.sigma[go], scout.weight[go] = two.mu, two.sigma, two.weight
    ll = np.full(tiled.size, -math.inf)
    ll[go] = ll_two
    return scout, ll


def by_mean(p: Params) -> Params:
    """
    The same two-part states with the parts in order of their means (column 1 the slower).
    """
    order = np.argsort(p.mu, axis=1, kind="stable")
    return Params(*(np.take_along_axis(x, order, axis=1) for x in (p.mu, p.sigma, p.weight)))


def shapes(p: Params) -> tuple[_BoolArray, _BoolArray, _BoolArray]:
    """
    Per solution (parts in order of their means): tail-shaped, slower-minority, fast-shaped.

    Tail-shaped: the slower part holds at most `TAIL_SHARE_MAX` of calls, its median lies
    beyond the body's p99 (``gap >= Z_SEPARATION * body_sigma``), and at most 20% of it lies
    below the body's median (``gap >= Z_REACH * tail_sigma``: it is slower, not merely wider).
    Fast-shaped is the mirror image: a fast minority clear of the rest.
    """
    gap = p.mu[:, 1] - p.mu[:, 0]
    tail = (p.weight[:, 1] <= TAIL_SHARE_MAX) & (gap >= Z_SEPARATION * p.sigma[:, 0])
    tail &= gap >= Z_REACH * p.sigma[:, 1]
    fast = (p.weight[:, 0] <= TAIL_SHARE_MAX) & (gap >= Z_SEPARATION * p.sigma[:, 1])
    fast &= gap >= Z_REACH * p.sigma[:, 0]
    return tail, p.weight[:, 1] <= 0.5, fast


def best(ll: _Array, allowed: _BoolArray) -> npt.NDArray[np.intp]:
    """
    Per row (column), the solution (row of ``ll``) of highest likelihood among those allowed.
    """
    return np.asarray(np.argmax(np.where(allowed, ll, -np.inf), axis=0), dtype=np.intp)
