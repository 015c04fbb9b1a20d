"""
Lognormal fits: simulate with known parameters, fit, recover them, with and without censoring.
"""

from __future__ import annotations

import math

from collections.abc import Callable

import numpy as np
import pytest

from numpy.typing import NDArray
from scipy import stats

from tailkit.fit._lognormal import LognormalFit, fit_lognormal, fit_lognormal_moments


MU, SIGMA = math.log(8.0), 0.8
TRUE_P99 = math.exp(MU + SIGMA * float(stats.norm.ppf(0.99)))
TRUE_RATIO = math.exp(SIGMA * float(stats.norm.ppf(0.99)))  # p99 / p50 = 6.43


def sample(seed: int, n: int = 2000) -> NDArray[np.float64]:
    return np.random.default_rng(seed).lognormal(MU, SIGMA, n)


def cap_censor(x: NDArray[np.float64], share: float) -> NDArray[np.float64]:
    """
    Cut every call at the true (1 - share) quantile, like a client timeout.
    """
    cap = math.exp(MU + SIGMA * float(stats.norm.ppf(1.0 - share)))
    return np.where(x > cap, cap, np.nan)


def hedge_censor(x: NDArray[np.float64], seed: int, hedge_at_s: float) -> NDArray[np.float64]:
    """
    A hedge starts at hedge_at_s; when it finishes first, the primary is cut then.
    """
    hedge_done = hedge_at_s + np.random.default_rng(seed + 10_000).lognormal(MU, SIGMA, x.size)
    return np.where(hedge_done < x, hedge_done, np.nan)


def test_uncensored_fit_recovers_parameters_with_exact_intervals() -> None:
    """
    With 2000 calls the MLE is near the truth and the t / chi-square intervals contain it.
    """
    fit = fit_lognormal(sample(0))

    assert (2000, 0) == (fit.n, fit.n_censored)
    assert MU in fit.mu_interval
    assert SIGMA in fit.sigma_interval
    assert TRUE_P99 in fit.quantile_interval(0.99)
    assert TRUE_RATIO in fit.ratio_interval()


def test_uncensored_fit_is_scipy_lognorm_fit() -> None:
    """
    Same estimates as scipy.stats.lognorm.fit(floc=0); loglik is the sum of its logpdf.
    """
    x = sample(1, 500)

    fit = fit_lognormal(x)

    s, _, scale = stats.lognorm.fit(x, floc=0)
    assert pytest.approx((s, math.log(scale)), rel=1e-10) == (fit.sigma, fit.mu)
    assert pytest.approx(stats.lognorm.logpdf(x, s, 0, scale).sum(), rel=1e-10) == fit.loglik


def test_uncensored_intervals_follow_the_textbook_formulas() -> None:
    """
    Intervals: sigma by chi-square, p99 by the noncentral t, the ratio from sigma's.
    """
    x = sample(2, 50)
    y = np.log(x)
    n, s = y.size, float(y.std(ddof=1))

    fit = fit_lognormal(x)

    chi = stats.chi2.ppf([0.975, 0.025], n - 1)
    assert pytest.approx(np.sqrt((n - 1) * s**2 / chi).tolist()) == [
        fit.sigma_interval.low,
        fit.sigma_interval.high,
    ]
    z = float(stats.norm.ppf(0.99))
    k = stats.nct.ppf([0.025, 0.975], n - 1, z * math.sqrt(n)) / math.sqrt(n)
    p99 = fit.quantile_interval(0.99)
    assert pytest.approx(np.exp(y.mean() + k * s).tolist()) == [p99.low, p99.high]
    ratio = fit.ratio_interval()
    assert pytest.approx(
        [math.exp(z * fit.sigma_interval.low), math.exp(z * fit.sigma_interval.high)]
    ) == [
        ratio.low,
        ratio.high,
    ]


def test_moments_from_sql_give_the_same_fit() -> None:
    """
    fit_lognormal_moments(count, avg(ln x), var_pop(ln x)) equals fit_lognormal on the data.
    """
    x = sample(3, 777)
    y = np.log(x)

    expected = fit_lognormal(x)
    actual = fit_lognormal_moments(y.size, float(y.mean()), float(y.var()))

    assert expected == actual


