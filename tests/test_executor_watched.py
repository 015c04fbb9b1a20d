"""
Every attempt watched: retries, failovers and upgrades meet the step's cutoffs, from their start.

Also the attempt's own tracing context (its span current inside the attempt function, its
``traceparent``), tracing decided when spans are made, and ``losers="finish"`` when the caller
gives up. Timing is the subject: the virtual-time loop, exact instants.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from collections.abc import AsyncIterator
from typing import Any

import pytest

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailkit.config import Plan, parse_plan
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    AttemptRecord,
    Executor,
    HedgeBudget,
    Ledger,
    MemorySink,
    Observer,
    StepPolicy,
    now,
)
from tailkit.executor._events import trace_headers
from tests._fakeloop import run


def plan(step: str) -> Plan:
    """One step on route a/m (hedge b/m on another provider, upgrade u/big)."""
    return parse_plan(
        "tailkit_plan: 1\nworkflow: watched\ndeadline_s: 60\nhedge_budget: 0.05\n"
        "routes:\n  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "  u/big: {provider: u, model: big}\n"
        f"steps:\n  s:\n    route: a/m\n    hedge_route: b/m\n{step}"
    )


def execute(p: Plan, fn: Any, policy: StepPolicy) -> tuple[Any, float, list[AttemptRecord]]:
    """Run one call of step ``s`` on the virtual loop: (value, seconds, lines by attempt)."""
    sink = MemorySink()

    async def main() -> tuple[Any, float]:
        executor = Executor(
            p, ledger=Ledger(sink), policies={"s": policy}, budget=HedgeBudget(1.0), seed=1
        )
        t0 = now()
        value = await executor.run_step("s", fn)
        return value, now() - t0

    value, spent = run(main())
    return value, spent, sorted(sink.records, key=lambda r: r.attempt)


async def _stream(ttft_s: float, then_s: float | None, text: str = "fine") -> AsyncIterator[Any]:
    """A token at ``ttft_s``, then the end ``then_s`` later (``None``: silent for good)."""
    await asyncio.sleep(ttft_s)
    yield text
    if then_s is None:
        await asyncio.sleep(100.0)  # past the deadline
    else:
        await asyncio.sleep(then_s)
    yield FINAL


def test_a_failover_that_stalls_mid_stream_is_cut_by_the_stall_cutoff() -> None:
    """The retry after an error stalls: 2 s after its last token the step hedges, and wins."""
    p = plan("    stall_cutoff_s: 2.0\n    cutoff_s: 30\n    on_cutoff: hedge\n")

    async def fail(seconds: float) -> AsyncIterator[Any]:
        await asyncio.sleep(seconds)
        msg = "unavailable"
        raise AttemptError(msg, http_status=503)
        yield  # a stream

    def fn(a: Attempt) -> AsyncIterator[Any]:
        if a.role == "primary":
            return fail(1.0)
        if a.role == "retry":  # the failover to b: one token at 0.5 s, then silence
            return _stream(0.5, None)
        return _stream(0.2, 0.8)  # the hedge, back on a's route

    value, spent, lines = execute(p, fn, StepPolicy(retry_jitter_s=0.0))
    assert value.text == "fine"
    assert spent == pytest.approx(1.0 + 0.5 + 2.0 + 1.0)  # not the 60 s deadline
    first, retry, hedge = lines
    assert (retry.role, retry.provider, retry.attrs["cutoff"]) == ("retry", "b", "stall")
    assert first.attrs["failover"] == "b/m"
    assert (hedge.role, hedge.provider, hedge.winner) == ("hedge", "a", True)


def test_a_failovers_cutoffs_count_from_its_own_start() -> None:
    """A 429 at 1.5 s, then a failover whose TTFT (1.9 s) is under the 2 s cutoff: no hedge."""
    p = plan("    signal: ttft\n    ttft_cutoff_s: 2.0\n    on_cutoff: hedge\n")

    async def limited() -> str:
        await asyncio.sleep(1.5)
        msg = "slow down"
        raise AttemptError(msg, status="rate_limited", http_status=429)

    def fn(a: Attempt) -> Any:
        if a.role == "primary":
            return limited()
        return _stream(1.9, 1.0)  # first token 1.9 s after its own start: in time

    for jitter_s in (0.0, 0.3):  # at once, and after a jittered wait
        value, spent, lines = execute(p, fn, StepPolicy(retry_jitter_s=jitter_s))
        assert value.text == "fine"
        _, failover = lines  # no hedge: the TTFT cutoff did not fire
        assert "cutoff" not in failover.attrs
        assert failover.provider == "b"
        assert failover.ttft_s == pytest.approx(1.9)  # counted from its start, after its wait
        waited = spent - 1.5 - 2.9
        assert -1e-9 <= waited <= jitter_s + 1e-9


def test_a_retrys_cutoff_fires_at_its_own_age_not_the_steps() -> None:
    """A retry that hangs is hedged exactly its TTFT cutoff after it started, not earlier."""
    p = plan("    signal: ttft\n    ttft_cutoff_s: 2.0\n    on_cutoff: hedge\n")

    async def fail() -> AsyncIterator[Any]:
        await asyncio.sleep(1.5)
        msg = "unavailable"
        raise AttemptError(msg, http_status=502)
        yield  # a stream

    def fn(a: Attempt) -> Any:
        if a.role == "primary":
            return fail()
        if a.role == "retry":
            return _stream(100.0, 1.0)  # hangs before its first token
        return _stream(0.1, 0.1)

    value, spent, lines = execute(p, fn, StepPolicy(retry_jitter_s=0.0))
    assert value.text == "fine"
    _, retry, hedge = lines
    assert retry.attrs["cutoff"] == "ttft"
    assert retry.censored_at_s == pytest.approx(2.0 + 0.2)  # cut when the hedge won
    assert hedge.total_s == pytest.approx(0.2)
    assert spent == pytest.approx(1.5 + 2.0 + 0.2)  # hedged 2 s after the retry started


def test_an_upgrade_is_watched_by_the_steps_cutoffs() -> None:
    """An invalid answer's upgrade hangs: its TTFT cutoff hedges it, the hedge's answer wins."""
    p = plan(
        "    signal: ttft\n    ttft_cutoff_s: 2.0\n    on_cutoff: hedge\n    upgrade_route: u/big\n"
    )

    def fn(a: Attempt) -> Any:
        if a.role == "primary":
            return _stream(0.5, 0.5, "bad")
        if a.role == "upgrade":
            return _stream(100.0, 1.0)
        return _stream(0.3, 0.3)

    policy = StepPolicy(validator=lambda v: v.text == "fine", retry_jitter_s=0.0)
    value, spent, lines = execute(p, fn, policy)
    assert value.text == "fine"
    first, upgrade, hedge = lines
    assert (first.status, upgrade.role, upgrade.attrs["cutoff"]) == ("invalid", "upgrade", "ttft")
    assert (hedge.role, hedge.provider, hedge.winner) == ("hedge", "b", True)
    assert spent == pytest.approx(1.0 + 2.0 + 0.6)


def test_losers_that_may_finish_are_cut_when_the_caller_gives_up() -> None:
    """losers="finish" and a cancelled caller: every attempt is cut then, none runs on."""
    p = plan("    cutoff_s: 1.0\n    on_cutoff: hedge\n")
    sink = MemorySink()

    async def slow(a: Attempt) -> str:
        await asyncio.sleep(50.0)
        return a.role

    async def main() -> tuple[int, float]:
        policy = StepPolicy(losers="finish")
        executor = Executor(p, ledger=Ledger(sink), policies={"s": policy}, budget=HedgeBudget(1.0))
        task = asyncio.ensure_future(executor.run_step("s", slow))
        await asyncio.sleep(5.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = len(executor.shared.abandoned)
        await executor.aclose()
        return left, now()

    left, ended = run(main())
    assert left == 0
    assert ended == pytest.approx(5.0)  # closing waited for nothing
    assert [(r.role, r.status, r.abandoned) for r in sink.records] == [
        ("primary", "cancelled", False), ("hedge", "cancelled", False),
    ]  # fmt: skip
    assert [r.censored_at_s for r in sink.records] == pytest.approx([5.0, 4.0])


def test_the_attempt_span_is_current_inside_the_attempt_function() -> None:
    """An SDK's span made inside the attempt is the attempt span's child; traceparent is its."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("an.sdk")
    seen: dict[str, Any] = {}

    async def fn(a: Attempt) -> str:
        seen["current"] = trace.get_current_span().get_span_context().span_id
        seen["headers"] = trace_headers()
        seen["sent"] = a.headers()
        with tracer.start_as_current_span("POST /chat/completions"):
            await asyncio.sleep(0.1)
        return "ok"

    async def main() -> None:
        executor = Executor(plan(""), observer=Observer(tracer_provider=provider))
        await executor.run_step("s", fn)
        seen["outside"] = trace_headers()

    run(main())
    spans = {span.name: span for span in exporter.get_finished_spans()}
    attempt, http = spans["chat m"], spans["POST /chat/completions"]
    context = attempt.get_span_context()
    assert seen["current"] == context.span_id
    assert http.parent is not None
    assert http.parent.span_id == context.span_id
    flags = int(context.trace_flags)
    assert seen["headers"] == {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    }
    assert seen["sent"]["traceparent"] == seen["headers"]["traceparent"]  # what adapters send
    assert seen["outside"] == {}  # the caller's context is left as it was


def test_an_observer_made_before_opentelemetry_is_configured_traces_once_it_is() -> None:
    """Observer() first, the SDK's provider set after: the step is traced (fresh process)."""
    script = textwrap.dedent(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        from tailkit.config import parse_plan
        from tailkit.executor import Executor, Observer

        observer = Observer()
        before = observer.tracing
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        plan = parse_plan(
            "tailkit_plan: 1\\nworkflow: w\\ndeadline_s: 60\\n"
            "routes:\\n  a/m: {provider: a, model: m}\\n"
            "steps:\\n  s: {route: a/m}\\n"
        )

        async def fn(attempt):
            return "ok"

        async def main():
            executor = Executor(plan, observer=observer)
            await executor.run_step("s", fn)

        asyncio.run(main())
        names = sorted(span.name for span in exporter.get_finished_spans())
        print(before, observer.tracing, names)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False True ['chat m', 'tailkit.step s']"
