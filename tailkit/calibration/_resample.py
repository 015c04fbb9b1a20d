"""
Bootstrap replicates of route samples: the samples the measured calls could as well have been.

A prediction simulated from measured calls is only as sure as those calls: 51 calls pin a
route's p99 far less than 10,000 do. To see how far, the calls are resampled with
replacement, the workflow is simulated again on each replicate, and the spread of the
replicates' predictions is the uncertainty that the sample adds (Efron's bootstrap).

What one replicate redraws, per route sample:

- the finished and cut calls, each with its time to first token and its stall gap (a cut
  call keeps the latency beyond its cut that `RouteSample.from_latencies` drew for it from
  the fitted tail);
- where in a stalled stream its stall sat (`RouteSample.stall_at`), which the record does not
  say: uniform from right after the first token to the stream's end;
- the error rate and invalid rate, as binomial counts over the calls behind them (for the
  error rate, the calls plus their share of failed attempts), and the error times;
- for a sample that is a fitted model (``--latency lognormal``: a quantile grid standing for
  ``calls`` measured calls), the fit itself: the log-median and log-spread are redrawn from
  their sampling distributions for that many finished calls, and the grid moved with them.

Steps that use the same route in the same token bucket draw from the same measured calls, so
within a replicate they share one resample. A rate that was measured as zero stays zero: a
bootstrap cannot invent a failure it never saw.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.fit import min_calls_for_quantile
from tailkit.simulation import RouteSample
from tailkit.simulation.lowlevel import SampleKey


Array = npt.NDArray[np.float64]
_MAX_ERROR_RATE = 0.999  # a route sample needs some attempts that finish


def replicate(
    samples: Mapping[SampleKey, RouteSample], rng: np.random.Generator
) -> dict[SampleKey, RouteSample]:
    """
    One bootstrap replicate of every sample; steps sharing a route and bucket share it.

    Args:
        samples: Route samples per (step, route), as `load_samples` returns them.
        rng: The replicate's random numbers.

    Returns:
        The same keys, each with a resampled `RouteSample`.
    """
    made: dict[tuple[str, str], RouteSample] = {}
    out: dict[SampleKey, RouteSample] = {}
    for key, sample in samples.items():
        shared = (key[1], sample.bucket)
        if shared not in made:
            made[shared] = resample(sample, rng)
        out[key] = made[shared]
    return out


def resample(sample: RouteSample, rng: np.random.Generator) -> RouteSample:
    """
    One bootstrap replicate of a route sample (see the module doc for what is redrawn).

    Args:
        sample: Measured calls (or a fitted model's grid, when it holds more points than
            calls).
        rng: Random numbers.
    """
    calls = max(sample.calls, 2)
    if sample.total_s.size == sample.calls:
        n = sample.total_s.size
        # sorted indexes of a resample with replacement, without a sort: counts per call
        picked = np.repeat(np.arange(n), np.bincount(rng.integers(0, n, n), minlength=n))
        total_s, ttft_s = sample.total_s[picked], sample.ttft_s[picked]
        gap_s = None if sample.gap_s is None else sample.gap_s[picked]  # with its call
    else:
        total_s, ttft_s = _refit_grid(sample, calls, rng)
        gap_s = sample.gap_s  # the grid moves in place: each gap stays with its rank
    attempts = max(round(calls / (1.0 - sample.error_rate)), 1)
    error_rate = min(rng.binomial(attempts, sample.error_rate) / attempts, _MAX_ERROR_RATE)
    errors, errors_ttft = sample.error_s, sample.error_ttft_s
    if sample.error_rate > 0.0 and errors.size > 1:
        again = np.sort(rng.integers(0, errors.size, errors.size))  # error_s is sorted
        errors = errors[again]
        errors_ttft = None if errors_ttft is None else errors_ttft[again]
    invalid_rate = rng.binomial(calls, sample.invalid_rate) / calls
    stall_at = sample.stall_at
    if gap_s is not None and bool((gap_s > 0.0).any()):
        stall_at = float(rng.random())  # where a stall sits is not in the record
    return dataclasses.replace(
        sample,
        total_s=total_s,
        ttft_s=ttft_s,
        error_rate=float(error_rate),
        error_s=errors,
        error_ttft_s=errors_ttft,
        invalid_rate=float(invalid_rate),
        gap_s=gap_s,
        stall_at=stall_at,
    )


def _refit_grid(sample: RouteSample, calls: int, rng: np.random.Generator) -> tuple[Array, Array]:
    """
    The model's grid moved as a refit on ``calls`` fresh calls would move it (log scale).

    For a lognormal fitted to n finished calls the log-mean's error is normal with variance
    sigma^2 / n and the log-variance is sigma^2 chi^2(n - 1) / (n - 1); cut calls carry less
    than a finished one, so only the finished share counts towards n.
    """
    logs = np.log(sample.total_s)
    mu, sigma = float(logs.mean()), float(logs.std())
    n = max(round(calls * (1.0 - sample.censored)), 2)
    new_mu = mu + sigma * float(rng.standard_normal()) / math.sqrt(n)
    stretch = math.sqrt(float(rng.chisquare(n - 1)) / (n - 1))
    total_s = np.exp(new_mu + stretch * (logs - mu))
    return total_s, sample.ttft_s * (total_s / sample.total_s)


# What a bootstrap cannot see, and the rules that make the intervals honest anyway.
#
# A resample never holds a latency beyond the sample's largest, nor an event the sample never
# showed: from 50 calls a p99 interval covers its truth about 45 % of the time, and 300
# identical latencies give a miss-rate interval of [0, 0.002 %] whatever the calls that were
# not seen would have done. Two rules, measured by benchmarks/plan_coverage.py:
#
# - a p99 (the run's, a step's) is not bounded above while a route it draws from has fewer
#   finished calls than the order statistics need for a 95 % bound on a p99
#   (`tailkit.fit.min_calls_for_quantile`, 368): the interval's high end is infinite and a
#   note says why, as `tailkit stats` says it of a thin group's p99;
# - a share (miss rate, hedge rate, extra attempts) is known no better than a binomial count
#   over the thinnest route's calls: its interval holds at least the Clopper-Pearson interval
#   of the estimate's count among those calls. This is the floor that a sample without a
#   single slow call or error cannot go below (rule of three: 0 of 300 still allows 1.2 %).

SHARE_KEYS = ("miss_rate", "hedge_rate", "extra_attempts")
QUANTILE_KEYS = {"p99_s": 0.99}


@dataclass(frozen=True, slots=True)
class Thinnest:
    """
    The thinnest route behind a prediction (of a run, or of one step).

    Args:
        route: Its name (``provider/model``).
        step: A step that draws from it.
        calls: Its calls (finished and cut): the trials of a share's binomial floor.
        finished: Its finished calls: what bounds a quantile.
    """

    route: str
    step: str
    calls: int
    finished: int


def thinnest(samples: Mapping[SampleKey, RouteSample]) -> Thinnest | None:
    """
    The route with the fewest finished calls among ``samples`` (``None`` when empty).
    """
    found: Thinnest | None = None
    for (step, route), sample in samples.items():
        calls = max(sample.calls, 2)
        finished = max(round(calls * (1.0 - sample.censored)), 2)
        if found is None or finished < found.finished:
            found = Thinnest(route, step, calls, finished)
    return found


def honest_bounds(
    key: str, value: float, low: float, high: float, *, thin: Thinnest | None, level: float
) -> tuple[float, float, str | None]:
    """
    A bootstrap interval made honest where resampling cannot see (see the rules above).

    Args:
        key: The figure (``miss_rate``, ``p99_s``, …).
        value: Its point estimate.
        low: The bootstrap interval's low end.
        high: The bootstrap interval's high end.
        thin: The thinnest route behind the figure.
        level: The interval's coverage.

    Returns:
        The low and high ends (``high`` infinite when refused), and why it was refused
        (``None`` when it was not).
    """
    if thin is None or not math.isfinite(value):
        return low, high, None
    q = QUANTILE_KEYS.get(key)
    if q is not None:
        needed = min_calls_for_quantile(q, level=level)
        if thin.finished < needed:
            why = (
                f"{key.removesuffix('_s')} not bounded above: route {thin.route} "
                f"(step {thin.step!r}) has {thin.finished:,} finished calls, and a {level:.0%} "
                f"bound on a p{round(100 * q)} needs {needed:,}; ingest more calls of it"
            )
            return low, math.inf, why
        return low, high, None
    if key in SHARE_KEYS:
        floor_low, floor_high = _binomial(value, thin.calls, level)
        ceiling = 1.0 if key != "extra_attempts" else math.inf
        return min(low, floor_low), min(max(high, floor_high), max(ceiling, value)), None
    return low, high, None


def _binomial(share: float, n: int, level: float) -> tuple[float, float]:
    """
    Clopper-Pearson interval of ``share`` read as a count among ``n`` trials (outward).
    """
    from scipy import stats

    alpha = 1.0 - level
    k = min(max(share, 0.0), 1.0) * n
    below, above = math.floor(k), math.ceil(k)
    low = 0.0 if below <= 0 else float(stats.beta.ppf(alpha / 2.0, below, n - below + 1))
    high = 1.0 if above >= n else float(stats.beta.ppf(1.0 - alpha / 2.0, above + 1, n - above))
    return low, high
