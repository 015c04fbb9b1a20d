"""
Work-driven or transient: tail growth with call size, and tail clustering in time.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from tailkit.fit._trend import tail_growth, time_clustering


_Array = npt.NDArray[np.float64]
_T0 = 1_760_000_000.0  # an epoch second in 2025


def test_a_ratio_rising_with_bucket_grows() -> None:
    """
    p99/p50 rising over six buckets: rho 1, exact p = 2/720, a work-driven verdict.
    """
    growth = tail_growth(range(6), [2.0, 2.4, 2.9, 3.5, 4.3, 5.2], [1_000] * 6)

    assert 6 == growth.n_buckets
    assert 1.0 == growth.spearman_rho
    assert 2 / 720 == pytest.approx(growth.p_value)
    assert growth.grows
    assert growth.slope_per_bucket == pytest.approx(0.19, abs=0.01)
    assert growth.verdict.startswith("the tail ratio grows with call size (\u03c1=1.00)")


def test_a_flat_ratio_does_not_grow() -> None:
    """
    p99/p50 wandering around 3: no growth, and no claim that the tail is transient.
    """
    growth = tail_growth(range(6), [3.1, 2.9, 3.0, 3.2, 2.95, 3.05], [1_000] * 6)

    assert not growth.grows
    assert abs(growth.slope_per_bucket) < 0.02
    assert growth.verdict.startswith("no significant growth of the tail ratio")
    assert "transient" not in growth.verdict


def test_a_constant_ratio_has_no_correlation_and_no_warning() -> None:
    """
    A perfectly flat ratio has no rank correlation: NaN, not a scipy warning.
    """
    growth = tail_growth(range(5), [3.0] * 5, [500] * 5)

    assert math.isnan(growth.spearman_rho)
    assert 0.0 == growth.slope_per_bucket
    assert not growth.grows
    assert "a flat ratio" in growth.verdict


def test_slope_is_weighted_by_calls() -> None:
    """
    A noisy small bucket moves the slope little; log ratio 0.1 per step comes back.
    """
    ratio = np.exp(0.1 * np.arange(6))
    ratio[5] *= 3.0
    calls = [10_000] * 5 + [200]

    growth = tail_growth(np.arange(6), ratio, calls)

    assert growth.slope_per_bucket == pytest.approx(0.1, abs=0.02)


def test_three_ordered_buckets_are_too_few_to_tell() -> None:
    """
    Three perfectly ordered buckets: exact p is 1/3, so no claim (scipy's t would say 0).
    """
    growth = tail_growth([0, 1, 2], [2.0, 3.0, 4.0], [1_000] * 3)

    assert 1 / 3 == pytest.approx(growth.p_value)
    assert not growth.grows
    assert growth.verdict.startswith("too few buckets to tell")


def test_small_and_unknown_buckets_are_left_out() -> None:
    """
    Buckets under min_calls or with a NaN ratio do not count.
    """
    growth = tail_growth(range(4), [2.0, 3.0, np.nan, 5.0], [1_000, 150, 1_000, 1_000])

    assert 2 == growth.n_buckets
    assert math.isnan(growth.p_value)
    assert growth.verdict.startswith("too few buckets to tell")


def test_many_buckets_use_the_t_approximation() -> None:
    """
    Twelve rising buckets: scipy's p-value, far below 0.05.
    """
    growth = tail_growth(range(12), np.linspace(2.0, 6.0, 12), [400] * 12)

    assert growth.grows
    assert growth.p_value < 1e-6


def _independent(n: int, seed: int, *, hours: float, share: float) -> tuple[_Array, _Array]:
    """
    Start times uniform over ``hours``; each call is in the tail with chance ``share``.
    """
    rng = np.random.default_rng(seed)
    started_at_s = _T0 + np.sort(rng.random(n)) * hours * 3_600
    return started_at_s, rng.random(n) < share


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_independent_tails_are_not_clustered(seed: int) -> None:
    """
    Tail calls placed at random follow the load: dispersion near 1, not clustered.
    """
    started_at_s, is_tail = _independent(5_000, seed, hours=6, share=0.05)

    clustering = time_clustering(started_at_s, is_tail)

    assert 5_000 == clustering.n
    assert not clustering.clustered
    assert 0.6 < clustering.dispersion < 1.5
    assert clustering.verdict.startswith("tail calls are spread over time as the load predicts")


def test_incident_windows_make_tails_cluster() -> None:
    """
    Three 5-minute incidents where most calls are slow: clustered, far beyond chance.
    """
    rng = np.random.default_rng(4)
    started_at_s, is_tail = _independent(5_000, 4, hours=6, share=0.02)
    hour = (started_at_s - _T0) / 3_600
    incident = (np.abs(hour - 1.0) < 1 / 24) | (np.abs(hour - 3.5) < 1 / 24)
    incident |= np.abs(hour - 5.0) < 1 / 24
    is_tail |= incident & (rng.random(started_at_s.size) < 0.6)

    clustering = time_clustering(started_at_s, is_tail)

    assert clustering.clustered
    assert clustering.p_value < 1e-6
    assert clustering.dispersion > 3
    assert clustering.verdict.startswith("tail calls cluster in time")


def test_load_bursts_alone_are_not_clustering() -> None:
    """
    Calls arrive in bursts, but each is slow with the same chance: the load explains it.
    """
    rng = np.random.default_rng(5)
    quiet = _T0 + rng.random(2_000) * 6 * 3_600
    bursts = _T0 + rng.choice([1, 2, 4], 3_000) * 3_600 + rng.random(3_000) * 300
    started_at_s = np.concatenate([quiet, bursts])

    clustering = time_clustering(started_at_s, rng.random(started_at_s.size) < 0.05)

    assert not clustering.clustered


def test_sparse_windows_do_not_fake_clusters() -> None:
    """
    About 3 calls a window and a 1% tail: pooled windows keep false alarms rare.
    """
    alarms = 0
    for seed in range(40):
        started_at_s, is_tail = _independent(1_000, 100 + seed, hours=5, share=0.01)
        alarms += time_clustering(started_at_s, is_tail).clustered

    assert alarms <= 4


def test_unknown_start_times_are_left_out() -> None:
    """
    NaN start times do not count; under 50 known there is nothing to test.
    """
    started_at_s = np.full(200, np.nan)
    started_at_s[:40] = _T0 + np.arange(40) * 30.0

    clustering = time_clustering(started_at_s, np.arange(200) % 10 == 0)

    assert 40 == clustering.n
    assert 4 == clustering.n_tail
    assert math.isnan(clustering.p_value)
    assert not clustering.clustered
    assert clustering.verdict.startswith("no start times")


def test_time_clustering_names_bad_input() -> None:
    """
    Misaligned arrays and a non-positive window raise ValueError with the value.
    """
    with pytest.raises(ValueError, match=r"started_at_s has 2 entries but is_tail has 3"):
        time_clustering([1.0, 2.0], [True, False, True])
    with pytest.raises(ValueError, match=r"window_s must be positive, got 0"):
        time_clustering([1.0], [True], window_s=0)
