"""
The executor and the simulator are twins: on the simulator's draws, the same runs.

A small workflow (a fan-out and a join, a deadline that bites, a hedge watched on the time to
first token, a retry, a downgrade, optional steps that fail, a route with errors and invalid
outputs) is simulated on ``Draws``; then the real `Executor` runs the same runs on the
virtual-time loop, with an attempt function that plays, for each (run, step, slot), the drawn
outcome: it streams its first token at the drawn TTFT and ends at the drawn total, or fails at
the drawn error time, or answers with output the step's validator refuses. Attempts map to
slots as the simulator defines them: slot 0 the first attempt, slot 1 the attempt a cutoff or
an error starts, slot 3 the cutoff's attempt when slot 1 went to an error's retry (a retry is
watched by the step's cutoffs like the first attempt), slot 2 the upgrade. Every run must end
at the same instant (to 1e-6 s of virtual time), with the same verdict, the same extra
attempts and the same budget denials.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from tailkit.config import Plan, parse_plan
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Executor,
    HedgeBudget,
    Ledger,
    MemorySink,
    ProviderThrottle,
    RunResult,
    StepPolicy,
)
from tailkit.simulation import RouteSample, WorkflowModel, simulate_model, workflow_model
from tailkit.simulation._reference import RunTrace, reference_trace
from tailkit.simulation.lowlevel import Draws, LiveState, reference_live
from tailkit.simulation.lowlevel import simulate_runs as run_workflow
from tests._fakeloop import run


RUNS = 500
DEADLINE_S = 16.0
SLOT = {"primary": 0, "upgrade": 2}  # any other attempt: slot 1, or 3 once slot 1 is used
PLAN = """\
tailkit_plan: 1
workflow: twin
deadline_s: {deadline}
hedge_budget: {budget}
routes:
  a/m: {{provider: a, model: m}}
  b/m: {{provider: b, model: m}}
  c/m: {{provider: c, model: m}}
  u/big: {{provider: u, model: big}}
  d/small: {{provider: d, model: small}}
steps:
  plan:
    route: a/m
    signal: ttft
    ttft_cutoff_s: 1.1
    cutoff_s: 7.5
    on_cutoff: hedge
    hedge_route: b/m
    predicted: {{p50_s: 3.1, p99_s: 9.0, hedge_rate: 0.1}}
  fetch:
    route: c/m
    depends_on: [plan]
    cutoff_s: 7.0
    on_cutoff: retry
    hedge_route: b/m
    upgrade_route: u/big
    predicted: {{p50_s: 4.2, p99_s: 12.0, hedge_rate: 0.05}}
  search:
    route: a/m
    depends_on: [plan]
    cutoff_s: 5.0
    on_cutoff: downgrade
    downgrade_route: d/small
    predicted: {{p50_s: 2.9, p99_s: 7.0, hedge_rate: 0.1}}
  tag:
    route: a/m
    depends_on: [plan]
    required: false
    cutoff_s: 3.5
    on_cutoff: fail
    predicted: {{p50_s: 2.8, p99_s: 3.5, hedge_rate: 0.0}}
  note:
    route: c/m
    depends_on: [plan]
    required: false
    idempotent: false
    predicted: {{p50_s: 4.0, p99_s: 12.0, hedge_rate: 0.0}}
  probe:
    route: c/m
    depends_on: [plan]
    required: false
    cutoff_s: 3.0
    on_cutoff: hedge
    hedge_route: a/m
    predicted: {{p50_s: 3.5, p99_s: 12.0, hedge_rate: 0.2}}
  write:
    route: a/m
    depends_on: [fetch, search, tag]
    cutoff_s: 6.0
    on_cutoff: hedge
    hedge_route: b/m
    upgrade_route: u/big
    predicted: {{p50_s: 3.0, p99_s: 8.0, hedge_rate: 0.12}}
