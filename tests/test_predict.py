"""
Predictions with intervals: the bootstrap over measured calls, its coverage, and the warnings.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from scipy import stats

from tailkit.calibration import Prediction, predict, prediction_warnings, workflow_of
from tailkit.calibration._resample import replicate, resample
from tailkit.config import Plan, Route, Step, dump_plan, parse_plan
from tailkit.errors import ConfigError
from tailkit.simulation import RouteSample, simulate_model, workflow_model
from tailkit.simulation.lowlevel import SampleKey


ROUTES = {"p/m": Route("p", "m"), "q/m": Route("q", "m")}
MEDIAN_S, SIGMA = 8.0, 0.5  # the "true" latency of route p/m
# a -> b on the same route; a retries at 14 s. The deadline sits near the true p95 (5% miss).
CHAIN = Plan(
    "chain",
    34.0,
    ROUTES,
    {
        "a": Step("a", "p/m", cutoff_s=14.0, on_cutoff="retry"),
        "b": Step("b", "p/m", depends_on=("a",)),
    },
)


def _measured(calls: int, seed: int) -> dict[SampleKey, RouteSample]:
    """`calls` calls drawn from the true latency, as the basis of both steps."""
    rng = np.random.default_rng([11, seed])
    sample = RouteSample.from_latencies(rng.lognormal(math.log(MEDIAN_S), SIGMA, calls))
    return {("a", "p/m"): sample, ("b", "p/m"): sample}


def _true_miss_rate() -> float:
    """The chain's miss rate under the true latency, on many runs."""
    truth = RouteSample.lognormal(MEDIAN_S, SIGMA)
    samples = {("a", "p/m"): truth, ("b", "p/m"): truth}
    return simulate_model(workflow_model(CHAIN, samples), runs=400_000, seed=5).miss_rate


@pytest.mark.slow
def test_interval_covers_the_true_miss_rate_at_about_its_level() -> None:
    """Simulate, fit, recover: 95% intervals from 300 calls cover the true miss rate."""
    trials, truth = 60, _true_miss_rate()
    # A 95% interval covers in Binomial(60, 0.95) trials; fewer than this happens < 0.1%.
    bound = stats.binom.ppf(0.001, trials, 0.95)
    covered = monte_carlo_only = 0
    for trial in range(trials):
        found = predict(None, CHAIN, samples=_measured(300, trial), runs=20_000, seed=trial,
                        replicates=50, replicate_runs=2_000)  # fmt: skip
        miss = found.miss_rate
        covered += miss.low <= truth <= miss.high
        monte_carlo_only += abs(miss.value - truth) <= 1.96 * found.result.miss_rate_se
    assert 0.03 < truth < 0.08
    assert bound == 51
    assert covered >= bound, f"{covered} of {trials} intervals hold the true miss rate"
    # the old "± Monte Carlo error" alone would fail this test: the sample's doubt dominates
    assert monte_carlo_only < bound, monte_carlo_only


def test_fewer_calls_give_a_wider_interval() -> None:
    """An interval from 50 calls is several times wider than one from 5,000."""
    widths = []
    for calls in (50, 5_000):
        miss = predict(None, CHAIN, samples=_measured(calls, 1), runs=20_000, seed=1,
                       replicates=50, replicate_runs=2_000).miss_rate  # fmt: skip
        widths.append(miss.high - miss.low)
    assert widths[0] > 4 * widths[1]  # sqrt(100) = 10 times in theory


def test_prediction_is_repeatable_and_every_interval_holds_its_value() -> None:
    """The same seed gives the same prediction; every estimate lies in its interval."""
    samples = _measured(400, 2)
    args = {"samples": samples, "runs": 10_000, "seed": 4, "replicates": 20}
    first = predict(None, CHAIN, replicate_runs=1_000, **args)  # type: ignore[arg-type]
    again = predict(None, CHAIN, replicate_runs=1_000, **args)  # type: ignore[arg-type]
    assert first.as_dict() == again.as_dict()
    estimates = [first.miss_rate, first.p50_s, first.p99_s, first.extra_attempts]
    estimates += [e for s in first.steps.values() for e in (s.p50_s, s.p99_s, s.hedge_rate)]
    for e in estimates:
        assert e.low <= e.value <= e.high
    assert first.miss_rate.low < first.miss_rate.high
    assert (first.runs, first.replicates, first.replicate_runs) == (10_000, 20, 1_000)
    assert list(first.steps) == ["a", "b"]


