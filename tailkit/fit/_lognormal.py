"""
The lognormal latency model, fitted by maximum likelihood with right-censored calls.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np

from numpy.typing import ArrayLike, NDArray

from tailkit.estimate import Estimate
from tailkit.fit._quantiles import KaplanMeier, split_censored


__all__ = ["LognormalFit", "fit_lognormal", "fit_lognormal_moments"]

_LOG_2PI = math.log(2.0 * math.pi)
_WALD = "Wald (censored maximum likelihood)"
_NO_FIT = "no fit"

Matrix2 = tuple[tuple[float, float], tuple[float, float]]


def _z(q: float) -> float:
    from scipy import stats

    if not 0.0 < q < 1.0:
        msg = f"q must be a quantile by the CDF strictly between 0 and 1 (0.99 is p99), got {q!r}"
        raise ValueError(msg)
    return float(stats.norm.ppf(q))


def _alpha(level: float) -> float:
    if not 0.0 < level < 1.0:
        msg = f"level must be between 0 and 1 (e.g. 0.95), got {level!r}"
        raise ValueError(msg)
    return 1.0 - level


@dataclass(frozen=True, slots=True)
class LognormalFit:
    """
    A lognormal fit of latency: ``log(latency_s)`` is normal with mean ``mu``, sd ``sigma``.

    Every interval here is exact or asymptotic **under the lognormal model** and holds only
    if latency is lognormal. On other shapes its coverage can be far below its level: on a
    lognormal with a 5 % transient tail (those calls 4x slower) the p99 and p99/p50 intervals
    covered the truth in 0 of 200 samples, at 200 and at 2,000 calls. Check the shape first
    (`goodness_of_fit`); the distribution-free intervals of `empirical_quantiles` hold for any
    shape.

    Args:
        mu: Mean of log latency (log seconds); ``exp(mu)`` is the median in seconds. NaN when
            the data give no estimate (see ``note``).
        sigma: Standard deviation of log latency (the MLE, ddof = 0); NaN with ``mu``.
        n: Calls used, censored ones included.
        n_censored: Calls that were cut (right-censored).
        mu_interval: Interval for ``mu``: Student t without censoring, Wald with censoring;
            ``(-inf, inf)`` when there is no estimate.
        sigma_interval: Interval for ``sigma``: chi-square without censoring, Wald on
            ``log(sigma)`` with censoring; ``(0, inf)`` when there is no estimate.
        loglik: Maximized log-likelihood of the latencies in seconds (the ``-sum(log x)``
            Jacobian included, so it compares with other families on the same data); NaN when
            there is no estimate.
        cov: Covariance of the estimates ``(mu, sigma)`` from the observed information (NaN
            when there is no estimate).
        note: ``None`` for a fit; otherwise why the data give no estimate, e.g.
            ``"all 2 finished calls took 1.2 s: no spread to fit"``.
    """

    mu: float
    sigma: float
    n: int
    n_censored: int
    mu_interval: Estimate
    sigma_interval: Estimate
    loglik: float
    cov: Matrix2
    note: str | None = None

    @property
    def median_s(self) -> float:
        """
        The fitted median latency in seconds, ``exp(mu)``.
        """
        return math.exp(self.mu)

    def quantile(self, q: float) -> float:
        """
        The fitted q-quantile of latency in seconds (``quantile(0.99)`` is p99).

        Args:
            q: Quantile by the CDF, strictly between 0 and 1.

        Returns:
            ``exp(mu + z_q * sigma)`` in seconds.
        """
        return math.exp(self.mu + _z(q) * self.sigma)

    def quantile_interval(self, q: float, *, level: float | None = None) -> Estimate:
        """
        Confidence interval for the q-quantile in seconds.

        Without censoring it is exact under the lognormal model: ``exp(mean + k * s)`` with
        ``k`` from the noncentral t (``s`` the ddof = 1 sd of log latency). With censoring it
        is the delta method on the log scale, ``var(mu + z sigma) = var_mu + z**2 var_sigma +
        2 z cov``, exponentiated. Either way it holds only if latency is lognormal (see the
        class docstring); ``empirical_quantiles`` gives one that holds for any shape.

        Args:
            q: Quantile by the CDF, strictly between 0 and 1.
            level: Confidence level; ``None`` uses the level the fit was made with.

        Returns:
            The quantile with its interval in seconds; ``(0, inf)`` when the fit has no
            estimate.
        """
        from scipy import stats

        z = _z(q)
        level = self.mu_interval.level if level is None else level
        alpha = _alpha(level)
        if self.note is not None:
            return Estimate(math.nan, 0.0, math.inf, self.n, method=_NO_FIT, level=level)
        if self.n_censored == 0:
            n = self.n
            s = self.sigma * math.sqrt(n / (n - 1))
            k = stats.nct.ppf([alpha / 2.0, 1.0 - alpha / 2.0], n - 1, z * math.sqrt(n))
            low, high = self.mu + k * s / math.sqrt(n)
            method = "noncentral t"
        else:
            (v_mu, c), (_, v_sigma) = self.cov
            se = math.sqrt(max(v_mu + z * z * v_sigma + 2.0 * z * c, 0.0))
            half = float(stats.norm.ppf(1.0 - alpha / 2.0)) * se
            centre = self.mu + z * self.sigma
            low, high = centre - half, centre + half
            method = "delta method"
        value = self.quantile(q)
        return Estimate(value, math.exp(low), math.exp(high), self.n, method=method, level=level)

    def ratio(self, q_hi: float = 0.99, q_lo: float = 0.5) -> float:
        """
        The tail ratio ``quantile(q_hi) / quantile(q_lo)`` = ``exp(sigma * (z_hi - z_lo))``.

        Args:
            q_hi: Upper quantile by the CDF (``0.99`` is p99).
            q_lo: Lower quantile by the CDF.

        Returns:
            The ratio (dimensionless); it depends on ``sigma`` only.
        """
        return math.exp(self.sigma * (_z(q_hi) - _z(q_lo)))

    def ratio_interval(self, q_hi: float = 0.99, q_lo: float = 0.5) -> Estimate:
        """
        Confidence interval for `ratio`: the ``sigma`` interval pushed through the ratio.

        Like every interval of the fit it holds only if latency is lognormal.

        Args:
            q_hi: Upper quantile by the CDF (``0.99`` is p99).
            q_lo: Lower quantile by the CDF.

        Returns:
            The ratio with its interval, at the level of ``sigma_interval``.
        """
        dz = _z(q_hi) - _z(q_lo)
        ends = sorted(math.exp(s * dz) for s in (self.sigma_interval.low, self.sigma_interval.high))
        sigma = self.sigma_interval
        value = self.ratio(q_hi, q_lo)
        return Estimate(value, ends[0], ends[1], self.n, method=sigma.method, level=sigma.level)


def _calls(n: int) -> str:
    return f"{n:,} call" if n == 1 else f"{n:,} calls"


def no_fit(n: int, n_censored: int, level: float, note: str) -> LognormalFit:
    """
    The fit of data that give no estimate: NaN estimates, unbounded intervals, and why.
    """
    nan = math.nan
    return LognormalFit(
        mu=nan,
        sigma=nan,
        n=n,
        n_censored=n_censored,
        mu_interval=Estimate(nan, -math.inf, math.inf, n, method=_NO_FIT, level=level),
        sigma_interval=Estimate(nan, 0.0, math.inf, n, method=_NO_FIT, level=level),
        loglik=nan,
        cov=((nan, nan), (nan, nan)),
        note=note,
    )


def fit_lognormal_moments(
    n: int, mean_log: float, var_log: float, *, level: float = 0.95
) -> LognormalFit:
    """
    The uncensored lognormal fit from moments of log latency computed elsewhere (e.g. SQL).

    Gives the same fit as `fit_lognormal` on the data. In DuckDB:
    ``count(*), avg(ln(total_s)), var_pop(ln(total_s))`` over uncensored calls with
    ``total_s > 0``.

    Args:
        n: Number of calls (none censored).
        mean_log: Mean of ``ln(latency_s)`` (log seconds).
        var_log: **Population** variance (ddof = 0, DuckDB ``var_pop``) of ``ln(latency_s)``.
        level: Confidence level of the intervals.

    Returns:
        The fit, with the Student t interval for ``mu`` and the chi-square interval for
        ``sigma``; no estimate (NaN, with a ``note``) for fewer than 2 calls or a variance of
        0 (all latencies equal).

    Raises:
        ValueError: A negative ``n`` or variance, or a non-finite moment.
    """
    from scipy import stats

    alpha = _alpha(level)
    if n < 0 or var_log < 0.0:
        msg = f"n and var_log must be non-negative, got n={n!r} and var_log={var_log!r}"
        raise ValueError(msg)
    if not (math.isfinite(mean_log) and math.isfinite(var_log)):
        msg = f"mean_log and var_log must be finite, got {mean_log!r} and {var_log!r}"
        raise ValueError(msg)
    if n < 2:
        return no_fit(n, 0, level, f"{_calls(n)} finished: a lognormal fit needs at least 2")
    if var_log == 0.0:
        note = f"all {n} finished calls took {math.exp(mean_log):.4g} s: no spread to fit"
        return no_fit(n, 0, level, note)
    sigma = math.sqrt(var_log)
    s = sigma * math.sqrt(n / (n - 1))
    t = float(stats.t.ppf(1.0 - alpha / 2.0, n - 1))
    half = t * s / math.sqrt(n)
    chi_hi, chi_lo = (float(stats.chi2.ppf(p, n - 1)) for p in (1.0 - alpha / 2.0, alpha / 2.0))
    sum_sq = n * var_log  # (n - 1) s**2
    loglik = -0.5 * n * (_LOG_2PI + math.log(var_log) + 1.0) - n * mean_log
    return LognormalFit(
        mu=mean_log,
        sigma=sigma,
        n=n,
        n_censored=0,
        mu_interval=Estimate(mean_log, mean_log - half, mean_log + half, n, "t", level),
        sigma_interval=Estimate(
            sigma, math.sqrt(sum_sq / chi_hi), math.sqrt(sum_sq / chi_lo), n, "chi-square", level
        ),
        loglik=loglik,
        cov=((var_log / n, 0.0), (0.0, var_log / (2.0 * n))),
    )


def _censored_terms(
    y: NDArray[np.float64], y_cut: NDArray[np.float64], mu: float, sigma: float
) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
    # Log-likelihood, gradient and Hessian in (mu, sigma) of log latency y (normal) with
    # right-censored log times y_cut. h = phi(w) / Q(w) is the normal hazard; h' = h (h - w).
    from scipy import special

    z = (y - mu) / sigma
    w = (y_cut - mu) / sigma
    log_q = special.log_ndtr(-w)
    h = np.exp(-0.5 * w * w - 0.5 * _LOG_2PI - log_q)
    dh = h * (h - w)
    n_obs = y.size
    loglik = float(-0.5 * np.dot(z, z) - n_obs * (math.log(sigma) + 0.5 * _LOG_2PI) + log_q.sum())
    grad = np.array([z.sum() + h.sum(), np.dot(z, z) - n_obs + np.dot(h, w)]) / sigma
    d_mu_mu = -n_obs - dh.sum()
    d_mu_sigma = -2.0 * z.sum() - np.dot(dh, w) - h.sum()
    d_sigma_sigma = n_obs - 3.0 * np.dot(z, z) - np.dot(dh, w * w) - 2.0 * np.dot(h, w)
    hess = np.array([[d_mu_mu, d_mu_sigma], [d_mu_sigma, d_sigma_sigma]]) / sigma**2
    return loglik, grad, hess


def _fit_censored(y: NDArray[np.float64], y_cut: NDArray[np.float64], level: float) -> LognormalFit:
    # Maximum likelihood with right censoring. A completed call contributes the normal density
    # of its log latency, a cut call the normal survival probability of its log cut time
    # (log_ndtr(-w), accurate far into the tail). There is no closed form, so Newton steps in a
    # trust region (scipy "trust-exact") run on (mu, log sigma) -- log sigma keeps sigma positive
    # and makes the surface rounder -- from the fit of the completed calls alone, with the exact
    # gradient and Hessian; it converges in a handful of steps. Wald intervals come from the
    # observed information (minus the Hessian) at the optimum; sigma's is taken on log sigma so
    # that it stays positive and follows the skew of sigma's sampling distribution.
    from scipy import optimize, stats

    n_all = y.size + y_cut.size
    start_sigma = max(float(np.std(y)), 1e-3)

    cache: dict[bytes, tuple[float, NDArray[np.float64], NDArray[np.float64]]] = {}

    def objective(
        theta: NDArray[np.float64],
    ) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
        # scipy asks for value, gradient and Hessian separately; compute them once per point.
        key = theta.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = newton_terms(theta)
        return cache[key]

    def newton_terms(
        theta: NDArray[np.float64],
    ) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
        sigma = math.exp(theta[1])
        loglik, grad, hess = _censored_terms(y, y_cut, float(theta[0]), sigma)
        # chain rule to (mu, b = log sigma): d/db = sigma d/dsigma
        g = np.array([grad[0], sigma * grad[1]])
        h = np.array(
            [
                [hess[0, 0], sigma * hess[0, 1]],
                [sigma * hess[0, 1], sigma**2 * hess[1, 1] + sigma * grad[1]],
            ]
        )
        return -loglik / n_all, -g / n_all, -h / n_all

    result = optimize.minimize(
        lambda t: objective(t)[0],
        np.array([float(np.mean(y)), math.log(start_sigma)]),
        jac=lambda t: objective(t)[1],
        hess=lambda t: objective(t)[2],
        method="trust-exact",
        options={"gtol": 1e-9},
    )
    mu, sigma = float(result.x[0]), math.exp(float(result.x[1]))
    loglik, grad, hess = _censored_terms(y, y_cut, mu, sigma)
    info = -hess
    definite = np.all(np.isfinite(info)) and info[0, 0] > 0.0 and np.linalg.det(info) > 0.0
    if not definite or (float(np.max(np.abs(grad))) * sigma > 1e-4 * n_all):
        note = (
            f"the censored fit has no maximum ({y.size:,} finished, {y_cut.size:,} cut calls): "
            "too few finished calls for this much censoring"
        )
        return no_fit(n_all, y_cut.size, level, note)
    cov = np.linalg.inv(info)
    z = float(stats.norm.ppf(1.0 - _alpha(level) / 2.0))
    se_mu, se_sigma = math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])
    spread = math.exp(z * se_sigma / sigma)
    return LognormalFit(
        mu=mu,
        sigma=sigma,
        n=n_all,
        n_censored=y_cut.size,
        mu_interval=Estimate(mu, mu - z * se_mu, mu + z * se_mu, n_all, _WALD, level),
        sigma_interval=Estimate(sigma, sigma / spread, sigma * spread, n_all, _WALD, level),
        loglik=loglik - float(y.sum()),
        cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
    )


def fit_lognormal(
    latency_s: ArrayLike, *, censored_at_s: ArrayLike | None = None, level: float = 0.95
) -> LognormalFit:
    """
    Maximum-likelihood lognormal fit of latency, with cut calls as right-censored.

    Without censoring the fit is closed form (mean and population sd of log latency), with
    exact intervals under the model (Student t for ``mu``, chi-square for ``sigma``). With
    censored calls the censored log-likelihood is maximized, with Wald intervals from its
    Hessian. Dropping the cut calls instead would bias every upper quantile low.

    Args:
        latency_s: Latency of each call in seconds; NaN for an uncensored call drops it.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            the true latency is larger and the ``latency_s`` entry is ignored. NaN for calls
            that were not cut; ``None`` when no call was cut. A cut at 0 s carries no
            information and is left out.
        level: Confidence level of the intervals.

    Returns:
        The fit; or, when the data give no estimate, NaN estimates with unbounded intervals and
        a ``note`` saying why: fewer than 2 finished calls, all finished calls equally long,
        cut calls hiding the median, or a censored likelihood without a maximum.

    Raises:
        ValueError: A latency that is not positive, a level outside (0, 1), or invalid arrays
            (see ``split_censored``).
    """
    # When is censoring hopeless? A lognormal fit finds some median however few calls finished:
    # with 3 finished under a timeout and 2,000 cut, the maximum puts it far beyond every
    # finished call. That number is the model's extrapolation, not the data's.
    # The fit is given only when the data alone bound the median: its distribution-free
    # (Kaplan-Meier) interval at ``level`` is bounded above. That needs roughly half the calls
    # to finish before the cuts, and a handful of calls in all; without cuts the exact
    # intervals need no such rule.
    _alpha(level)
    observed, censored = split_censored(latency_s, censored_at_s)
    if observed.size and observed.min() <= 0.0:
        msg = (
            f"latency_s must be positive for a lognormal fit, got {float(observed.min())!r} "
            f"({int(np.count_nonzero(observed <= 0.0))} calls)"
        )
        raise ValueError(msg)
    censored = censored[censored > 0.0]
    n, k = observed.size + censored.size, censored.size
    if observed.size < 2:
        note = f"{_calls(observed.size)} finished: a lognormal fit needs at least 2"
        return no_fit(n, k, level, note)
    y = np.log(observed)
    if float(np.ptp(y)) == 0.0:
        note = f"all {observed.size:,} finished calls took {observed[0]:.4g} s: no spread to fit"
        return no_fit(n, k, level, note)
    if k == 0:
        return fit_lognormal_moments(y.size, float(np.mean(y)), float(np.var(y)), level=level)
    value, _, high = KaplanMeier.fit(observed, censored).quantiles(np.array([0.5]), level)
    if math.isinf(float(high[0])):
        why = "cut calls hide the median" if math.isinf(float(value[0])) else "too few calls"
        note = (
            f"{why}: {observed.size:,} of {n:,} calls finished, and the median's "
            f"distribution-free {level:.0%} interval is unbounded, so a censored lognormal "
            "fit would only extrapolate"
        )
        return no_fit(n, k, level, note)
    return _fit_censored(y, np.log(censored), level)
