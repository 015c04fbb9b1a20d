"""
Calibrate's stall cutoffs and its total cutoff beside a TTFT cutoff.

Set where the calls show them, modelled by the simulator, and true against streams that stall
unlike the simulator assumes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailkit.calibration import Calibration, calibrate, predict
from tailkit.check.lowlevel import rate
from tailkit.config import Plan, parse_plan
from tailkit.executor import FINAL, Attempt, Executor, HedgeBudget, Ledger, MemorySink
from tailkit.ingest import ingest_paths
from tailkit.simulation import RouteSample, WorkflowModel, workflow_model
from tailkit.simulation._couple import step_indexes
from tailkit.simulation._reference import reference_trace
from tailkit.simulation.lowlevel import Draws, StepModel, simulate_runs
from tailkit.store import Store
from tests._fakeloop import VirtualLoop


WORKFLOW = """
tailkit_plan: 1
workflow: stalls
deadline_s: {deadline}
hedge_budget: 0.15
routes:
  a/m: {{provider: a, model: m}}
  b/m: {{provider: b, model: m}}
steps:
  ask:
    route: a/m
    expected_tokens: {{input: 2000, output: {output}}}
    hedge_route: b/m
  answer:
    depends_on: [ask]
    route: b/m
    expected_tokens: {{input: 2000, output: {output}}}
    hedge_route: a/m
