"""
Which phase holds the tail, token rates, and the finish-time projection of a stream.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from hypothesis import given
from hypothesis import strategies as st

from tailkit.fit._phase import phase_split, project_finish_s, token_rate


_Array = npt.NDArray[np.float64]


def _calls(
    n: int, seed: int, *, tokens: tuple[int, int], stall: str
) -> tuple[_Array, _Array, _Array]:
    """
    Streamed calls at ~50 tokens/s; 5% stall 5-30 s in ``stall`` ("ttft" or "gen").
    """
    rng = np.random.default_rng(seed)
    ttft_s = np.exp(rng.normal(math.log(0.5), 0.3, n))
    output_tokens = rng.integers(tokens[0], tokens[1], n).astype(np.float64)
    gen_s = (output_tokens - 1) / np.exp(rng.normal(math.log(50.0), 0.1, n))
    stalled = rng.random(n) < 0.05
    delay_s = np.where(stalled, rng.uniform(5.0, 30.0, n), 0.0)
    if stall == "ttft":
        ttft_s += delay_s
    else:
        gen_s += delay_s
    return ttft_s, ttft_s + gen_s, output_tokens


def test_stalls_before_the_first_token_of_short_answers_put_the_tail_in_ttft() -> None:
    """
    Short outputs, stalls in TTFT: the tail is in TTFT and the cutoff should watch TTFT.
    """
    ttft_s, total_s, _ = _calls(4_000, seed=1, tokens=(20, 120), stall="ttft")

    split = phase_split(ttft_s, total_s)

    assert 4_000 == split.n
    assert 200 == split.n_tail
    assert "ttft" == split.tail_phase
    assert "ttft" == split.signal
    assert split.ttft_share > 0.8
    assert split.ttft_p99_s > 10 * split.ttft_p50_s


def test_stalls_while_generating_long_answers_put_the_tail_in_generation() -> None:
    """
    Long outputs, stalls mid-stream: the tail is in generation, the cutoff watches the total.
    """
    ttft_s, total_s, _ = _calls(4_000, seed=2, tokens=(800, 2_000), stall="gen")

    split = phase_split(ttft_s, total_s)

    assert "generation" == split.tail_phase
    assert "total" == split.signal
    assert split.generation_share > 0.9
    assert split.tail_threshold_s == pytest.approx(np.quantile(total_s, 0.95))


def test_stalls_in_both_phases_split_the_tail() -> None:
    """
    Half the stalled calls wait for the first token, half stall mid-stream: "both".
    """
    ttft_a, total_a, _ = _calls(2_000, seed=3, tokens=(100, 200), stall="ttft")
    ttft_b, total_b, _ = _calls(2_000, seed=4, tokens=(100, 200), stall="gen")

    split = phase_split(np.concatenate([ttft_a, ttft_b]), np.concatenate([total_a, total_b]))

    assert "both" == split.tail_phase
    assert "total" == split.signal
    assert 0.4 < split.ttft_share < 0.6


def test_unusable_calls_are_left_out_and_few_calls_are_unknown() -> None:
    """
    NaN or TTFT >= total drops a call; under 20 calls the split is unknown, not a guess.
    """
    ttft_s = [0.5] * 15 + [np.nan, 3.0, 2.0]
    total_s = [2.0] * 15 + [2.0, 2.0, np.nan]

    split = phase_split(ttft_s, total_s)

    assert 15 == split.n
    assert "unknown" == split.tail_phase
    assert "total" == split.signal
    assert math.isnan(split.ttft_share)
    assert 0.5 == split.ttft_p50_s
    assert 1.5 == split.gen_p50_s


def test_phase_split_names_misaligned_input() -> None:
    """
    Arrays of different length raise ValueError with both sizes.
    """
    with pytest.raises(ValueError, match=r"ttft_s has 2 entries but total_s has 3"):
        phase_split([0.1, 0.2], [1.0, 2.0, 3.0])


@given(
    calls=st.lists(
        st.tuples(st.floats(0.0, 100.0), st.floats(1e-3, 100.0)), min_size=0, max_size=200
    ),
    tail_q=st.floats(0.5, 0.99),
)
def test_shares_are_in_range_and_add_up_to_one(
    calls: list[tuple[float, float]], tail_q: float
) -> None:
    """
    Whatever the calls, defined shares lie in [0, 1] and sum to 1; undefined ones are NaN.
    """
    ttft_s = np.array([t for t, _ in calls], dtype=float)
    total_s = np.array([t + g for t, g in calls], dtype=float)

    split = phase_split(ttft_s, total_s, tail_q=tail_q)

    if split.tail_phase == "unknown":
        assert math.isnan(split.ttft_share)
        assert math.isnan(split.generation_share)
    else:
        assert 0.0 <= split.ttft_share <= 1.0
        assert 0.0 <= split.generation_share <= 1.0
        assert split.ttft_share + split.generation_share == pytest.approx(1.0)
        assert split.n_tail >= 1


def test_token_rate_counts_tokens_after_the_first() -> None:
    """
    (tokens - 1) / gen_s per call; calls with < 2 tokens or no generation time are left out.
    """
    gen_s = np.array([1.0, 2.0, 4.0, 1.0, 0.0, np.nan, 3.0])
    output_tokens = np.array([51, 101, 101, 1, 50, 40, np.nan])

    rate = token_rate(gen_s, output_tokens)

    assert 3 == rate.n
    assert 50.0 == rate.tokens_per_s_p50
    assert rate.tokens_per_s_p10 == pytest.approx(np.quantile([50.0, 50.0, 25.0], 0.1))
    assert 0 == token_rate([], []).n


@pytest.mark.parametrize("tokens_so_far", [2, 10, 300, 599])
def test_projection_is_exact_on_a_constant_rate_stream(tokens_so_far: int) -> None:
    """
    First token at 0.8 s, then 40 tokens/s: 600 tokens end at 0.8 + 599/40 s, seen from any k.
    """
    elapsed_s = 0.8 + (tokens_so_far - 1) / 40.0

    projected_s = project_finish_s(
        ttft_s=0.8, elapsed_s=elapsed_s, tokens_so_far=tokens_so_far, expected_tokens=600
    )

    assert 0.8 + 599 / 40.0 == pytest.approx(projected_s)


def test_projection_before_a_rate_is_known() -> None:
    """
    Under two tokens: the fallback rate from the first token (or now), else the age itself.
    """
    assert 1.2 == project_finish_s(ttft_s=1.0, elapsed_s=1.2, tokens_so_far=1, expected_tokens=101)
    assert 3.0 == project_finish_s(
        ttft_s=1.0, elapsed_s=1.2, tokens_so_far=1, expected_tokens=101, fallback_tokens_per_s=50
    )
    assert 4.0 == project_finish_s(
        ttft_s=math.nan,
        elapsed_s=2.0,
        tokens_so_far=0,
        expected_tokens=101,
        fallback_tokens_per_s=50,
    )


def test_projection_rejects_a_first_token_after_now() -> None:
    """
    A TTFT later than the call's age is a caller bug, named with both values.
    """
    with pytest.raises(ValueError, match=r"ttft_s must be between 0 and elapsed_s \(1.0\), got 2"):
        project_finish_s(ttft_s=2.0, elapsed_s=1.0, tokens_so_far=5, expected_tokens=10)


@given(
    ttft_s=st.floats(0.0, 60.0),
    since_first_s=st.floats(0.0, 600.0),
    tokens_so_far=st.integers(0, 5_000),
    expected_tokens=st.integers(0, 5_000),
    fallback=st.one_of(st.none(), st.floats(0.1, 500.0)),
)
def test_projection_is_never_before_now(
    ttft_s: float,
    since_first_s: float,
    tokens_so_far: int,
    expected_tokens: int,
    fallback: float | None,
) -> None:
    """
    The projected finish is finite and never earlier than the call's current age.
    """
    elapsed_s = ttft_s + since_first_s

    projected_s = project_finish_s(
        ttft_s=ttft_s,
        elapsed_s=elapsed_s,
        tokens_so_far=tokens_so_far,
        expected_tokens=expected_tokens,
        fallback_tokens_per_s=fallback,
    )

    assert elapsed_s <= projected_s < math.inf
