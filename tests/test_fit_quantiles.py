"""
Distribution-free quantiles: exact order-statistic intervals, Kaplan-Meier with censoring.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from tailkit.fit._quantiles import (
    KaplanMeier,
    QuantileEstimate,
    empirical_quantiles,
    min_calls_for_quantile,
    quantile_warning,
    sorted_quantiles,
)
from tailkit.fit._tail_warning import tail_warning
from tailkit.text import percent, seconds


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
        expected.append((float(ci.low), float(ci.high)))
    assert expected == [e.interval.bounds for e in estimates]
    assert {e.interval.level for e in estimates} == {0.95}


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

    assert (0.0, math.inf, 0.95) == (*median.interval.bounds, median.interval.level)
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

    assert (math.inf, (cap, math.inf)) == (p99.value, p99.interval.bounds)


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


def test_kaplan_meier_curve_and_band_are_scipys() -> None:
    """
    Times, survival and the log-log band equal scipy.stats.ecdf's, ties and all.
    """
    rng = np.random.default_rng(20)
    for _ in range(50):
        values = np.round(rng.lognormal(0.0, 1.0, int(rng.integers(2, 80))), 1)  # many ties
        cut = rng.random(values.size) < 0.3
        cut[0] = False
        km = KaplanMeier.fit(values[~cut], values[cut])
        sf = stats.ecdf(stats.CensoredData.right_censored(values, cut)).sf
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # undefined where S is 0 or 1
            band = sf.confidence_interval(0.9, method="log-log")
        s = sf.probabilities
        low = np.where(np.isnan(band.low.probabilities), np.where(s >= 1.0, 1.0, 0.0), 0.0)
        low = np.where(np.isnan(band.low.probabilities), low, band.low.probabilities)
        high = np.where(np.isnan(band.high.probabilities), 1.0, band.high.probabilities)

        assert sf.quantiles.tolist() == km.times.tolist()
        assert pytest.approx(s.tolist(), abs=1e-15) == km.survival.tolist()
        mine_low, mine_high = km.band(0.9)
        assert pytest.approx(low.tolist(), abs=1e-12) == mine_low.tolist()
        assert pytest.approx(high.tolist(), abs=1e-12) == mine_high.tolist()


def test_a_call_cut_when_another_finishes_was_still_running() -> None:
    """
    Tie convention: the finish at 2 s comes first, so S(2 s) = 2/3 and the cut is at risk.
    """
    km = KaplanMeier.fit(np.array([1.0, 2.0, 3.0]), np.array([2.0]))

    assert [0.75, 0.5, 0.0] == km.survival.tolist()
    assert [4.0, 3.0, 1.0] == km.at_risk.tolist()


@pytest.mark.parametrize("n", [20, 50, 51, 100])
def test_one_call_cut_at_the_median_leaves_the_median_where_numpy_puts_it(n: int) -> None:
    """
    Cut the slowest call at the median: the Kaplan-Meier median is numpy's, to the bit.
    """
    for seed in range(20):
        x = np.random.default_rng(seed).lognormal(MU, SIGMA, n)
        cut = np.full(n, np.nan)
        cut[int(np.argmax(x))] = float(np.median(x))

        (km,) = empirical_quantiles(x, qs=(0.5,), censored_at_s=cut)

        assert (float(np.median(x)), "Kaplan-Meier") == (km.value, km.method)


def hedge_cuts(x: NDArray[np.float64], seed: int, hedge_at_s: float) -> NDArray[np.float64]:
    """
    A hedge starts at hedge_at_s; when it finishes first, the primary is cut then.
    """
    done = hedge_at_s + np.random.default_rng(seed + 10_000).lognormal(MU, SIGMA, x.size)
    return np.where(done < x, done, np.nan)


def random_cuts(x: NDArray[np.float64], seed: int) -> NDArray[np.float64]:
    """
    Cut ages exponential with mean 88 s, about 11 % of calls cut.
    """
    at = np.random.default_rng(seed + 20_000).exponential(88.0, x.size)
    return np.where(at < x, at, np.nan)


def unbounded(x: NDArray[np.float64], cut: NDArray[np.float64] | None) -> tuple[bool, bool]:
    """
    Whether the p99's upper end, and p99/p50's (each end at 97.5 %), are infinite.
    """
    (p99,) = empirical_quantiles(x, qs=(0.99,), censored_at_s=cut)
    p50, p99_wide = empirical_quantiles(x, qs=(0.5, 0.99), censored_at_s=cut, level=0.975)
    ratio = p50.interval.low == 0.0 or math.isinf(p99_wide.interval.high)
    return math.isinf(p99.interval.high), ratio


def test_tail_warning_without_cuts_counts_calls() -> None:
    """
    Uncut: below 368 calls the p99 warns, from 368 to 436 p99/p50 does, from 437 nothing does.
    """
    x = np.random.default_rng(21).lognormal(MU, SIGMA, 437)

    assert "p99 from 120 calls is not bounded above: it needs at least 368 calls " + (
        "(p99/p50: 437)"
    ) == tail_warning(x[:120])
    assert (
        "p99/p50's upper end is unbounded: it needs at least 437 calls, this group has 400 "
        "(each end at 97.5%)"
    ) == tail_warning(x[:400])
    assert tail_warning(x[:368]) is not None
    assert tail_warning(x) is None
    assert (False, True) == unbounded(x[:436], None)
    assert (False, False) == unbounded(x, None)


@pytest.mark.parametrize("cuts", ["hedge", "random"])
def test_tail_warning_fires_exactly_when_an_upper_end_is_unbounded(cuts: str) -> None:
    """
    1,000 calls, about 10 % cut: the warning fires iff the p99's or p99/p50's upper end is inf.
    """
    fired = 0
    for seed in range(30):
        x = np.random.default_rng(seed).lognormal(MU, SIGMA, 1000)
        cut = hedge_cuts(x, seed, 13.5) if cuts == "hedge" else random_cuts(x, seed)
        assert 0.06 < np.mean(~np.isnan(cut)) < 0.16

        warning = tail_warning(x, censored_at_s=cut)

        assert (warning is not None) == any(unbounded(x, cut))
        fired += warning is not None
        if warning is not None:
            n_cut = int(np.count_nonzero(~np.isnan(cut)))
            assert f"({n_cut} cut in all)" in warning
    assert fired >= (28 if cuts == "hedge" else 15)


def test_tail_warning_names_the_quantile_no_cut_may_come_before() -> None:
    """
    Following every call cut before the named quantile (true latencies) bounds the p99.
    """
    checked = 0
    for seed in range(30):
        x = np.random.default_rng(seed).lognormal(MU, SIGMA, 1000)
        cut = hedge_cuts(x, seed, 13.5)
        warning = tail_warning(x, censored_at_s=cut) or ""
        found = re.search(r"no cut before the p([\d.]+)", warning)
        if not warning.startswith("p99's") or found is None:
            continue
        follow = float(found.group(1)) / 100.0
        rank = round(1000 * (1.0 - follow))  # the quantile was rounded up
        horizon = float(np.sort(x)[1000 - rank - 1])  # the (n - rank)-th latency
        # calls cut before the horizon are followed to it instead
        later = np.where(
            np.isnan(cut) | (cut >= horizon), cut, np.where(x <= horizon, np.nan, horizon)
        )

        assert (False, False) != unbounded(x, later)
        assert not unbounded(x, later)[0]
        checked += 1
    assert checked >= 10


def test_tail_warning_calls_needed_is_at_least_that() -> None:
    """
    "At least ~N calls": fresh samples of 0.8 N calls cut alike are seldom bounded.
    """
    bounded = samples = 0
    for seed in range(10):
        x = np.random.default_rng(seed).lognormal(MU, SIGMA, 1000)
        warning = tail_warning(x, censored_at_s=random_cuts(x, seed))
        if warning is None or samples >= 40:
            continue
        found = re.search(r"at least ~?([\d,]+) calls cut like these", warning)
        assert found is not None, warning
        n = int(found.group(1).replace(",", ""))
        assert 1000 < n < 2000
        for replicate in range(10):
            fresh = np.random.default_rng(100 + 10 * seed + replicate).lognormal(
                MU, SIGMA, int(0.8 * n)
            )
            bounded += not any(unbounded(fresh, random_cuts(fresh, 100 + replicate)))
            samples += 1
    assert samples == 40
    assert bounded <= 12


def test_tail_warning_when_cuts_hide_the_p99() -> None:
    """
    Every call cut at the p95 (a timeout): the p99 is hidden, and the warning says where.
    """
    x = np.random.default_rng(22).lognormal(MU, SIGMA, 2000)
    cap = true_quantile(0.95)
    cut = np.where(x > cap, cap, np.nan)
    n_cut = int(np.count_nonzero(x > cap))
    last = float(x[x <= cap].max())

    warning = tail_warning(x, censored_at_s=cut)

    assert (
        f"p99 is hidden by cut calls ({n_cut} cut in all): {n_cut} of 2,000 calls were cut after "
        f"the last finished "
        f"one ({seconds(last)}), so the survival curve stops at {percent(n_cut / 2000)}, above the "
        f"p99's 1%; only calls followed past the p99 (more than {seconds(cap)}) can bound it"
    ) == warning


def test_tail_warning_when_too_few_calls_finished() -> None:
    """
    Two equal finished calls and one cut, or none finished: hidden, and 538 calls at the least.
    """
    tie = tail_warning([1.2, 1.2, np.nan], censored_at_s=[np.nan, np.nan, 5.0])
    none = tail_warning([np.nan] * 4, censored_at_s=[1.0, 2.0, 3.0, 4.0])

    assert (
        "p99 is hidden by cut calls (1 cut in all): 1 of 3 calls were cut after the last finished "
        "one (1.2 s), "
        "so the survival curve stops at 33%, above the p99's 1%; only calls followed past the "
        "p99 (more than 1.2 s) can bound it (and at least 538 calls)"
    ) == tie
    assert "p99 is hidden by cut calls: none of 4 calls finished (and at least 538 calls)" == none


def test_a_single_early_cut_needs_the_kaplan_meier_538() -> None:
    """
    400 calls and one cut at 0 s: Kaplan-Meier's band needs 538 calls, and the warning says so.
    """
    x = np.random.default_rng(23).lognormal(MU, SIGMA, 400)
    cut = np.full(400, np.nan)
    cut[0] = 0.0

    warning = tail_warning(x, censored_at_s=cut) or ""

    assert warning.startswith("p99's upper end is unbounded: 1 of 400 calls were cut before")
    assert warning.endswith("(1 cut in all); bounding it takes at least 538 calls cut like these")


@pytest.mark.parametrize(
    ("latency", "cut"),
    [
        ([1.2, 1.2, np.nan], [np.nan, np.nan, 0.5]),
        ([1.2, 1.2, 1.2], None),
        ([3.0], None),
        ([3.0, np.nan], [np.nan, 9.0]),
        ([np.nan] * 5, [1.0, 2.0, 3.0, 4.0, 5.0]),
        ([1.0, 2.0, 3.0] + [np.nan] * 2000, [np.nan] * 3 + [30.0] * 2000),
    ],
)
def test_degenerate_samples_give_estimates_and_warnings(
    latency: list[float], cut: list[float] | None
) -> None:
    """
    All equal, one or two finished calls, all or almost all cut: no error, a warning.
    """
    estimates = empirical_quantiles(latency, censored_at_s=cut)

    check_invariants(estimates)
    assert tail_warning(latency, censored_at_s=cut) is not None