"""
PACE_S = 0.02  # median seconds per output token after the first


def _calls(
    path: Path,
    *,
    stall: float = 0.0,
    tokens: bool = True,
    slow_ttft: float = 0.0,
    slow_gen: float = 0.0,
    seed: int = 1,
    per_route: int = 1500,
) -> None:
    """
    A log of two routes: a lognormal TTFT, 360-440 output tokens at a lognormal pace.

    ``stall`` of the streams stall after their first token for 10-25 s, then finish;
    ``slow_ttft`` wait 6x longer for their first token; ``slow_gen`` decode 4x slower.
    """
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as out:
        for provider in ("a", "b"):
            for i in range(per_route):
                ttft = math.exp(0.3 * rng.standard_normal())
                ttft *= 6.0 if rng.random() < slow_ttft else 1.0
                k = int(rng.integers(360, 440))
                pace = PACE_S * math.exp(0.15 * rng.standard_normal())
                pace *= 4.0 if rng.random() < slow_gen else 1.0
                total = ttft + (k - 1) * pace
                if rng.random() < stall:
                    total += rng.uniform(10.0, 25.0)
                row = {
                    "call_id": f"{provider}-{i}", "provider": provider, "model": "m",
                    "input_tokens": 2000, "output_tokens": k if tokens else None,
                    "status": "ok", "ttft_s": round(ttft, 4), "total_s": round(total, 4),
                }  # fmt: skip
                out.write(json.dumps(row) + "\n")


def _calibrated(folder: Path, *, deadline: float = 30.0, **log: Any) -> Calibration:
    _calls(folder / "calls.jsonl", **log)
    with Store.open(folder / "calls.duckdb") as store:
        assert ingest_paths(store, [folder / "calls.jsonl"]).ok
        output = 400 if log.get("tokens", True) else "null"  # no tokens logged: any bucket
        plan = parse_plan(WORKFLOW.format(deadline=deadline, output=output))
        return calibrate(store, plan, runs=4000, check_runs=20_000, seed=2, replicates=40)


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory) -> Calibration:
    """The workflow calibrated on streams of which 8 % stall after their first token."""
    return _calibrated(tmp_path_factory.mktemp("stalling"), stall=0.08)


def test_stalls_are_read_from_pace_and_tokens() -> None:
    """Calls far slower than their tokens imply are stalls; the gap is their excess."""
    from tailkit.simulation._stall import stall_gaps

    rng = np.random.default_rng(0)
    n = 2000
    tokens = rng.integers(100, 400, n).astype(float)
    ttft = rng.lognormal(0.0, 0.3, n)
    total = ttft + (tokens - 1) * PACE_S * np.exp(0.15 * rng.standard_normal(n))
    stalled = rng.random(n) < 0.05
    total[stalled] += 20.0
    gaps, stalls = stall_gaps(total, ttft, tokens)
    assert gaps is not None
    assert stalls.cutoff_s is not None
    assert np.array_equal(gaps > 0, stalled)
    # each gap is the stall plus its call's pace's departure from the median, which averages out
    assert abs(float(gaps[stalled].mean()) - 20.0) < 0.5
    assert np.allclose(gaps[stalled], 20.0, atol=0.8 * 400 * PACE_S)
    low, high = stalls.interval
    assert low < stalled.mean() < high
    # the cutoff is beyond any normal stream's pace, far below the stalls' gaps
    assert 25 * PACE_S < stalls.cutoff_s < 2.0
    # without output tokens, or without a first token, the calls cannot tell
    assert stall_gaps(total, ttft, np.full(n, np.nan))[0] is None
    no_ttft = stall_gaps(total, np.full(n, np.nan), tokens)[1]
    assert no_ttft.cutoff_s is None
    assert "no time to first token" in no_ttft.reason


def test_a_stall_cutoff_cuts_the_stalled_outcomes_mid_stream() -> None:
    """Each stalled outcome is cut a stall cutoff after its last chunk, before it resumes."""
    rng = np.random.default_rng(1)
    n = 1000
    tokens = np.full(n, 300.0)
    ttft = rng.lognormal(0.0, 0.2, n)
    total = ttft + 299 * PACE_S * np.exp(0.1 * rng.standard_normal(n))
    total[:50] += 10.0
    sample = RouteSample.from_latencies(total, ttft_s=ttft, output_tokens=tokens)
    table = np.arange(sample.end_table.size)
    cut = sample.stall_cut(table, 1.0)
    assert cut is not None
    stalled = np.isfinite(cut)
    assert stalled.mean() == pytest.approx(0.05, abs=1e-3)
    assert sample.error_rate == 0.0  # a stall is not a failure: the outcome stays as it is
    ends, firsts = sample.end_table[stalled], sample.ttft_table[stalled]
    assert np.all(cut[stalled] < ends - 8.0)  # cut ~9 s before the stream resumes and ends
    assert np.all(cut[stalled] > firsts + 1.0)  # after its first token and a cutoff's wait
    # half-way through its normal generation (the gap excluded), plus the cutoff
    assert sample.gap_table is not None
    normal = ends - sample.gap_table[stalled] - firsts
    assert np.allclose(cut[stalled], firsts + 0.5 * normal + 1.0)
    assert not np.isfinite(sample.stall_cut(table, 30.0)).any()  # type: ignore[arg-type]
    assert sample.stall_cut(table, math.inf) is None
    # a failure is never stall-cut
    failing = dataclasses.replace(sample, error_rate=0.1)
    failed = np.arange(failing.ok_entries, failing.end_table.size)
    assert not np.isfinite(failing.stall_cut(failed, 1.0)).any()  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_the_engine_plays_stall_cuts_as_the_reference_does(seed: int) -> None:
    """Steps with stall cutoffs: the vectorized engine and the reference agree run by run."""
    rng = np.random.default_rng(seed)
    routes = []
    for _ in range(3):
        n = 600
        tokens = rng.integers(100, 400, n).astype(float)
        ttft = rng.lognormal(0.0, 0.4, n)
        total = ttft + (tokens - 1) * PACE_S * np.exp(0.15 * rng.standard_normal(n))
        total[rng.random(n) < 0.1] += rng.uniform(5.0, 20.0)
        routes.append(
            RouteSample.from_latencies(
                total,
                ttft_s=ttft,
                output_tokens=tokens,
                error_rate=0.05,
                error_s=np.ones(5),
                invalid_rate=0.03 * (seed % 2),
            )
        )
    steps = []
    for i in range(6):
        action = str(rng.choice(["hedge", "retry", "downgrade", "fail"]))
        other = routes[(i + 1) % 3]
        cutoff = float(rng.choice([math.inf, float(rng.uniform(1.0, 15.0))]))
        step = StepModel(
            f"s{i}", (i - 1,) if i else (), True, routes[i % 3],
            signal=str(rng.choice(["total", "ttft"])), cutoff_s=cutoff,
            action=action, second=None if action in ("retry", "fail") else other,
            failover=other if rng.random() < 0.5 else None,
            upgrade=other if rng.random() < 0.5 else None,
            ttft_cutoff_s=float(rng.choice([math.inf, 1.5])), reserve_s=2.0,
            shares=tuple((r, 0.5) for r in routes),
            stall_cutoff_s=float(rng.uniform(0.5, 3.0)),
        )  # fmt: skip
        steps.append(step)
    model = WorkflowModel(tuple(steps), deadline_s=60.0)
    draws = Draws(400, seed=seed, keep=True)
    outcome = simulate_runs(model, draws)
    fired = sum(int(o.fired.sum()) for o in outcome.steps)
    assert fired > 40  # the stalls do fire the steps' actions
    uniforms = [step_indexes(s, draws.stack(s.name)) for s in model.steps]
    for r in range(400):
        trace = reference_trace(model, [[int(x) for x in u[:, r]] for u in uniforms])
        assert outcome.end_s[r] == pytest.approx(trace.end_s, rel=1e-12, abs=1e-12)
        assert outcome.ok[r] == trace.ok
        assert sum(int(o.extra[r]) for o in outcome.steps) == trace.extras
        assert sum(int(o.recovery[r]) for o in outcome.steps) == trace.recoveries


def test_a_stall_cut_fires_the_action_not_a_recovery() -> None:
    """A stalled first attempt: the step's action starts at the cut, counted as extra."""
    tokens = np.full(200, 101.0)
    ttft = np.full(200, 1.0)
    total = ttft + 100 * PACE_S * np.linspace(0.9, 1.1, 200)
    total[::10] += 20.0  # every tenth stream stalls 20 s
    sample = RouteSample.from_latencies(total, ttft_s=ttft, output_tokens=tokens)
    for action in ("hedge", "retry"):
        step = StepModel(
            "s", (), True, sample, action=action, cutoff_s=math.inf, stall_cutoff_s=1.0,
            second=sample if action == "hedge" else None,
        )  # fmt: skip
        model = WorkflowModel((step,), deadline_s=60.0)
        out = simulate_runs(model, Draws(20_000, seed=1)).steps[0]
        assert out.extra.mean() == pytest.approx(0.1, abs=0.01)
        assert out.recovery.sum() == 0
        # a stalled run ends with its fresh attempt (cut at about 1 + 1 + 1 s, then about
        # 3 s) unless that one stalls too: then the stalled one resuming (a hedge) or the
        # fresh one resuming (a retry: the fresh one is not watched)
        assert float(out.duration_s.max()) < 30.0
        assert float(np.quantile(out.duration_s[out.fired], 0.8)) < 6.5


