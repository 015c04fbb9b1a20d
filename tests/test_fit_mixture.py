"""
The transient-tail mixture: simulate a body plus a tail, fit, recover; no tail where none is.

Also: cold starts (the llmperf 70b replicate) are found, work-driven spread and a fast
minority are not called a tail, and the share interval holds the true share about as often
as it says.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import numpy.typing as npt
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from tailkit.fit._mixture import fit_transient_tail, fit_transient_tails

from .conftest import LLMPERF


_Array = npt.NDArray[np.float64]


def _body_and_tail(n: int, seed: int, *, share: float = 0.03, scale: float = 8.0) -> _Array:
    """
    Lognormal body (median 2 s, sigma 0.3); a ``share`` of calls are ``scale`` times slower.
    """
    rng = np.random.default_rng(seed)
    latency_s = np.exp(rng.normal(math.log(2.0), 0.3, n))
    latency_s[rng.random(n) < share] *= scale
    return latency_s


def test_recovers_share_and_scale_of_a_transient_tail() -> None:
    """
    3% of calls 8x slower: share, scale and body come back, and the tail is called real.
    """
    fit = fit_transient_tail(_body_and_tail(5_000, seed=1))

    assert 5_000 == fit.n
    assert 0 == fit.n_censored
    assert 0.03 in fit.tail_share_interval
    assert abs(fit.tail_share - 0.03) <= 0.015
    assert 8.0 * 0.7 <= fit.tail_scale <= 8.0 * 1.3
    assert abs(fit.body_mu - math.log(2.0)) < 0.03
    assert abs(fit.body_sigma - 0.3) < 0.03
    assert fit.tail_share_interval.low < fit.tail_share < fit.tail_share_interval.high
    assert fit.bic_gain > 100
    assert fit.has_transient_tail
    assert fit.verdict.endswith("slower than the body: a fresh attempt escapes it")


def test_recovers_the_tail_when_30_percent_of_calls_were_cut() -> None:
    """
    Calls cut at random ages (lost hedge races) and at a 20 s cap are censored, not dropped.
    """
    rng = np.random.default_rng(7)
    true_s = _body_and_tail(5_000, seed=2)
    cut_s = np.exp(rng.normal(math.log(2.2), 0.4, true_s.size))
    cut_s = np.minimum(np.where(rng.random(true_s.size) < 0.7, cut_s, np.inf), 20.0)
    was_cut = true_s > cut_s
    latency_s = np.where(was_cut, np.nan, true_s)
    censored_at_s = np.where(was_cut, cut_s, np.nan)

    fit = fit_transient_tail(latency_s, censored_at_s=censored_at_s)

    assert 0.27 < fit.n_censored / fit.n < 0.33
    assert 0.03 in fit.tail_share_interval or abs(fit.tail_share - 0.03) <= 0.015
    assert 8.0 * 0.7 <= fit.tail_scale <= 8.0 * 1.3
    assert fit.has_transient_tail


def test_dropping_cut_calls_would_hide_the_tail_the_censored_fit_finds() -> None:
    """
    The censored fit finds more tail than the same data with cut calls dropped.
    """
    true_s = _body_and_tail(5_000, seed=3)
    was_cut = true_s > 12.0
    latency_s = np.where(was_cut, np.nan, true_s)

    censored = fit_transient_tail(latency_s, censored_at_s=np.where(was_cut, 12.0, np.nan))
    dropped = fit_transient_tail(latency_s)

    assert abs(censored.tail_share - 0.03) <= 0.01
    assert censored.tail_share > dropped.tail_share + 0.005


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_pure_lognormal_has_no_transient_tail(seed: int) -> None:
    """
    One lognormal (sigma 0.5): the mixture does not pay for its three extra parameters.
    """
    latency_s = np.exp(np.random.default_rng(seed).normal(math.log(2.0), 0.5, 5_000))

    fit = fit_transient_tail(latency_s)

    assert not fit.has_transient_tail
    assert fit.bic_gain < 10
    assert "no separate tail: slow calls are the body's own spread" == fit.verdict


def test_a_cap_below_the_tail_hides_it_and_the_fit_invents_nothing() -> None:
    """
    Every call beyond p70 cut: the tail cannot be seen, the fit stays finite and says so.
    """
    true_s = _body_and_tail(5_000, seed=4)
    cap_s = float(np.quantile(true_s, 0.7))
    was_cut = true_s > cap_s

    fit = fit_transient_tail(
        np.where(was_cut, np.nan, true_s), censored_at_s=np.where(was_cut, cap_s, np.nan)
    )

    assert not fit.has_transient_tail
    assert math.isfinite(fit.tail_scale)
    assert fit.bic_gain < 10


def test_large_inputs_are_subsampled_deterministically() -> None:
    """
    Above max_n the fit uses max_n calls, the same ones for the same seed.
    """
    latency_s = _body_and_tail(30_000, seed=5)

    first = fit_transient_tail(latency_s, max_n=5_000, seed=3)
    again = fit_transient_tail(latency_s, max_n=5_000, seed=3)
    other = fit_transient_tail(latency_s, max_n=5_000, seed=4)

    assert 5_000 == first.n
    assert first == again
    assert first.body_mu != other.body_mu


def test_too_few_calls_give_nan_and_no_tail() -> None:
    """
    Below 50 usable calls nothing is fitted, and the verdict says why.
    """
    fit = fit_transient_tail(_body_and_tail(40, seed=6))

    assert 40 == fit.n
    assert math.isnan(fit.tail_share)
    assert not fit.has_transient_tail
    assert fit.verdict.startswith("too few calls")


def test_invalid_input_is_named_with_its_value() -> None:
    """
    Misaligned censoring and non-positive latencies raise ValueError with the fix.
    """
    with pytest.raises(ValueError, match=r"censored_at_s has 2 entries but latency_s has 3"):
        fit_transient_tail([1.0, 2.0, 3.0], censored_at_s=[np.nan, 1.0])
    with pytest.raises(ValueError, match=r"must be positive for finished calls, got 0.0"):
        fit_transient_tail([1.0, 0.0, 3.0])
    with pytest.raises(ValueError, match=r"level must be between 0 and 1, got 95"):
        fit_transient_tail(_body_and_tail(100, seed=0), level=95)


@settings(max_examples=40, deadline=None)
@given(
    latency_s=st.lists(st.floats(1e-3, 1e4), min_size=50, max_size=400),
    cut=st.lists(st.booleans(), min_size=400, max_size=400),
)
def test_any_input_gives_an_ordered_fit_in_range(latency_s: list[float], cut: list[bool]) -> None:
    """
    For any latencies and cuts: tail after body, share and interval in [0, 1], no warnings.
    """
    x = np.array(latency_s)
    censored = np.where(np.array(cut[: x.size]), x, np.nan)

    fit = fit_transient_tail(x, censored_at_s=censored)

    if math.isnan(fit.tail_share):
        assert not fit.has_transient_tail
    else:
        assert fit.tail_mu >= fit.body_mu
        assert 0.0 <= fit.tail_share <= 1.0
        assert 0.0 <= fit.tail_share_interval.low <= fit.tail_share_interval.high <= 1.0
        assert fit.body_sigma > 0.0
        assert fit.tail_sigma > 0.0
        assert math.isfinite(fit.bic_gain)
    if fit.has_transient_tail:
        assert fit.tail_share <= 0.25
        assert fit.separation >= 2.326
        assert fit.bic_gain > 10


def test_many_samples_at_once_give_each_samples_own_fit() -> None:
    """
    Fitted together (tail, no tail, cut calls, too few), each sample gets the fit it gets alone.
    """
    tail = _body_and_tail(3_000, seed=21)
    plain = np.exp(np.random.default_rng(22).normal(0.0, 0.5, 800))
    cut = np.where(tail > 9.0, np.nan, tail), np.where(tail > 9.0, 9.0, np.nan)
    samples = [(tail, None), (plain, None), cut, (tail[:30], None), (tail[::7], None)]

    together = fit_transient_tails(samples, max_n=2_000, seed=5)

    for (latency_s, censored_at_s), fit in zip(samples, together, strict=True):
        alone = fit_transient_tail(latency_s, censored_at_s=censored_at_s, max_n=2_000, seed=5)
        assert (alone.n, alone.n_censored, alone.verdict) == (fit.n, fit.n_censored, fit.verdict)
        for name in ("body_mu", "body_sigma", "tail_share", "tail_mu", "tail_scale", "bic_gain"):
            assert getattr(alone, name) == pytest.approx(getattr(fit, name), rel=1e-9, nan_ok=True)
        assert alone.tail_share_interval.low == pytest.approx(fit.tail_share_interval.low, rel=1e-6)


def _cold_starts(seed: int) -> _Array:
    """
    145 calls like llmperf's 70b replicate: 138 around 12.4 s (sigma 0.15), 7 at 46-82 s.
    """
    rng = np.random.default_rng(seed)
    body_s = np.exp(rng.normal(math.log(12.4), 0.15, 138))
    return rng.permutation(np.concatenate([body_s, rng.uniform(46.0, 82.0, 7)]))


@pytest.mark.parametrize("seed", [31, 32, 33, 34, 35])
def test_seven_cold_starts_in_145_calls_are_a_transient_tail(seed: int) -> None:
    """
    7 of 145 calls at 4-7x the median: a tail of about 7/145, beyond the body's p99.
    """
    fit = fit_transient_tail(_cold_starts(seed))

    assert fit.has_transient_tail
    assert 7 / 145 in fit.tail_share_interval
    assert abs(fit.tail_share - 7 / 145) < 0.02
    assert 3.5 < fit.tail_scale < 7.0
    assert fit.separation > 5.0
    assert fit.verdict.endswith("slower than the body: a fresh attempt escapes it")


def test_llmperf_replicate_70b_cold_starts_are_a_transient_tail() -> None:
    """
    The real file: 7 of 145 calls take 46-82 s against a 12.4 s median; the tail is found.
    """
    path = LLMPERF / "individual" / "replicate_70b.json"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    rows = json.loads(path.read_text())
    latency_s = [r["end_to_end_latency_s"] for r in rows if r["error_code"] is None]

    fit = fit_transient_tail(latency_s)

    assert 145 == fit.n
    assert fit.has_transient_tail
    assert 7 / 145 in fit.tail_share_interval
    assert 0.03 < fit.tail_share < 0.1
    assert fit.tail_scale > 3.0
    assert fit.separation > 2.326
    assert fit.bic_gain > 10


def _work_driven(n: int, seed: int) -> _Array:
    """
    Latency driven by output size: 0.5 s + tokens/50 s, jitter 10%, tokens in the 64-256 bucket.

    Tokens are lognormal around 500 (log sd 1), so within the bucket the larger calls are the
    more common: a skewed body with no transient part at all.
    """
    rng = np.random.default_rng(seed)
    tokens = np.exp(rng.normal(math.log(500.0), 1.0, 8 * n))
    tokens = tokens[(tokens >= 64) & (tokens < 256)][:n]
    return 0.5 + tokens / 50.0 * np.exp(rng.normal(0.0, 0.1, tokens.size))


def test_work_driven_spread_is_not_a_transient_tail() -> None:
    """
    Spread from call size (once flagged in ~80% of replicates as a 45% tail) is no tail.
    """
    samples = [(_work_driven(2_000, seed), None) for seed in range(16)]

    fits = fit_transient_tails(samples)

    assert all(2_000 == fit.n for fit in fits)
    assert sum(fit.has_transient_tail for fit in fits) <= 1
    assert all(fit.verdict.startswith("no ") for fit in fits)


@pytest.mark.parametrize("seed", [41, 42, 43])
def test_a_fast_minority_is_not_a_tail_and_is_named(seed: int) -> None:
    """
    2% of calls 10x faster (cache hits): the bulk is not a "tail"; the verdict says what it is.
    """
    rng = np.random.default_rng(seed)
    latency_s = np.exp(rng.normal(math.log(2.0), 0.3, 2_000))
    latency_s[rng.random(latency_s.size) < 0.02] /= 10.0

    fit = fit_transient_tail(latency_s)

    assert not fit.has_transient_tail
    assert not fit.tail_share > 0.25  # NaN (no slower minority) or a small one
    assert fit.fast_minority
    assert abs(fit.fast_share - 0.02) < 0.01
    assert 7.0 < 1.0 / fit.fast_scale < 14.0
    faster = r"[\d.]+\u00d7 faster"
    pattern = rf"a fast minority \(\d\.\d% of calls, {faster}, e\.g\. cache hits\); no slow tail"
    assert re.fullmatch(pattern, fit.verdict)


def share_coverage(
    share: float, scale: float, *, sigma: float, n: int, replicates: int, seed: int
) -> float:
    """
    Share of seeded replicates whose 95% ``tail_share_interval`` holds the true ``share``.

    Body lognormal (median 2 s, log sd ``sigma``); each call is, with chance ``share``,
    ``scale`` times slower.
    """
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(replicates):
        latency_s = np.exp(rng.normal(math.log(2.0), sigma, n))
        latency_s[rng.random(n) < share] *= scale
        samples.append((latency_s, None))
    fits = fit_transient_tails(samples, max_n=n)
    return float(np.mean([share in fit.tail_share_interval for fit in fits]))


@pytest.mark.parametrize(
    ("share", "scale", "sigma"), [(0.01, 3.0, 0.3), (0.03, 3.0, 0.3), (0.03, 3.0, 0.5)]
)
def test_share_interval_covers_near_the_body(share: float, scale: float, sigma: float) -> None:
    """
    Small tails at 3x the body (a Wald interval held 77-79%): 60 replicates cover >= 85%.
    """
    coverage = share_coverage(share, scale, sigma=sigma, n=2_000, replicates=60, seed=2)

    assert coverage >= 0.85
