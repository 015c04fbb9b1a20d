"""
`predict`: what a plan will do, each number with an interval that includes the sample's doubt.

The point estimates come from many fresh simulated runs, as before. Their intervals come from
a bootstrap (`tailkit.calibration._resample`): the measured calls are resampled, and the plan is
simulated again on each replicate. Every replicate, and the samples as measured, run on the
same draws (common random numbers), so a replicate's difference from the measured samples is
paired: it is what the resampling changed, with far less Monte Carlo noise than two
independent runs would carry. The interval is the point estimate moved by the middle
``level`` of those differences (a percentile interval, centred on the precise estimate), each
side widened by the point estimate's own Monte Carlo error, the two added in quadrature.

What simulation noise the pairing leaves in the differences (each replicate runs 4,000 runs,
not 100,000) makes the interval a little wider than the sample alone would: it errs on the
wide side. 100 replicates × 4,000 runs: the replicates' cost is mostly building their route
samples, so more runs per replicate are cheap and more replicates are not; with 100
replicates each end of a 95 % interval sits at the third most extreme replicate.
"""

from __future__ import annotations

import math
import statistics
import zlib

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tailkit.calibration._resample import Thinnest, honest_bounds, replicate, thinnest
from tailkit.config import (
    Plan,
    PlanInterval,
    PlanPrediction,
    Shared,
    StepInterval,
    StepPrediction,
)
from tailkit.errors import ConfigError
from tailkit.estimate import LEVEL, Estimate
from tailkit.fit import quantile
from tailkit.simulation import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MIN_CALLS,
    RouteSample,
    SimResult,
    WorkflowModel,
    estimate_sharing,
    load_samples,
    policy_model,
    simulate_model,
    workflow_model,
)
from tailkit.simulation.lowlevel import (
    Draws,
    RunOutcome,
    SampleKey,
    live_state,
    resample_sharing,
    sim_result,
    simulate_runs,
    step_quantile_runs,
    step_routes,
)


if TYPE_CHECKING:
    from tailkit.record import Buckets
    from tailkit.store import Store


REPLICATES = 100
REPLICATE_RUNS = 4_000
# Decimals the plan file keeps: seconds to the millisecond, shares to a basis point or finer.
_DECIMALS = {"p50_s": 3, "p99_s": 3, "miss_rate": 5, "extra_attempts": 4, "hedge_rate": 4}
_PLAN_KEYS = ("miss_rate", "p50_s", "p99_s", "extra_attempts")  # Prediction's field order
_STEP_KEYS = ("p50_s", "p99_s", "hedge_rate")
QUANTILE_OF = {"p50_s": 0.5, "p99_s": 0.99}
# How a prediction's interval was found (`Estimate.method`): a bootstrap over the measured
# calls, widened by Monte Carlo error; or, with no replicates, none (the value at both ends).
_BOOTSTRAP = "bootstrap"
_RUNS_ONLY = "no replicates"


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """
    One step's predictions, each with its interval.

    Args:
        name: Step name.
        p50_s: Median seconds from the step's start to its result.
        p99_s: 99th percentile of the same.
        hedge_rate: Share of runs in which the step started an extra attempt at its cutoff.
    """

    name: str
    p50_s: Estimate
    p99_s: Estimate
    hedge_rate: Estimate