def test_calibrate_sets_a_stall_cutoff_where_streams_stall(stalling: Calibration) -> None:
    """Streams that stall after their first token: each step gets a stall cutoff, said why."""
    for name, step in stalling.plan.steps.items():
        assert step.stall_cutoff_s is not None, name
        assert 0.5 < step.stall_cutoff_s < 3.0
        note = next(n for n in stalling.notes if n.startswith(f"step {name!r}"))
        assert f"stall cutoff {step.stall_cutoff_s:g} s" in note
        assert "streams stalled mid-way" in note
        assert "prediction counts it" in note
    # the prediction counts it: the same plan without stall cutoffs misses more often
    bare = _without_stalls(stalling.plan)
    without = predict(None, bare, samples=stalling.samples, runs=20_000, seed=3, replicates=0)
    assert without.result.miss_rate > stalling.prediction.result.miss_rate


def test_no_stall_cutoff_without_stalls(tmp_path: Path) -> None:
    """Streams that never stall: no stall cutoff, and the note says none stalled."""
    found = _calibrated(tmp_path, slow_ttft=0.08)
    for name, step in found.plan.steps.items():
        assert step.stall_cutoff_s is None
        assert any(n.startswith(f"step {name!r}") and "none of" in n for n in found.notes)


def test_no_stall_cutoff_when_the_calls_cannot_tell(tmp_path: Path) -> None:
    """Without output tokens the calls cannot tell a stall: none set, and the note says so."""
    found = _calibrated(tmp_path, stall=0.08, tokens=False)
    assert all(step.stall_cutoff_s is None for step in found.plan.steps.values())
    assert all("cannot tell whether streams stall (no output tokens" in n for n in found.notes)


def test_a_ttft_step_with_a_generation_tail_gets_a_total_cutoff_too(tmp_path: Path) -> None:
    """Slow first tokens and slow decodes: a TTFT-watched step also gets a total cutoff."""
    found = _calibrated(tmp_path, slow_ttft=0.08, slow_gen=0.06, tokens=False)
    both = [s for s in found.plan.steps.values() if s.signal == "ttft" and s.cutoff_s is not None]
    assert both
    for step in both:
        assert step.ttft_cutoff_s is not None
        assert step.ttft_cutoff_s < step.cutoff_s < found.plan.deadline_s
        note = next(n for n in found.notes if n.startswith(f"step {step.name!r}"))
        assert f"total cutoff {step.cutoff_s:.3g} s" in note
        assert "beside its TTFT cutoff" in note
    # the simulator models both clocks: without the total cutoffs the plan misses more
    bare = _replace_steps(found.plan, cutoff_s=None)
    without = predict(None, bare, samples=found.samples, runs=20_000, seed=3, replicates=0)
    assert without.result.miss_rate > found.prediction.result.miss_rate
    model = workflow_model(found.plan, found.samples)
    assert {s.name for s in model.steps if math.isfinite(s.other_cutoff_s)} >= {
        s.name for s in both
    }


def _replace_steps(plan: Plan, **fields: Any) -> Plan:
    steps = {n: dataclasses.replace(s, **fields) for n, s in plan.steps.items()}
    return dataclasses.replace(plan, steps=steps)