def test_exact_p99_interval_covers_at_small_n() -> None:
    """
    With 30 calls, the uncensored p99 interval covers the truth in 90-99 % of 400 samples.
    """
    hits = sum(
        TRUE_P99 in fit_lognormal(sample(seed, 30)).quantile_interval(0.99) for seed in range(400)
    )

    assert 0.90 * 400 <= hits <= 0.99 * 400


def test_fit_methods_agree_with_each_other() -> None:
    """
    quantile(0.5) is the median, quantiles rise with q, ratio is a quotient of quantiles.
    """
    fit = fit_lognormal(sample(4, 300))

    assert fit.median_s == fit.quantile(0.5)
    assert fit.quantile(0.9) < fit.quantile(0.99)
    assert pytest.approx(fit.quantile(0.99) / fit.quantile(0.5)) == fit.ratio()
    assert fit.quantile(0.99) in fit.quantile_interval(0.99)
    narrow, wide = fit.quantile_interval(0.99, level=0.5), fit.quantile_interval(0.99)
    assert (0.5, 0.95) == (narrow.level, wide.level)
    assert wide.low < narrow.low < narrow.high < wide.high


@pytest.mark.parametrize("share", [0.1, 0.3])
def test_cap_censored_fit_matches_scipy_censored_fit(share: float) -> None:
    """
    Same estimates as lognorm.fit(CensoredData); loglik is the sum of logpdf and logsf.
    """
    x = sample(5)
    cut = cap_censor(x, share)
    done, cut_at = x[np.isnan(cut)], cut[~np.isnan(cut)]

    fit = fit_lognormal(x, censored_at_s=cut)

    data = stats.CensoredData(uncensored=done, right=cut_at)
    s, _, scale = stats.lognorm.fit(data, floc=0)
    assert pytest.approx((s, math.log(scale)), rel=1e-4) == (fit.sigma, fit.mu)
    loglik = (
        stats.lognorm.logpdf(done, fit.sigma, 0, fit.median_s).sum()
        + stats.lognorm.logsf(cut_at, fit.sigma, 0, fit.median_s).sum()
    )
    assert pytest.approx(loglik, rel=1e-12) == fit.loglik
    assert (2000, cut_at.size) == (fit.n, fit.n_censored)


def test_censored_covariance_is_the_inverse_observed_information() -> None:
    """
    The covariance is the inverse of minus the finite-difference Hessian of the censored loglik.
    """
    x = sample(6)
    cut = cap_censor(x, 0.3)
    done, cut_at = x[np.isnan(cut)], cut[~np.isnan(cut)]
    fit = fit_lognormal(x, censored_at_s=cut)

    def loglik(mu: float, sigma: float) -> float:
        scale = math.exp(mu)
        return float(
            stats.lognorm.logpdf(done, sigma, 0, scale).sum()
            + stats.lognorm.logsf(cut_at, sigma, 0, scale).sum()
        )

    h = 1e-4
    theta = np.array([fit.mu, fit.sigma])
    hessian = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            ei, ej = np.eye(2)[i] * h, np.eye(2)[j] * h
            hessian[i, j] = (
                loglik(*(theta + ei + ej))
                - loglik(*(theta + ei - ej))
                - loglik(*(theta - ei + ej))
                + loglik(*(theta - ei - ej))
            ) / (4 * h * h)

    assert pytest.approx(np.linalg.inv(-hessian).ravel().tolist(), rel=1e-3) == [
        v for row in fit.cov for v in row
    ]


Censor = Callable[[NDArray[np.float64], int], NDArray[np.float64] | None]
CENSORING: dict[str, Censor] = {
    "none": lambda x, seed: None,
    "cap 10%": lambda x, seed: cap_censor(x, 0.1),
    "cap 30%": lambda x, seed: cap_censor(x, 0.3),
    "hedge at p90": lambda x, seed: hedge_censor(x, seed, 8.0 * math.exp(1.2816 * SIGMA)),
}


@pytest.mark.parametrize("scenario", list(CENSORING))
def test_censored_p99_interval_covers_the_truth(scenario: str) -> None:
    """
    Over 20 seeded samples of 2000 calls the p99 interval contains the true p99 at least 16 times.
    """
    hits = ratio_hits = 0
    for seed in range(20):
        x = sample(100 + seed)
        fit = fit_lognormal(x, censored_at_s=CENSORING[scenario](x, seed))
        hits += TRUE_P99 in fit.quantile_interval(0.99)
        ratio_hits += TRUE_RATIO in fit.ratio_interval()

    assert hits >= 16
    assert ratio_hits >= 16


