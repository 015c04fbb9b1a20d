"""
Which phase holds the tail: waiting for the first token, or generating the rest.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.fit._quantiles import quantile


__all__ = ["PhaseSplit", "TokenRate", "phase_split", "project_finish_s", "token_rate"]

MIN_CALLS = 20  # below this many streamed calls the split is "unknown"
TTFT_SHARE_MIN = 0.6  # at or above: the tail is in TTFT
TTFT_SHARE_MAX_FOR_GENERATION = 0.4  # at or below: the tail is in generation


@dataclass(frozen=True, slots=True)
class PhaseSplit:
    """
    How the excess latency of tail calls divides between TTFT and generation.

    Returned by `phase_split` -- do not instantiate directly.

    Args:
        n: Streamed calls used (finite TTFT and total, ``0 <= ttft_s < total_s``).
        n_tail: Of those, calls at or above the ``tail_q`` quantile of total latency.
        tail_threshold_s: That quantile, in seconds.
        ttft_share: Share of the tail calls' excess latency that arrived before the first
            token, 0..1 (NaN when unknown).
        generation_share: ``1 - ttft_share``: the share that arrived after it.
        tail_phase: ``"ttft"`` (``ttft_share >= 0.6``), ``"generation"`` (``<= 0.4``),
            ``"both"``, or ``"unknown"`` (fewer than 20 calls, or no excess to split).
        signal: ``"ttft"`` when the tail lives in TTFT, so a cutoff on time to first token
            acts early; ``"total"`` otherwise.
        ttft_p50_s: Median TTFT of the calls used, in seconds (NaN without calls).
        ttft_p99_s: 99th percentile of TTFT, in seconds.
        gen_p50_s: Median generation time (total - TTFT), in seconds.
        gen_p99_s: 99th percentile of generation time, in seconds.
    """

    n: int
    n_tail: int
    tail_threshold_s: float
    ttft_share: float
    generation_share: float
    tail_phase: str
    signal: str
    ttft_p50_s: float
    ttft_p99_s: float
    gen_p50_s: float
    gen_p99_s: float


@dataclass(frozen=True, slots=True)
class TokenRate:
    """
    Per-call generation speed after the first token.

    Returned by `token_rate` -- do not instantiate directly.

    Args:
        tokens_per_s_p50: Median speed, tokens per second (NaN without calls).
        tokens_per_s_p10: 10th percentile of speed: how fast the slow calls generate.
        n: Calls used (at least 2 output tokens and a positive generation time).
    """

    tokens_per_s_p50: float
    tokens_per_s_p10: float
    n: int


def phase_split(
    ttft_s: npt.ArrayLike, total_s: npt.ArrayLike, *, tail_q: float = 0.95
) -> PhaseSplit:
    """
    Split the excess latency of the slowest calls between TTFT and generation.

    A tail call's excess over the typical call is ``total - median(total)``. It is split as
    ``(ttft - median(ttft)) + (gen - median(gen))`` with ``gen = total - ttft``. Each part
    counts only where it is positive: a phase that was faster than usual in a slow call did
    not cause its slowness and must not cancel the phase that did. So
    ``ttft_share = sum(max(ttft excess, 0)) / sum(max(ttft excess, 0) + max(gen excess, 0))``
    over the tail calls; the two shares are in [0, 1] and add up to 1.

    Args:
        ttft_s: Time to first token of each call, in seconds; NaN where not streamed.
        total_s: Total latency of each call, in seconds; NaN where it did not finish.
        tail_q: Calls at or above this quantile of total latency form the tail.

    Returns:
        The split. With fewer than 20 usable calls, or tail calls no slower than the median
        in either phase, ``tail_phase`` is ``"unknown"``, ``signal`` is ``"total"`` and the
        shares are NaN.

    Raises:
        ValueError: The arrays differ in length, or ``tail_q`` is not in (0, 1).
    """
    ttft = np.asarray(ttft_s, dtype=np.float64).ravel()
    total = np.asarray(total_s, dtype=np.float64).ravel()
    if ttft.shape != total.shape:
        msg = f"ttft_s has {ttft.size} entries but total_s has {total.size}: pass one per call"
        raise ValueError(msg)
    if not 0.0 < tail_q < 1.0:
        msg = f"tail_q must be between 0 and 1, got {tail_q}"
        raise ValueError(msg)
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(ttft) & np.isfinite(total) & (ttft >= 0.0) & (ttft < total)
    ttft, total = ttft[usable], total[usable]
    gen = total - ttft
    n = int(total.size)
    q = (*_quantiles(ttft), *_quantiles(gen))
    threshold = quantile(total, tail_q) if n else math.nan
    tail = total >= threshold
    if n < MIN_CALLS:
        return _split(n, tail, threshold, ttft_share=math.nan, phase="unknown", q=q)
    ttft_excess = float(np.maximum(ttft[tail] - q[0], 0.0).sum())
    gen_excess = float(np.maximum(gen[tail] - q[2], 0.0).sum())
    if ttft_excess + gen_excess <= 0.0:
        return _split(n, tail, threshold, ttft_share=math.nan, phase="unknown", q=q)
    ttft_share = ttft_excess / (ttft_excess + gen_excess)
    if ttft_share >= TTFT_SHARE_MIN:
        return _split(n, tail, threshold, ttft_share=ttft_share, phase="ttft", q=q)
    if ttft_share <= TTFT_SHARE_MAX_FOR_GENERATION:
        return _split(n, tail, threshold, ttft_share=ttft_share, phase="generation", q=q)
    return _split(n, tail, threshold, ttft_share=ttft_share, phase="both", q=q)


def token_rate(gen_s: npt.ArrayLike, output_tokens: npt.ArrayLike) -> TokenRate:
    """
    Generation speed of each call, ``(output_tokens - 1) / gen_s``, summarised.

    The first token closes TTFT, so a call with ``k`` tokens generated ``k - 1`` of them in
    ``gen_s``. Calls with fewer than 2 tokens, or no positive finite generation time, say
    nothing about speed and are left out.

    Args:
        gen_s: Generation time of each call (total - TTFT), in seconds; NaN where unknown.
        output_tokens: Output tokens of each call; NaN where unknown.

    Returns:
        Median and 10th-percentile speed in tokens per second, with the calls used.

    Raises:
        ValueError: The arrays differ in length.
    """
    gen = np.asarray(gen_s, dtype=np.float64).ravel()
    tokens = np.asarray(output_tokens, dtype=np.float64).ravel()
    if gen.shape != tokens.shape:
        msg = f"gen_s has {gen.size} entries but output_tokens has {tokens.size}: pass one per call"
        raise ValueError(msg)
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(gen) & np.isfinite(tokens) & (gen > 0.0) & (tokens >= 2.0)
    rate = (tokens[usable] - 1.0) / gen[usable]
    if rate.size == 0:
        return TokenRate(tokens_per_s_p50=math.nan, tokens_per_s_p10=math.nan, n=0)
    p10, p50 = (quantile(rate, q) for q in (0.10, 0.50))
    return TokenRate(tokens_per_s_p50=float(p50), tokens_per_s_p10=float(p10), n=int(rate.size))


def project_finish_s(
    *,
    ttft_s: float,
    elapsed_s: float,
    tokens_so_far: int,
    expected_tokens: int,
    fallback_tokens_per_s: float | None = None,
) -> float:
    """
    Project the total time of a streaming call from the tokens it has produced so far.

    The rate is measured since the first token, ``(tokens_so_far - 1) / (elapsed_s -
    ttft_s)``, because TTFT is waiting, not generating. The call then ends when its last
    expected token arrives: ``ttft_s + (expected_tokens - 1) / rate``. On a stream at a
    constant rate this is exact. Before two tokens have arrived there is no rate yet: the
    projection uses ``fallback_tokens_per_s`` (e.g. `token_rate`'s p50 for the bucket)
    counted from the first token, or from now if none has arrived; without a fallback it
    returns ``elapsed_s``, which never signals an overrun on its own (TTFT and stall cutoffs
    watch that phase). The result is never less than ``elapsed_s``.

    Args:
        ttft_s: Age in seconds at which the first token arrived; ignored (may be NaN) while
            ``tokens_so_far`` is 0.
        elapsed_s: Age of the call now, in seconds.
        tokens_so_far: Output tokens received so far.
        expected_tokens: Output tokens the call is expected to produce in all.
        fallback_tokens_per_s: Speed to assume before a rate can be measured, tokens per
            second. ``None``: no projection before the second token.

    Returns:
        The projected total latency of the call, in seconds.

    Raises:
        ValueError: A time or count is negative, or the first token is later than now.
    """
    if elapsed_s < 0.0 or tokens_so_far < 0 or expected_tokens < 0:
        msg = (
            "elapsed_s, tokens_so_far and expected_tokens must not be negative, got "
            f"{elapsed_s}, {tokens_so_far}, {expected_tokens}"
        )
        raise ValueError(msg)
    if tokens_so_far >= 1 and not 0.0 <= ttft_s <= elapsed_s:
        msg = f"ttft_s must be between 0 and elapsed_s ({elapsed_s}), got {ttft_s}"
        raise ValueError(msg)
    first_s = ttft_s if tokens_so_far >= 1 else elapsed_s
    if tokens_so_far >= 2 and elapsed_s > ttft_s:
        rate = (tokens_so_far - 1) / (elapsed_s - ttft_s)
    elif fallback_tokens_per_s is not None and fallback_tokens_per_s > 0.0:
        rate = fallback_tokens_per_s
    else:
        return elapsed_s
    remaining = max(expected_tokens, tokens_so_far, 1) - 1
    return max(elapsed_s, first_s + remaining / rate)


def _quantiles(x: npt.NDArray[np.float64]) -> tuple[float, float]:
    """
    Median and p99 of ``x``, NaN when empty.
    """
    if x.size == 0:
        return math.nan, math.nan
    p50, p99 = (quantile(x, q) for q in (0.50, 0.99))
    return float(p50), float(p99)


def _split(
    n: int,
    tail: npt.NDArray[np.bool_],
    threshold_s: float,
    *,
    ttft_share: float,
    phase: str,
    q: tuple[float, float, float, float],
) -> PhaseSplit:
    """
    Assemble the result; ``q`` holds TTFT p50, p99 and generation p50, p99 in seconds.
    """
    return PhaseSplit(
        n=n,
        n_tail=int(tail.sum()),
        tail_threshold_s=threshold_s,
        ttft_share=ttft_share,
        generation_share=1.0 - ttft_share,
        tail_phase=phase,
        signal="ttft" if phase == "ttft" else "total",
        ttft_p50_s=q[0],
        ttft_p99_s=q[1],
        gen_p50_s=q[2],
        gen_p99_s=q[3],
    )
