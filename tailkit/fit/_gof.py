"""
Is latency lognormal? Anderson-Darling, or a score test under heavy censoring; families by AIC.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from numpy.typing import ArrayLike, NDArray

from tailkit.errors import TailkitError
from tailkit.fit._families import fit_gamma, fit_location_scale, gamma_shape, gengamma_scores
from tailkit.fit._lognormal import fit_lognormal
from tailkit.fit._quantiles import KaplanMeier, split_censored


__all__ = ["FamilyFit", "GoodnessOfFit", "goodness_of_fit", "goodness_of_fit_many"]

AD_METHOD = "Anderson-Darling on log latency, estimated parameters (D'Agostino-Stephens p-value)"
AD_IMPUTED_METHOD = AD_METHOD + "; censored calls imputed from the censored lognormal fit"
SCORE_METHOD = (
    "censored: score test of the lognormal inside the generalized gamma (skew of log latency; "
    "chi-square p-value)"
)
SCORE_BOOTSTRAP_METHOD = SCORE_METHOD.replace("chi-square", "parametric bootstrap")
TOO_FEW_METHOD = "too few calls"
NO_FIT_METHOD = "no lognormal fit: "  # followed by the fit's note

MIN_CALLS = 20  # uncensored calls below which no verdict is given
MAX_CENSORED_FOR_TEST = 0.05  # censored share above which the score test replaces AD
BOOTSTRAP_BELOW = 300  # finished calls below which the score test's p-value is bootstrapped
BOOTSTRAP_SAMPLES = 199

_Array = NDArray[np.float64]
_Sample = tuple[_Array, _Array, np.random.Generator]  # completed, cut, the rest of its seed


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
            ``scipy.stats.anderson`` reports it); with more than 5 % of calls cut, the score
            statistic of the lognormal inside the generalized gamma; NaN when no test was run.
        p_value: p-value of that statistic with estimated parameters; NaN when no test was run.
        method: How the verdict was reached (one of the ``*_METHOD`` strings of this module;
            ``NO_FIT_METHOD`` followed by the reason when the lognormal has no fit).
        verdict: ``"fits"`` or ``"rejected"`` at ``alpha``; ``"too few calls"`` when no test
            was run (too few finished calls, all equal, or cut calls hiding the median).
        families: Every family that could be fitted, best (lowest AIC) first.
        best_family: The family with the lowest AIC; ``""`` with too few calls. It ranks the
            families; it is not a test, and a lognormal that "fits" may still not rank first.
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


def _anderson_darling_normal(ys: list[_Array]) -> list[tuple[float, float]]:
    # A^2 of each y against the normal with its sample mean and sd (ddof = 1, as scipy), in logs
    # of the normal CDF so that far tails stay finite; all samples as one zero-padded matrix.
    from scipy import special

    n = np.array([y.size for y in ys])
    width = np.arange(int(n.max()))
    real = width < n[:, None]
    z = np.zeros(real.shape)
    for i, y in enumerate(ys):
        z[i, : y.size] = np.sort((y - y.mean()) / y.std(ddof=1))
    mirror = np.take_along_axis(z, np.where(real, n[:, None] - 1 - width, 0), axis=1)
    terms = special.log_ndtr(z) + special.log_ndtr(-mirror)
    a2 = -n - np.einsum("sw,sw->s", np.where(real, 2.0 * width + 1.0, 0.0), terms) / n
    a_star = a2 * (1.0 + 0.75 / n + 2.25 / n**2)
    return [
        (float(a), min(max(_ad_p_value(float(s)), 0.0), 1.0))
        for a, s in zip(a2, a_star, strict=True)
    ]


def _family_fits(
    samples: list[_Sample], *, others: bool = True
) -> list[tuple[tuple[FamilyFit, ...], str | None]]:
    # Each sample's families, best first, and why the lognormal has no fit (None if it has);
    # without ``others``, the lognormal alone.
    ys = [np.log(x) for x, _, _ in samples]
    cuts = [np.log(c) for _, c, _ in samples]
    names = ("weibull", "loglogistic") if others else ()
    location_scale = {f: fit_location_scale(f, ys, cuts) for f in names}
    gamma_shapes = (
        gamma_shape(
            np.array(
                [math.log(x.mean()) - y.mean() for (x, _, _), y in zip(samples, ys, strict=True)]
            )
        ).tolist()
        if others
        else []
    )
    out = []
    for i, (x, x_cut, _) in enumerate(samples):
        fits: list[tuple[str, tuple[float, float, float], float]] = []
        note = None
        if x_cut.size == 0:
            # closed form, as fit_lognormal: mean and population sd of log latency
            mu, var = float(ys[i].mean()), float(ys[i].var())
            loglik = -0.5 * x.size * (math.log(2.0 * math.pi * var) + 1.0) - x.size * mu
            fits.append(("lognormal", (math.sqrt(var), 0.0, math.exp(mu)), loglik))
        else:
            # fit_lognormal takes aligned arrays: NaN latency for cut calls, NaN cut else
            gap_x, gap_cut = np.full(x_cut.size, np.nan), np.full(x.size, np.nan)
            ln = fit_lognormal(
                np.concatenate([x, gap_x]), censored_at_s=np.concatenate([gap_cut, x_cut])
            )
            note = ln.note
            if note is None:
                fits.append(("lognormal", (ln.sigma, 0.0, ln.median_s), ln.loglik))
        for family, found in location_scale.items():
            loc, scale_log, value = found[i]
            if math.isfinite(value):
                fits.append((family, (1.0 / scale_log, 0.0, math.exp(loc)), value))
        if others:
            try:
                a, scale, value = fit_gamma(x, ys[i], x_cut, gamma_shapes[i])
                fits.append(("gamma", (a, 0.0, scale), value))
            except TailkitError:
                pass
        n_all = x.size + x_cut.size
        ranked = sorted((FamilyFit(f, p, v, 4.0 - 2.0 * v, n_all) for f, p, v in fits), key=_aic)
        out.append((tuple(ranked), note))
    return out


def _aic(fit: FamilyFit) -> float:
    return fit.aic


def _score_test(sample: _Sample, mu: float, sigma: float) -> tuple[float, float, str]:
    """
    Score statistic, p-value and method of the lognormal ``(mu, sigma)`` of a censored sample.
    """
    # Below 300 finished calls the chi-square p-value is too small (measured at 10 % cut: 2-3 %
    # false rejections at alpha 0.01 with 25-100 calls), so it comes from a parametric bootstrap:
    # latencies drawn from the fitted lognormal, cut ages from the Kaplan-Meier curve of the cut
    # ages (cuts are its events, a finished call is "not yet cut"; its leftover mass, never
    # cut), each sample refitted -- all at once, by Newton's method -- and its statistic taken.
    from scipy import stats

    observed, censored, rng = sample
    y, y_cut = np.log(observed), np.log(censored)
    statistic = float(gengamma_scores([y], [y_cut], np.array([mu]), np.array([sigma]))[0])
    if math.isnan(statistic) or y.size >= BOOTSTRAP_BELOW:
        return statistic, float(stats.chi2.sf(statistic, 1)), SCORE_METHOD
    cuts = KaplanMeier.fit(censored, observed)
    n = observed.size + censored.size
    ranks = np.searchsorted(1.0 - cuts.survival, rng.random((BOOTSTRAP_SAMPLES, n)))
    cut_at = np.log(np.append(cuts.times, math.inf)[ranks])
    latency = mu + sigma * rng.standard_normal((BOOTSTRAP_SAMPLES, n))
    done = latency <= cut_at
    rows = [
        (latency[b][done[b]], cut_at[b][~done[b]])
        for b in range(BOOTSTRAP_SAMPLES)
        if np.count_nonzero(done[b]) >= 3 and float(np.ptp(latency[b][done[b]])) > 0.0
    ]
    if not rows:
        return statistic, math.nan, SCORE_BOOTSTRAP_METHOD
    ys, cut_ats = [r[0] for r in rows], [r[1] for r in rows]
    refits = fit_location_scale("normal", ys, cut_ats)
    drawn = gengamma_scores(ys, cut_ats, refits[:, 0], refits[:, 1])
    valid = drawn[np.isfinite(drawn)]
    p_value = (1.0 + float(np.count_nonzero(valid >= statistic))) / (1.0 + valid.size)
    return statistic, p_value, SCORE_BOOTSTRAP_METHOD


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
        families) below 20 uncensored calls or when they are all equal, and (with the other
        families) when the lognormal has no fit (see `fit_lognormal`). A "fits" verdict is
        what the lognormal fit's intervals rest on: they hold only for lognormal latency.

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
    # the sample would come from the model under test. There the test is Rao's score test of the
    # lognormal inside the generalized gamma (see `gengamma_scores`), on the censored
    # likelihood: it asks whether log latency is skewed (a slow tail, or a Weibull's or gamma's
    # short one), and its p-value honours alpha. Measured on lognormal data with 10 % of calls
    # cut (a timeout, random cut ages, or hedges; 400 samples each of 30, 100, 299, 300, 1,000
    # and 2,000 calls), it rejected 0-1.75 % (0.5 % on average) at alpha 0.01 and 2-6.5 %
    # (4.2 %) at alpha 0.05, where "AIC within 2 of the best" rejected 6 % of 100-call samples
    # whatever alpha. Its p-value is chi-square from 300 finished calls, and below that a
    # parametric bootstrap (199 samples), as the chi-square rejected 2-3 % at alpha 0.01 with
    # 25-100 calls. A shape that is symmetric in logs (the log-logistic) is not what it looks
    # for: the AIC ranking still shows it.
    #
    # Families are fitted by maximum likelihood with loc = 0, with the censored likelihood when
    # calls were cut, and ranked by AIC (all have two parameters). Beyond max_n calls a uniform
    # subsample without replacement, drawn with `seed`, is tested: it keeps the cost to a few ms
    # whatever n, and at 5000 calls AD already detects departures far too small to matter.
    return goodness_of_fit_many([(latency_s, censored_at_s)], alpha=alpha, max_n=max_n, seed=seed)[
        0
    ]


def goodness_of_fit_many(
    samples: Sequence[tuple[ArrayLike, ArrayLike | None]],
    *,
    alpha: float = 0.05,
    max_n: int = 5000,
    seed: int = 0,
    families: bool = True,
) -> list[GoodnessOfFit]:
    """
    `goodness_of_fit` for many samples, ``(latency_s, censored_at_s)`` each, results in order.

    Each result is the one `goodness_of_fit` gives for that sample alone; the fits and tests
    of all samples run together as arrays, which costs far less than one at a time.

    Without ``families`` only the lognormal is fitted: the test, its p-value and verdict are
    the same, but ``families`` holds the lognormal alone and ``best_family`` is ``""``. The
    comparison of families is most of the cost (three more maximum-likelihood fits per
    sample), and a table that shows only the verdict need not pay for it.
    """
    from scipy import special

    if not 0.0 < alpha < 1.0:
        msg = f"alpha must be between 0 and 1 (e.g. 0.05), got {alpha!r}"
        raise ValueError(msg)
    if max_n < MIN_CALLS:
        msg = f"max_n must be at least {MIN_CALLS}, got {max_n!r}"
        raise ValueError(msg)
    results: list[GoodnessOfFit | None] = []
    todo: list[_Sample] = []
    for latency_s, censored_at_s in samples:
        observed, censored, rng = _subsample(latency_s, censored_at_s, max_n=max_n, seed=seed)
        n = observed.size + censored.size
        few = observed.size < MIN_CALLS or float(np.ptp(observed)) == 0.0
        nan = math.nan
        results.append(
            GoodnessOfFit("lognormal", nan, nan, TOO_FEW_METHOD, "too few calls", (), "", n)
            if few
            else None
        )
        if not few:
            todo.append((observed, censored, rng))
    tested: list[tuple[int, _Array, str]] = []  # (index in todo, log latency, method)
    verdicts: dict[int, GoodnessOfFit] = {}
    all_families = _family_fits(todo, others=families) if todo else []
    for i, (sample, (fitted, note)) in enumerate(zip(todo, all_families, strict=True)):
        observed, censored, rng = sample
        n = observed.size + censored.size
        best = fitted[0].family if fitted and families else ""
        lognormal = next((f for f in fitted if f.family == "lognormal"), None)
        if lognormal is None:
            # degenerate or hopeless data (see fit_lognormal): no test, and no rejection
            method = NO_FIT_METHOD + (note or "the censored fit failed")
            verdicts[i] = GoodnessOfFit(
                "lognormal", math.nan, math.nan, method, "too few calls", fitted, best, n
            )
            continue
        sigma, _, median = lognormal.params
        if censored.size / n > MAX_CENSORED_FOR_TEST:
            statistic, p_value, method = _score_test(sample, math.log(median), sigma)
            verdict = "too few calls" if math.isnan(p_value) else "fits"
            verdict = "rejected" if p_value < alpha else verdict
            verdicts[i] = GoodnessOfFit(
                "lognormal", statistic, p_value, method, verdict, fitted, best, n
            )
            continue
        y = np.log(observed)
        if censored.size:
            mu = math.log(median)
            w = (np.log(censored) - mu) / sigma
            survival = special.ndtr(-w) * (1.0 - rng.random(censored.size))
            imputed = mu - sigma * special.ndtri(np.maximum(survival, 1e-300))
            y = np.concatenate([y, np.maximum(imputed, np.log(censored))])
        tested.append((i, y, AD_IMPUTED_METHOD if censored.size else AD_METHOD))
    tests = _anderson_darling_normal([y for _, y, _ in tested]) if tested else []
    for (i, _, method), (statistic, p_value) in zip(tested, tests, strict=True):
        fitted, n = all_families[i][0], todo[i][0].size + todo[i][1].size
        verdict = "rejected" if p_value < alpha else "fits"
        best = fitted[0].family if families else ""
        verdicts[i] = GoodnessOfFit(
            "lognormal", statistic, p_value, method, verdict, fitted, best, n
        )
    done = iter(verdicts[i] for i in range(len(todo)))
    return [r if r is not None else next(done) for r in results]


def _subsample(
    latency_s: ArrayLike, censored_at_s: ArrayLike | None, *, max_n: int, seed: int
) -> _Sample:
    """
    Completed and cut calls (at most ``max_n``), and the generator, which imputes next.
    """
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
    return observed, censored, rng
