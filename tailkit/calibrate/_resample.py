"""
Bootstrap replicates of route samples: the samples the measured calls could as well have been.

A prediction simulated from measured calls is only as sure as those calls: 51 calls pin a
route's p99 far less than 10,000 do. To see how far, the calls are resampled with
replacement, the workflow is simulated again on each replicate, and the spread of the
replicates' predictions is the uncertainty that the sample adds (Efron's bootstrap).

What one replicate redraws, per route sample:

- the finished and cut calls, each with its time to first token (a cut call keeps the
  latency beyond its cut that `RouteSample.from_latencies` drew for it from the fitted tail);
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

import numpy as np
import numpy.typing as npt

from tailkit.simulate import RouteSample, SampleKey


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
    else:
        total_s, ttft_s = _refit_grid(sample, calls, rng)
    attempts = max(round(calls / (1.0 - sample.error_rate)), 1)
    error_rate = min(rng.binomial(attempts, sample.error_rate) / attempts, _MAX_ERROR_RATE)
    errors = sample.error_s
    if sample.error_rate > 0.0 and errors.size > 1:
        errors = np.sort(errors[rng.integers(0, errors.size, errors.size)])
    invalid_rate = rng.binomial(calls, sample.invalid_rate) / calls
    return dataclasses.replace(
        sample,
        total_s=total_s,
        ttft_s=ttft_s,
        error_rate=float(error_rate),
        error_s=errors,
        invalid_rate=float(invalid_rate),
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