def test_hedge_censoring_cuts_a_real_share_of_calls() -> None:
    """
    The hedge scenario above censors between 2 % and 15 % of calls: it tests something.
    """
    x = sample(100)

    share = float(np.mean(~np.isnan(hedge_censor(x, 0, 8.0 * math.exp(1.2816 * SIGMA)))))

    assert 0.02 < share < 0.15


def test_dropping_cut_calls_biases_p99_low() -> None:
    """
    30 % cut: the naive p99 interval lies below the truth; the censored fit agrees with the uncut.
    """
    x = sample(7)
    cut = cap_censor(x, 0.3)

    naive = fit_lognormal(x[np.isnan(cut)])
    censored = fit_lognormal(x, censored_at_s=cut)

    assert naive.quantile_interval(0.99).high < TRUE_P99
    assert naive.quantile_interval(0.99).high < censored.quantile(0.99)
    full = fit_lognormal(x)  # what the same calls would give had none been cut
    assert full.quantile(0.99) in censored.quantile_interval(0.99)


def test_censored_intervals_are_wald() -> None:
    """
    With censoring mu's interval is mu -/+ 1.96 se and sigma's is symmetric on log sigma.
    """
    x = sample(8)
    fit = fit_lognormal(x, censored_at_s=cap_censor(x, 0.3))
    z = float(stats.norm.ppf(0.975))
    se_mu, se_sigma = math.sqrt(fit.cov[0][0]), math.sqrt(fit.cov[1][1])

    expected = (
        (fit.mu - z * se_mu, fit.mu + z * se_mu),
        (
            fit.sigma / math.exp(z * se_sigma / fit.sigma),
            fit.sigma * math.exp(z * se_sigma / fit.sigma),
        ),
    )
    assert pytest.approx(expected[0][0]) == fit.mu_interval.low
    assert pytest.approx(expected[1][1]) == fit.sigma_interval.high
    assert pytest.approx(fit.sigma_interval.low * fit.sigma_interval.high) == fit.sigma**2


def test_zero_censoring_times_carry_no_information() -> None:
    """
    A call cut at 0 s is left out; the rest is the uncensored fit.
    """
    x = sample(9, 100)
    cut = np.full(100, np.nan)
    cut[:3] = 0.0

    assert fit_lognormal(x[3:]) == fit_lognormal(x, censored_at_s=cut)


@pytest.mark.parametrize(
    ("latency", "cut", "message"),
    [
        ([1.0, 0.0, 2.0], None, r"positive for a lognormal fit, got 0.0 \(1 calls\)"),
        ([1.0, -2.0, 2.0], None, "non-negative, got -2.0"),
        ([1.0, 2.0, 3.0], [np.nan, 4.0], "got 2 entries for 3 calls"),
        ([1.0, 2.0, 3.0], [np.nan, np.nan, -4.0], "censored_at_s must be non-negative"),
    ],
)
def test_invalid_data_is_refused(
    latency: list[float], cut: list[float] | None, message: str
) -> None:
    """
    Non-positive latency, a negative cut age or misaligned arrays raise ValueError saying so.
    """
    with pytest.raises(ValueError, match=message):
        fit_lognormal(latency, censored_at_s=cut)


@pytest.mark.parametrize(
    ("latency", "cut", "note"),
    [
        ([1.2, 1.2, np.nan], [np.nan, np.nan, 3.0], "all 2 finished calls took 1.2 s: no spread"),
        ([2.0, 2.0, 2.0], None, "all 3 finished calls took 2 s: no spread to fit"),
        ([1.0], None, "1 call finished: a lognormal fit needs at least 2"),
        ([1.0, np.nan, 2.0], [np.nan, np.nan, 3.0], "1 call finished: a lognormal fit needs"),
        ([np.nan] * 3, [1.0, 2.0, 3.0], "0 calls finished: a lognormal fit needs at least 2"),
        ([1.0, 2.0, 3.0, 4.0, np.nan], [np.nan] * 4 + [0.5], "too few calls: 4 of 5 calls"),
    ],
)
def test_degenerate_data_gives_no_estimate_and_says_why(
    latency: list[float], cut: list[float] | None, note: str
) -> None:
    """
    All equal, fewer than 2 finished, or too few calls to bound the median: NaN, a note.
    """
    fit = fit_lognormal(latency, censored_at_s=cut)

    assert fit.note is not None
    assert fit.note.startswith(note)
    assert math.isnan(fit.mu)
    assert math.isnan(fit.sigma)
    assert math.isnan(fit.quantile(0.99))
    assert ((-math.inf, math.inf), (0.0, math.inf)) == (
        fit.mu_interval.bounds,
        fit.sigma_interval.bounds,
    )
    assert (0.0, math.inf) == fit.quantile_interval(0.99).bounds
    assert not fit.ratio_interval().bounded
    ages = cut or [math.nan] * len(latency)
    cuts = sum(c > 0 for c in ages)
    finished = sum(not (math.isnan(v) or c > 0) for v, c in zip(latency, ages, strict=True))
    assert (finished + cuts, cuts) == (fit.n, fit.n_censored)


