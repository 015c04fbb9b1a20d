"""
The tail table's warning: a p99 (or p99/p50) unbounded above, and what would bound it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from numpy.typing import ArrayLike
from scipy import special

from tailkit.fit._quantiles import (
    KaplanMeier,
    check_level,
    label,
    min_calls_for_quantile,
    split_censored,
)
from tailkit.text import percent, seconds


__all__ = ["tail_warning"]


# The tail warning. A p99's upper end is unbounded for one of two reasons: too few calls (no
# order statistic is high enough: 368 calls at 95 %), or cut calls (the Kaplan-Meier band never
# gets down to 1 %). The table also shows p99/p50 with each end at (1 + level) / 2, so that the
# ratio's interval holds at ``level``; that takes more calls (437 at 95 %). The warning fires
# when either upper end is unbounded and says what would bound it.
#
# With cut calls, "what would bound it" comes from the curve itself. Calls like these -- the
# same latencies and the same cuts, m times over -- keep S(t) and divide Greenwood's sum G(t)
# by m, and the log-log band's upper end drops to 1 - q at t as soon as
# z^2 G(t) / m <= (L log(L / L_q))^2, with L = -log S(t) and L_q = -log(1 - q). More calls also
# fill in each step of the curve: after a share u of the d events of a step with r at risk,
# S = S_before (1 - u d / r) and G = G_before + u d / (r (r - u d)). The smallest m over a grid
# of u in every step, times n, is the number of calls reported; never fewer than a curve without
# cuts needs (538 at 95 %: the band is wider than the order statistics' interval). It errs low:
# the curve cannot show the cuts beyond its own end, which only add. Measured at 1,000 calls
# with exponential cut ages (11 % cut) it says ~1,100-1,600 where half of fresh samples are
# bounded at ~1,600 calls, and with hedge cuts ~6,000-16,000 where that takes ~40,000. Without
# cuts, S = k / n at the (n - k)-th latency and G = 1 / k - 1 / n exactly, so the largest k that
# bounds the quantile says how far every call must be followed: "no cut before" that quantile,
# which then bounds it for certain.
_STEP_GRID = np.arange(1, 65) / 64.0


def _bounding_rank(n: int, q: float, z: float) -> int:
    # Largest k < (1 - q) n whose uncensored curve, S = k / n, bounds quantile q; 0 if none.
    k = np.arange(1, math.ceil((1.0 - q) * n), dtype=np.float64)
    k = k[k < (1.0 - q) * n]
    room = np.log(n / k) * np.log(np.log(n / k) / -math.log(1.0 - q))
    ok = z * z * (1.0 / k - 1.0 / n) <= room**2
    return int(k[ok].max()) if ok.any() else 0


@functools.lru_cache(maxsize=16)
def _uncut_calls(q: float, z: float) -> int:
    # Fewest calls, none cut, whose Kaplan-Meier band bounds quantile q (538 for p99 at 95 %).
    n = min_calls_for_quantile(q)
    while _bounding_rank(n, q, z) == 0:
        n += 1
    return n


def _what_bounds(km: KaplanMeier, n: int, q: float, level: float) -> tuple[int, int]:
    # (about how many calls cut like these would bound quantile q, the largest k of "none cut
    # before the (n - k)-th latency", 0 when these n calls are too few even uncut).

    target, z = 1.0 - q, float(special.ndtri(0.5 + level / 2.0))
    steps = np.flatnonzero((km.events > 0) & (km.survival < target))
    s_before = np.concatenate([[1.0], km.survival])[steps]
    g_before = np.concatenate([[0.0], km.greenwood])[steps]
    r, share = km.at_risk[steps, None], _STEP_GRID[None, :] * km.events[steps, None]
    s = s_before[:, None] * (1.0 - share / r)
    inside = (s > 0.0) & (s < target * (1.0 - 1e-9))
    s = np.where(inside, s, target / 2.0)
    with np.errstate(divide="ignore"):
        g = g_before[:, None] + share / (r * (r - share))
    room = -np.log(s) * np.log(np.log(s) / math.log(target))
    needed = np.where(inside & np.isfinite(g), z * z * g / room**2, math.inf)
    scale = float(needed.min()) if needed.size else math.inf
    floor = _uncut_calls(q, z)
    # these n calls do not bound it, whatever the filled-in steps suggest
    calls = max(math.ceil(scale * n) if math.isfinite(scale) else 0, floor, n + 1)
    return calls, _bounding_rank(n, q, z)


def tail_warning(
    latency_s: ArrayLike, *, censored_at_s: ArrayLike | None = None, level: float = 0.95
) -> str | None:
    """
    A warning when the p99's upper end, or p99/p50's, is unbounded, saying what would bound it.

    The ends are those of `empirical_quantiles`: the p99's at ``level``, p99/p50's from the
    p99 and p50 each at ``(1 + level) / 2`` (so that the ratio's interval holds at ``level``).
    Without cut calls only the number of calls matters (368 for the p99, 437 for p99/p50 at
    95 %). With cut calls the Kaplan-Meier band decides (538 calls at the least, none cut), and
    the warning counts the calls cut before the p99, estimates from the curve the fewest calls
    cut like these that could bound it (an estimate that errs low), and names the
    quantile before which no call may be cut for these calls to bound it.

    Args:
        latency_s: Latency of each call in seconds; NaN for an uncensored call drops it.
        censored_at_s: Age in seconds at which each call was cut, aligned with ``latency_s``;
            NaN for calls that were not cut; ``None`` when no call was cut.
        level: Confidence level of the intervals.

    Returns:
        ``None`` when both upper ends are bounded, else one line, for example
        ``"p99 from 120 calls is not bounded above: it needs at least 368 calls (p99/p50:
        437)"``, ``"p99/p50's upper end is unbounded: it needs at least 437 calls, this group
        has 400 (each end at 97.5%)"`` or ``"p99's upper end is unbounded: 100 of 1,000
        calls were cut before 61.6 s, the p99 (100 cut in all); bounding it takes at least
        ~5,800 calls cut like these, or no cut before the p99.6 (at least 61.6 s)"``; when cut
        calls hide the p99 itself, ``"p99 is hidden by cut calls (125 cut in all): 3 of 1,000
        calls were cut after the last finished one (30.9 s), so the survival curve stops at
        2.4%, above the p99's 1%; only calls followed past the p99 (more than 30.9 s) can bound
        it"``.

    Raises:
        ValueError: ``level`` outside (0, 1), or invalid latencies (see ``split_censored``).
    """
    check_level(level)
    wide = (1.0 + level) / 2.0
    observed, censored = split_censored(latency_s, censored_at_s)
    n = observed.size + censored.size
    if censored.size == 0:
        p99 = min_calls_for_quantile(0.99, level=level)
        ratio = max(min_calls_for_quantile(0.99, level=wide), min_calls_for_quantile(0.5))
        if n < p99:
            return (
                f"p99 from {n:,} calls is not bounded above: it needs at least {p99:,} calls "
                f"(p99/p50: {ratio:,})"
            )
        if n < ratio:
            return (
                f"p99/p50's upper end is unbounded: it needs at least {ratio:,} calls, this "
                f"group has {n:,} (each end at {wide:.1%})"
            )
        return None
    km = KaplanMeier.fit(observed, censored)
    value, p99_low, p99_high = (float(a[0]) for a in km.quantiles(np.array([0.99]), level))
    _, low, high = km.quantiles(np.array([0.5, 0.99]), wide)
    if math.isfinite(p99_high) and math.isfinite(float(high[1])) and float(low[0]) > 0.0:
        return None
    subject, at = ("p99", level) if math.isinf(p99_high) else ("p99/p50", wide)
    cut_in_all = f"{censored.size:,} cut in all"
    floor = _uncut_calls(0.99, float(special.ndtri(0.5 + at / 2.0)))
    if math.isinf(value):
        also = f" (and at least {floor:,} calls)" if n < floor else ""
        if observed.size == 0:
            return f"p99 is hidden by cut calls: none of {n:,} calls finished{also}"
        last = float(observed.max())
        after = int(np.count_nonzero(censored >= last))
        return (
            f"p99 is hidden by cut calls ({cut_in_all}): {after:,} of {n:,} calls were cut "
            f"after the last finished one ({seconds(last)}), so the survival curve stops at "
            f"{percent(float(km.survival[-1]))}, above the p99's 1%; only calls followed past the "
            f"p99 (more than {seconds(p99_low)}) can bound it{also}"
        )
    before = int(np.count_nonzero(censored < value))
    calls, rank = _what_bounds(km, n, 0.99, at)
    if calls == floor:
        shown = f"{calls:,}"
    else:  # two significant digits, rounded up, as "at least" promises
        unit = 10 ** max(len(str(calls)) - 2, 0)
        shown = f"~{-(-calls // unit) * unit:,}"
    remedy = f"bounding it takes at least {shown} calls cut like these"
    if rank:
        # follow every call to the (n - rank)-th latency, named by its quantile rounded up
        follow = math.ceil(1000.0 * (1.0 - rank / n)) / 1000.0
        (far,) = km.quantiles(np.array([follow]), level)[0]
        # at the end of the curve the quantile is only known to be at least that far out
        end = float(km.times[-1])
        where = f"at least {seconds(end)}" if far >= end else seconds(far)
        remedy += f", or no cut before the {label(follow)} ({where})"
    wide_note = f" (each end at {wide:.1%})" if subject == "p99/p50" else ""
    return (
        f"{subject}'s upper end is unbounded{wide_note}: {before:,} of {n:,} calls were cut "
        f"before {seconds(value)}, the p99 ({cut_in_all}); {remedy}"
    )