def _without_stalls(plan: Plan) -> Plan:
    return _replace_steps(plan, stall_cutoff_s=None)


class Truth:
    """
    Streams as a provider serves them, not as the simulator assumes them.

    The calls' TTFT, tokens and pace are the log's; but 8 % of streams stall at a random
    point of their generation (the simulator assumes after all of it) for 5-40 s (the log
    showed 10-25 s), then go on. Chunks of 10 tokens.
    """

    STALL, CHUNK = 0.08, 10

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - test draws, not secrets

    async def attempt(self, attempt: Attempt) -> AsyncIterator[Any]:
        """One attempt's stream: its first token, then chunks of tokens, maybe a stall."""
        rng = self.rng
        ttft = math.exp(0.3 * rng.gauss(0.0, 1.0))
        tokens = rng.randrange(360, 440)
        pace = PACE_S * math.exp(0.15 * rng.gauss(0.0, 1.0))
        stall_at = rng.randrange(1, tokens) if rng.random() < self.STALL else -1
        gap = rng.uniform(5.0, 40.0)
        await asyncio.sleep(ttft)
        yield "x"
        sent = 1
        while sent < tokens:
            chunk = min(self.CHUNK, tokens - sent)
            wait = chunk * pace
            if sent <= stall_at < sent + chunk:
                wait += gap
            await asyncio.sleep(wait)
            yield "x" * chunk
            sent += chunk
        yield FINAL


class _Nudged(VirtualLoop):
    """
    Virtual time that moves a nanosecond whenever the loop polls.

    The executor arms the stall timer at ``last_chunk + stall_cutoff_s`` and fires when
    ``now - last_chunk >= stall_cutoff_s``; in floating point the second can fall short of the
    first by an ulp, and a clock that never moves by itself then re-arms the same timer
    forever. A real clock moves on; so does this one, by a nanosecond per poll.
    """

    def advance(self, seconds: float) -> None:
        super().advance(max(seconds, 1e-9))


def _run(coro: Any) -> Any:
    loop = _Nudged()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _misses(plan: Plan, runs: int, *, seed: int) -> tuple[int, int, int]:
    """
    Runs of ``plan`` through the executor, in virtual time, against `Truth`.

    Returns the misses, the attempts a cutoff started (as ``tailkit check`` reads them from
    the ledger: ``attrs.started_by == "cutoff"``), and the first attempts.
    """
    truth = Truth(seed)
    budget = HedgeBudget(plan.hedge_budget)
    sink = MemorySink()
    executor = Executor(plan, ledger=Ledger(sink), budget=budget)

    async def main() -> list[bool]:
        results = await asyncio.gather(
            *(executor.run(truth.attempt, run_id=f"r{r}") for r in range(runs))
        )
        return [not result.ok for result in results]

    misses = sum(_run(main()))
    extras = sum(1 for r in sink.records if r.attrs.get("started_by") == "cutoff")
    firsts = sum(1 for r in sink.records if r.attempt == 0)
    return misses, extras, firsts


@pytest.mark.slow
def test_the_stall_cutoff_prediction_comes_true_on_other_stalls(stalling: Calibration) -> None:
    """
    Against stalls unlike the log's, the executor misses as predicted, and less without.

    Its extra attempts too: a stall cut is the step's action, an attempt the ledger counts
    started by a cutoff, as the prediction counts it.
    """
    runs = 1000
    misses, extras, firsts = _misses(stalling.plan, runs, seed=7)
    missed = rate(misses, runs)
    interval = stalling.prediction.plan_prediction().interval
    assert interval is not None
    low, high = interval.miss_rate
    predicted = stalling.prediction
    print(f"measured miss rate {missed.value:.3%} [{missed.low:.3%}, {missed.high:.3%}]; "
          f"predicted {predicted.miss_rate.value:.3%} [{low:.3%}, {high:.3%}]")  # fmt: skip
    assert missed.low <= high
    assert low <= missed.high
    extra = rate(extras, firsts)
    low, high = interval.extra_attempts
    print(f"measured extra attempts {extra.value:.4f} [{extra.low:.4f}, {extra.high:.4f}] per "
          f"first attempt ({extras} of {firsts}); predicted "
          f"{predicted.extra_attempts.value:.4f} [{low:.4f}, {high:.4f}]; "
          f"recovery {predicted.result.recovery_attempts:.4f}")  # fmt: skip
    assert extra.low <= high
    assert low <= extra.high
    bare, _, _ = _misses(_without_stalls(stalling.plan), runs, seed=7)
    print(f"without the stall cutoff: {bare / runs:.3%}")
    assert rate(bare, runs).low > missed.high
