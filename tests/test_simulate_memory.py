"""
The simulator's memory follows the routes and buckets of a plan, not its steps.

A plan of 1,000 steps on one route once held a route sample (its 65,536-entry tables and the
calls behind them) per step, and every step's arrays for 32,768 runs at once: gigabytes. These
tests check the structure (one sample per route and bucket, chunks that shrink as steps grow)
and the bytes allocated, never the time.
"""

from __future__ import annotations

import tracemalloc

from pathlib import Path

import pytest

from tailkit.config import parse_plan
from tailkit.simulation import RouteSample, WorkflowModel, load_samples, simulate_model
from tailkit.simulation import _api as api
from tailkit.simulation import _result as result
from tailkit.simulation._engine import live_steps
from tailkit.simulation.lowlevel import Draws, StepModel, sim_result, simulate_runs
from tailkit.store import Store


def _plan(steps: int, *, other_bucket: bool = False) -> str:
    lines = [
        "tailkit_plan: 1",
        "workflow: many",
        "deadline_s: 60",
        "routes:",
        "  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}",
        "  google/gemini-2.5-flash: {provider: google, model: gemini-2.5-flash}",
        "steps:",
    ]
    for i in range(steps):
        lines += [
            f"  s{i}:",
            "    route: openai/gpt-4.1-mini",
            "    expected_tokens: {input: 8000, output: 350}",
            "    hedge_route: google/gemini-2.5-flash",
        ]
    if other_bucket:
        lines += [
            "  long:",
            "    route: openai/gpt-4.1-mini",
            "    expected_tokens: {input: 20000, output: 100}",
        ]
    return "\n".join(lines) + "\n"


def test_steps_on_one_route_and_bucket_share_one_sample(production_db: Path) -> None:
    """Twenty steps on one route and bucket (hedging on a second) build two samples, not 40."""
    plan = parse_plan(_plan(20, other_bucket=True))
    with Store.open(production_db, read_only=True) as store:
        samples = load_samples(store, plan)
        lognormal = load_samples(store, plan, latency="lognormal")
    assert len(samples) == 41
    # (mini, 8k/350), (gemini, 8k/350), (mini, 20k/100): one sample each
    assert len({id(s) for s in samples.values()}) == 3
    assert len({id(s) for s in lognormal.values()}) == 3
    first = samples[("s0", "openai/gpt-4.1-mini")]
    assert all(samples[(f"s{i}", "openai/gpt-4.1-mini")] is first for i in range(20))
    assert samples[("long", "openai/gpt-4.1-mini")] is not first


def test_the_first_step_of_a_shared_sample_draws_what_it_drew_alone(production_db: Path) -> None:
    """A shared sample is the one its first step gets in a plan of its own: same cut fills."""
    with Store.open(production_db, read_only=True) as store:
        alone = load_samples(store, parse_plan(_plan(1)))
        shared = load_samples(store, parse_plan(_plan(5)))
    one, many = alone[("s0", "openai/gpt-4.1-mini")], shared[("s4", "openai/gpt-4.1-mini")]
    assert one.censored > 0  # the route has cut calls, whose latency is drawn from the seed
    assert one.total_s.tobytes() == many.total_s.tobytes()
    assert one.end_table.tobytes() == many.end_table.tobytes()


def test_chunks_shrink_as_steps_grow() -> None:
    """A chunk of runs holds at most CHUNK_STEP_RUNS step-runs, a multiple of 4 runs."""
    assert api.chunk_runs(1) == api.CHUNK_RUNS
    assert api.chunk_runs(64) == api.CHUNK_RUNS
    for steps in (65, 100, 1000, 2000):
        chunk = api.chunk_runs(steps)
        assert chunk % 4 == 0
        assert chunk * steps <= api.CHUNK_STEP_RUNS
    assert api.chunk_runs(100_000) == api.MIN_CHUNK_RUNS


