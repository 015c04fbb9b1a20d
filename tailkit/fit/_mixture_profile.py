"""
Profile-likelihood intervals of the tail share, many samples at once.

Strictly private to `tailkit.fit._mixture`.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from scipy import special, stats

from tailkit.estimate import Estimate
from tailkit.fit._mixture_em import MAX_ITERATIONS, Data, Params, em, split_start


_Array = npt.NDArray[np.float64]
_BoolArray = npt.NDArray[np.bool_]
_IntArray = npt.NDArray[np.intp]

PROFILE_LIKELIHOOD = "profile likelihood"
ROUNDS = 8  # secant rounds per bound; each is one batched EM over every row and side
CLOSE = 0.02  # stop when the signed root is this close to its target (in sqrt of deviance)
GRID = 16  # shares at which a loose row's whole profile is seen, from one call to GRID_TOP
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
    local: _BoolArray,
    loose: _BoolArray,
) -> list[Estimate]:
    """
    The interval ``{w : 2 (ll_max - ll_p(w)) <= cut}`` of the weight of part 1, per row.

    ``ll_p(w)`` is the profile log-likelihood: the likelihood maximised over both parts' means
    and spreads with the share held at ``w`` (EM with the weights fixed), so the interval
    needs no standard error and follows the likelihood's own skew near 0 and near the body,
    where a Wald interval under-covers (Venzon & Moolgavkar 1988; Pawitan 2001, ch. 3;
    McLachlan & Peel 2000, sec. 2.16, on likelihood inference for mixtures).

    ``cut`` is ``chi2_1(level)``, the regular limit. Rows marked ``loose`` (the fit found no
    separate tail) start at 0, and widen the upper end to ``chi2_2(level)`` and to the hull
    of the whole profile above it:
    with no separate tail the share is barely identified -- the tail's mean and spread trade
    off against it, and a spike on the top few calls can out-fit the true share -- so the
    deviance at the true share is not chi2_1 (the likelihood-ratio asymptotics of mixtures
    are non-standard: Hartigan 1985; Chen & Chen 2001). Seeded simulation (a 1% tail at 3x a
    body of log spread 0.5, n = 2,000) puts its 95th percentile at 6.0, chi2_2's.
    ``local`` rows hold a fit that is a local maximum chosen for its shape (see `_Search`).
    """
    # Profile search, essay.
    #
    # Each bound is a root of g(eta) = sqrt(D(eta)) - sqrt(cut), with eta the logit of the
    # share and D the deviance from the fit. The signed root sqrt(D) is close to linear in eta
    # (exactly so for a normal likelihood), so a secant from the fit (g = -sqrt(cut)) lands
    # near the bound in one or two rounds; once a round has gone past it, the bound is
    # bracketed and regula falsi on the bracket finishes. Every round is one EM over all rows
    # and both sides together, warm-started from the last point found inside the interval.
    # The search stays within shares of 0.1 / n and 1 - 0.1 / n: if even there the deviance
    # is below the cut, the data do not bound the share on that side and the bound is 0 or 1.
    # Loose rows may have a profile with several humps (a spike on the top calls, a wide part
    # around the body), so they also get the profile on a grid of `GRID` shares, each started
    # afresh from the slowest calls of its share (the path from the fit may never reach the
    # other humps), and the interval is widened to every grid share inside it.
    rows = ll_max.size
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    target = np.sqrt(stats.chi2.ppf(level, np.where(loose, 2, 1)))
    w_hat = np.clip(fit.weight[:, 1], 0.5 / n, 1.0 - 0.5 / n)
    eta_hat = special.logit(w_hat)
    search = _Search(eta_hat, special.logit(np.stack([0.1 / n, 1.0 - 0.1 / n])), target, local)
    search.open[0, loose] = False  # a loose row's interval starts at 0: no lower search
    # a first guess: the complete-data standard error, doubled for what the mixture hides
    trial = search.clip(eta_hat + SIDES * 2.0 * target / np.sqrt(n * w_hat * (1.0 - w_hat)))
    start = Params(*(np.stack([x, x]) for x in (fit.mu, fit.sigma, fit.weight)))
    for _ in range(ROUNDS):
        todo = np.flatnonzero(search.open.ravel())
        if todo.size == 0:
            break
        side, row = np.divmod(todo, rows)
        path = Params(start.mu[side, row], start.sigma[side, row], start.weight[side, row])
        share = special.expit(trial[side, row])
        got, ll = _profile(path, share, row, d, floor=floor, cap=cap)
        now_in = search.record(side, row, trial[side, row], ll_max[row] - ll)
        start.mu[side[now_in], row[now_in]] = got.mu[now_in]
        start.sigma[side[now_in], row[now_in]] = got.sigma[now_in]
        trial = search.next_trial()
    low, high = search.bounds()
    todo = np.flatnonzero(loose)
    if todo.size:
        eta = np.linspace(special.logit(1.0 / n[todo]), special.logit(GRID_TOP), GRID, axis=1)
        # Only grid shares above the upper bound can widen it: the others are not fitted
        # (and count as outside, which leaves the hull's upper end as it would be).
        above = special.expit(eta) > high[todo, None]
        g = np.full(eta.shape, math.inf)
        if above.any():
            row = np.repeat(todo, GRID).reshape(eta.shape)[above]
            _, ll = _profile(None, special.expit(eta[above]), row, d, floor=floor, cap=cap)
            g[above] = search.signed_root(row, ll_max[row] - ll)
        low[todo], high[todo] = _hull(low[todo], high[todo], eta, g)
        low[todo] = 0.0  # no tail beat one lognormal: the data do not exclude a share of 0
    return [
        Estimate(float(w), float(lo), float(hi), int(k), PROFILE_LIKELIHOOD, level)
        for w, lo, hi, k in zip(fit.weight[:, 1], low, high, n, strict=True)
    ]


def _profile(
    path: Params | None, share: _Array, row: _IntArray, d: Data, *, floor: _Array, cap: _Array
) -> tuple[Params, _Array]:
    """
    EM at each fixed ``share`` of row ``row``; the states and log-likelihoods reached.

    Each runs on from ``path``, or, if ``None``, afresh from the slowest calls of its share.
    """
    weight = np.column_stack([1.0 - share, share])
    if path is None:
        path = split_start(d.take(row), share, top=True, floor=floor[row])
    start = Params(path.mu, path.sigma, weight)
    return em(
        start, d.take(row), floor=floor[row], cap=cap[row], max_iter=MAX_ITERATIONS,
        free_weight=False,
    )  # fmt: skip


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

    def __init__(self, eta_hat: _Array, limit: _Array, target: _Array, local: _BoolArray) -> None:
        self.eta_hat, self.limit, self.target, self.local = eta_hat, limit, target, local
        self.inside = np.stack([eta_hat, eta_hat])  # the last point inside the interval
        self.g_in = -np.stack([target, target])
        self.outside = np.full(self.inside.shape, math.nan)  # nearest beyond, once seen
        self.g_out = np.full(self.inside.shape, math.nan)  # inf where the fit changed basin
        self.open = np.ones(self.inside.shape, dtype=bool)

    def clip(self, eta: _Array) -> _Array:
        """
        ``eta`` held within each side's search limit.
        """
        return np.clip(eta, np.minimum(*self.limit), np.maximum(*self.limit))

    def signed_root(self, row: _IntArray, drop: _Array) -> _Array:
        """
        ``g``: the signed root of the deviance less its target, from ``drop = ll_max - ll_p``.

        Where the fit is a local maximum chosen for its shape (``local``), a profile point
        well above it means the fixed-share EM has left the fit's basin for another kind of
        two-part fit; the share there belongs to that other fit, so the point counts as
        beyond the bound (``g = inf``). Elsewhere a point above the fit is simply inside.
        """
        jumped = (drop < -JUMP) & self.local[row]
        root = np.sqrt(np.maximum(2.0 * drop, 0.0)) - self.target[row]
        return np.where(jumped, math.inf, root)

    def record(self, side: _IntArray, row: _IntArray, eta: _Array, drop: _Array) -> _BoolArray:
        """
        Take the log-likelihood drops ``ll_max - ll_p`` at ``eta``; return which are inside.
        """
        g = self.signed_root(row, drop)
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
        root = self.g_in + self.target[None, :]
        steep = root > 1e-3
        reach = gone * self.target[None, :] / np.where(steep, root, 1.0) * 1.2
        reach = np.where(steep, reach, 4.0 * gone)
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
