"""
Goodness of fit: is latency lognormal, and which family fits best by AIC.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from numpy.typing import NDArray
from scipy import stats

from tailkit.fit._gof import (
    AD_IMPUTED_METHOD,
    AD_METHOD,
    NO_FIT_METHOD,
    SCORE_BOOTSTRAP_METHOD,
    SCORE_METHOD,
    _ad_p_value,
    _score_test,
    goodness_of_fit,
    goodness_of_fit_many,
)
from tailkit.fit._lognormal import fit_lognormal


MU, SIGMA = math.log(8.0), 0.8

SCIPY = {
    "lognormal": stats.lognorm,
    "gamma": stats.gamma,
    "weibull": stats.weibull_min,
    "loglogistic": stats.fisk,
}


def lognormal(seed: int, n: int = 2000) -> NDArray[np.float64]:
    return np.random.default_rng(seed).lognormal(MU, SIGMA, n)


def cap(x: NDArray[np.float64], share: float) -> NDArray[np.float64]:
    at = float(np.quantile(x, 1.0 - share))
    return np.where(x > at, at, np.nan)


def test_lognormal_data_fits_and_lognormal_ranks_first() -> None:
    """
    Over 20 seeded lognormal samples the test accepts at least 17 times; lognormal is best in all.
    """
    results = [goodness_of_fit(lognormal(seed)) for seed in range(20)]

    assert sum(r.verdict == "fits" for r in results) >= 17
    assert {"lognormal"} == {r.best_family for r in results}
    assert {AD_METHOD} == {r.method for r in results}


@pytest.mark.parametrize(
    ("family", "shape"), [("weibull", 1.5), ("gamma", 3.0), ("loglogistic", 4.0)]
)
def test_other_families_are_rejected_and_recognized(family: str, shape: float) -> None:
    """
    Weibull, gamma and log-logistic data: lognormal rejected, the true family ranks first.
    """
    x = SCIPY[family].rvs(shape, scale=10.0, size=3000, random_state=np.random.default_rng(1))

    result = goodness_of_fit(x)

    assert ("rejected", family) == (result.verdict, result.best_family)
    assert result.p_value < 1e-4


def test_statistic_is_scipy_anderson_on_log_latency() -> None:
    """
    A^2 is scipy.stats.anderson(log x, 'norm')'s statistic.
    """
    x = lognormal(2, 300)

    result = goodness_of_fit(x)

    expected = stats.anderson(np.log(x), "norm", method="interpolate").statistic
    assert pytest.approx(expected, rel=1e-9) == result.statistic


@pytest.mark.parametrize(
    ("a_star", "p"), [(0.561, 0.15), (0.631, 0.10), (0.752, 0.05), (0.873, 0.025), (1.035, 0.01)]
)
def test_p_value_matches_stephens_critical_values(a_star: float, p: float) -> None:
    """
    At Stephens' critical values of A*^2 (estimated mean and variance) the p-value is the level.
    """
    assert pytest.approx(p, rel=0.03) == _ad_p_value(a_star)


def test_p_value_is_a_probability_across_its_four_pieces() -> None:
    """
    The D'Agostino-Stephens p-value falls from near 1 to near 0, within [0, 1], up to A*^2 = 2000.
    """
    values = [_ad_p_value(a) for a in np.linspace(0.01, 2000.0, 20_000)]

    assert all(0.0 <= v <= 1.0 for v in values)
    assert sorted(values, reverse=True) == values
    assert values[0] > 0.99
    assert values[-1] < 1e-100


def test_a_grossly_bimodal_sample_is_rejected() -> None:
    """
    Two well-separated modes give a huge A^2; the verdict is "rejected", not an overflow.
    """
    rng = np.random.default_rng(13)
    x = np.concatenate([rng.lognormal(0.0, 0.05, 2500), rng.lognormal(5.0, 0.05, 2500)])

    result = goodness_of_fit(x)

    assert result.statistic > 300.0
    assert "rejected" == result.verdict
    assert result.p_value < 1e-100


@pytest.mark.parametrize("family", list(SCIPY))
def test_family_fits_are_maximum_likelihood(family: str) -> None:
    """
    Each family's loglik is at least scipy's fit(floc=0) and its parameters agree.
    """
    x = lognormal(3, 1000)

    fit = next(f for f in goodness_of_fit(x).families if f.family == family)

    params = SCIPY[family].fit(x, floc=0)
    expected = float(SCIPY[family].logpdf(x, *params).sum())
    assert fit.loglik >= expected - 1e-6
    assert pytest.approx(params, rel=1e-4) == fit.params
    assert pytest.approx(float(SCIPY[family].logpdf(x, *fit.params).sum()), rel=1e-12) == fit.loglik


@pytest.mark.parametrize("family", list(SCIPY))
def test_censored_family_fits_use_the_censored_likelihood(family: str) -> None:
    """
    With 20 % cut calls each loglik is logpdf + logsf at its parameters, at least scipy's.
    """
    x = lognormal(4, 1000)
    cut = cap(x, 0.2)
    done, cut_at = x[np.isnan(cut)], cut[~np.isnan(cut)]

    fit = next(f for f in goodness_of_fit(x, censored_at_s=cut).families if f.family == family)

    dist = SCIPY[family]
    at_fit = dist.logpdf(done, *fit.params).sum() + dist.logsf(cut_at, *fit.params).sum()
    assert pytest.approx(float(at_fit), rel=1e-9) == fit.loglik
    params = dist.fit(stats.CensoredData(uncensored=done, right=cut_at), floc=0)
    scipy_loglik = dist.logpdf(done, *params).sum() + dist.logsf(cut_at, *params).sum()
    assert fit.loglik >= float(scipy_loglik) - 1e-5


def test_families_are_ranked_by_aic() -> None:
    """
    Families come best first; AIC is 2 k - 2 loglik with k = 2; n counts every call.
    """
    result = goodness_of_fit(lognormal(5, 500))

    assert [f.aic for f in result.families] == sorted(f.aic for f in result.families)
    assert [4.0 - 2.0 * f.loglik for f in result.families] == [f.aic for f in result.families]
    assert {"lognormal", "gamma", "weibull", "loglogistic"} == {f.family for f in result.families}
    assert {500} == {f.n for f in result.families} | {result.n}


def test_heavy_censoring_is_score_tested() -> None:
    """
    30 % cut calls: the score test, with a p-value; lognormal data fits and ranks first.
    """
    x = lognormal(6)

    result = goodness_of_fit(x, censored_at_s=cap(x, 0.3))

    assert (SCORE_METHOD, "fits", "lognormal") == (
        result.method,
        result.verdict,
        result.best_family,
    )
    assert 0.05 < result.p_value <= 1.0
    assert stats.chi2.sf(result.statistic, 1) == pytest.approx(result.p_value)


@pytest.mark.parametrize(("family", "shape"), [("weibull", 1.5), ("gamma", 3.0)])
def test_heavy_censoring_rejects_skewed_families(family: str, shape: float) -> None:
    """
    30 % of Weibull or gamma calls cut: the score test rejects the lognormal, AIC ranks right.
    """
    x = SCIPY[family].rvs(shape, scale=10.0, size=3000, random_state=np.random.default_rng(7))

    result = goodness_of_fit(x, censored_at_s=cap(x, 0.3))

    assert ("rejected", family) == (result.verdict, result.best_family)
    assert result.p_value < 1e-4


def transient_tail(seed: int, n: int) -> NDArray[np.float64]:
    """
    A lognormal whose 5 % transient calls take 4 times as long.
    """
    rng = np.random.default_rng(seed)
    x = rng.lognormal(MU, 0.5, n)
    slow = rng.random(n) < 0.05
    x[slow] *= rng.lognormal(math.log(4.0), 0.3, int(slow.sum()))
    return x


def hedge(x: NDArray[np.float64], seed: int) -> NDArray[np.float64]:
    """
    A hedge sent at 13.5 s cuts the call when it finishes first: about 10 % of calls cut.
    """
    done = 13.5 + np.random.default_rng(seed + 10_000).lognormal(MU, SIGMA, x.size)
    return np.where(done < x, done, np.nan)


def score_p_value(x: NDArray[np.float64], cut: NDArray[np.float64], seed: int) -> float:
    """
    The p-value goodness_of_fit gives a sample with more than 5 % cut (without other families).
    """
    fit = fit_lognormal(x, censored_at_s=cut)
    done, cut_at = x[np.isnan(cut)], cut[~np.isnan(cut)]
    return _score_test((done, cut_at, np.random.default_rng(seed)), fit.mu, fit.sigma)[1]


@pytest.mark.parametrize(("n", "samples"), [(400, 300), (60, 100)])
def test_heavy_censoring_honours_alpha(n: int, samples: int) -> None:
    """
    Lognormal, about 10 % hedge-cut: false rejections near alpha 0.01 and 0.05, both p-values.
    """
    p = np.array([
        score_p_value(x, hedge(x, seed), seed)
        for seed in range(samples)
        for x in [lognormal(seed, n)]
    ])  # fmt: skip

    for alpha, measured in ((0.01, "0.7 % and 1 %"), (0.05, "5.3 % and 5 %")):
        # 3.5 binomial standard errors above alpha: a test that holds its size cannot fail
        limit = alpha + 3.5 * math.sqrt(alpha * (1.0 - alpha) / samples)
        assert np.mean(p < alpha) <= limit, measured
    assert np.mean(p < 0.5) >= 0.35  # and not a test that never rejects


def test_heavy_censoring_bootstraps_small_samples() -> None:
    """
    Under 300 finished calls the p-value is bootstrapped; it repeats with the seed.
    """
    x = lognormal(16, 100)
    cut = hedge(x, 16)

    first = goodness_of_fit(x, censored_at_s=cut, seed=4)
    again = goodness_of_fit(x, censored_at_s=cut, seed=4)

    assert SCORE_BOOTSTRAP_METHOD == first.method
    assert first == again
    assert 0.005 <= first.p_value <= 1.0  # (1 + count) / 200


def test_heavy_censoring_finds_a_transient_tail() -> None:
    """
    A lognormal with a 5 % transient tail, 10 % hedge-cut: rejected at alpha 0.01 (p < 1e-4).
    """
    rejected = 0
    for seed in range(10):
        x = transient_tail(seed, 2000)
        rejected += score_p_value(x, hedge(x, seed), seed) < 0.01

    assert rejected >= 9


def test_light_censoring_is_imputed_and_keeps_the_test_valid() -> None:
    """
    4 % cut at a cap: lognormal data fits in at least 17 of 20 samples; Weibull data is rejected.
    """
    results = []
    for seed in range(20):
        x = lognormal(seed, 3000)
        results.append(goodness_of_fit(x, censored_at_s=cap(x, 0.04), seed=seed))
    w = stats.weibull_min.rvs(1.5, scale=10.0, size=3000, random_state=np.random.default_rng(8))
    weibull = goodness_of_fit(w, censored_at_s=cap(w, 0.04))

    assert {AD_IMPUTED_METHOD} == {r.method for r in results}
    assert sum(r.verdict == "fits" for r in results) >= 17
    assert "rejected" == weibull.verdict


def test_dropping_cut_calls_would_have_rejected_the_truth() -> None:
    """
    The reason for imputing: the same data with the cut calls dropped is rejected.
    """
    x = lognormal(9, 5000)
    cut = cap(x, 0.04)

    assert "fits" == goodness_of_fit(x, censored_at_s=cut).verdict
    assert "rejected" == goodness_of_fit(x[np.isnan(cut)]).verdict


def test_too_few_calls_give_no_verdict() -> None:
    """
    Below 20 completed calls the verdict is "too few calls", with no families.
    """
    x = lognormal(10, 40)
    few = goodness_of_fit(x[:19])
    enough = goodness_of_fit(x[:20])
    censored = goodness_of_fit(x, censored_at_s=np.where(np.arange(40) < 21, 1.0, np.nan))

    assert ("too few calls", (), "", 19) == (few.verdict, few.families, few.best_family, few.n)
    assert "too few calls" != enough.verdict
    assert "too few calls" == censored.verdict


def test_large_samples_are_subsampled_deterministically() -> None:
    """
    Beyond max_n a seeded subsample is tested: same seed, same result; n is max_n.
    """
    x = lognormal(11, 20_000)

    first = goodness_of_fit(x, max_n=1000)
    again = goodness_of_fit(x, max_n=1000)
    other = goodness_of_fit(x, max_n=1000, seed=1)

    assert first == again
    assert 1000 == first.n
    assert first.statistic != other.statistic


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 5}, "alpha must be between 0 and 1 .* got 5"),
        ({"max_n": 10}, "max_n must be at least 20, got 10"),
        ({"latency_s": [1.0, 0.0]}, "positive to test a lognormal fit, got 0.0"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    """
    Bad arguments raise ValueError naming the argument and the value.
    """
    latency = kwargs.pop("latency_s", lognormal(12, 50))
    with pytest.raises(ValueError, match=message):
        goodness_of_fit(latency, **kwargs)  # type: ignore[arg-type]


def test_many_samples_at_once_give_each_samples_own_result() -> None:
    """
    Tested together (lognormal, Weibull, light and heavy cuts, too few), each result is its own.
    """
    x = lognormal(14, 3000)
    w = stats.weibull_min.rvs(1.5, scale=10.0, size=1500, random_state=np.random.default_rng(15))
    samples = [(x, None), (w, None), (x, cap(x, 0.03)), (x, cap(x, 0.3)), (x[:10], None)]

    together = goodness_of_fit_many(samples, max_n=2000, seed=3)

    for (latency_s, censored_at_s), result in zip(samples, together, strict=True):
        alone = goodness_of_fit(latency_s, censored_at_s=censored_at_s, max_n=2000, seed=3)
        assert (alone.verdict, alone.method, alone.best_family, alone.n) == (
            result.verdict, result.method, result.best_family, result.n,
        )  # fmt: skip
        assert alone.p_value == pytest.approx(result.p_value, rel=1e-9, nan_ok=True)
        assert [f.family for f in alone.families] == [f.family for f in result.families]
        for one, many in zip(alone.families, result.families, strict=True):
            assert one.loglik == pytest.approx(many.loglik, rel=1e-9)
            assert one.params == pytest.approx(many.params, rel=1e-6)


def test_hopeless_censoring_gives_no_verdict() -> None:
    """
    25 finished calls under a timeout and 2,000 cut: "too few calls", saying why; no error.
    """
    x = np.concatenate([lognormal(17, 25) / 10.0, np.full(2000, np.nan)])
    cut = np.concatenate([np.full(25, np.nan), np.full(2000, 5.0)])

    result = goodness_of_fit(x, censored_at_s=cut)

    assert "too few calls" == result.verdict
    assert result.method.startswith(NO_FIT_METHOD + "cut calls hide the median")
    assert math.isnan(result.p_value)
    assert "lognormal" not in {f.family for f in result.families}


def test_degenerate_samples_never_fail_the_batch() -> None:
    """
    All equal, one finished, all cut, hopeless: each "too few calls", the good one still tested.
    """
    x = lognormal(18, 500)
    samples: list[tuple[object, object]] = [
        ([1.2] * 30 + [np.nan], [np.nan] * 30 + [3.0]),
        ([1.2, np.nan], [np.nan, 3.0]),
        ([np.nan] * 40, [5.0] * 40),
        (np.concatenate([x[:3], np.full(2000, np.nan)]), [np.nan] * 3 + [30.0] * 2000),
        (x, hedge(x, 18)),
    ]

    results = goodness_of_fit_many(samples)  # type: ignore[arg-type]

    assert ["too few calls"] * 4 == [r.verdict for r in results[:4]]
    assert results[4].verdict in {"fits", "rejected"}