"""


def _route(
    rng: np.random.Generator, median_s: float, sigma: float, *, error_rate: float = 0.0,
    invalid_rate: float = 0.0, n: int = 4000,
) -> RouteSample:  # fmt: skip
    """A streamed route: lognormal totals, first tokens at 5-40 % of them, 4 % stuck starts."""
    total = median_s * np.exp(sigma * rng.standard_normal(n))
    share = np.where(rng.random(n) < 0.04, rng.uniform(0.8, 1.0, n), rng.uniform(0.05, 0.4, n))
    return RouteSample.from_latencies(
        total, ttft_s=total * share, error_rate=error_rate, error_s=rng.uniform(0.2, 4.0, 50),
        invalid_rate=invalid_rate,
    )  # fmt: skip


def _samples() -> dict[tuple[str, str], RouteSample]:
    rng = np.random.default_rng(7)
    routes = {
        "a/m": _route(rng, 2.6, 0.55, invalid_rate=0.03),
        "b/m": _route(rng, 2.4, 0.45, invalid_rate=0.1),
        "c/m": _route(rng, 3.5, 0.6, error_rate=0.1, invalid_rate=0.12),
        "u/big": _route(rng, 4.5, 0.3, error_rate=0.1),
        "d/small": _route(rng, 1.2, 0.3),
    }
    steps = ("plan", "fetch", "search", "tag", "note", "probe", "write")
    return {(step, name): sample for step in steps for name, sample in routes.items()}


SAMPLES = _samples()


def _plan(budget: float = 0.5, deadline_s: float = DEADLINE_S) -> Plan:
    return parse_plan(PLAN.format(budget=budget, deadline=deadline_s))


class Twin:
    """The simulator's draws for ``runs`` runs, and an attempt function that plays them."""

    def __init__(
        self,
        plan: Plan,
        runs: int,
        seed: int = 3,
        *,
        samples: dict[tuple[str, str], RouteSample] | None = None,
        chunk_s: float | None = None,
    ) -> None:
        self.plan, self.runs = plan, runs
        self.samples = SAMPLES if samples is None else samples
        self.chunk_s = chunk_s  # streams in chunks this far apart, stalling where drawn
        self.model = with_failover(workflow_model(plan, self.samples), plan, self.samples)
        self.draws = Draws(runs, seed=seed, keep=True)
        self.names = [step.name for step in self.model.steps]
        self.index = {name: self.draws.stack(name) for name in self.names}
        self.used: set[tuple[str | None, str]] = set()  # (run, step) whose slot 1 is taken

    def per_run(self, r: int) -> list[list[int]]:
        """Every step's raw table indexes (one per slot) in run ``r``."""
        return [[int(x) for x in self.index[name][:, r]] for name in self.names]

    def attempt(self, a: Attempt) -> Any:
        """Play the drawn outcome of this (run, step, slot)."""
        r = int(a.run_id[1:]) if a.run_id else 0
        route = self.samples[(a.step, a.route)]
        k = int(self.index[a.step][self.slot(a), r])
        end_s, ttft_s = float(route.end_table[k]), float(route.ttft_table[k])
        if k >= route.ok_entries:
            return _fail_after(end_s)
        text = "refused" if route.invalid_table[k] else "fine"
        if self.chunk_s is None:
            return _stream(ttft_s, end_s, text)
        stall = (math.inf, 0.0)
        if route.gap_table is not None and route.stall_start_table is not None:
            stall = (float(route.stall_start_table[k]), float(route.gap_table[k]))
        return _chunked(ttft_s, end_s, text, self.chunk_s, stall)

    def slot(self, a: Attempt) -> int:
        """The simulator's slot of this attempt: the first, the upgrade, or the next repeat's."""
        if a.role in SLOT:
            return SLOT[a.role]
        key = (a.run_id, a.step)
        if key in self.used:
            return 3
        self.used.add(key)
        return 1

    def executor(
        self, budget: HedgeBudget | None = None, throttle: ProviderThrottle | None = None
    ) -> tuple[Executor, MemorySink]:
        """
        An executor for the plan (``budget``: the default), validating every step's output.

        The simulator does not model the provider throttle (a route failing often enough to
        engage it is a brownout, not the tail a plan is built on), so unless a test passes
        one, the throttle here holds enough tokens never to engage on the drawn failures.
        """
        throttle = throttle or ProviderThrottle(max_tokens=1_000_000.0)
        self.used.clear()  # a new executor replays the runs afresh
        sink = MemorySink()
        # the simulator retries an error at once; the executor's jitter is turned off to match
        valid = StepPolicy(
            validator=lambda result: result.text.startswith("fine"), retry_jitter_s=0.0
        )
        policies = dict.fromkeys(self.names, valid)
        executor = Executor(
            self.plan, ledger=Ledger(sink), budget=budget, throttle=throttle, policies=policies
        )
        return executor, sink


