"""
The fast paths of the fits give the results of the plain implementations they replaced.

Each reference below is the earlier implementation, kept here as written: the mixture EM on
one (row, part, group) matrix, Newton on every row at every step, the pooling loop. Seeded
data; the new code must agree to rounding (the EM and Newton fast paths are in fact equal
to the bit on these inputs).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt
import pytest

from scipy import special

from tailkit.fit import _families, _mixture, _mixture_em, _mixture_profile, _size, _trend
from tailkit.fit._mixture import fit_transient_tails
from tailkit.fit._mixture_em import Data, Params
from tailkit.fit._quantiles import OrderStatisticRanks


_Array = npt.NDArray[np.float64]


def _em_reference(
    p: Params, d: Data, *, floor: _Array, cap: _Array, max_iter: int, free_weight: bool = True
) -> tuple[Params, _Array]:
    # the EM before row blocks: every active row in one (row, part, group) matrix
    n = d.n_obs.sum(axis=1) + d.n_cens.sum(axis=1)
    mu, sigma, weight = p.mu.copy(), p.sigma.copy(), p.weight.copy()
    previous, final = np.full(n.size, -math.inf), np.empty(n.size)
    active, sub = np.arange(n.size), d
    for _ in range(max_iter):
        if active.size == 0:
            break
        r_obs, r_cens, ll, m1, m2 = _e_step_reference(
            mu[active], sigma[active], weight[active], sub
        )
        done = ll - previous[active] < _mixture_em.TOLERANCE
        final[active[done]] = ll[done]
        previous[active] = ll
        r_obs, r_cens = r_obs * sub.n_obs[:, None, :], r_cens * sub.n_cens[:, None, :]
        mass = np.maximum(r_obs.sum(axis=2) + r_cens.sum(axis=2), 1e-300)
        new_mu = np.einsum("rkb,rb->rk", r_obs, sub.y_obs) + (r_cens * m1).sum(axis=2)
        new_mu = np.minimum(new_mu / mass, cap[active, None])
        dev_obs = (sub.y_obs[:, None, :] - new_mu[:, :, None]) ** 2
        dev_cens = m2 - 2.0 * new_mu[:, :, None] * m1 + new_mu[:, :, None] ** 2
        var = ((r_obs * dev_obs).sum(axis=2) + (r_cens * dev_cens).sum(axis=2)) / mass
        new_weight = np.maximum(mass / n[active, None], _mixture_em.MIN_WEIGHT)
        go = active[~done]
        mu[go] = new_mu[~done]
        sigma[go] = np.maximum(np.sqrt(np.maximum(var, 0.0)), floor[active, None])[~done]
        if free_weight:
            weight[go] = (new_weight / new_weight.sum(axis=1, keepdims=True))[~done]
        if done.any():
            active, sub = go, d.take(go)
    if active.size:
        final[active] = _e_step_reference(mu[active], sigma[active], weight[active], sub)[2]
    return Params(mu, sigma, weight), final


def _e_step_reference(
    mu: _Array, sigma: _Array, weight: _Array, d: Data
) -> tuple[_Array, _Array, _Array, _Array, _Array]:
    mu_, sd_ = mu[:, :, None], sigma[:, :, None]
    log_w = np.log(weight)[:, :, None]
    z = (d.y_obs[:, None, :] - mu_) / sd_
    log_obs = (log_w - np.log(sd_) - _mixture_em.LOG_SQRT_2PI) - 0.5 * z * z
    a = (d.y_cens[:, None, :] - mu_) / sd_
    log_sf = special.log_ndtr(-a)
    ll_obs, r_obs = _posterior_reference(log_obs)
    ll_cens, r_cens = _posterior_reference(log_w + log_sf)
    mills = np.exp(-0.5 * a * a - _mixture_em.LOG_SQRT_2PI - log_sf)
    m1 = mu_ + sd_ * mills
    m2 = mu_ * mu_ + 2.0 * mu_ * sd_ * mills + sd_ * sd_ * (1.0 + a * mills)
    ll = np.einsum("rb,rb->r", ll_obs, d.n_obs) + np.einsum("rb,rb->r", ll_cens, d.n_cens)
    return r_obs, r_cens, ll, m1, m2


def _posterior_reference(parts: _Array) -> tuple[_Array, _Array]:
    if parts.shape[1] == 1:
        return parts[:, 0], np.ones_like(parts)
    top = np.maximum(parts[:, 0], parts[:, 1])
    each = np.exp(parts - top[:, None, :])
    total = each[:, 0] + each[:, 1]
    return top + np.log(total), each / total[:, None, :]


def _samples(seed: int, *, groups: int, cut_share: float) -> list[tuple[_Array, _Array | None]]:
    # bodies with and without a slow tail, some with cut calls, of 60 to 3,000 calls
    rng = np.random.default_rng(seed)
    out: list[tuple[_Array, _Array | None]] = []
    for g in range(groups):
        n = int(rng.integers(60, 3_000))
        x = np.exp(rng.normal(rng.uniform(-1.0, 2.0), rng.uniform(0.2, 0.8), n))
        tail = rng.random(n) < (0.04 if g % 2 else 0.0)
        x[tail] *= rng.uniform(3.0, 10.0)
        if g % 3 == 0 or cut_share == 0.0:
            out.append((x, None))
            continue
        at = np.where(rng.random(n) < cut_share, x * rng.uniform(0.3, 1.0, n), np.nan)
        out.append((x, at))
    return out


def _assert_close(new: object, old: object, *, rtol: float, path: str = "") -> None:
    if dataclasses.is_dataclass(new) and not isinstance(new, type):
        for f in dataclasses.fields(new):
            _assert_close(getattr(new, f.name), getattr(old, f.name), rtol=rtol, path=f.name)
    elif isinstance(new, float) and isinstance(old, float):
        assert new == pytest.approx(old, rel=rtol, abs=1e-12, nan_ok=True), path
    else:
        assert new == old, path


@pytest.mark.parametrize("cut_share", [0.0, 0.15])
def test_mixture_fits_equal_those_of_the_single_matrix_em(
    cut_share: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Every field of every fit equals the fit the earlier EM gives, to 1e-9.
    """
    samples = _samples(7, groups=12, cut_share=cut_share)
    new = fit_transient_tails(samples, max_n=2_000)
    for module in (_mixture, _mixture_em, _mixture_profile):
        monkeypatch.setattr(module, "em", _em_reference)
    old = fit_transient_tails(samples, max_n=2_000)
    for a, b in zip(new, old, strict=True):
        _assert_close(a, b, rtol=1e-9)