def _fan_out(steps: int) -> WorkflowModel:
    route = RouteSample.lognormal(2.0, 0.5, error_rate=0.02, points=2_000)
    return WorkflowModel(
        tuple(StepModel(f"s{i}", (), True, route) for i in range(steps)), deadline_s=6.0
    )


def test_chunk_size_does_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seed gives the same runs whether 32,768 or 1,024 are simulated at once."""
    model = _fan_out(3)
    whole = simulate_model(model, runs=10_000, seed=5)
    monkeypatch.setattr(api, "CHUNK_RUNS", 1024)
    chunked = simulate_model(model, runs=10_000, seed=5)
    assert whole.end_s.tobytes() == chunked.end_s.tobytes()
    assert whole.as_dict() == chunked.as_dict()


def _peak_bytes(steps: int, runs: int) -> int:
    route = RouteSample.lognormal(2.0, 0.5, points=2_000)
    model = WorkflowModel(
        tuple(StepModel(f"s{i}", (), True, route) for i in range(steps)), deadline_s=6.0
    )
    tracemalloc.start()
    try:
        simulate_model(model, runs=runs, seed=1)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_follows_the_budget_not_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice the steps (100 -> 200) allocate well under twice the peak bytes (was 2x).

    The budgets are scaled down 8- and 32-fold so that small plans already reach them.
    """
    monkeypatch.setattr(api, "CHUNK_STEP_RUNS", 1 << 18)
    monkeypatch.setattr(api, "MIN_CHUNK_RUNS", 64)
    monkeypatch.setattr(result, "STEP_QUANTILE_VALUES", 1 << 18)
    monkeypatch.setattr(result, "MIN_STEP_QUANTILE_RUNS", 64)
    small, large = _peak_bytes(100, 8_192), _peak_bytes(200, 8_192)
    assert large < 1.4 * small


def _dag() -> WorkflowModel:
    """Steps a -> (b, c optional, d) -> e: an optional sink, failures and a deadline."""
    route = RouteSample.lognormal(2.0, 0.5, error_rate=0.05, invalid_rate=0.02, points=2_000)
    steps = (
        StepModel("a", (), True, route),
        StepModel("b", (0,), True, route, cutoff_s=3.0, action="retry"),
        StepModel("c", (0,), False, route),
        StepModel("d", (0,), True, route, cutoff_s=2.5, action="hedge", second=route),
        StepModel("e", (1, 3), True, route),
    )
    return WorkflowModel(steps, deadline_s=9.0)


def test_steps_let_go_as_played_give_the_same_runs() -> None:
    """simulate_runs with on_step (each step counted, then let go) plays the same runs."""
    model = _dag()
    kept = simulate_runs(model, Draws(5_000, seed=2))
    seen: list[int] = []
    streamed = simulate_runs(model, Draws(5_000, seed=2), on_step=lambda i, _: seen.append(i))
    assert seen == [0, 1, 2, 3, 4]
    assert streamed.steps == ()
    assert streamed.end_s.tobytes() == kept.end_s.tobytes()
    assert streamed.ok.tobytes() == kept.ok.tobytes()
    assert sim_result(model, kept).as_dict() == simulate_model(model, runs=5_000, seed=2).as_dict()


def test_live_steps_counts_the_ends_held_side_by_side() -> None:
    """A chain or a fan-out holds one or two ends at once; a fan-in holds all its branches."""
    route = RouteSample.lognormal(1.0, 0.3, points=100)

    def model(deps: list[tuple[int, ...]]) -> WorkflowModel:
        return WorkflowModel(tuple(StepModel(f"s{i}", d, True, route) for i, d in enumerate(deps)))

    assert live_steps(model([(), *[(i,) for i in range(99)]])) == 2  # a chain
    assert live_steps(model([()] * 100)) == 1  # independent steps
    assert live_steps(model([(), *[(0,)] * 99])) == 2  # a fan-out from one step
    assert live_steps(model([*[()] * 99, tuple(range(99))])) == 100  # a fan-in of 99
    assert live_steps(_dag()) == 3