def test_hopeless_censoring_gives_no_median() -> None:
    """
    3 finished calls under a 30 s timeout and 2,000 cut: no estimate, "cut calls hide the median".
    """
    latency = [1.0, 2.0, 3.0] + [np.nan] * 2000
    cut = [np.nan] * 3 + [30.0] * 2000

    fit = fit_lognormal(latency, censored_at_s=cut)

    assert math.isnan(fit.mu)
    assert (
        "cut calls hide the median: 3 of 2,003 calls finished, and the median's "
        "distribution-free 95% interval is unbounded, so a censored lognormal fit would only "
        "extrapolate"
    ) == fit.note


def test_the_fit_is_given_while_the_data_bound_the_median() -> None:
    """
    A timeout at the true p60 (40 % cut) still fits; at the p40 (60 % cut) the median is hidden.
    """
    x = sample(11)

    kept = fit_lognormal(x, censored_at_s=cap_censor(x, 0.4))
    hidden = fit_lognormal(x, censored_at_s=cap_censor(x, 0.6))

    assert kept.note is None
    assert MU in kept.mu_interval
    assert hidden.note is not None
    assert hidden.note.startswith("cut calls hide the median")


@pytest.mark.parametrize(
    ("n", "mean_log", "var_log", "message"),
    [
        (-1, 0.0, 1.0, "got n=-1"),
        (10, 0.0, -1.0, "var_log=-1.0"),
        (10, math.nan, 1.0, "must be finite"),
    ],
)
def test_invalid_moments_are_refused(n: int, mean_log: float, var_log: float, message: str) -> None:
    """
    fit_lognormal_moments refuses a negative count or variance and non-finite moments.
    """
    with pytest.raises(ValueError, match=message):
        fit_lognormal_moments(n, mean_log, var_log)


def test_degenerate_moments_give_no_estimate() -> None:
    """
    One call, or a variance of 0, give the no-estimate fit fit_lognormal gives on such data.
    """
    assert fit_lognormal([3.0]) == fit_lognormal_moments(1, math.log(3.0), 0.0)
    assert fit_lognormal([2.0, 2.0]) == fit_lognormal_moments(2, math.log(2.0), 0.0)


def test_intervals_hold_only_for_lognormal_latency() -> None:
    """
    As documented: on a lognormal with a 5 % transient tail the p99 interval almost never covers.
    """

    def mixture(rng: np.random.Generator, n: int) -> NDArray[np.float64]:
        x = rng.lognormal(MU, 0.5, n)
        slow = rng.random(n) < 0.05
        x[slow] *= rng.lognormal(math.log(4.0), 0.3, int(slow.sum()))
        return x

    truth = float(np.quantile(mixture(np.random.default_rng(0), 2_000_000), 0.99))
    hits = sum(
        truth in fit_lognormal(mixture(np.random.default_rng(seed), 500)).quantile_interval(0.99)
        for seed in range(1, 41)
    )

    assert hits <= 8  # 0 measured; a lognormal sample covers in about 38 of 40


def test_bad_quantile_and_level_are_named() -> None:
    """
    A q or level outside (0, 1) raises ValueError naming them.
    """
    fit: LognormalFit = fit_lognormal(sample(10, 50))

    with pytest.raises(ValueError, match=r"q must be .* got 99"):
        fit.quantile(99)
    with pytest.raises(ValueError, match=r"level must be between 0 and 1 .* got 95"):
        fit.quantile_interval(0.99, level=95)