def with_failover(
    model: WorkflowModel, plan: Plan, samples: dict[tuple[str, str], RouteSample] | None = None
) -> WorkflowModel:
    """
    The model with each step's failover route: its hedge route when on another provider.

    The rule of `tailkit.simulation._couple.repeat_route`; a model built before the builder
    sets it gets it here (setting it again changes nothing).
    """
    samples = SAMPLES if samples is None else samples
    steps = []
    for step in model.steps:
        planned = plan.steps[step.name]
        other = planned.hedge_route
        own = plan.routes[planned.route].provider
        if other is not None and plan.routes[other].provider != own:
            steps.append(dataclasses.replace(step, failover=samples[(step.name, other)]))
        else:
            steps.append(step)
    return dataclasses.replace(model, steps=tuple(steps))


async def _fail_after(seconds: float) -> AsyncIterator[Any]:
    """A stream that fails before its first token, as the simulator's failed draws do."""
    await asyncio.sleep(seconds)
    msg = "drawn failure"
    raise AttemptError(msg, http_status=500)
    yield  # an async generator: the executor watches its TTFT like any stream's


async def _stream(ttft_s: float, end_s: float, text: str) -> AsyncIterator[Any]:
    await asyncio.sleep(ttft_s)
    yield text
    await asyncio.sleep(end_s - ttft_s)
    yield FINAL


