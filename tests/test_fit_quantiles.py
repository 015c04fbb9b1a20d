"""
Distribution-free quantiles: exact order-statistic intervals, Kaplan-Meier with censoring.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tailkit.fit._quantiles import (
    QuantileEstimate,
    empirical_quantiles,
    min_calls_for_quantile,
    quantile_warning,
    sorted_quantiles,
)
from tailkit.fit._types import Interval


MU, SIGMA = math.log(8.0), 0.8


def true_quantile(q: float) -> float:
    return math.exp(MU + SIGMA * float(stats.norm.ppf(q)))


def test_uncensored_values_are_numpy_and_duckdb_type_7_quantiles() -> None:
    """
    The point estimates equal numpy.quantile's default (linear), bit for bit.
    """
    x = np.random.default_rng(1).lognormal(MU, SIGMA, 1234)
    qs = (0.01, 0.5, 0.9, 0.95, 0.99, 0.999)

    estimates = empirical_quantiles(x, qs=qs)

    assert np.quantile(x, qs).tolist() == [e.value for e in estimates]
    assert {"order statistics"} == {e.method for e in estimates}
    assert {1234} == {e.n for e in estimates}


def test_uncensored_intervals_match_scipy_quantile_test() -> None:
    """
    The order-statistic interval has the ranks of scipy.stats.quantile_test's interval.
    """
    x = np.random.default_rng(2).lognormal(MU, SIGMA, 1000)
    qs = (0.1, 0.5, 0.9, 0.99)

    estimates = empirical_quantiles(x, qs=qs)

    expected = []
    for q in qs:
        ci = stats.quantile_test(x, q=float(np.quantile(x, q)), p=q).confidence_interval(0.95)
        expected.append(Interval(float(ci.low), float(ci.high), 0.95))
    assert expected == [e.interval for e in estimates]


def test_p99_is_bounded_above_from_368_calls_not_367() -> None:
    """
    The p99 upper bound is the maximum from 368 calls and infinite from 367 (0.99**367 > 0.025).
    """
    x = np.random.default_rng(3).lognormal(MU, SIGMA, 368)

    (short,) = empirical_quantiles(x[:367], qs=(0.99,))
    (enough,) = empirical_quantiles(x, qs=(0.99,))

    assert math.inf == short.interval.high
    assert float(x.max()) == enough.interval.high


def test_unbounded_lower_side_is_zero() -> None:
    """
    With 5 calls a p50 interval has no lower order statistic: its low end is 0.0 s.
    """
    (median,) = empirical_quantiles([1.0, 2.0, 3.0, 4.0, 5.0], qs=(0.5,))

    assert Interval(0.0, math.inf, 0.95) == median.interval
    assert 3.0 == median.value


@pytest.mark.parametrize(
    ("q", "level", "expected"),
    [(0.99, 0.95, 368), (0.99, 0.90, 299), (0.95, 0.95, 72), (0.5, 0.95, 6), (0.999, 0.95, 3688)],
)
def test_min_calls_for_quantile(q: float, level: float, expected: int) -> None:
    """
    The fewest calls whose interval is bounded above: smallest n with q**n <= (1 - level)/2.
    """
    assert expected == min_calls_for_quantile(q, level=level)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_min_calls_agrees_with_the_intervals(q: float) -> None:
    """
    At min_calls the interval is bounded above; one call fewer it is not.
    """
    n = min_calls_for_quantile(q)
    x = np.arange(1.0, n + 1.0)

    (fewer,) = empirical_quantiles(x[:-1], qs=(q,))
    (enough,) = empirical_quantiles(x, qs=(q,))

    assert (math.inf, float(n)) == (fewer.interval.high, enough.interval.high)


def test_quantile_warning_names_the_calls_needed() -> None:
    """
    Below the minimum the warning says how many calls p99 needs; at it there is none.
    """
    assert (
        "p99 from 120 calls is not bounded above: it needs at least 368 calls"
        == quantile_warning(120)
    )
    assert "p99.9 from 500 calls is not bounded above: it needs at least 3688 calls" == (
        quantile_warning(500, 0.999)
    )
    assert quantile_warning(368) is None


def test_order_statistic_interval_covers_the_true_p90() -> None:
    """
    Over 400 seeded samples of 200 calls the 95 % interval covers the true p90 at least 93 %.
    """
    truth = true_quantile(0.9)
    hits = 0
    for seed in range(400):
        x = np.random.default_rng(seed).lognormal(MU, SIGMA, 200)
        (p90,) = empirical_quantiles(x, qs=(0.9,))
        hits += truth in p90.interval

    assert hits >= 0.93 * 400


def test_censoring_above_the_median_leaves_the_kaplan_meier_median_exact() -> None:
    """
    Cut calls above the median do not move it: KM gives the inverted-CDF sample median.
    """
    x = np.random.default_rng(4).lognormal(MU, SIGMA, 1001)
    cap = float(np.quantile(x, 0.8))
    cut = np.where(x > cap, cap, np.nan)

    (median,) = empirical_quantiles(x, qs=(0.5,), censored_at_s=cut)

    assert float(np.quantile(x, 0.5, method="inverted_cdf")) == median.value
    assert "Kaplan-Meier" == median.method
    assert median.value in median.interval


def test_quantile_hidden_by_censoring_is_infinite_and_more_than_the_cap() -> None:
    """
    With 10 % of calls cut at a cap, p99 is "more than the cap": value inf, low end the cap.
    """
    x = np.random.default_rng(5).lognormal(MU, SIGMA, 2000)
    cap = true_quantile(0.9)
    cut = np.where(x > cap, cap, np.nan)

    (p99,) = empirical_quantiles(x, qs=(0.99,), censored_at_s=cut)

    assert (math.inf, Interval(cap, math.inf, 0.95)) == (p99.value, p99.interval)


def test_kaplan_meier_interval_covers_the_true_median_under_random_censoring() -> None:
    """
    Hedge-like random cuts: the KM interval of p50 covers the truth in at least 90 % of 200 runs.
    """
    truth = true_quantile(0.5)
    hits = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        x = rng.lognormal(MU, SIGMA, 300)
        cut_at = 4.0 + rng.lognormal(MU, SIGMA, 300)  # a hedge at 4 s that may win the race
        cut = np.where(cut_at < x, cut_at, np.nan)
        (p50,) = empirical_quantiles(x, qs=(0.5,), censored_at_s=cut)
        hits += truth in p50.interval

    assert hits >= 0.9 * 200


def test_nan_latency_is_dropped_and_censored_latency_ignored() -> None:
    """
    NaN uncensored latency is dropped; a cut call's latency entry is ignored, NaN or not.
    """
    latency = [1.0, np.nan, 3.0, np.nan, 99.0]
    cut = [np.nan, np.nan, np.nan, 2.0, 2.5]

    (plain,) = empirical_quantiles([1.0, np.nan, 3.0], qs=(0.5,))
    (censored,) = empirical_quantiles(latency, qs=(0.5,), censored_at_s=cut)

    assert (2, 2.0) == (plain.n, plain.value)
    assert (4, "Kaplan-Meier") == (censored.n, censored.method)


def test_all_nan_censoring_is_uncensored() -> None:
    """
    A censored_at_s with no finite entry gives the order-statistic estimates.
    """
    x = [3.0, 1.0, 2.0, 5.0]

    expected = empirical_quantiles(x)
    actual = empirical_quantiles(x, censored_at_s=[np.nan, np.inf, np.nan, np.nan])

    assert expected == actual


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"latency_s": []}, "no calls"),
        ({"latency_s": [np.nan]}, "no calls"),
        ({"latency_s": [1.0], "qs": (0.99, 1.0)}, r"qs must be quantiles .* got \(0.99, 1.0\)"),
        ({"latency_s": [1.0], "level": 95}, "level must be between 0 and 1"),
        ({"latency_s": [-1.0]}, "non-negative, got -1.0"),
        ({"latency_s": [np.inf]}, "belongs in censored_at_s"),
        ({"latency_s": [1.0, 2.0], "censored_at_s": [1.0]}, "got 1 entries for 2 calls"),
        ({"latency_s": [1.0], "censored_at_s": [-2.0]}, "censored_at_s must be non-negative"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    """
    Bad input raises ValueError naming the argument and the value.
    """
    latency = kwargs.pop("latency_s")
    with pytest.raises(ValueError, match=message):
        empirical_quantiles(latency, **kwargs)  # type: ignore[arg-type]


latencies = st.lists(
    st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_subnormal=False),
    min_size=1,
    max_size=60,
)
quantile_sets = st.lists(
    st.floats(min_value=0.001, max_value=0.999), min_size=1, max_size=6, unique=True
)


def check_invariants(estimates: tuple[QuantileEstimate, ...]) -> None:
    ordered = sorted(estimates, key=lambda e: e.q)
    values = [e.value for e in ordered]
    assert sorted(values) == values
    for e in estimates:
        assert e.value in e.interval
        assert e.interval.low >= 0.0


@settings(max_examples=200, deadline=None)
@given(x=latencies, qs=quantile_sets, level=st.floats(min_value=0.01, max_value=0.999))
def test_uncensored_estimates_are_monotone_and_inside_their_intervals(
    x: list[float], qs: list[float], level: float
) -> None:
    """
    Any data, quantiles and level: values rise with q, each inside its interval.
    """
    estimates = empirical_quantiles(x, qs=qs, level=level)

    check_invariants(estimates)
    assert np.quantile(np.array(x), qs).tolist() == [e.value for e in estimates]


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_subnormal=False),
            st.booleans(),
        ),
        min_size=1,
        max_size=60,
    ),
    qs=quantile_sets,
    level=st.floats(min_value=0.5, max_value=0.999),
)
def test_censored_estimates_are_monotone_and_inside_their_intervals(
    data: list[tuple[float, bool]], qs: list[float], level: float
) -> None:
    """
    Any mix of completed and cut calls: KM values rise with q, each inside its interval.
    """
    latency = [np.nan if cut else v for v, cut in data]
    cut_at = [v if cut else np.nan for v, cut in data]

    estimates = empirical_quantiles(latency, qs=qs, censored_at_s=cut_at, level=level)

    check_invariants(estimates)
    assert {len(data)} == {e.n for e in estimates}


@settings(max_examples=100, deadline=None)
@given(
    samples=st.lists(
        st.lists(st.floats(1e-3, 1e4, allow_subnormal=False), min_size=1, max_size=400),
        min_size=1,
        max_size=6,
    ),
    level=st.floats(min_value=0.5, max_value=0.999),
)
def test_sorted_quantiles_of_many_samples_are_each_samples_own(
    samples: list[list[float]], level: float
) -> None:
    """
    Sorted samples side by side: values are np.quantile's exactly, intervals each sample's own.
    """
    qs = (0.5, 0.9, 0.95, 0.99)
    flat = np.concatenate([np.sort(x) for x in samples])
    sizes = np.array([len(x) for x in samples])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    value, low, high = sorted_quantiles(flat, starts, sizes, np.array(qs), 1.0 - level)

    for i, x in enumerate(samples):
        alone = empirical_quantiles(x, qs=qs, level=level)
        assert np.quantile(np.array(x), qs).tolist() == value[i].tolist()
        assert [e.interval.low for e in alone] == low[i].tolist()
        assert [e.interval.high for e in alone] == high[i].tolist()
