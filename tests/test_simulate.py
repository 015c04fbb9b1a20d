"""
The workflow simulator against closed forms, and against its one-run-at-a-time reference.

Tolerances come from the Monte Carlo error: a share p estimated from R runs has standard error
sqrt(p (1 - p) / R), and every check allows 4.5 of them (a false alarm about once in 150,000).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from scipy import stats

from tailkit.errors import ConfigError
from tailkit.simulation import RouteSample, WorkflowModel, simulate_model
from tailkit.simulation import _api as api
from tailkit.simulation._couple import step_indexes
from tailkit.simulation._reference import reference_run
from tailkit.simulation.lowlevel import Draws, StepModel, sim_result, simulate_runs


Z = 4.5


def _se(p: float, runs: int) -> float:
    return math.sqrt(max(p * (1.0 - p), 1.0 / runs) / runs)


def lognormal(median_s: float, sigma: float, **kw: float) -> RouteSample:
    return RouteSample.lognormal(median_s, sigma, **kw)  # type: ignore[arg-type]


def stalls(median_s: float = 10.0, sigma: float = 0.25, share: float = 0.03) -> RouteSample:
    """
    A narrow lognormal body with a few percent of transient stalls 4-8x slower.
    """
    rng = np.random.default_rng(11)
    n = 400_000
    body = median_s * np.exp(sigma * rng.standard_normal(n))
    stalled = rng.random(n) < share
    return RouteSample.from_grid(np.where(stalled, body * rng.uniform(4.0, 8.0, n), body))


def run(model: WorkflowModel, runs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    outcome = simulate_runs(model, Draws(runs, seed=seed))
    return outcome.end_s, outcome.ok


def test_independent_steps_succeed_with_p_to_the_n() -> None:
    """A chain of n steps that each fail with 5 % succeeds with 0.95**n (10 and 20 steps)."""
    route = lognormal(1.0, 0.3, error_rate=0.05)
    runs = 200_000
    for n, expected in ((10, 0.599), (20, 0.358)):
        steps = tuple(StepModel(f"s{i}", (i - 1,) if i else (), True, route) for i in range(n))
        _, ok = run(WorkflowModel(steps, error_retries=0), runs)
        assert abs(ok.mean() - 0.95**n) <= Z * _se(0.95**n, runs)
        assert round(0.95**n, 3) == expected


def test_hedge_survival_is_the_product_of_both_attempts() -> None:
    """A hedge at c gives P(T > t) = S1(t) * S2(t - c) for t > c."""
    first, second = lognormal(10.0, 0.6), lognormal(8.0, 0.4)
    cutoff, runs = 14.0, 400_000
    step = StepModel("a", (), True, first, cutoff_s=cutoff, action="hedge", second=second)
    end, _ = run(WorkflowModel((step,)), runs)
    s1 = stats.lognorm(0.6, scale=10.0).sf
    s2 = stats.lognorm(0.4, scale=8.0).sf
    for t in (0.5 * cutoff, 15.0, 18.0, 22.0, 30.0, 45.0):
        expected = s1(t) * (s2(t - cutoff) if t > cutoff else 1.0)
        assert abs((end > t).mean() - expected) <= Z * _se(expected, runs) + 2e-5, t


def test_tail_of_a_sum_of_lognormals_approaches_the_tail_of_the_max() -> None:
    """For a chain of lognormal steps, P(sum > t) / P(max > t) falls towards 1 as t grows."""
    route = lognormal(5.0, 1.2)
    names = ("a", "b", "c")
    chain = WorkflowModel(
        tuple(StepModel(n, (i - 1,) if i else (), True, route) for i, n in enumerate(names))
    )
    fan = WorkflowModel(tuple(StepModel(n, (), True, route) for n in names))
    runs = 2_000_000
    total, _ = run(chain, runs)
    biggest, _ = run(fan, runs)  # same step names: the same draws, so max <= sum run by run
    assert np.all(biggest <= total + 1e-9)
    ratios = []
    for t in np.quantile(biggest, [0.9, 0.99, 0.999]):
        ratios.append((total > t).mean() / (biggest > t).mean())
    assert ratios[0] > ratios[1] > ratios[2] > 1.0
    assert ratios[2] < 1.6


def test_hedge_at_p95_halves_p99_where_retry_helps_much_less() -> None:
    """Narrow body + 3 % stalls (p50 ~10 s, p99 ~60 s): hedge at p95 ~halves p99, p50 stays."""
    route = stalls()
    cutoff, runs = route.quantile(0.95), 400_000
    assert 9.5 < route.quantile(0.5) < 10.5
    assert 50.0 < route.quantile(0.99) < 75.0
    results = {}
    for action in ("wait", "hedge", "retry"):
        step = StepModel("a", (), True, route, cutoff_s=cutoff, action=action)
        model = WorkflowModel((step,), deadline_s=30.0)
        results[action] = sim_result(model, simulate_runs(model, Draws(runs, seed=5)))
    none, hedge, retry = results["wait"], results["hedge"], results["retry"]
    assert hedge.p99_s <= 0.5 * none.p99_s
    assert abs(hedge.p50_s / none.p50_s - 1.0) < 0.01
    assert hedge.extra_attempts == pytest.approx(0.05, abs=Z * _se(0.05, runs))

    # Retry cancels calls that were about to finish: p95-p96 get worse than doing nothing,
    # a second stall is not raced (p99.9 stays high), and a 30 s deadline is missed more.
    def q(r: object, p: float) -> float:
        return float(np.quantile(r.end_s, p))  # type: ignore[attr-defined]

    assert q(retry, 0.96) > 1.25 * q(none, 0.96)
    assert q(hedge, 0.96) == q(none, 0.96)
    assert q(retry, 0.999) > 1.5 * q(hedge, 0.999)
    assert retry.p99_s > hedge.p99_s
    assert retry.miss_rate > hedge.miss_rate + Z * _se(hedge.miss_rate, runs)


def test_cutoff_shrinks_when_little_time_is_left() -> None:
    """A step acts at min(cutoff, deadline - reserve - start): late runs act early."""
    slow = RouteSample.from_grid(np.full(10, 20.0))
    fast = RouteSample.from_grid(np.full(10, 1.0))
    step = StepModel(
        "a", (), True, slow, cutoff_s=10.0, action="retry", second=fast, reserve_s=15.0
    )
    end, _ = run(WorkflowModel((step,), deadline_s=20.0), 1000)
    assert np.allclose(end, 5.0 + 1.0)  # cut at 20 - 15 - 0 = 5 s, then 1 s on the fast route
    end, _ = run(WorkflowModel((step,), deadline_s=100.0), 1000)
    assert np.allclose(end, 10.0 + 1.0)


def test_optional_step_may_fail_without_failing_the_run() -> None:
    """An optional step cut with `fail` costs its cutoff in time but never the run."""
    route = lognormal(10.0, 0.8)
    opt = StepModel("opt", (), False, route, cutoff_s=12.0, action="fail")
    end, ok = run(WorkflowModel((opt,)), 10_000)
    assert ok.all()
    assert end.max() <= 12.0 + 1e-9
    end, ok = run(WorkflowModel((dataclasses.replace(opt, required=True),)), 10_000)
    assert abs((~ok).mean() - stats.lognorm(0.8, scale=10.0).sf(12.0)) < Z * _se(0.41, 10_000)


@pytest.mark.parametrize(("seed", "shared"), [(s, s >= 3) for s in range(6)])
def test_vectorized_engine_equals_the_reference_run_by_run(seed: int, shared: bool) -> None:
    """On the same uniforms the vectorized engine and the plain-Python reference agree exactly."""
    rng = np.random.default_rng(seed)
    routes = [
        RouteSample.from_latencies(
            rng.lognormal(rng.uniform(0, 3), rng.uniform(0.2, 1.0), 500),
            ttft_s=rng.lognormal(-1, 0.5, 500),
            error_rate=float(rng.choice([0.0, 0.05, 0.2])),
            error_s=rng.uniform(0, 25, 20),
            invalid_rate=float(rng.choice([0.0, 0.1])),
        )
        for _ in range(4)
    ]
    steps = []
    for i in range(6):
        deps = (
            tuple(
                int(d) for d in rng.choice(i, size=min(i, int(rng.integers(0, 3))), replace=False)
            )
            if i
            else ()
        )
        steps.append(
            StepModel(
                f"s{i}",
                deps,
                bool(rng.random() < 0.7),
                routes[int(rng.integers(4))],
                signal=str(rng.choice(["total", "ttft"])),
                cutoff_s=float(rng.uniform(0.5, 20.0)),
                action=str(rng.choice(["wait", "hedge", "retry", "downgrade", "fail"])),
                second=routes[int(rng.integers(4))] if rng.random() < 0.5 else None,
                upgrade=routes[int(rng.integers(4))] if rng.random() < 0.5 else None,
                idempotent=bool(rng.random() < 0.8),
                reserve_s=float(rng.choice([0.0, rng.uniform(0, 10)])),
                ttft_cutoff_s=float(rng.choice([math.inf, rng.uniform(0.2, 20.0)])),
                total_cutoff_s=float(rng.choice([math.inf, rng.uniform(0.5, 20.0)])),
                # repeats that share the job: every route its own correlation with the first
                shares=tuple((r, float(rng.choice([0.0, 0.5, 0.9]))) for r in routes)
                if shared
                else (),
            )
        )
    model = WorkflowModel(tuple(steps), deadline_s=float(rng.choice([math.inf, 30.0])))
    draws = Draws(400, seed=seed, keep=True)
    outcome = simulate_runs(model, draws)
    uniforms = [step_indexes(s, draws.stack(s.name)) for s in model.steps]
    for r in range(400):
        end, ok, extras = reference_run(model, [[int(x) for x in u[:, r]] for u in uniforms])
        assert outcome.end_s[r] == pytest.approx(end, rel=1e-12, abs=1e-12)
        assert outcome.ok[r] == ok
        assert sum(int(o.extra[r]) for o in outcome.steps) == extras


def test_same_seed_same_numbers_and_chunks_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulating in chunks gives every run once; the same seed repeats the result."""
    monkeypatch.setattr(api, "CHUNK_RUNS", 1000)
    model = WorkflowModel((StepModel("a", (), True, lognormal(3.0, 0.5)),), deadline_s=6.0)
    one, two = simulate_model(model, runs=2500, seed=3), simulate_model(model, runs=2500, seed=3)
    assert one.runs == 2500
    assert one.end_s.size == 2500
    assert one.as_dict() == two.as_dict()
    expected = stats.lognorm(0.5, scale=3.0).sf(6.0)
    assert abs(one.miss_rate - expected) <= Z * _se(expected, 2500)