async def _chunked(
    ttft_s: float, end_s: float, text: str, chunk_s: float, stall: tuple[float, float]
) -> AsyncIterator[Any]:
    """
    A stream in chunks ``chunk_s`` apart, that stalls where the simulator's draw says.

    ``stall``: the age of the last chunk before the stall and the stall's gap (``inf``: the
    stream does not stall). Its first token at ``ttft_s``, its end at ``end_s``.
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    at, gap = stall
    times = [*np.arange(ttft_s, min(at, end_s), chunk_s)]
    if math.isfinite(at):  # the last chunk before the gap, the first after it
        times += [at, *np.arange(at + gap, end_s, chunk_s)]
    for i, t in enumerate(times):
        await asyncio.sleep(max(began + float(t) - loop.time(), 0.0))
        yield text if i == 0 else "."
    await asyncio.sleep(max(began + end_s - loop.time(), 0.0))
    yield FINAL


def _extras(sink: MemorySink) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in sink.records:
        if record.attrs.get("started_by") == "cutoff":
            counts[record.run_id or ""] = counts.get(record.run_id or "", 0) + 1
    return counts


_DENIED = ("hedge_denied", "retry_denied", "upgrade_denied")


def _denied_lines(sink: MemorySink, why: str) -> int:
    """Ledger lines that say an extra attempt they asked for was refused for ``why``."""
    return sum(1 for r in sink.records for key in _DENIED if r.attrs.get(key) == why)


def _same(result: RunResult, trace: RunTrace, extras: int, deadline_s: float) -> None:
    """One run: the executor's end, verdict, extra attempts and denials are the simulator's."""
    where = f"run {result.run_id}"
    assert math.isclose(result.elapsed_s, min(trace.end_s, deadline_s), abs_tol=1e-6), where
    assert result.ok == (not trace.missed), where
    assert extras == trace.extras, where
    assert result.denials["budget"] == trace.denials, where


def _sequential(twin: Twin, executor: Executor, sink: MemorySink) -> list[RunResult]:
    """Every run on its own fresh virtual loop, one after another (each starting at t = 0)."""
    return [run(executor.run(twin.attempt, run_id=f"r{r}")) for r in range(twin.runs)]


def test_executor_plays_every_run_as_the_simulator_does() -> None:
    """With a budget that never binds, every run matches the engine and the reference."""
    twin = Twin(_plan(), RUNS)
    executor, sink = twin.executor()
    results = _sequential(twin, executor, sink)
    engine = run_workflow(twin.model, twin.draws)
    extras = _extras(sink)
    traces = [reference_trace(twin.model, twin.per_run(r)) for r in range(RUNS)]
    for r, (result, trace) in enumerate(zip(results, traces, strict=True)):
        _same(result, trace, extras.get(f"r{r}", 0), DEADLINE_S)
        assert engine.end_s[r] == pytest.approx(trace.end_s, rel=1e-12, abs=1e-12)
        assert bool(engine.ok[r]) == trace.ok
        assert sum(int(o.extra[r]) for o in engine.steps) == trace.extras
    # the workflow exercised what it is meant to: misses, failures, every action, recoveries
    missed = sum(t.missed for t in traces)
    assert 0.05 * RUNS < missed < 0.5 * RUNS
    assert sum(not t.ok for t in traces) > 5
    assert sum(t.end_s > DEADLINE_S for t in traces) > 5
    roles = {r.role for r in sink.records}
    assert roles == {"primary", "hedge", "retry", "downgrade", "upgrade"}
    causes = {r.attrs.get("started_by") for r in sink.records}
    assert causes == {None, "cutoff", "error", "invalid"}
    assert {r.attrs.get("cutoff") for r in sink.records} >= {"ttft", "total"}
    assert executor.denials == {"budget": 0, "throttle": 0}
    # errors fail over to a hedge route on another provider, and every attempt is watched:
    # a retry's and an upgrade's own cutoffs fire (a failover is hedged back on its route)
    failed_over = [r for r in sink.records if r.attrs.get("failover")]
    assert len(failed_over) > 20
    assert {(r.provider, r.attrs["failover"]) for r in failed_over} == {("c", "b/m"), ("c", "a/m")}
    watched = [r for r in sink.records if r.role in ("retry", "upgrade") and r.attrs.get("cutoff")]
    assert {r.role for r in watched} == {"retry", "upgrade"}
    assert sum(r.role == "retry" for r in watched) > 5


def test_a_binding_budget_denies_what_the_reference_denies() -> None:
    """A tight budget, runs one after another: denials and their effects match run by run."""
    twin = Twin(_plan(), RUNS, seed=5)
    budget: dict[str, Any] = {"allowance": 1, "sigmas": 1.0, "window_firsts": 300}
    executor, sink = twin.executor(HedgeBudget(0.04, **budget))
    results = _sequential(twin, executor, sink)
    mirror = HedgeBudget(0.04, **budget)
    traces = [reference_trace(twin.model, twin.per_run(r), budget=mirror) for r in range(RUNS)]
    extras = _extras(sink)
    for r, (result, trace) in enumerate(zip(results, traces, strict=True)):
        _same(result, trace, extras.get(f"r{r}", 0), DEADLINE_S)
    denied = sum(t.denials for t in traces)
    assert denied > 20
    assert sum(t.denials > 0 for t in traces) < 0.8 * RUNS  # it binds for some runs, not all
    assert executor.denials["budget"] == denied == _denied_lines(sink, "budget")
    lines = [r for r in sink.records if r.attrs.get("hedge_denied") == "budget"]
    assert 0 < len(lines) < denied  # cutoffs were refused, and so were retries or upgrades
    assert all(r.attrs["cutoff"] in {"ttft", "total"} for r in lines)
    # the engine never denies: where the budget did not bind, it agrees with the reference
    free = [reference_trace(twin.model, twin.per_run(r)) for r in range(RUNS)]
    assert sum(f.extras for f in free) > sum(t.extras for t in traces)


def _concurrent(twin: Twin, executor: Executor) -> list[RunResult]:
    async def main() -> list[RunResult]:
        return list(
            await asyncio.gather(
                *(executor.run(twin.attempt, run_id=f"r{r}") for r in range(twin.runs))
            )
        )

    return run(main())


def test_many_concurrent_runs_within_budget_are_never_denied() -> None:
    """400 runs started together, a plan on its budget: no denial, every run as simulated."""
    runs = 400
    expected = simulate_model(
        with_failover(workflow_model(_plan(), SAMPLES), _plan()), runs=100_000, seed=99
    )
    # on budget: the executor spends the budget on recoveries (error retries, upgrades) too
    spend = expected.extra_attempts + expected.recovery_attempts
    budget = math.ceil(spend * 1000) / 1000
    twin = Twin(_plan(budget=budget), runs, seed=25)
    traces = [reference_trace(twin.model, twin.per_run(r)) for r in range(runs)]
    spent = sum(t.extras + t.recoveries for t in traces) / (runs * len(twin.names))
    assert spent > budget  # these runs happen to spend more than expected: the noise at work
    executor, sink = twin.executor()  # Executor's default budget: HedgeBudget(plan.hedge_budget)
    results = _concurrent(twin, executor)
    extras = _extras(sink)
    assert executor.denials == {"budget": 0, "throttle": 0}
    for r, (result, trace) in enumerate(zip(results, traces, strict=True)):
        _same(result, trace, extras.get(f"r{r}", 0), DEADLINE_S)
    assert sum(extras.values()) == sum(t.extras for t in traces) > 0.05 * runs
    # without the noise headroom and the allowance, the same runs would have been denied
    strict, _ = twin.executor(HedgeBudget(budget, allowance=0, sigmas=0.0))
    _concurrent(twin, strict)
    assert strict.denials["budget"] > 0


def test_the_budget_brakes_a_plan_that_overspends() -> None:
    """Hedging nearly every run at 5 %: extras stay at the share plus its noise; the rest denied."""
    runs = 400
    text = PLAN.format(budget=0.05, deadline=100.0).replace(
        "ttft_cutoff_s: 1.1", "ttft_cutoff_s: 0.01"
    )
    twin = Twin(parse_plan(text), runs, seed=2)
    executor, sink = twin.executor()
    results = _concurrent(twin, executor)
    firsts = runs * len(twin.names)
    extras = sum(_extras(sink).values())
    wanted = extras + executor.denials["budget"]
    assert wanted > 0.9 * runs  # the plan step alone hedges nearly every run
    bound = 0.05 * firsts + 3.0 * math.sqrt(0.05 * firsts) + 2
    assert 0.05 * firsts <= extras <= bound
    assert executor.denials["budget"] == sum(r.denials["budget"] for r in results) > 0.5 * runs
    assert _denied_lines(sink, "budget") == executor.denials["budget"]


def test_a_throttled_hedge_provider_is_a_visible_denial() -> None:
    """Failures at the hedge provider stop hedges there; each denial is on the ledger."""
    twin = Twin(_plan(), 40, seed=4)
    executor, sink = twin.executor(throttle=ProviderThrottle())
    for _ in range(6):
        executor.shared.throttle.on_failure("b")
    results = [run(executor.run(twin.attempt, run_id=f"r{r}")) for r in range(40)]
    denied = [r for r in sink.records if r.attrs.get("hedge_denied") == "throttle"]
    assert (
        len(denied) == executor.denials["throttle"] == sum(r.denials["throttle"] for r in results)
    )
    assert denied
    assert all(r.attrs["action_skipped"] == "provider b throttled" for r in denied)
    assert not any(r.role == "hedge" and r.provider == "b" for r in sink.records)


STALL_PLAN = """\
tailkit_plan: 1
workflow: stalls
deadline_s: 12.0
hedge_budget: 0.5
routes:
  s/m: {provider: s, model: m}
  t/m: {provider: t, model: m}
  d/small: {provider: d, model: small}
