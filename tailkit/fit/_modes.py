"""
A second, slower mode: calls that form a hump of their own, not the body's slow side.

A client that times out and retries after a fixed delay (or a proxy that does) adds that delay
to some calls: their latencies form a second hump a fixed number of seconds after the first,
with a gap between. Such a mode is no sign of too few calls, and no transient tail a residual
test could place either (it can hold a quarter of the calls). `slow_mode` finds it, so a
verdict can say "a second mode near 6.3 s" instead of asking for more calls.

The test. Under a unimodal body (lognormal latency, normal log residuals, any tail that thins
out), the density of log residuals falls to the right of the main mode. A kernel density
estimate (Silverman's bandwidth, which over-smooths several modes, so errs against finding
one) proposes a dip and a peak to the right of it; the calls within a bandwidth of each are
counted, and a binomial test asks whether the peak holds more than the dip: under a falling
density it holds at most half. The proposal looks at the same calls as the test, so the test
runs at 0.1 % (Bonferroni over the proposals), and the mode must hold at least 1 % of calls
(10 at least) and lie at least 1.25x beyond the main mode.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scipy import stats

from tailkit.text import number, percent, seconds


__all__ = ["SlowMode", "slow_mode"]

_Array = npt.NDArray[np.float64]

MODE_ALPHA = 0.001  # the dip test's level, over all proposed modes (Bonferroni)
MIN_MODE_SHARE = 0.01  # a mode holds at least 1 % of calls ...
MIN_MODE_CALLS = 10  # ... and 10 calls
MODE_FLOOR = math.log(1.25)  # and lies at least 1.25x beyond the main mode
_BINS_PER_BANDWIDTH = 4
_MAD = 1.4826


@dataclass(frozen=True, slots=True)
class SlowMode:
    """
    A second mode on the slow side of a route's calls (after size is taken out).

    Returned by `slow_mode` -- do not instantiate directly.

    Args:
        share: Share of the calls beyond the dip (the mode and what lies past it).
        calls: Those calls.
        at_s: Their median latency, seconds.
        delay_s: Their median extra latency over a call of their size, seconds: a fixed
            delay (a client's timeout before a retry) shows as a steady value here.
        factor: Their median slow-down against a call of their size.
        p_value: The dip test's p-value, Bonferroni-adjusted over the proposed modes.
        steady: The extra latency varies less, relatively, than the slow-down: a fixed delay
            (a client's timeout before a retry) rather than calls slowed in proportion.
    """

    share: float
    calls: int
    at_s: float
    delay_s: float
    factor: float
    p_value: float
    steady: bool = False

    def describe(self, than: str = "a call of their size") -> str:
        """
        The mode in words: ``a second mode near 6.3 s (25% of calls, about 5.0 s later ...)``.

        Args:
            than: What the calls are slower than (without token counts: the typical call).
        """
        slower = f"{percent(self.share)} of calls, {number(self.factor, 1)}× {than}"
        if not self.steady:
            return f"a second mode near {seconds(self.at_s)} ({slower})"
        return (
            f"a second mode near {seconds(self.at_s)} ({slower}, about {seconds(self.delay_s)} "
            "later each: a fixed delay, retries after a timeout?)"
        )


def slow_mode(residual: _Array, latency_s: _Array) -> SlowMode | None:
    """
    Find a second, slower mode in the log residuals of finished calls, if there is one.

    It is looked for in the log residuals (size taken out) and in log latency (a retry's
    fixed delay adds seconds, which size smears out in the residuals), at Silverman's
    bandwidth and three times it; in log latency a hump counts only where its calls are
    slower than their size explains (their median residual beyond 3 body spreads and 1.25x):
    two kinds of requests, short and long, are two humps of work.

    Args:
        residual: Log latency less the size model's prediction, one per finished call.
        latency_s: The same calls' latency in seconds, aligned.

    Returns:
        The mode, or ``None`` when the density falls steadily beyond the main mode.
    """
    r = np.asarray(residual, dtype=np.float64)
    x = np.asarray(latency_s, dtype=np.float64)
    keep = np.isfinite(r) & np.isfinite(x) & (x > 0.0)
    r, x = r[keep], x[keep]
    n = r.size
    if n < 5 * MIN_MODE_CALLS:
        return None
    centre = float(np.median(r))
    sigma = _MAD * float(np.median(np.abs(r - centre)))
    candidates = []
    for values, needs_residual in ((r, False), (np.log(x), True)):
        for widen in _WIDEN:
            for p, beyond in _humps(values, widen):
                if needs_residual and np.median(r[beyond]) - centre < max(3 * sigma, MODE_FLOOR):
                    continue
                candidates.append((p, beyond))
    if not candidates:
        return None
    p, beyond = min(candidates, key=lambda c: c[0])
    p = min(1.0, p * len(candidates))
    if p >= MODE_ALPHA:
        return None
    body = float(np.median(r[~beyond]))
    slow_x, slow_r = x[beyond], r[beyond]
    same_size = slow_x / np.exp(slow_r - body)  # a call of their size, at the body's centre
    delay = slow_x - same_size
    ratio = np.log(slow_x / same_size)
    steady = _spread(delay) / max(float(np.median(delay)), 1e-9) < _spread(ratio)
    return SlowMode(
        share=float(beyond.mean()),
        calls=int(beyond.sum()),
        at_s=float(np.median(slow_x)),
        delay_s=float(np.median(slow_x - same_size)),
        factor=float(np.exp(np.median(slow_r) - body)),
        p_value=p,
        steady=bool(steady),
    )


def _spread(v: _Array) -> float:
    return _MAD * float(np.median(np.abs(v - np.median(v))))


_WIDEN = (1.0, 3.0)  # bandwidths tried: Silverman's, and three times it (a spread-out hump)


def _humps(v: _Array, widen: float) -> list[tuple[float, npt.NDArray[np.bool_]]]:
    """
    The humps right of the main mode of ``v``: each one's dip-test p-value and its calls.
    """
    n = v.size
    centre = float(np.median(v))
    spread = _MAD * float(np.median(np.abs(v - centre)))
    if spread <= 0.0:
        return []
    h = widen * 0.9 * spread * n**-0.2  # Silverman's rule, on a robust spread
    width = h / _BINS_PER_BANDWIDTH
    low, high = float(v.min()) - 3 * h, float(v.max()) + 3 * h
    bins = min(math.ceil((high - low) / width), 100_000)
    counts, edges = np.histogram(v, bins=bins, range=(low, high))
    kernel = stats.norm.pdf(np.arange(-3 * _BINS_PER_BANDWIDTH, 3 * _BINS_PER_BANDWIDTH + 1),
                            scale=_BINS_PER_BANDWIDTH)  # fmt: skip
    density = np.convolve(counts, kernel, mode="same")
    mids = 0.5 * (edges[:-1] + edges[1:])
    rising = np.diff(density) > 0
    # The main mode is the body's: the hump the median lies on (a taller, narrower second
    # hump can hold fewer calls), reached by climbing from the median.
    main = int(np.searchsorted(edges, centre, side="right")) - 1
    while 0 < main < density.size - 1:
        if density[main + 1] > density[main]:
            main += 1
        elif density[main - 1] > density[main]:
            main -= 1
        else:
            break
    peaks = [i for i in range(main + 1, density.size - 1) if rising[i - 1] and not rising[i]]
    found = []
    for peak in peaks:
        dip = main + int(np.argmin(density[main : peak + 1]))
        if mids[peak] - mids[main] < MODE_FLOOR or dip in (main, peak):
            continue
        half = min(h, (mids[peak] - mids[dip]) / 2.0)
        at_dip = int(np.count_nonzero(np.abs(v - mids[dip]) <= half))
        at_peak = int(np.count_nonzero(np.abs(v - mids[peak]) <= half))
        beyond = v > mids[dip]
        if int(beyond.sum()) < max(MIN_MODE_CALLS, MIN_MODE_SHARE * n):
            continue
        found.append((float(stats.binom.sf(at_peak - 1, at_dip + at_peak, 0.5)), beyond))
    return found
