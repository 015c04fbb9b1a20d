"""
The lognormal latency model, fitted by maximum likelihood with right-censored calls.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np

from numpy.typing import ArrayLike, NDArray

from tailkit.errors import TailkitError
from tailkit.fit._quantiles import split_censored
from tailkit.fit._types import Interval


__all__ = ["LognormalFit", "fit_lognormal", "fit_lognormal_moments"]

_LOG_2PI = math.log(2.0 * math.pi)

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

    Args:
        mu: Mean of log latency (log seconds); ``exp(mu)`` is the median in seconds.
        sigma: Standard deviation of log latency (the MLE, ddof = 0).
        n: Calls used, censored ones included.
        n_censored: Calls that were cut (right-censored).
        mu_interval: Interval for ``mu``: Student t without censoring, Wald with censoring.
        sigma_interval: Interval for ``sigma``: chi-square without censoring, Wald on
            ``log(sigma)`` with censoring.
        loglik: Maximized log-likelihood of the latencies in seconds (the ``-sum(log x)``
            Jacobian included, so it compares with other families on the same data).
        cov: Covariance of the estimates ``(mu, sigma)`` from the observed information.
    """

    mu: float
    sigma: float
    n: int
    n_censored: int
    mu_interval: Interval
    sigma_interval: Interval
    loglik: float
    cov: Matrix2

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

    def quantile_interval(self, q: float, *, level: float | None = None) -> Interval:
        """
        Confidence interval for the q-quantile in seconds.

        Without censoring it is exact under the lognormal model: ``exp(mean + k * s)`` with
        ``k`` from the noncentral t (``s`` the ddof = 1 sd of log latency). With censoring it
        is the delta method on the log scale, ``var(mu + z sigma) = var_mu + z**2 var_sigma +
        2 z cov``, exponentiated.

        Args:
            q: Quantile by the CDF, strictly between 0 and 1.
            level: Confidence level; ``None`` uses the level the fit was made with.

        Returns:
            The interval in seconds.
        """
        from scipy import stats

        z = _z(q)
        level = self.mu_interval.level if level is None else level
        alpha = _alpha(level)
        if self.n_censored == 0:
            n = self.n
            s = self.sigma * math.sqrt(n / (n - 1))
            k = stats.nct.ppf([alpha / 2.0, 1.0 - alpha / 2.0], n - 1, z * math.sqrt(n))
            low, high = self.mu + k * s / math.sqrt(n)
        else:
            (v_mu, c), (_, v_sigma) = self.cov
            se = math.sqrt(max(v_mu + z * z * v_sigma + 2.0 * z * c, 0.0))
            half = float(stats.norm.ppf(1.0 - alpha / 2.0)) * se
            centre = self.mu + z * self.sigma
            low, high = centre - half, centre + half
        return Interval(math.exp(low), math.exp(high), level)

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

    def ratio_interval(self, q_hi: float = 0.99, q_lo: float = 0.5) -> Interval:
        """
        Confidence interval for `ratio`: the ``sigma`` interval pushed through the ratio.

        Args:
            q_hi: Upper quantile by the CDF (``0.99`` is p99).
            q_lo: Lower quantile by the CDF.

        Returns:
            The interval, at the level of ``sigma_interval``.
        """
        dz = _z(q_hi) - _z(q_lo)
        ends = sorted(math.exp(s * dz) for s in (self.sigma_interval.low, self.sigma_interval.high))
        return Interval(ends[0], ends[1], self.sigma_interval.level)


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
        ``sigma``.

    Raises:
        ValueError: Fewer than 2 calls, a non-finite moment, or a variance that is not
            positive (all latencies equal).
    """
    from scipy import stats

    alpha = _alpha(level)
    if n < 2:
        msg = f"a lognormal fit needs at least 2 uncensored calls, got n={n!r}"
        raise ValueError(msg)
    if not (math.isfinite(mean_log) and math.isfinite(var_log)):
        msg = f"mean_log and var_log must be finite, got {mean_log!r} and {var_log!r}"
        raise ValueError(msg)
    if var_log <= 0.0:
        msg = (
            f"var_log must be positive, got {var_log!r}: all {n} latencies are equal, "
            "so there is no spread to fit"
        )
        raise ValueError(msg)
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
        mu_interval=Interval(mean_log - half, mean_log + half, level),
        sigma_interval=Interval(math.sqrt(sum_sq / chi_hi), math.sqrt(sum_sq / chi_lo), level),
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
        msg = (
            f"the censored lognormal fit did not converge ({y.size} completed, "
            f"{y_cut.size} censored calls): too few completed calls for this much censoring"
        )
        raise TailkitError(msg)
    cov = np.linalg.inv(info)
    z = float(stats.norm.ppf(1.0 - _alpha(level) / 2.0))
    se_mu, se_sigma = math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])
    spread = math.exp(z * se_sigma / sigma)
    return LognormalFit(
        mu=mu,
        sigma=sigma,
        n=n_all,
        n_censored=y_cut.size,
        mu_interval=Interval(mu - z * se_mu, mu + z * se_mu, level),
        sigma_interval=Interval(sigma / spread, sigma * spread, level),
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
        The fit.

    Raises:
        ValueError: Fewer than 2 uncensored calls, a latency that is not positive, all
            latencies equal, or invalid arrays (see ``split_censored``).
        TailkitError: The censored fit did not converge (far too much censoring).
    """
    _alpha(level)
    observed, censored = split_censored(latency_s, censored_at_s)
    if observed.size and observed.min() <= 0.0:
        msg = (
            f"latency_s must be positive for a lognormal fit, got {float(observed.min())!r} "
            f"({int(np.count_nonzero(observed <= 0.0))} calls)"
        )
        raise ValueError(msg)
    censored = censored[censored > 0.0]
    if observed.size < 2:
        msg = f"a lognormal fit needs at least 2 uncensored calls, got {observed.size}"
        raise ValueError(msg)
    y = np.log(observed)
    if float(np.ptp(y)) == 0.0:
        msg = (
            f"all {observed.size} uncensored latencies are equal ({observed[0]!r} s): "
            "there is no spread to fit"
        )
        raise ValueError(msg)
    if censored.size == 0:
        return fit_lognormal_moments(y.size, float(np.mean(y)), float(np.var(y)), level=level)
    return _fit_censored(y, np.log(censored), level)