steps:
  ask:
    route: s/m
    cutoff_s: 6.0
    stall_cutoff_s: 0.8
    on_cutoff: hedge
    hedge_route: t/m
    predicted: {p50_s: 2.2, p99_s: 7.0, hedge_rate: 0.1}
  read:
    route: t/m
    depends_on: [ask]
    cutoff_s: 7.0
    stall_cutoff_s: 0.7
    on_cutoff: retry
    upgrade_route: s/m
    predicted: {p50_s: 2.2, p99_s: 7.0, hedge_rate: 0.1}
  cut:
    route: s/m
    depends_on: [ask]
    signal: ttft
    ttft_cutoff_s: 1.4
    cutoff_s: 6.5
    stall_cutoff_s: 0.9
    on_cutoff: downgrade
    downgrade_route: d/small
    hedge_route: t/m
    predicted: {p50_s: 2.2, p99_s: 7.0, hedge_rate: 0.1}
  tag:
    route: t/m
    depends_on: [ask]
    required: false
    cutoff_s: 5.0
    stall_cutoff_s: 0.8
    on_cutoff: fail
    predicted: {p50_s: 2.2, p99_s: 5.0, hedge_rate: 0.0}
"""


def _stalling(
    rng: np.random.Generator, *, stall: float, error_rate: float = 0.0, invalid_rate: float = 0.0
) -> RouteSample:
    """A streamed route whose calls tell their stalls: tokens at a pace, some stalled 1-8 s."""
    n = 3000
    tokens = rng.integers(60, 160, n).astype(float)
    ttft = 0.8 * np.exp(0.3 * rng.standard_normal(n))
    total = ttft + (tokens - 1) * 0.015 * np.exp(0.15 * rng.standard_normal(n))
    stalled = rng.random(n) < stall
    total[stalled] += rng.uniform(1.0, 8.0, int(stalled.sum()))
    return RouteSample.from_latencies(
        total, ttft_s=ttft, output_tokens=tokens, error_rate=error_rate,
        error_s=rng.uniform(0.2, 2.0, 50), invalid_rate=invalid_rate,
    )  # fmt: skip


def test_a_stall_cut_plays_as_the_simulator_plays_it() -> None:
    """
    Streams in chunks that stall where drawn: the executor's stall cutoff acts as simulated.

    It fires the step's action where the simulator's does (a hedge racing the stalled stream,
    a retry or downgrade replacing it, a fail giving up), on error retries and upgrades too.
    """
    rng = np.random.default_rng(11)
    routes = {
        "s/m": _stalling(rng, stall=0.12, error_rate=0.08, invalid_rate=0.05),
        "t/m": _stalling(rng, stall=0.1, error_rate=0.05, invalid_rate=0.05),
        "d/small": _route(rng, 1.2, 0.3),
    }
    samples = {
        (step, name): r for step in ("ask", "read", "cut", "tag") for name, r in routes.items()
    }
    runs = 300
    twin = Twin(parse_plan(STALL_PLAN), runs, seed=8, samples=samples, chunk_s=0.1)
    assert {s.name: s.stall_cutoff_s for s in twin.model.steps} == {
        "ask": 0.8, "read": 0.7, "cut": 0.9, "tag": 0.8,
    }  # fmt: skip
    executor, sink = twin.executor()
    results = _sequential(twin, executor, sink)
    engine = run_workflow(twin.model, twin.draws)
    extras = _extras(sink)
    traces = [reference_trace(twin.model, twin.per_run(r)) for r in range(runs)]
    for r, (result, trace) in enumerate(zip(results, traces, strict=True)):
        _same(result, trace, extras.get(f"r{r}", 0), 12.0)
        assert engine.end_s[r] == pytest.approx(trace.end_s, rel=1e-12, abs=1e-12)
        assert bool(engine.ok[r]) == trace.ok
        assert sum(int(o.extra[r]) for o in engine.steps) == trace.extras
        assert sum(int(o.recovery[r]) for o in engine.steps) == trace.recoveries
    # the stall cutoff fired every action, on first attempts and on watched recoveries
    stalled = [r for r in sink.records if r.attrs.get("cutoff") == "stall"]
    assert {r.step for r in stalled} == {"ask", "read", "cut", "tag"}
    assert {r.role for r in stalled} == {"primary", "retry", "upgrade"}
    assert sum(not t.ok for t in traces) > 0


LIVE_PLAN = """\
tailkit_plan: 1
workflow: twin-live
deadline_s: 15.0
hedge_budget: 0.5
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/m: {provider: c, model: m}
  f/m: {provider: f, model: m}
  d/small: {provider: d, model: small}
