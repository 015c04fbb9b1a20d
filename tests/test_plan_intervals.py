"""
Calibrate's intervals where a bootstrap cannot see: thin samples refuse a p99 bound, shares floor.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tailkit.calibration import predict
from tailkit.calibration._resample import Thinnest, honest_bounds
from tailkit.config import dump_plan, parse_plan
from tailkit.fit import min_calls_for_quantile
from tailkit.simulation import RouteSample


PLAN = """
tailkit_plan: 1
workflow: thin
deadline_s: 20
hedge_budget: 0.2
routes:
  p/m: {provider: p, model: m}
steps:
  a:
    route: p/m
    cutoff_s: 6.0
    on_cutoff: retry
"""


def _thin(finished: int) -> Thinnest:
    return Thinnest("p/m", "a", finished, finished)


def test_a_p99_is_not_bounded_above_below_the_order_statistic_minimum() -> None:
    """Below 368 finished calls a p99's high end is infinite, with the reason; at 368 it is kept."""
    needed = min_calls_for_quantile(0.99)
    low, high, why = honest_bounds("p99_s", 9.0, 8.0, 10.0, thin=_thin(needed - 1), level=0.95)

    assert (8.0, math.inf) == (low, high)
    assert why == (
        f"p99 not bounded above: route p/m (step 'a') has {needed - 1} finished calls, and a "
        f"95% bound on a p99 needs {needed}; ingest more calls of it"
    )
    assert (8.0, 10.0, None) == honest_bounds(
        "p99_s", 9.0, 8.0, 10.0, thin=_thin(needed), level=0.95
    )


def test_a_share_seen_zero_times_keeps_the_rule_of_three() -> None:
    """A miss rate of 0 from 300 calls is bounded by Clopper-Pearson's 1.2 %, not by 0."""
    low, high, why = honest_bounds("miss_rate", 0.0, 0.0, 0.00002, thin=_thin(300), level=0.95)

    assert (0.0, None) == (low, why)
    assert high == pytest.approx(0.01222, abs=1e-5)


def test_a_share_interval_wider_than_the_floor_is_kept() -> None:
    """The floor only widens: a bootstrap interval already wider than it stays as it was."""
    assert (0.01, 0.5, None) == honest_bounds(
        "hedge_rate", 0.1, 0.01, 0.5, thin=_thin(3000), level=0.95
    )


def test_fifty_calls_give_no_p99_bound_in_the_prediction_or_the_plan() -> None:
    """From 50 calls the plan's p99 intervals end at .inf, the note says why, the plan loads."""
    plan = parse_plan(PLAN)
    rng = np.random.default_rng(4)
    sample = RouteSample.from_latencies(rng.lognormal(math.log(3.0), 0.5, 50))

    found = predict(None, plan, samples={("a", "p/m"): sample}, runs=5_000, replicates=20,
                    replicate_runs=1_000, seed=1)  # fmt: skip

    assert math.isinf(found.p99_s.high)
    assert math.isinf(found.steps["a"].p99_s.high)
    assert math.isfinite(found.p50_s.high)
    assert found.interval_notes == (
        "p99 not bounded above: route p/m (step 'a') has 50 finished calls, and a 95% bound on "
        "a p99 needs 368; ingest more calls of it",
    )
    predicted = found.plan_prediction()
    assert predicted.interval is not None
    assert math.isinf(predicted.interval.p99_s[1])
    calibrated = parse_plan(dump_plan(dataclasses.replace(plan, predicted=predicted)))
    assert calibrated.predicted == predicted


def test_identical_latencies_leave_a_miss_rate_interval_of_the_calls_count() -> None:
    """300 identical latencies: the miss-rate interval reaches the rule of three, not 0.002 %."""
    plan = parse_plan(PLAN)
    sample = RouteSample.from_latencies(np.full(300, 4.0))

    found = predict(None, plan, samples={("a", "p/m"): sample}, runs=5_000, replicates=20,
                    replicate_runs=1_000, seed=1)  # fmt: skip

    assert 0.0 == found.miss_rate.value
    assert found.miss_rate.high > 0.012
    assert found.steps["a"].hedge_rate.high > 0.012