@dataclass(frozen=True, slots=True, eq=False)
class Prediction:
    """
    What a plan will do, each number with its interval.

    Args:
        miss_rate: Share of runs that fail or end after the deadline.
        p50_s: Median end-to-end seconds.
        p99_s: 99th percentile end-to-end seconds.
        extra_attempts: Extra attempts started at cutoffs per first attempt.
        steps: Per step name, in the plan's order of execution.
        level: The intervals' coverage (0.95: 95 % intervals).
        runs: Fresh runs behind the point estimates.
        replicates: Bootstrap replicates behind the intervals (0: none; every interval is
            then its point).
        replicate_runs: Simulated runs per replicate.
        result: The point estimates' simulation, with every other number it gives.
        samples: The route samples the plan was simulated on.
        sharing: What a repeat shared with the first attempt, where it was not the plan's
            ``basis.shared`` (``None``: the plan's, or independent).
        interval_notes: Why an interval is not bounded (its high end is ``inf``): too few
            calls of a route for a bound on its p99 (see `tailkit.calibration._resample`).
    """

    miss_rate: Estimate
    p50_s: Estimate
    p99_s: Estimate
    extra_attempts: Estimate
    steps: dict[str, StepEstimate]
    level: float
    runs: int
    replicates: int
    replicate_runs: int
    result: SimResult
    samples: dict[SampleKey, RouteSample]
    sharing: Mapping[str, Shared] | None = None
    interval_notes: tuple[str, ...] = ()

    def plan_prediction(self) -> PlanPrediction:
        """
        The plan file's ``predicted``: values rounded, intervals rounded outwards.

        Without replicates it has no interval.
        """
        values = {k: _round(k, getattr(self, k)) for k in _PLAN_KEYS}
        interval = None
        if self.replicates:
            interval = PlanInterval(level=self.level, **{k: v[1] for k, v in values.items()})
        return PlanPrediction(**{k: v[0] for k, v in values.items()}, interval=interval)

    def step_prediction(self, name: str) -> StepPrediction:
        """
        A step's ``predicted`` in the plan file, rounded like `plan_prediction`.
        """
        step = self.steps[name]
        values = {k: _round(k, getattr(step, k)) for k in _STEP_KEYS}
        interval = None
        if self.replicates:
            interval = StepInterval(level=self.level, **{k: v[1] for k, v in values.items()})
        return StepPrediction(**{k: v[0] for k, v in values.items()}, interval=interval)

    def as_dict(self) -> dict[str, Any]:
        """
        Plain data for JSON: each number as ``{value, low, high}`` (``None`` for infinity).
        """

        def plain(e: Estimate) -> dict[str, float | None]:
            return {k: v if math.isfinite(v) else None
                    for k, v in (("value", e.value), ("low", e.low), ("high", e.high))}  # fmt: skip

        out: dict[str, Any] = {"level": self.level, "runs": self.runs,
                               "replicates": self.replicates,
                               "replicate_runs": self.replicate_runs}  # fmt: skip
        out.update({k: plain(getattr(self, k)) for k in _PLAN_KEYS})
        out["interval_notes"] = list(self.interval_notes)
        out["steps"] = {
            name: {k: plain(getattr(step, k)) for k in _STEP_KEYS}
            for name, step in self.steps.items()
        }
        return out


