"""
Profile-likelihood intervals of the tail share, many samples at once.

Strictly private to `tailkit.fit._mixture`.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from scipy import special, stats

from tailkit.fit._mixture_em import MAX_ITERATIONS, Data, Params, em, split_start
from tailkit.fit._types import Interval


_Array = npt.NDArray[np.float64]

ROUNDS = 8  # secant rounds per bound; each is one batched EM over every row and side
CLOSE = 0.02  # stop when the signed root is this close to its target (in sqrt of deviance)
GRID = 16  # shares on which the whole profile is looked at, from one call to GRID_TOP
GRID_TOP = 0.9
JUMP = 0.5  # a profile point this many nats above the fit has found another fit's basin


def profile_share_intervals(
    fit: Params,
    ll_max: _Array,
    d: Data,
    *,
    floor: _Array,
    cap: _Array,
    level: float,
    local: npt.NDArray[np.bool_],
) -> list[Interval]:
    """
    The interval ``{w : 2 (ll_max - ll_p(w)) <= chi2_1(level)}`` of the weight of part 1.

    ``ll_p(w)`` is the profile log-likelihood: the likelihood maximised over both parts' means
    and spreads with the share held at ``w`` (EM with the weights fixed, started from the
    fit), so the interval needs no standard error and follows the likelihood's own skew near
    0 and near the body, where a Wald interval under-covers (Venzon & Moolgavkar 1988;
    Pawitan 2001, ch. 3; McLachlan & Peel 2000, sec. 2.16, on mixtures).
    """
    # Profile search, essay.
    #
    # Each bound is a root of g(eta) = sqrt(D(eta)) - sqrt(chi2_1(level)), with eta the logit
    # of the share and D the deviance from the fit. The signed root sqrt(D) is close to linear
    # in eta (exactly so for a normal likelihood), so a secant from the fit (g = -sqrt(chi2))
    # lands near the bound in one or two rounds; once a round has gone past it, the bound is
    # bracketed and regula falsi on the bracket finishes. Every round is one EM over all rows
    # and both sides together, warm-started from the last point found inside the interval.
    # The search stays within shares of 0.1 / n and 1 - 0.1 / n: if even there the deviance
    # is below the cut, the data do not bound the share on that side and the bound is 0 or 1
    # (no separate tail: every share fits about as well).
    rows = ll_max.size
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    target = math.sqrt(float(stats.chi2.ppf(level, 1)))
    w_hat = np.clip(fit.weight[:, 1], 0.5 / n, 1.0 - 0.5 / n)
    eta_hat = special.logit(w_hat)
    search = _Search(eta_hat, special.logit(np.stack([0.1 / n, 1.0 - 0.1 / n])), target, local)
    # a first guess: the complete-data standard error, doubled for what the mixture hides
    trial = search.clip(eta_hat + SIDES * 2.0 * target / np.sqrt(n * w_hat * (1.0 - w_hat)))
    start = Params(*(np.stack([x, x]) for x in (fit.mu, fit.sigma, fit.weight)))
    for _ in range(ROUNDS):
        todo = np.flatnonzero(search.open.ravel())
        if todo.size == 0:
            break
        side, row = np.divmod(todo, rows)
        share = special.expit(trial[side, row])
        weight = np.column_stack([1.0 - share, share])
        # two EMs at each share: on from the last fit inside, and afresh from the slowest
        # calls of that share, for the path from the fit may miss the profile's maximum
        sub = d.take(row)
        fresh = split_start(sub, share, top=True, floor=floor[row])
        warm = Params(
            np.concatenate([start.mu[side, row], fresh.mu]),
            np.concatenate([start.sigma[side, row], fresh.sigma]),
            np.concatenate([weight, weight]),
        )
        both = np.concatenate([row, row])
        got, ll = em(
            warm, d.take(both), floor=floor[both], cap=cap[both], max_iter=MAX_ITERATIONS,
            free_weight=False,
        )  # fmt: skip
        better = np.where(ll[todo.size :] > ll[: todo.size], todo.size, 0) + np.arange(todo.size)
        ll, got = ll[better], Params(got.mu[better], got.sigma[better], got.weight[better])
        now_in = search.record(side, row, trial[side, row], ll_max[row] - ll)
        start.mu[side[now_in], row[now_in]] = got.mu[now_in]
        start.sigma[side[now_in], row[now_in]] = got.sigma[now_in]
        trial = search.next_trial()
    low, high = search.bounds()
    eta, g = _grid(fit, ll_max, d, floor=floor, cap=cap, target=target, local=local)
    low, high = _hull(low, high, eta, g)
    return [Interval(float(lo), float(hi), level) for lo, hi in zip(low, high, strict=True)]


def _grid(
    fit: Params, ll_max: _Array, d: Data, *, floor: _Array, cap: _Array, target: float,
    local: npt.NDArray[np.bool_],
) -> tuple[_Array, _Array]:  # fmt: skip
    """
    The signed root minus its target, ``g``, on a grid of shares (logit ``eta``), per row.

    Each share gets two EMs, from the fit and afresh from the slowest calls of that share.
    """
    rows = ll_max.size
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    eta = np.linspace(special.logit(1.0 / n), special.logit(GRID_TOP), GRID, axis=1)
    share = special.expit(eta.ravel())
    row = np.repeat(np.arange(rows), GRID)
    fresh = split_start(d.take(row), share, top=True, floor=floor[row])
    weight = np.column_stack([1.0 - share, share])
    start = Params(
        np.concatenate([fit.mu[row], fresh.mu]),
        np.concatenate([fit.sigma[row], fresh.sigma]),
        np.concatenate([weight, weight]),
    )
    both = np.concatenate([row, row])
    _, ll = em(
        start, d.take(both), floor=floor[both], cap=cap[both], max_iter=MAX_ITERATIONS,
        free_weight=False,
    )  # fmt: skip
    drop = ll_max[row] - np.maximum(ll[: row.size], ll[row.size :])
    jumped = (drop < -JUMP) & local[row]
    g = np.where(jumped, math.inf, np.sqrt(np.maximum(2.0 * drop, 0.0)) - target)
    return eta, g.reshape(rows, GRID)


def _hull(low: _Array, high: _Array, eta: _Array, g: _Array) -> tuple[_Array, _Array]:
    """
    Widen ``(low, high)`` to every grid share inside the interval, and on to the next outside.
    """
    inside = g <= 0.0
    share = special.expit(eta)
    for i in np.flatnonzero(inside.any(axis=1)):
        first, last = np.flatnonzero(inside[i])[[0, -1]]
        if share[i, first] < low[i]:
            low[i] = 0.0 if first == 0 else _between(eta[i], g[i], first, first - 1)
        if share[i, last] > high[i]:
            high[i] = 1.0 if last == GRID - 1 else _between(eta[i], g[i], last, last + 1)
    return low, high


def _between(eta: _Array, g: _Array, inside: int, outside: int) -> float:
    """
    The share where ``g`` crosses 0 between two grid points (their middle past a basin edge).
    """
    part = -g[inside] / (g[outside] - g[inside]) if math.isfinite(g[outside]) else 0.5
    return float(special.expit(eta[inside] + (eta[outside] - eta[inside]) * part))


SIDES = np.array([[-1.0], [1.0]])  # the lower bound's search goes down, the upper's up


class _Search:
    """
    Strictly private: the state of both bounds' root searches, arrays of shape (side, row).
    """

    def __init__(
        self, eta_hat: _Array, limit: _Array, target: float, local: npt.NDArray[np.bool_]
    ) -> None:
        self.eta_hat, self.limit, self.target, self.local = eta_hat, limit, target, local
        self.inside = np.stack([eta_hat, eta_hat])  # the last point inside the interval
        self.g_in = np.full(self.inside.shape, -target)
        self.outside = np.full(self.inside.shape, math.nan)  # nearest beyond, once seen
        self.g_out = np.full(self.inside.shape, math.nan)  # inf where the fit changed basin
        self.open = np.ones(self.inside.shape, dtype=bool)

    def clip(self, eta: _Array) -> _Array:
        """
        ``eta`` held within each side's search limit.
        """
        return np.clip(eta, np.minimum(*self.limit), np.maximum(*self.limit))

    def record(
        self, side: npt.NDArray[np.intp], row: npt.NDArray[np.intp], eta: _Array, drop: _Array
    ) -> npt.NDArray[np.bool_]:
        """
        Take the log-likelihood drops ``ll_max - ll_p`` at ``eta``; return which are inside.

        Where the fit is a local maximum chosen for its shape (``local``), a profile point
        well above it means the fixed-share EM has left the fit's basin for another kind of
        two-part fit; the share there belongs to that other fit, so the point counts as
        beyond the bound. Elsewhere a point above the fit is simply inside.
        """
        jumped = (drop < -JUMP) & self.local[row]
        g = np.where(jumped, math.inf, np.sqrt(np.maximum(2.0 * drop, 0.0)) - self.target)
        now_in = g <= 0.0
        s, r = side[now_in], row[now_in]
        self.inside[s, r], self.g_in[s, r] = eta[now_in], g[now_in]
        s, r = side[~now_in], row[~now_in]
        self.outside[s, r], self.g_out[s, r] = eta[~now_in], g[~now_in]
        at_limit = now_in & (np.abs(eta - self.limit[side, row]) < 1e-12)
        done = at_limit | (np.abs(g) < CLOSE)
        bracket = np.abs(self.outside - self.inside)[side, row]
        done |= bracket < 1e-3  # a basin edge (or a step) found to within 0.1% of the odds
        self.open[side[done], row[done]] = False
        return now_in

    def next_trial(self) -> _Array:
        """
        The next eta: regula falsi in a bracket (bisection at a basin edge), else a secant.
        """
        return self.clip(np.where(np.isfinite(self.outside), self._falsi(), self._secant()))

    def _falsi(self) -> _Array:
        """
        Linear in the signed root between inside and outside; their middle at a basin edge.
        """
        smooth = np.isfinite(self.g_out)
        span = np.where(smooth, self.g_out - self.g_in, 1.0)
        share = np.where(smooth, -self.g_in / span, 0.5)
        return self.inside + (self.outside - self.inside) * share

    def _secant(self) -> _Array:
        """
        No bracket yet: the line from the fit through the inside point, a little beyond.
        """
        gone = np.abs(self.inside - self.eta_hat[None, :])
        root = self.g_in + self.target
        steep = root > 1e-3
        reach = np.where(steep, gone * self.target / np.where(steep, root, 1.0) * 1.2, 4.0 * gone)
        out: _Array = self.eta_hat[None, :] + SIDES * np.maximum(reach, gone + 0.25)
        return out

    def bounds(self) -> tuple[_Array, _Array]:
        """
        Share bounds: within the bracket; 0 or 1 where no share out to the limit was outside.
        """
        bracketed = np.isfinite(self.outside)
        share = special.expit(np.where(bracketed, self._falsi(), self.inside))
        share = np.where(bracketed, share, np.array([[0.0], [1.0]]))
        return share[0], share[1]
