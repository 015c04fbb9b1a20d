"""
Is latency lognormal? An Anderson-Darling test, and a comparison with other families by AIC.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from numpy.typing import ArrayLike, NDArray

from tailkit.errors import TailkitError
from tailkit.fit._lognormal import fit_lognormal
from tailkit.fit._quantiles import split_censored


__all__ = ["FamilyFit", "GoodnessOfFit", "goodness_of_fit"]

AD_METHOD = "Anderson-Darling on log latency, estimated parameters (D'Agostino-Stephens p-value)"
AD_IMPUTED_METHOD = AD_METHOD + "; censored calls imputed from the censored lognormal fit"
AIC_ONLY_METHOD = "censored: AIC comparison only"
TOO_FEW_METHOD = "too few calls"

MIN_CALLS = 20  # uncensored calls below which no verdict is given
MAX_CENSORED_FOR_TEST = 0.05  # censored share above which only AIC speaks
AIC_SUPPORT = 2.0  # Burnham & Anderson: within 2 of the best AIC is substantial support

_Array = NDArray[np.float64]
# A standardized log-location-scale family: log density g(u), g'(u), log survival G(u), G'(u).
_Shape = tuple[
    Callable[[_Array], _Array],
    Callable[[_Array], _Array],
    Callable[[_Array], _Array],
    Callable[[_Array], _Array],
]


@dataclass(frozen=True, slots=True)
class FamilyFit:
    """
    One distribution family fitted to latency by maximum likelihood (location fixed at 0).

    Args:
        family: ``"lognormal"``, ``"gamma"``, ``"weibull"`` or ``"loglogistic"``.
        params: ``(shape, 0.0, scale_s)``, scipy's ``(shape, loc, scale)`` as ``fit(floc=0)``
            returns it: the distribution is ``scipy.stats.lognorm`` / ``gamma`` /
            ``weibull_min`` / ``fisk`` ``(*params)``. For lognormal, shape is sigma and scale is
            the median in seconds; for Weibull and log-logistic, shape is 1 / the scale of log
            latency.
        loglik: Maximized log-likelihood (censored likelihood when calls were cut).
        aic: ``2 * 2 - 2 * loglik``; lower is better.
        n: Calls fitted, censored ones included.
    """

    family: str
    params: tuple[float, ...]
    loglik: float
    aic: float
    n: int


@dataclass(frozen=True, slots=True)
class GoodnessOfFit:
    """
    Whether latency is lognormal, and which family describes it best.

    Args:
        family: The family tested, ``"lognormal"``.
        statistic: Anderson-Darling A^2 of log latency against the fitted normal (as
            ``scipy.stats.anderson`` reports it); NaN when no test was run.
        p_value: p-value for A^2 with estimated parameters; NaN when no test was run.
        method: How the verdict was reached (one of the ``*_METHOD`` strings of this module).
        verdict: ``"fits"``, ``"rejected"`` or ``"too few calls"``.
        families: Every family that could be fitted, best (lowest AIC) first.
        best_family: The family with the lowest AIC; ``""`` with too few calls.
        n: Calls tested (after subsampling to ``max_n``), censored ones included.
    """

    family: str
    statistic: float
    p_value: float
    method: str
    verdict: str
    families: tuple[FamilyFit, ...]
    best_family: str
    n: int


def _ad_p_value(a_star: float) -> float:
    # D'Agostino & Stephens (1986), Table 4.9: normal, mean and variance estimated, for the
    # modified statistic A*^2 = A^2 (1 + 0.75/n + 2.25/n^2).
    if a_star >= 0.6:
        # The quadratic turns upward past A* = 153 (and overflows past ~300), where p is already
        # below 1e-190: hold it there, so a grossly non-lognormal sample cannot come out "fits".
        a_star = min(a_star, 150.0)
        return math.exp(1.2937 - 5.709 * a_star + 0.0186 * a_star**2)
    if a_star >= 0.34:
        return math.exp(0.9177 - 4.279 * a_star - 1.38 * a_star**2)
    if a_star >= 0.2:
        return 1.0 - math.exp(-8.318 + 42.796 * a_star - 59.938 * a_star**2)
    return 1.0 - math.exp(-13.436 + 101.14 * a_star - 223.73 * a_star**2)


def _anderson_darling_normal(y: _Array) -> tuple[float, float]:
    # A^2 of y against the normal with the sample mean and sd (ddof = 1, as scipy), in logs of
    # the normal CDF so that far tails stay finite.
    from scipy import special

    n = y.size
    z = np.sort((y - y.mean()) / y.std(ddof=1))
    weights = 2.0 * np.arange(1, n + 1) - 1.0
    a2 = float(-n - np.dot(weights, special.log_ndtr(z) + special.log_ndtr(-z[::-1])) / n)
    p = _ad_p_value(a2 * (1.0 + 0.75 / n + 2.25 / n**2))
    return a2, min(max(p, 0.0), 1.0)


def _gumbel_min() -> _Shape:
    # log of a Weibull latency: u = k (log x - log scale), density e^(u - e^u), survival e^(-e^u)
    def g(u: _Array) -> _Array:
        return u - np.exp(u)

    def dg(u: _Array) -> _Array:
        return 1.0 - np.exp(u)

    def big_g(u: _Array) -> _Array:
        return -np.exp(u)

    return g, dg, big_g, big_g


def _logistic() -> _Shape:
    # log of a log-logistic latency: u = c (log x - log scale), logistic density and survival
    from scipy import special

    def g(u: _Array) -> _Array:
        return -np.abs(u) - 2.0 * np.log1p(np.exp(-np.abs(u)))

    def dg(u: _Array) -> _Array:
        return -np.tanh(u / 2.0)

    def big_g(u: _Array) -> _Array:
        return -np.logaddexp(0.0, u)

    def dbig_g(u: _Array) -> _Array:
        return np.asarray(-special.expit(u), dtype=np.float64)

    return g, dg, big_g, dbig_g


def _fit_log_location_scale(
    y: _Array, y_cut: _Array, shape: _Shape, start: tuple[float, float]
) -> tuple[float, float, float]:
    # Weibull and log-logistic latencies are location-scale families in log latency, so one
    # likelihood serves both: with u = (y - m) / s, a completed call adds g(u) - log s - y
    # (the -y turns the density of log x into the density of x) and a cut call adds G(u).
    # The exact gradient in (m, log s) drives L-BFGS-B; overflow far out is harmless (it makes
    # the objective infinite and the line search steps back).
    from scipy import optimize

    g, dg, big_g, dbig_g = shape
    n_all = y.size + y_cut.size
    sum_y = float(y.sum())

    def negative_loglik(theta: _Array) -> tuple[float, _Array]:
        m, b = float(theta[0]), float(theta[1])
        s = math.exp(b)
        with np.errstate(over="ignore", invalid="ignore"):
            u, w = (y - m) / s, (y_cut - m) / s
            loglik = float(g(u).sum() - y.size * b - sum_y + big_g(w).sum())
            du, dw = dg(u), dbig_g(w)
            grad = np.array([-(du.sum() + dw.sum()) / s, -np.dot(du, u) - y.size - np.dot(dw, w)])
        if not (math.isfinite(loglik) and np.all(np.isfinite(grad))):
            return math.inf, np.zeros(2)
        return -loglik / n_all, -grad / n_all

    result = optimize.minimize(
        negative_loglik, np.array(start), jac=True, method="L-BFGS-B", options={"gtol": 1e-8}
    )
    if not math.isfinite(float(result.fun)):
        msg = "the fit did not converge"
        raise TailkitError(msg)
    return float(result.x[0]), math.exp(float(result.x[1])), -float(result.fun) * n_all


def _fit_gamma(x: _Array, x_cut: _Array) -> tuple[float, float, float]:
    # Without censoring the scale profiles out (scale = mean / a) and a solves
    # log a - digamma(a) = log mean - mean log, by Newton from Minka's (2002) closed-form start.
    # With censoring the survival term log Q(a, c / scale) has no handy derivative in a, so
    # L-BFGS-B runs on (log a, log scale) with numerical gradients from the uncensored fit.
    from scipy import optimize, special

    log_x = np.log(x)
    mean, mean_log = float(x.mean()), float(log_x.mean())
    gap = math.log(mean) - mean_log
    a = (3.0 - gap + math.sqrt((gap - 3.0) ** 2 + 24.0 * gap)) / (12.0 * gap)
    for _ in range(50):
        step = (math.log(a) - special.digamma(a) - gap) / (1.0 / a - special.polygamma(1, a))
        a = max(a - step, a / 10.0)
        if abs(step) < 1e-12 * a:
            break

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


def _family_fits(x: _Array, x_cut: _Array) -> tuple[FamilyFit, ...]:
    y, y_cut = np.log(x), np.log(x_cut)
    n_all = x.size + x_cut.size
    mean_y, sd_y = float(y.mean()), float(y.std())
    fits: list[tuple[str, tuple[float, float, float], float]] = []
    try:
        # fit_lognormal takes aligned arrays: NaN latency for cut calls, NaN cut for the rest
        gap_x, gap_cut = np.full(x_cut.size, np.nan), np.full(x.size, np.nan)
        lognormal = fit_lognormal(
            np.concatenate([x, gap_x]), censored_at_s=np.concatenate([gap_cut, x_cut])
        )
        fits.append(("lognormal", (lognormal.sigma, 0.0, lognormal.median_s), lognormal.loglik))
    except TailkitError:
        pass
    # starts from the moments of the completed calls' log latency
    s_weibull = sd_y * math.sqrt(6.0) / math.pi
    s_logistic = sd_y * math.sqrt(3.0) / math.pi
    candidates = (
        ("weibull", _gumbel_min(), (mean_y + 0.5772156649 * s_weibull, s_weibull)),
        ("loglogistic", _logistic(), (mean_y, s_logistic)),
    )
    for family, shape, (m, s) in candidates:
        try:
            loc, scale_log, value = _fit_log_location_scale(y, y_cut, shape, (m, math.log(s)))
        except TailkitError:
            continue
        fits.append((family, (1.0 / scale_log, 0.0, math.exp(loc)), value))
    try:
        a, scale, value = _fit_gamma(x, x_cut)
        fits.append(("gamma", (a, 0.0, scale), value))
    except TailkitError:
        pass
    ranked = sorted(
        (FamilyFit(name, params, value, 4.0 - 2.0 * value, n_all) for name, params, value in fits),
        key=lambda f: f.aic,
    )
    return tuple(ranked)


def goodness_of_fit(
    latency_s: ArrayLike,
    *,
    censored_at_s: ArrayLike | None = None,
    alpha: float = 0.05,
    max_n: int = 5000,
    seed: int = 0,
) -> GoodnessOfFit:
    """
    Test whether latency is lognormal, and rank lognormal, gamma, Weibull and log-logistic.

    Args:
        latency_s: Latency of each call in seconds; NaN for an uncensored call drops it.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            NaN for calls that were not cut; ``None`` when no call was cut. A cut at 0 s carries
            no information and is left out.
        alpha: Significance level of the test.
        max_n: Largest sample tested; more calls are subsampled without replacement.
        seed: Seed of the subsample and of the imputation of censored calls.

    Returns:
        The test result and the families ranked by AIC; verdict ``"too few calls"`` (with no
        families) below 20 uncensored calls or when they are all equal.

    Raises:
        ValueError: ``alpha`` outside (0, 1), ``max_n`` below 20, a latency that is not
            positive, or invalid arrays (see ``split_censored``).
    """
    # The test is Anderson-Darling on log latency against the normal whose mean and sd are
    # estimated from the same data. Estimating them makes the usual tables far too lenient
    # (the Lilliefors problem), so the p-value comes from the D'Agostino-Stephens (1986)
    # formula for the modified statistic A*^2 = A^2 (1 + 0.75/n + 2.25/n^2), which is built for
    # estimated parameters and, unlike scipy.stats.anderson, is not clipped at 0.15.
    #
    # Censoring. Dropping cut calls removes the top of the distribution, and AD -- sensitive in
    # the tails -- would then reject a lognormal that is true. Up to 5 % censored, each cut call
    # is imputed by a draw from the censored lognormal fit conditioned on exceeding its cut
    # time: under the null hypothesis that is a draw from the right distribution, so the test
    # keeps its size, and only a small share of the sample is model-made. Above 5 % too much of
    # the sample would come from the model under test: no p-value is given (NaN), and the
    # verdict is "fits" when the lognormal's AIC is within 2 of the best family's.
    #
    # Families are fitted by maximum likelihood with loc = 0, with the censored likelihood when
    # calls were cut, and ranked by AIC (all have two parameters). Beyond max_n calls a uniform
    # subsample without replacement, drawn with `seed`, is tested: it keeps the cost to a few ms
    # whatever n, and at 5000 calls AD already detects departures far too small to matter.
    from scipy import special

    if not 0.0 < alpha < 1.0:
        msg = f"alpha must be between 0 and 1 (e.g. 0.05), got {alpha!r}"
        raise ValueError(msg)
    if max_n < MIN_CALLS:
        msg = f"max_n must be at least {MIN_CALLS}, got {max_n!r}"
        raise ValueError(msg)
    observed, censored = split_censored(latency_s, censored_at_s)
    if observed.size and observed.min() <= 0.0:
        msg = f"latency_s must be positive to test a lognormal fit, got {float(observed.min())!r}"
        raise ValueError(msg)
    censored = censored[censored > 0.0]
    rng = np.random.default_rng(seed)
    n = observed.size + censored.size
    if n > max_n:
        keep = np.zeros(n, dtype=bool)
        keep[rng.choice(n, size=max_n, replace=False)] = True
        observed, censored = observed[keep[: observed.size]], censored[keep[observed.size :]]
        n = max_n
    if observed.size < MIN_CALLS or float(np.ptp(observed)) == 0.0:
        nan = math.nan
        return GoodnessOfFit("lognormal", nan, nan, TOO_FEW_METHOD, "too few calls", (), "", n)

    families = _family_fits(observed, censored)
    best = families[0].family if families else ""
    lognormal = next((f for f in families if f.family == "lognormal"), None)
    share = censored.size / n
    if share > MAX_CENSORED_FOR_TEST or lognormal is None:
        fits = lognormal is not None and lognormal.aic - families[0].aic <= AIC_SUPPORT
        verdict = "fits" if fits else "rejected"
        return GoodnessOfFit(
            "lognormal", math.nan, math.nan, AIC_ONLY_METHOD, verdict, families, best, n
        )

    y = np.log(observed)
    method = AD_METHOD
    if censored.size:
        sigma, _, median = lognormal.params
        mu = math.log(median)
        w = (np.log(censored) - mu) / sigma
        survival = special.ndtr(-w) * (1.0 - rng.random(censored.size))
        imputed = mu - sigma * special.ndtri(np.maximum(survival, 1e-300))
        y = np.concatenate([y, np.maximum(imputed, np.log(censored))])
        method = AD_IMPUTED_METHOD
    statistic, p_value = _anderson_darling_normal(y)
    verdict = "rejected" if p_value < alpha else "fits"
    return GoodnessOfFit("lognormal", statistic, p_value, method, verdict, families, best, n)