def test_censored_calls_are_filled_beyond_their_cut() -> None:
    """Cut calls get a latency beyond the cut, so the p99 is not biased low by the cap."""
    rng = np.random.default_rng(4)
    true = rng.lognormal(math.log(10.0), 0.7, 20_000)
    cap = float(np.quantile(true, 0.8))  # 20 % cut at the cap
    latency = np.where(true > cap, np.nan, true)
    cut = np.where(true > cap, cap, np.nan)
    sample = RouteSample.from_latencies(latency, censored_at_s=cut, seed=1)
    assert sample.censored == pytest.approx(0.2, abs=0.01)
    assert sample.total_s.min() > 0
    assert np.all(np.diff(sample.total_s) >= 0)
    p99 = stats.lognorm(0.7, scale=10.0).ppf(0.99)
    assert sample.quantile(0.99) == pytest.approx(p99, rel=0.08)
    assert sample.quantile(0.99) > cap * 1.5


def test_a_sample_needs_finished_calls() -> None:
    """A route sample refuses fewer than two finished calls, naming the bucket."""
    with pytest.raises(ConfigError, match="bucket in 1k-4k"):
        RouteSample.from_latencies([1.0, math.nan], bucket="in 1k-4k")


def _fixed(seconds: float, **kw: float) -> RouteSample:
    return RouteSample.from_grid(np.full(10, seconds), **kw)  # type: ignore[arg-type]