@pytest.mark.parametrize(("parts", "cut", "free"), [(1, 0.0, True), (2, 0.0, True),
                                                    (2, 0.2, True), (2, 0.2, False)])  # fmt: skip
def test_em_states_and_likelihoods_equal_the_single_matrix_em(
    parts: int, cut: float, free: bool
) -> None:
    """
    `em` over more rows than one block gives each row the state of the earlier EM.
    """
    rng = np.random.default_rng(3)
    todo = []
    for _ in range(_mixture_em.BLOCK + 37):
        y = rng.normal(rng.uniform(0.0, 2.0), 0.5, int(rng.integers(100, 900)))
        y[: y.size // 25] += 1.5
        is_cut = rng.random(y.size) < cut
        todo.append((y[~is_cut], y[is_cut] - rng.uniform(0.0, 0.5, int(is_cut.sum()))))
    d = _mixture_em.stack(todo)
    rows = len(todo)
    floor, cap = np.full(rows, 0.02), np.full(rows, 6.0)
    start = _mixture_em.split_start(d, np.full(rows, 0.05), top=True, floor=floor)
    if parts == 1:
        start = Params(start.mu[:, :1], start.sigma[:, :1], np.ones((rows, 1)))
    got, ll = _mixture_em.em(start, d, floor=floor, cap=cap, max_iter=400, free_weight=free)
    want, ll_want = _em_reference(start, d, floor=floor, cap=cap, max_iter=400, free_weight=free)
    np.testing.assert_allclose(ll, ll_want, rtol=1e-12)
    for a, b in zip(
        (got.mu, got.sigma, got.weight), (want.mu, want.sigma, want.weight), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-9)


def _fit_location_scale_reference(family: str, ys: list[_Array], cuts: list[_Array]) -> _Array:
    # Newton on every row at every trial step, on the whole matrix
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

    def evaluate(theta: _Array) -> tuple[_Array, _Array, _Array]:
        value, grad, hess = np.log(theta[:, 1]) * n_obs, np.zeros((rows, 2)), np.zeros((rows, 3))
        grad[:, 1] = n_obs / theta[:, 1]
        hess[:, 2] = -n_obs / theta[:, 1] ** 2
        for cut, (y, w) in enumerate(data):
            g, g1, g2 = _families.shape_terms(
                family, theta[:, 1:] * y - theta[:, :1], cut=bool(cut)
            )
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
        active &= np.isfinite(rise) & (rise > 2.0 * _families._NEWTON_TOLERANCE)
        if not active.any():
            break
        t, pending = np.ones(rows), active.copy()
        for _ in range(60):
            trial = theta + t[:, None] * step
            with np.errstate(invalid="ignore", divide="ignore"):
                new = evaluate(trial)
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


@pytest.mark.parametrize("family", ["weibull", "loglogistic", "normal"])
def test_location_scale_fits_equal_newton_on_every_row(family: str) -> None:
    """
    Newton on the rows still searching, in blocks, gives every row's fit as on all rows.
    """
    samples = _samples(11, groups=40, cut_share=0.2)
    ys = [np.log(x[~np.isfinite(c)]) if c is not None else np.log(x) for x, c in samples]
    cuts = [np.log(c[np.isfinite(c)]) if c is not None else np.empty(0) for _, c in samples]
    got = _families.fit_location_scale(family, ys, cuts)
    want = _fit_location_scale_reference(family, ys, cuts)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _pool_reference(
    window: npt.NDArray[np.intp], tail: npt.NDArray[np.bool_], share: float
) -> tuple[_Array, _Array]:
    calls = np.bincount(window).astype(np.float64)
    expected = calls * min(share, 1.0 - share)
    pool = np.empty(calls.size, dtype=np.int64)
    current, filled = 0, 0.0
    for i, e in enumerate(expected.tolist()):
        pool[i] = current
        filled += e
        if filled >= _trend.MIN_EXPECTED:
            current, filled = current + 1, 0.0
    if filled > 0.0 and current > 0:
        pool[pool == current] = current - 1
    per_call = pool[window]
    return np.bincount(per_call).astype(np.float64), np.bincount(
        per_call, weights=tail.astype(np.float64)
    )


def test_pools_of_windows_equal_the_loop_that_fills_them_one_by_one() -> None:
    """
    The cumulative-sum pooling makes the same pools as adding window after window.
    """
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 4_000))
        window = np.sort(rng.integers(0, int(rng.integers(1, 3_000)), n))
        tail = rng.random(n) < rng.uniform(0.0, 0.2)
        share = float(rng.choice([0.0, 0.003, 0.05, 0.3, 0.9, 1.0]))
        for a, b in zip(_trend._pool(window, tail, share), _pool_reference(window, tail, share),
                        strict=True):  # fmt: skip
            np.testing.assert_array_equal(a, b)


