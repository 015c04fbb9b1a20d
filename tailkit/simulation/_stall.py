"""
Streams that stall mid-way, read from calls that have no chunk timings.

A call record holds a call's time to first token, its total and its output tokens, but not
when each chunk came. What the three still show is the pace of the generation: ``total -
ttft`` seconds for ``output_tokens - 1`` tokens after the first. A route's streams run at
about one pace (a provider's decode speed, spread by load), so a call whose generation took
many times what its tokens imply at the route's median pace spent the excess waiting: a
stall, a gap of about that excess with no chunk. How it is read:

1. Calls that can tell: finished, streamed (a TTFT before the total) and with at least two
   output tokens. Fewer than `MIN_CALLS` of them, and the data cannot tell (``cutoff_s`` is
   ``None`` and ``reason`` says why).
2. Each call's seconds per token after the first; on the log scale, its median ``m`` and its
   robust spread (1.4826 x the median absolute deviation). A call is *stalled* when its pace
   is more than `SIGMAS` robust spreads and at least `FACTOR` times slower than ``m``: far
   beyond what a normal stream's speed varies by. Its gap is its excess over the median pace,
   ``(total - ttft) - (tokens - 1) x m``.
3. The stalled share, with its 95 % (Clopper-Pearson) interval. Fewer than `MIN_STALLED`
   stalled calls and no stall cutoff is proposed: a share that small is not measured.
4. The cutoff: a gap no normal stream reaches. A normal stream's longest wait between two
   chunks is about one token at its pace (a provider sends a chunk per token or a few), so
   the cutoff is `MARGIN` times the slowest normal pace (its 99.9th percentile over the calls
   that did not stall): room for chunks of several tokens and for jitter, far below a stall.

Where the stall sat in the stream is not in the record. The simulator (`RouteSample`) takes
it half-way through the call's normal generation (a stall as likely anywhere), so a stalled
attempt is cut at ``ttft + (total - gap - ttft) / 2 + stall_cutoff``; each bootstrap replicate
of the prediction draws the place anew, from right after the first token to the stream's end,
so the predictions' intervals span what the record cannot tell. A stream that ran slowly
throughout looks the same in the record as one that stalled: both show a pace far beyond
their tokens'.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.estimate import LEVEL
from tailkit.fit import quantile
from tailkit.text import percent, percent_span, seconds


__all__ = ["FACTOR", "MARGIN", "MIN_CALLS", "MIN_STALLED", "SIGMAS", "Stalls", "stall_gaps"]

Array = npt.NDArray[np.float64]
MIN_CALLS = 50  # calls with a TTFT and output tokens before the pace is read
MIN_STALLED = 5  # stalled calls before a share is called measured
SIGMAS = 5.0  # robust log-spreads beyond the median pace that a normal stream does not go
FACTOR = 2.0  # and at least this many times the median pace
MARGIN = 25.0  # the cutoff, in the slowest normal pace's seconds per token


@dataclass(frozen=True, slots=True)
class Stalls:
    """
    What a route's calls show of mid-stream stalls.

    Args:
        calls: Calls that can tell (finished, streamed, two or more output tokens).
        stalled: Those whose generation was far slower than their tokens imply.
        share: ``stalled / calls`` (0 when no call can tell).
        interval: 95 % interval of the share.
        per_token_s: The median seconds per output token after the first (NaN: unknown).
        normal_pace_s: The slowest normal pace: the 99.9th percentile of the seconds per
            token of the calls that did not stall (NaN: unknown).
        median_gap_s: The median gap of the stalled calls (NaN: none stalled).
        cutoff_s: A stall cutoff no normal stream reaches (``None``: none proposed).
        reason: One line: what was found, or why the data cannot tell.
    """

    calls: int
    stalled: int
    share: float
    interval: tuple[float, float]
    per_token_s: float
    normal_pace_s: float
    median_gap_s: float
    cutoff_s: float | None
    reason: str

    @property
    def measured(self) -> bool:
        """
        Whether the calls can tell at all (enough with a TTFT and output tokens).
        """
        return math.isfinite(self.per_token_s)


def _interval(k: int, n: int) -> tuple[float, float]:
    from scipy import stats

    alpha = 1.0 - LEVEL
    low = 0.0 if k <= 0 else float(stats.beta.ppf(alpha / 2.0, k, n - k + 1))
    high = 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha / 2.0, k + 1, n - k))
    return low, high


def _cannot_tell(calls: int, why: str) -> Stalls:
    nan = math.nan
    return Stalls(calls, 0, 0.0, (0.0, 1.0), nan, nan, nan, None, why)


def stall_gaps(
    total_s: npt.ArrayLike, ttft_s: npt.ArrayLike, output_tokens: npt.ArrayLike
) -> tuple[Array | None, Stalls]:
    """
    Each call's stall gap, and what the calls show (see the module doc).

    Args:
        total_s: Seconds from the start of each call to its last token (NaN: not finished).
        ttft_s: Seconds to its first content token (NaN: not streamed, or unknown).
        output_tokens: Its output tokens (NaN: unknown).

    Returns:
        The gap of each call in seconds (0 where it did not stall or cannot tell), ``None``
        when the calls cannot tell; and the summary.
    """
    total = np.asarray(total_s, dtype=np.float64)
    ttft = np.asarray(ttft_s, dtype=np.float64)
    tokens = np.asarray(output_tokens, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        usable = (
            np.isfinite(total) & np.isfinite(ttft) & np.isfinite(tokens)
            & (ttft > 0) & (total > ttft) & (tokens >= 2)
        )  # fmt: skip
    n = int(usable.sum())
    if n < MIN_CALLS:
        what = []
        if not np.isfinite(tokens).any():
            what.append("no output tokens")
        if not (np.isfinite(ttft) & (ttft > 0)).any():
            what.append("no time to first token")
        missing = " and ".join(what) or f"{n} streamed calls with output tokens"
        return None, _cannot_tell(
            n, f"the calls cannot tell whether streams stall ({missing}; needs {MIN_CALLS})"
        )
    gen = total[usable] - ttft[usable]
    steps = tokens[usable] - 1.0
    pace = np.log(gen / steps)
    middle = float(np.median(pace))
    spread = 1.4826 * float(np.median(np.abs(pace - middle)))
    stalled = pace - middle > max(SIGMAS * spread, math.log(FACTOR))
    per_token = math.exp(middle)
    gap = np.zeros(total.shape)
    gap[np.flatnonzero(usable)[stalled]] = gen[stalled] - steps[stalled] * per_token
    k = int(stalled.sum())
    normal = np.exp(pace[~stalled])
    slowest = quantile(normal, 0.999) if normal.size else math.nan
    median_gap = float(np.median(gap[gap > 0])) if k else math.nan
    low, high = _interval(k, n)
    cutoff = None
    if k >= MIN_STALLED:
        cutoff = math.ceil(MARGIN * slowest * 1000.0) / 1000.0
        reason = (
            f"{k} of {n} streams stalled mid-way ({percent(k / n)}, 95% {percent_span(low, high)}; "
            f"median gap {seconds(median_gap)}); normal streams run at up to {slowest:.3g} s "
            f"per token, so a gap of {cutoff:g} s is a stall"
        )
    elif k:
        reason = (
            f"{k} of {n} streams stalled mid-way: too few to measure a share (needs {MIN_STALLED})"
        )
    else:
        reason = f"none of {n} streams stalled mid-way (95% up to {percent(high)})"
    stalls = Stalls(n, k, k / n, (low, high), per_token, slowest, median_gap, cutoff, reason)
    return gap, stalls