def test_the_plan_file_gets_rounded_values_and_outward_intervals() -> None:
    """plan_prediction rounds values, widens intervals outward, and the plan round-trips."""
    found = predict(None, CHAIN, samples=_measured(400, 3), runs=10_000, replicates=20,
                    replicate_runs=1_000)  # fmt: skip
    whole = found.plan_prediction()
    assert whole.interval is not None
    assert whole.interval.level == 0.95
    assert whole.miss_rate == round(found.miss_rate.value, 5)
    assert whole.interval.miss_rate[0] <= found.miss_rate.low
    assert whole.interval.miss_rate[1] >= found.miss_rate.high
    steps = {n: dataclasses.replace(s, predicted=found.step_prediction(n))
             for n, s in CHAIN.steps.items()}  # fmt: skip
    plan = dataclasses.replace(CHAIN, steps=steps, predicted=whole)
    assert parse_plan(dump_plan(plan)) == plan


def test_zero_replicates_predict_points_without_intervals() -> None:
    """replicates=0: each interval is its point, and the plan file gets no interval."""
    found = predict(None, CHAIN, samples=_measured(400, 3), runs=10_000, replicates=0)
    assert found.miss_rate.low == found.miss_rate.value == found.miss_rate.high
    assert found.plan_prediction().interval is None
    assert found.step_prediction("a").interval is None


def test_a_reference_policy_predicts_like_its_plan() -> None:
    """policy='none' predicts the same numbers as the workflow without cutoffs."""
    samples = _measured(400, 4)
    args = {"samples": samples, "runs": 10_000, "replicates": 10, "replicate_runs": 1_000}
    none = predict(None, CHAIN, policy="none", **args)  # type: ignore[arg-type]
    waiting = predict(None, workflow_of(CHAIN), **args)  # type: ignore[arg-type]
    assert none.as_dict() == waiting.as_dict()


def test_bad_arguments_name_the_fix() -> None:
    """No store and no samples, or a level outside (0, 1), are refused with the fix."""
    with pytest.raises(ConfigError, match="needs a store"):
        predict(None, CHAIN)
    with pytest.raises(ConfigError, match="level must be between 0 and 1"):
        predict(None, CHAIN, samples=_measured(50, 0), level=95)
    with pytest.raises(ConfigError, match="replicates must be 0"):
        predict(None, CHAIN, samples=_measured(50, 0), replicates=-1)


def test_resample_draws_the_calls_with_replacement() -> None:
    """A replicate holds n of the measured calls, TTFT with each, sorted; rates are binomial."""
    rng = np.random.default_rng(0)
    total = rng.lognormal(1.0, 0.6, 500)
    sample = RouteSample.from_latencies(total, ttft_s=total / 4, error_rate=0.1)
    measured = dict(zip(sample.total_s.tolist(), sample.ttft_s.tolist(), strict=True))
    rates = []
    for _ in range(400):
        again = resample(sample, rng)
        assert again.total_s.size == 500
        assert np.all(np.diff(again.total_s) >= 0)
        assert all(measured[t] == f for t, f in zip(again.total_s, again.ttft_s, strict=True))
        assert 0 < np.unique(again.total_s).size < 500
        rates.append(again.error_rate)
    # error counts over 500 calls + their 10% failures (556 attempts): binomial variance;
    # 399 * s^2 / sigma^2 is chi-square(399), outside these bounds with chance 0.1%
    sigma2 = 0.1 * 0.9 / 556
    ratio = np.var(rates, ddof=1) / sigma2
    assert stats.chi2.ppf(0.0005, 399) / 399 < ratio < stats.chi2.ppf(0.9995, 399) / 399