def test_a_failed_required_step_skips_what_waits_on_it() -> None:
    """As in the executor: the steps after a failed required step never start nor hedge."""
    broken = _fixed(2.0, error_rate=0.5)  # a failure takes 1 s
    first = StepModel("a", (), True, broken)
    after = StepModel("b", (0,), True, _fixed(50.0), cutoff_s=5.0, action="hedge")
    model = WorkflowModel((first, after), error_retries=0)
    outcome = simulate_runs(model, Draws(1000, seed=1))
    failed = ~outcome.ok
    assert 400 < failed.sum() < 600
    assert np.all(outcome.end_s[failed] == 1.0)
    assert np.all(outcome.end_s[~failed] == 2.0 + 50.0)  # the hedge at 5 s is no faster
    skipped = outcome.steps[1].skipped
    assert skipped is not None
    assert np.array_equal(skipped, failed)
    assert np.array_equal(outcome.steps[1].extra, ~failed)


def test_an_optional_step_still_running_at_the_deadline_is_cut_there() -> None:
    """The run ends at the deadline without its optional result, and is not a miss."""
    required = StepModel("a", (), True, _fixed(5.0))
    optional = StepModel("b", (), False, _fixed(50.0))
    model = WorkflowModel((required, optional), deadline_s=20.0)
    result = sim_result(model, simulate_runs(model, Draws(1000, seed=1)))
    assert result.miss_rate == 0.0
    assert result.p99_s == 20.0


def test_an_optional_sink_does_not_hide_a_late_required_step() -> None:
    """A required step past the deadline misses the run, even when an optional step follows."""
    required = StepModel("a", (), True, _fixed(25.0))
    optional = StepModel("b", (0,), False, _fixed(1.0))
    model = WorkflowModel((required, optional), deadline_s=20.0)
    result = sim_result(model, simulate_runs(model, Draws(1000, seed=1)))
    assert 1.0 == result.miss_rate
    assert 25.0 == result.p50_s
    assert (25.0, True, 0) == reference_run(model, [[0, 0, 0], [0, 0, 0]])