def test_median_and_mad_equal_numpy_to_the_bit() -> None:
    """
    The in-place median is np.median's, odd and even sizes, ties and NaN alike.
    """
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 4, 11, 1_000, 1_001, 20_000):
        for rounded in (False, True):
            x = rng.normal(0.0, 3.0, n)
            x = np.round(x) if rounded else x
            assert _size._median(x.copy()) == float(np.median(x))
            want = 1.4826 * float(np.median(np.abs(x - np.median(x))))
            assert _size._mad(x) == want
    assert math.isnan(_size._median(np.array([1.0, math.nan, 3.0])))


def test_ranks_of_many_sizes_in_one_call_equal_one_call_per_size() -> None:
    """
    `OrderStatisticRanks.of` for 1,600 sizes at once, row by row via `take`, as one at a time.
    """
    rng = np.random.default_rng(1)
    sizes = np.concatenate([rng.integers(1, 20_000, 1_590), [1, 2, 3, 1, 40_000, 7, 7, 99, 2, 1]])
    q = np.array([0.5, 0.9, 0.95, 0.99])
    every = OrderStatisticRanks.of(sizes, q, 0.05)
    for i in rng.choice(sizes.size, 60, replace=False).tolist() + list(range(1_590, 1_600)):
        one = OrderStatisticRanks.of(sizes[i : i + 1], q, 0.05)
        row = every.take(np.array([i]))
        for f in dataclasses.fields(one):
            np.testing.assert_array_equal(getattr(row, f.name), getattr(one, f.name))