def test_a_fitted_model_is_refit_with_the_error_of_its_calls() -> None:
    """A lognormal grid's log-median moves by sigma / sqrt(calls) between replicates."""
    rng = np.random.default_rng(1)
    model = dataclasses.replace(RouteSample.lognormal(10.0, 0.8, points=20_000), calls=200)
    medians = [math.log(resample(model, rng).quantile(0.5)) for _ in range(400)]
    ratio = np.var(medians, ddof=1) / (0.8**2 / 200)
    assert stats.chi2.ppf(0.0005, 399) / 399 < ratio < stats.chi2.ppf(0.9995, 399) / 399


def test_steps_on_the_same_calls_share_one_resample() -> None:
    """Two steps drawing from one route and bucket get the same replicate."""
    samples = _measured(100, 0)
    other = RouteSample.from_latencies(np.arange(1.0, 101.0), bucket="other")
    again = replicate({**samples, ("a", "q/m"): other}, np.random.default_rng(0))
    assert again[("a", "p/m")] is again[("b", "p/m")]
    assert again[("a", "q/m")] is not again[("a", "p/m")]


def _predicted(plan: Plan, calls: int, **kwargs: float) -> Prediction:
    return predict(None, plan, samples=_measured(calls, 9), runs=20_000, replicates=30,
                   replicate_runs=2_000, **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_a_hopeless_deadline_says_which_deadline_would_do() -> None:
    """Most runs miss: the warning gives the median run and the deadline for 5% misses."""
    plan = dataclasses.replace(workflow_of(CHAIN), deadline_s=12.0)  # the median run is 17 s
    found = _predicted(plan, 5_000)
    (warning,) = [w for w in prediction_warnings(plan, found) if "out of reach" in w]
    assert f"the median run takes {found.p50_s.value:.1f} s" in warning
    # the sum of two lognormal(8 s, 0.5) calls: its p95, by simulation
    rng = np.random.default_rng(0)
    p95 = np.quantile(rng.lognormal(math.log(8.0), 0.5, (2, 400_000)).sum(axis=0), 0.95)
    needed = int(warning.split("A deadline of about ")[1].split(" s")[0])
    assert needed == pytest.approx(p95, rel=0.05)


def test_a_plan_over_its_budget_is_flagged() -> None:
    """Extra attempts above hedge_budget, or an interval reaching past it, are warned about."""
    steps = dict(CHAIN.steps)
    steps["a"] = dataclasses.replace(steps["a"], cutoff_s=8.0)  # retries about half the runs
    plan = dataclasses.replace(CHAIN, steps=steps, hedge_budget=0.05)
    found = _predicted(plan, 2_000)
    over = [w for w in prediction_warnings(plan, found) if "hedge budget" in w]
    assert over
    assert over[0].startswith("the plan spends more than its hedge budget")
    at_edge = dataclasses.replace(plan, hedge_budget=found.extra_attempts.value)
    maybe = [w for w in prediction_warnings(at_edge, found) if "hedge budget" in w]
    assert maybe
    assert maybe[0].startswith("the plan may spend more than its hedge budget")
    roomy = dataclasses.replace(plan, hedge_budget=1.0)
    assert not [w for w in prediction_warnings(roomy, found) if "hedge budget" in w]


def test_thin_samples_behind_a_wide_interval_are_named() -> None:
    """A wide interval on 60 calls names the route, its steps and its calls; 5,000 do not."""
    thin = prediction_warnings(CHAIN, _predicted(CHAIN, 60))
    (warning,) = [w for w in thin if "thin" in w]
    assert "p/m (steps a, b) has 60 calls in bucket all" in warning
    assert "Ingest more calls" in warning
    assert not [w for w in prediction_warnings(CHAIN, _predicted(CHAIN, 5_000)) if "thin" in w]