def test_no_extra_attempt_is_due_at_the_deadline() -> None:
    """A last step whose cut falls on the deadline does not act (nor count an extra attempt)."""
    slow = StepModel("a", (), True, _fixed(30.0), cutoff_s=25.0, action="retry", second=_fixed(1.0))
    model = WorkflowModel((slow,), deadline_s=20.0)  # cut = min(25, 20 - 0 - 0) = 20: too late
    outcome = simulate_runs(model, Draws(1000, seed=1))
    assert np.all(outcome.end_s == 30.0)
    assert not outcome.steps[0].fired.any()
    early = WorkflowModel((dataclasses.replace(slow, reserve_s=1.0),), deadline_s=20.0)
    outcome = simulate_runs(early, Draws(1000, seed=1))
    assert np.all(outcome.end_s == 19.0 + 1.0)  # cut at 20 - 1 = 19 s, then 1 s
    assert outcome.steps[0].extra.all()


def test_a_cutoff_on_the_other_clock_acts_too() -> None:
    """Watched on the TTFT at 3 s with a total cutoff at 8 s: a stream that started acts at 8 s."""
    streamed = RouteSample.from_grid(np.full(10, 20.0), ttft_share=0.05)  # first token at 1 s
    step = StepModel(
        "a", (), True, streamed, signal="ttft", cutoff_s=3.0, action="retry",
        second=_fixed(1.0), total_cutoff_s=8.0,
    )  # fmt: skip
    end, _ = run(WorkflowModel((step,)), 100)
    assert np.all(end == 9.0)


def test_an_error_is_retried_only_on_an_idempotent_step() -> None:
    """A non-idempotent step's failed first attempt is not repeated (nor billed twice)."""
    flaky = lognormal(1.0, 0.3, error_rate=0.2)
    for idempotent, failure in ((True, 0.04), (False, 0.2)):
        step = StepModel("a", (), True, flaky, idempotent=idempotent)
        _, ok = run(WorkflowModel((step,)), 100_000)
        assert abs((~ok).mean() - failure) <= Z * _se(failure, 100_000)


def test_workflow_model_reserves_from_the_plans_predicted_medians() -> None:
    """Like the executor, the reserve reads predicted.p50_s; before calibration, sample medians."""
    from tailkit.config import parse_plan
    from tailkit.simulation import workflow_model

    text = """\
tailkit_plan: 1
workflow: w
deadline_s: 60
routes:
  a/m: {provider: a, model: m}
steps:
  first: {route: a/m}
  second: {route: a/m, depends_on: [first]}
  third: {route: a/m, depends_on: [second]}
"""
    samples = {(n, "a/m"): _fixed(4.0) for n in ("first", "second", "third")}
    model = workflow_model(parse_plan(text), samples)
    assert [s.reserve_s for s in model.steps] == [8.0, 4.0, 0.0]
    predicted = "\n    predicted: {p50_s: 2.5, p99_s: 9.0, hedge_rate: 0.0}"
    text = text.replace("depends_on: [first]}", "depends_on: [first]," + predicted + "}")
    text = text.replace("  second: {", "  second:\n    {")
    model = workflow_model(parse_plan(text), samples)
    assert [s.reserve_s for s in model.steps] == [6.5, 4.0, 0.0]


@pytest.mark.parametrize(("first_s", "hedge_s", "end_s"), [(9.0, 1.0, 9.0), (6.0, 3.0, 8.0)])
def test_a_hedged_step_whose_attempts_both_fail_ends_with_the_last(
    first_s: float, hedge_s: float, end_s: float
) -> None:
    """Both attempts fail: the step fails when the later one does (no error retry after a hedge)."""
    first = RouteSample(np.ones(4), np.ones(4), error_rate=0.9999, error_s=np.array([first_s]))
    hedge = RouteSample(np.ones(4), np.ones(4), error_rate=0.9999, error_s=np.array([hedge_s]))
    step = StepModel("a", (), True, first, cutoff_s=5.0, action="hedge", second=hedge)
    draws = Draws(2000, seed=2, keep=True)
    outcome = simulate_runs(WorkflowModel((step,)), draws)
    both = (draws.slot("a", 0) >= first.ok_entries) & (draws.slot("a", 1) >= hedge.ok_entries)
    assert both.sum() > 1900
    assert np.all(outcome.end_s[both] == end_s)
    assert not outcome.ok[both].any()
    assert np.all(outcome.steps[0].recovery[both] == 0)