steps:
  draft:
    route: a/m
    candidates: [a/m, f/m, c/m]
    cutoff_s: 5.0
    on_cutoff: hedge
    hedge_route: b/m
    upgrade_route: a/m
    live:
      quantile: 0.8
      cutoff_bounds_s: [2.0, 6.0]
      prior_s: {a/m: 4.0, f/m: 3.5, c/m: 5.0}
      window: 12
      min_calls: 4
      explore_every: 5
    predicted: {p50_s: 2.8, p99_s: 9.0, hedge_rate: 0.1}
  check:
    route: c/m
    depends_on: [draft]
    candidates: [c/m, a/m]
    cutoff_s: 6.0
    on_cutoff: retry
    live:
      quantile: 0.9
      cutoff_bounds_s: [2.5, 7.0]
      prior_s: {c/m: 6.0, a/m: 5.0}
      window: 10
      min_calls: 3
      explore_every: 4
    predicted: {p50_s: 3.0, p99_s: 9.0, hedge_rate: 0.1}
  polish:
    route: a/m
    depends_on: [check]
    candidates: [a/m, b/m]
    signal: ttft
    ttft_cutoff_s: 1.0
    cutoff_s: 7.0
    on_cutoff: hedge
    hedge_route: b/m
    live:
      quantile: 0.7
      cutoff_bounds_s: [0.4, 2.0]
      prior_s: {a/m: 1.0, b/m: 1.2}
      window: 10
      min_calls: 3
      explore_every: 4
    predicted: {p50_s: 2.5, p99_s: 8.0, hedge_rate: 0.1}
  tag:
    route: d/small
    depends_on: [draft]
    required: false
    cutoff_s: 2.0
    on_cutoff: fail
    predicted: {p50_s: 1.2, p99_s: 2.0, hedge_rate: 0.0}