def predict(
    store: Store | None,
    plan: Plan,
    *,
    runs: int = 100_000,
    seed: int = 0,
    replicates: int = REPLICATES,
    replicate_runs: int = REPLICATE_RUNS,
    level: float = LEVEL,
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    latency: str = "empirical",
    samples: dict[SampleKey, RouteSample] | None = None,
    policy: str = "plan",
    sharing: Mapping[str, Shared] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Prediction:
    """
    Predict a plan's miss rate, latency and extra attempts, each with its interval.

    Works for any plan: a calibrated one, or a workflow whose steps all wait.

    Args:
        store: An open store with calls of the plan's routes (``None`` when ``samples`` are
            given).
        plan: The plan.
        runs: Fresh simulated runs behind the point estimates.
        seed: Seed; the same seed and samples give the same prediction.
        replicates: Bootstrap replicates behind the intervals; 0 for none (every interval is
            then its point estimate, and `Prediction.plan_prediction` writes none).
        replicate_runs: Simulated runs per replicate.
        level: The intervals' coverage, in (0, 1).
        buckets: Token bucket edges (the defaults when ``None``).
        min_calls: Fewest calls a step's route needs in its bucket.
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (fitted).
        samples: Route samples already loaded by `load_samples` (then ``store``,
            ``buckets``, ``min_calls`` and ``latency`` are not used).
        policy: ``plan``, or a reference policy of `tailkit.simulation.policy_model`.
        sharing: Per step, what a repeat attempt shares with the first; ``None``: the plan's
            ``basis.shared``, and for a step without one, estimated from ``store``
            (`tailkit.simulation.estimate_sharing`), else independent.
        concurrency: Runs in flight at once, for the steps that route live (their ``live``
            block; see `tailkit.simulation.simulate_model`): the point estimates and every
            replicate are simulated so.

    Raises:
        ThinSampleError: A step's route has too few calls in its bucket.
        ConfigError: An argument is out of range, or neither store nor samples are given.
    """
    _check(runs=runs, replicates=replicates, replicate_runs=replicate_runs, level=level)
    if samples is None:
        if store is None:
            msg = "predict needs a store to load the route samples from, or samples"
            raise ConfigError(msg)
        samples = load_samples(
            store, plan, buckets=buckets, min_calls=min_calls, seed=seed, latency=latency
        )
    if sharing is None and store is not None:
        unstated = [n for n, s in plan.steps.items() if s.basis is None or s.basis.shared is None]
        if unstated:
            sharing = estimate_sharing(store, plan, buckets=buckets)
    model = policy_model(workflow_model(plan, samples, sharing=sharing), policy)
    result = simulate_model(model, runs=runs, seed=seed, concurrency=concurrency)
    spread = _Spread(result, level)
    if replicates:
        spread.bootstrap(plan, samples, model, policy=policy, replicates=replicates,
                         replicate_runs=replicate_runs, seed=seed, sharing=sharing,
                         concurrency=concurrency)  # fmt: skip
    steps = {
        step.name: StepEstimate(
            step.name,
            p50_s=spread.estimate("p50_s", step=i),
            p99_s=spread.estimate("p99_s", step=i),
            hedge_rate=spread.estimate("hedge_rate", step=i),
        )
        for i, step in enumerate(result.steps)
    }
    return Prediction(
        miss_rate=spread.estimate("miss_rate"),
        p50_s=spread.estimate("p50_s"),
        p99_s=spread.estimate("p99_s"),
        extra_attempts=spread.estimate("extra_attempts"),
        steps=steps,
        level=level,
        runs=runs,
        replicates=replicates,
        replicate_runs=replicate_runs,
        result=result,
        samples=samples,
        sharing=sharing,
        interval_notes=tuple(dict.fromkeys(spread.notes)),
    )


class _Spread:
    """
    A prediction's bootstrap replicates, and how they become intervals (see the module doc).

    ``base`` is the samples as measured, simulated on the replicates' draws; each replicate's
    difference from it is paired.
    """

    def __init__(self, result: SimResult, level: float) -> None:
        self.result = result
        self.level = level
        self.z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
        self.base: RunOutcome | None = None
        self.base_result = result
        self.replicas: list[SimResult] = []
        self.thin: dict[str | None, Thinnest | None] = {}  # per step name; None: the run
        self.notes: list[str] = []

    def bootstrap(
        self,
        plan: Plan,
        samples: dict[SampleKey, RouteSample],
        model: WorkflowModel,
        *,
        policy: str,
        replicates: int,
        replicate_runs: int,
        seed: int,
        sharing: Mapping[str, Shared] | None,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        """
        Simulate ``replicates`` bootstrap replicates, and the samples as measured.

        Live steps route live in each (a fresh state per replicate, as a fresh simulation).
        """
        used = {(n, r) for n, step in plan.steps.items() for r in step_routes(step)}
        used_samples = {k: v for k, v in samples.items() if k in used}
        self.thin[None] = thinnest(used_samples)
        for name in plan.steps:
            self.thin[name] = thinnest({k: v for k, v in used_samples.items() if k[0] == name})
        draws_seed = zlib.crc32(f"replicates {seed}".encode())
        self.base = simulate_runs(
            model,
            Draws(replicate_runs, seed=draws_seed),
            live=live_state(model, concurrency=concurrency),
        )
        self.base_result = sim_result(model, self.base)
        for r in range(replicates):
            rng = np.random.default_rng([seed, r, zlib.crc32(b"bootstrap")])
            shares = resample_sharing(plan, sharing, rng)  # the sharing's own sampling error
            again = workflow_model(plan, replicate(used_samples, rng), sharing=shares)
            again = policy_model(again, policy)
            outcome = simulate_runs(
                again,
                Draws(replicate_runs, seed=draws_seed),
                live=live_state(again, concurrency=concurrency),
            )
            self.replicas.append(sim_result(again, outcome))

    def estimate(self, key: str, *, step: int | None = None) -> Estimate:
        """
        The point estimate of ``key`` with its interval.

        Args:
            key: A field of `SimResult` (or of `StepSummary`).
            step: Index of the step in the result; ``None`` for the whole run.
        """

        def pick(result: SimResult) -> float:
            return float(getattr(result if step is None else result.steps[step], key))

        value = pick(self.result)
        if not self.replicas:
            return Estimate(value, value, value, self.result.runs, _RUNS_ONLY, self.level)
        bootstrap = self._bootstrap(key, step, pick, value)
        thin = self.thin.get(None if step is None else self.result.steps[step].name)
        low, high, why = honest_bounds(
            key, value, bootstrap.low, bootstrap.high, thin=thin, level=self.level
        )
        if why is not None:
            self.notes.append(why)
        return Estimate(value, low, high, self.result.runs, _BOOTSTRAP, self.level)

    def _bootstrap(
        self, key: str, step: int | None, pick: Callable[[SimResult], float], value: float
    ) -> Estimate:
        """
        The bootstrap interval of ``key`` (paired differences, widened by Monte Carlo error).
        """
        alpha = (1.0 - self.level) / 2.0
        values = np.asarray([pick(x) for x in self.replicas], dtype=np.float64)
        center = pick(self.base_result)
        if not (math.isfinite(value) and math.isfinite(center) and np.isfinite(values).all()):
            low = quantile(values, alpha, method="lower")
            high = quantile(values, 1.0 - alpha, method="higher")
            return Estimate(value, min(low, value), max(high, value), level=self.level)
        below = max(center - quantile(values, alpha, method="lower"), 0.0)
        above = max(quantile(values, 1.0 - alpha, method="higher") - center, 0.0)
        noise = self.z * self._monte_carlo_se(key, step)
        ceiling = 1.0 if key in ("miss_rate", "hedge_rate") else math.inf
        low = max(value - math.hypot(below, noise), 0.0)
        high = min(value + math.hypot(above, noise), max(ceiling, value))
        return Estimate(value, low, high, level=self.level)

    def _monte_carlo_se(self, key: str, step: int | None) -> float:
        """
        Standard error of the point estimate from its own runs.

        Binomial for shares; for a quantile q, sqrt(q (1 - q) / runs) over the density at
        it, which is read off ``base``.
        """
        runs = self.result.runs
        if key == "miss_rate":
            return self.result.miss_rate_se
        if key == "hedge_rate":
            assert step is not None  # noqa: S101 - only steps have a hedge rate
            share = self.result.steps[step].hedge_rate
            return math.sqrt(share * (1.0 - share) / runs)
        if key == "extra_attempts":
            shares = [s.hedge_rate for s in self.result.steps]
            spread = math.sqrt(sum(h * (1.0 - h) for h in shares) / runs)
            return spread / max(len(shares), 1)
        assert self.base is not None  # noqa: S101 - set before replicas exist
        q = QUANTILE_OF[key]
        if step is None:
            values = self.base.end_s
        else:
            values, runs = (
                self.base.steps[step].duration_s,
                min(runs, step_quantile_runs(len(self.base.steps))),
            )
        values = values[np.isfinite(values)]
        if values.size < 20:
            return 0.0
        se_q = math.sqrt(q * (1.0 - q) / runs)
        band = min(max(10.0 / values.size, self.z * se_q), q, 1.0 - q)
        low, high = (quantile(values, p) for p in (q - band, q + band))
        return se_q * (high - low) / (2.0 * band)


def _check(*, runs: int, replicates: int, replicate_runs: int, level: float) -> None:
    if runs < 1 or replicate_runs < 1:
        msg = f"runs and replicate_runs must be at least 1, got {runs} and {replicate_runs}"
        raise ConfigError(msg)
    if replicates < 0:
        msg = f"replicates must be 0 (no intervals) or more, got {replicates}"
        raise ConfigError(msg)
    if not 0.0 < level < 1.0:
        msg = f"level must be between 0 and 1 (0.95 for 95 % intervals), got {level}"
        raise ConfigError(msg)


def _round(key: str, e: Estimate) -> tuple[float, tuple[float, float]]:
    """
    The value rounded to the plan file's decimals, and its interval rounded outwards.
    """
    decimals = _DECIMALS[key]
    value = round(e.value, decimals) if math.isfinite(e.value) else e.value
    low = min(_outward(e.low, decimals, math.floor), value)
    high = max(_outward(e.high, decimals, math.ceil), value)
    return value, (low, high)


def _outward(x: float, decimals: int, direction: Callable[[float], int]) -> float:
    if not math.isfinite(x):
        return x
    scale = 10.0**decimals
    return direction(x * scale) / scale