"""


def _live_samples() -> dict[tuple[str, str], RouteSample]:
    """
    Distinct tails: f/m fast but heavy-tailed, c/m slow with errors, a/m and b/m between.

    65,536 calls a route, one per table entry: a live cutoff is a latency seen before, and
    a run that draws that very latency again ties with it, which float rounding decides (the
    executor measures an age as a difference of loop times, an ulp off the drawn value). With
    a call per entry such a tie is a repeat of one entry in 65,536; these runs have none.
    """
    rng = np.random.default_rng(17)
    n = 1 << 16
    routes = {
        "a/m": _route(rng, 2.6, 0.5, invalid_rate=0.03, n=n),
        "b/m": _route(rng, 2.4, 0.45, invalid_rate=0.05, n=n),
        "c/m": _route(rng, 3.2, 0.6, error_rate=0.08, invalid_rate=0.05, n=n),
        "f/m": _route(rng, 1.6, 1.1, n=n),
        "d/small": _route(rng, 1.2, 0.4, n=n),
    }
    steps = ("draft", "check", "polish", "tag")
    return {(step, name): sample for step in steps for name, sample in routes.items()}


def test_live_routing_plays_as_the_simulator_plays_it() -> None:
    """
    A plan that routes live, runs one after another: the executor decides as the simulator.

    Every run of every live step goes to the same candidate, for the same reason (best or an
    explore turn), with the same live cutoff, in the executor, in the one-run reference and
    in the engine (``concurrency=1``); every run ends at the same instant with the same
    verdict and extra attempts.
    """
    runs = 300
    samples = _live_samples()
    twin = Twin(parse_plan(LIVE_PLAN), runs, seed=13, samples=samples)
    reference = reference_live(twin.model, [twin.per_run(r) for r in range(runs)])
    engine = run_workflow(twin.model, twin.draws, live=LiveState(1))
    executor, sink = twin.executor()
    results = _sequential(twin, executor, sink)
    extras = _extras(sink)
    firsts = {
        (rec.run_id, rec.step): rec
        for rec in sink.records
        if rec.role == "primary" and "live" in rec.attrs
    }
    live = [(i, s) for i, s in enumerate(twin.model.steps) if s.live is not None]
    for r, (result, (trace, decided)) in enumerate(zip(results, reference, strict=True)):
        _same(result, trace, extras.get(f"r{r}", 0), 15.0)
        assert engine.end_s[r] == pytest.approx(trace.end_s, rel=1e-12, abs=1e-12)
        assert bool(engine.ok[r]) == trace.ok
        for i, step in live:
            assert step.live is not None
            chosen = engine.steps[i].live
            assert chosen is not None
            decision = decided.get(step.name)
            line = firsts.get((f"r{r}", step.name))
            where = f"run {r}, step {step.name}"
            if decision is None:  # the step never started
                assert chosen.route[r] == -1, where
                assert line is None, where
                continue
            assert step.live.routes[chosen.route[r]] == decision.route, where
            assert bool(chosen.explored[r]) == (decision.why == "explore"), where
            assert chosen.cutoff_s[r] == decision.cutoff_s, where
            assert line is not None, where
            assert f"{line.provider}/{line.model}" == decision.route, where
            assert line.attrs["live"] == decision.why, where
            assert line.attrs["live_calls"] == decision.calls, where
            assert line.attrs["live_cutoff_s"] == pytest.approx(decision.cutoff_s, abs=1e-9)
            value = line.attrs["live_value_s"]
            assert (value is None) == math.isinf(decision.value_s), where
            if value is not None:
                assert value == pytest.approx(decision.value_s, abs=1e-9), where
    # the plan exercised what it is meant to: decisions that change as the windows fill
    for _, step in live:
        made = [d[step.name] for _, d in reference if step.name in d]
        assert {d.why for d in made} == {"best", "explore"}, step.name
        best = {d.route for d in made if d.why == "best"}
        assert len(best) > 1, step.name  # the best route changed during the runs
        assert len({d.cutoff_s for d in made}) > 5, step.name
        told = [d.seen_s for d in made if d.seen_s is not None]
        assert any(math.isinf(t) for t in told), step.name
        assert any(math.isfinite(t) for t in told), step.name
    assert sum(t.missed for t, _ in reference) > 5
    roles = {r.role for r in sink.records}
    assert {"hedge", "retry", "upgrade"} <= roles
