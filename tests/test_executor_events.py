"""
The executor's observer: decision events for a hook, OpenTelemetry spans, and neither.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import subprocess
import sys
import time

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tailkit.errors import ConfigError, MissingExtraError
from tailkit.executor import _events
from tailkit.executor._events import (
    EVENT_KINDS,
    NO_SPAN,
    Event,
    Observer,
    SpanHandle,
    deadline_wall,
)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    Make ``opentelemetry`` look not installed to the observer.
    """

    def missing(name: str) -> Any:
        msg = f"No module named {name!r}"
        raise ModuleNotFoundError(msg)

    monkeypatch.setattr(_events, "_import_module", missing)
    monkeypatch.setattr(_events, "_loaded", {})


def _attempt(observer: Observer, parent: SpanHandle, **changes: Any) -> SpanHandle:
    values: dict[str, Any] = {
        "step": "extract", "attempt": 0, "role": "primary", "route": "openai/gpt-4o",
        "provider": "openai", "model": "gpt-4o", "idempotency_key": "k1", "deadline_wall": None,
    }  # fmt: skip
    values.update(changes)
    return observer.attempt_span(parent, **values)


def _by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_event_kinds_are_the_documented_twelve() -> None:
    """
    EVENT_KINDS lists each decision the brief names, once (the breaker's two included).
    """
    assert (
        "step_started", "step_ended", "attempt_started", "attempt_ended", "cutoff_fired",
        "extra_granted", "extra_denied", "retry_scheduled", "throttle_engaged",
        "throttle_released", "breaker_opened", "breaker_closed",
    ) == EVENT_KINDS  # fmt: skip


def test_event_refuses_an_unknown_kind() -> None:
    """
    A kind outside EVENT_KINDS is a ConfigError naming the value.
    """
    with pytest.raises(ConfigError, match="'hedge_fired'"):
        Event("hedge_fired")


def test_event_defaults_to_now_and_no_detail() -> None:
    """
    Without `at` an event is stamped with the wall clock when it is made; detail is empty.
    """
    before = time.time()
    event = Event("step_started", step="extract")
    after = time.time()
    assert before <= event.at <= after
    assert {} == dict(event.detail)
    assert event.run_id is None
    assert event.attempt is None


def test_hook_gets_every_event_in_order() -> None:
    """
    `Observer.emit` hands each event to the hook, unchanged and in order.
    """
    seen: list[Event] = []
    observer = Observer(seen.append, tracing=False)
    denied = Event("extra_denied", step="s", route="anthropic/claude", detail={"reason": "budget"})
    fired = Event("cutoff_fired", step="s", attempt=0, detail={"cutoff": "ttft"})
    observer.emit(fired)
    observer.emit(denied)
    assert [fired, denied] == seen
    assert observer.active
    assert not observer.tracing


def test_raising_hook_is_logged_once_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    """
    A hook that raises is logged on its first failure only, counted, and called again.
    """
    calls: list[str] = []

    def broken(event: Event) -> None:
        calls.append(event.kind)
        msg = "metrics backend down"
        raise RuntimeError(msg)

    observer = Observer(broken, tracing=False)
    with caplog.at_level(logging.ERROR, logger="tailkit.executor"):
        observer.emit(Event("step_started", step="s"))
        observer.emit(Event("step_ended", step="s"))
        observer.emit(Event("step_started", step="t"))
    assert ["step_started", "step_ended", "step_started"] == calls
    assert 3 == observer.hook_failures
    records = [r for r in caplog.records if r.name == "tailkit.executor"]
    assert 1 == len(records)
    assert "step_started" in records[0].getMessage()
    assert records[0].exc_info is not None
    assert "metrics backend down" in str(records[0].exc_info[1])


def test_tracing_false_makes_no_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    With tracing=False the span calls return the shared no-op handle and export nothing.
    """
    observer = Observer(tracing=False, tracer_provider=provider)
    step = observer.step_span("extract", "run-1", time.time() + 30.0, "wf")
    attempt = _attempt(observer, step)
    with attempt.use():
        pass
    attempt.add_event(Event("attempt_started"))
    attempt.end("error", error=RuntimeError("boom"))
    step.end("ok")
    assert step is NO_SPAN
    assert attempt is NO_SPAN
    assert NO_SPAN.span is None
    assert () == exporter.get_finished_spans()
    assert not observer.active


def test_without_otel_an_observer_without_hook_is_inactive(no_otel: None) -> None:
    """
    Observer() with OpenTelemetry not importable neither traces nor is active.
    """
    observer = Observer()
    assert not observer.tracing
    assert not observer.active
    assert observer.step_span("extract", None, None, "wf") is NO_SPAN
    assert Observer(print).active


def test_tracing_true_without_otel_names_the_package(no_otel: None) -> None:
    """
    Asking for tracing without OpenTelemetry installed says what to install.
    """
    with pytest.raises(MissingExtraError, match="pip install opentelemetry-api"):
        Observer(tracing=True)


def test_otel_is_imported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    The importer runs once however many observers are made, found or missing.
    """
    asked: list[str] = []

    def counting(name: str) -> Any:
        asked.append(name)
        msg = f"No module named {name!r}"
        raise ModuleNotFoundError(msg)

    monkeypatch.setattr(_events, "_import_module", counting)
    monkeypatch.setattr(_events, "_loaded", {})
    Observer()
    Observer(print)
    assert ["opentelemetry.trace"] == asked


def test_otel_installed_turns_tracing_on_by_default(provider: TracerProvider) -> None:
    """
    tracing=None traces when opentelemetry.trace imports, even with no hook.
    """
    observer = Observer(tracer_provider=provider)
    assert observer.tracing
    assert observer.active


def test_step_and_attempt_spans_names_kinds_and_parent(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    The step span is `tailkit.step NAME`; attempts are CLIENT `chat MODEL` spans under it.
    """
    observer = Observer(tracer_provider=provider)
    step = observer.step_span("extract", "run-1", None, "wf")
    first = _attempt(observer, step)
    hedge = _attempt(observer, step, attempt=1, role="hedge", model="claude", provider="anthropic",
                     route="anthropic/claude")  # fmt: skip
    first.end("cancelled")
    hedge.end("ok")
    step.end("ok")
    spans = _by_name(exporter)
    assert {"tailkit.step extract", "chat gpt-4o", "chat claude"} == set(spans)
    parent = spans["tailkit.step extract"]
    assert trace.SpanKind.INTERNAL == parent.kind
    assert parent.parent is None
    for name in ("chat gpt-4o", "chat claude"):
        child = spans[name]
        assert trace.SpanKind.CLIENT == child.kind
        assert child.parent is not None
        assert parent.context.span_id == child.parent.span_id
        assert parent.context.trace_id == child.context.trace_id


def test_attempt_span_attributes(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    """
    An attempt span carries the GenAI request attributes and tailkit's own.
    """
    observer = Observer(tracer_provider=provider)
    step = observer.step_span("extract", "run-1", None, "wf")
    span = _attempt(observer, step, attempt=2, role="retry", idempotency_key="abc", run_id="run-1")
    span.end("ok")
    attrs = dict(_by_name(exporter)["chat gpt-4o"].attributes or {})
    assert {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "tailkit.step": "extract",
        "tailkit.run_id": "run-1",
        "tailkit.attempt": 2,
        "tailkit.role": "retry",
        "tailkit.route": "openai/gpt-4o",
        "tailkit.idempotency_key": "abc",
        "tailkit.status": "ok",
    } == attrs


def test_step_span_attributes_leave_out_none(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    A step span names its workflow and step; a missing run id and deadline are left out.
    """
    observer = Observer(tracer_provider=provider)
    observer.step_span("extract", None, None, "wf").end("ok")
    attrs = dict(_by_name(exporter)["tailkit.step extract"].attributes or {})
    assert {"tailkit.workflow": "wf", "tailkit.step": "extract", "tailkit.status": "ok"} == attrs


def test_deadline_is_an_iso_utc_attribute_with_the_seconds_left(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    The deadline is written as ISO-8601 UTC, and the seconds left at the start beside it.
    """
    observer = Observer(tracer_provider=provider)
    wall = datetime(2099, 1, 2, 3, 4, 5, 678901, tzinfo=UTC).timestamp()
    before = time.time()
    step = observer.step_span("extract", "run-1", wall, "wf")
    _attempt(observer, step, deadline_wall=wall).end("ok")
    after = time.time()
    step.end("ok")
    for span in exporter.get_finished_spans():
        attrs = dict(span.attributes or {})
        assert "2099-01-02T03:04:05.678901Z" == attrs["tailkit.deadline"]
        left = attrs["tailkit.deadline_remaining_s"]
        assert isinstance(left, float)
        assert wall - after <= left <= wall - before


def test_a_passed_deadline_has_no_time_left(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    A deadline already passed is reported as 0 seconds left, never negative.
    """
    Observer(tracer_provider=provider).step_span("s", None, time.time() - 5.0, "wf").end("ok")
    assert (
        0.0
        == dict(exporter.get_finished_spans()[0].attributes or {})["tailkit.deadline_remaining_s"]
    )


def test_ok_end_leaves_status_unset_and_writes_tokens(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    Ending ok sets tailkit.status and the token counts under their GenAI names.
    """
    observer = Observer(tracer_provider=provider)
    span = _attempt(observer, NO_SPAN)
    span.end("ok", attrs={"input_tokens": 120, "output_tokens": 45, "ttft_s": 0.25,
                          "tailkit.winner": True, "http_status": None})  # fmt: skip
    done = _by_name(exporter)["chat gpt-4o"]
    attrs = dict(done.attributes or {})
    assert trace.StatusCode.UNSET == done.status.status_code
    assert "ok" == attrs["tailkit.status"]
    assert 120 == attrs["gen_ai.usage.input_tokens"]
    assert 45 == attrs["gen_ai.usage.output_tokens"]
    assert 0.25 == attrs["gen_ai.response.time_to_first_chunk"]
    assert attrs["tailkit.winner"] is True
    assert "http.response.status_code" not in attrs
    assert "error.type" not in attrs


def test_failed_end_is_an_error_with_the_exception(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    A status other than ok makes the span an ERROR and records the exception and its type.
    """
    observer = Observer(tracer_provider=provider)
    _attempt(observer, NO_SPAN).end("error", error=ConnectionResetError("peer reset"),
                                    attrs={"http_status": 502})  # fmt: skip
    done = _by_name(exporter)["chat gpt-4o"]
    attrs = dict(done.attributes or {})
    assert trace.StatusCode.ERROR == done.status.status_code
    assert "error: peer reset" == done.status.description
    assert "ConnectionResetError" == attrs["error.type"]
    assert 502 == attrs["http.response.status_code"]
    assert ["exception"] == [e.name for e in done.events]
    assert "ConnectionResetError" == dict(done.events[0].attributes or {})["exception.type"]


@pytest.mark.parametrize("status", ["timeout", "cancelled"])
def test_cut_end_names_the_cut_as_its_error_type(
    provider: TracerProvider, exporter: InMemorySpanExporter, status: str
) -> None:
    """
    A cut attempt is an ERROR whose error.type is the cut, whatever exception ended it.
    """
    observer = Observer(tracer_provider=provider)
    _attempt(observer, NO_SPAN).end(status, error=asyncio.CancelledError())
    done = _by_name(exporter)["chat gpt-4o"]
    assert trace.StatusCode.ERROR == done.status.status_code
    assert status == dict(done.attributes or {})["error.type"]


def test_end_is_idempotent(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    """
    A second end changes nothing: one span, with the first end's status.
    """
    observer = Observer(tracer_provider=provider)
    span = _attempt(observer, NO_SPAN)
    span.end("ok")
    span.end("timeout", error=TimeoutError("late"))
    span.add_event(Event("attempt_ended"))
    (done,) = exporter.get_finished_spans()
    assert "ok" == dict(done.attributes or {})["tailkit.status"]
    assert trace.StatusCode.UNSET == done.status.status_code
    assert () == tuple(done.events)


def test_emit_records_the_event_on_the_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    `emit(event, span=...)` adds a `tailkit.KIND` span event with the event's facts.
    """
    seen: list[Event] = []
    observer = Observer(seen.append, tracer_provider=provider)
    step = observer.step_span("extract", "run-1", None, "wf")
    detail = {"reason": "throttle", "tokens": 4.0, "plan": {"x": 1}, "gone": None}
    event = Event("extra_denied", step="extract", run_id="run-1", attempt=0,
                  route="anthropic/claude", provider="anthropic", at=1_800_000_000.5,
                  detail=detail)  # fmt: skip
    observer.emit(event, span=step)
    step.end("ok")
    assert [event] == seen
    (recorded,) = exporter.get_finished_spans()[0].events
    assert "tailkit.extra_denied" == recorded.name
    assert 1_800_000_000_500_000_000 == recorded.timestamp
    assert {
        "attempt": 0, "route": "anthropic/claude", "provider": "anthropic", "reason": "throttle",
        "tokens": 4.0, "plan": "{'x': 1}",
    } == dict(recorded.attributes or {})  # fmt: skip


def test_attempt_in_another_task_keeps_the_step_as_parent(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    An attempt span started in another task under another current span is the step's child.
    """
    observer = Observer(tracer_provider=provider)
    tracer = provider.get_tracer("user")

    async def main() -> None:
        step = observer.step_span("extract", "run-1", None, "wf")

        async def attempt_task() -> None:
            with tracer.start_as_current_span("unrelated"):
                _attempt(observer, step).end("ok")

        await asyncio.get_running_loop().create_task(attempt_task())
        step.end("ok")

    asyncio.run(main())
    spans = _by_name(exporter)
    child = spans["chat gpt-4o"]
    assert child.parent is not None
    assert spans["tailkit.step extract"].context.span_id == child.parent.span_id


def test_step_span_is_a_child_of_the_callers_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    A step started inside the caller's own span nests under it.
    """
    observer = Observer(tracer_provider=provider)
    with provider.get_tracer("user").start_as_current_span("handle request") as outer:
        observer.step_span("extract", None, None, "wf").end("ok")
    step = _by_name(exporter)["tailkit.step extract"]
    assert step.parent is not None
    assert outer.get_span_context().span_id == step.parent.span_id


def test_use_makes_the_attempt_span_current(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """
    Spans a client starts inside `use()` are children of the attempt span, which stays open.
    """
    observer = Observer(tracer_provider=provider)
    span = _attempt(observer, NO_SPAN)
    with span.use(), provider.get_tracer("httpx").start_as_current_span("POST"):
        pass
    assert ["POST"] == [s.name for s in exporter.get_finished_spans()]
    span.end("ok")
    spans = _by_name(exporter)
    post = spans["POST"]
    assert post.parent is not None
    assert spans["chat gpt-4o"].context.span_id == post.parent.span_id


def test_deadline_wall_converts_the_loop_clock() -> None:
    """
    A loop-clock deadline becomes the wall-clock instant as far ahead; none stays None.
    """
    assert 1_000.0 + 7.5 == deadline_wall(107.5, loop_now=100.0, wall_now=1_000.0)
    assert deadline_wall(float("inf")) is None


def test_events_module_imports_no_third_party_package() -> None:
    """
    _events.py imports only the standard library and tailkit; OpenTelemetry is by name.
    """
    source = Path(_events.__file__).read_text(encoding="utf-8")
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    outside = sorted(roots - set(sys.stdlib_module_names) - {"__future__", "tailkit"})
    assert [] == outside


def test_importing_the_module_loads_no_opentelemetry() -> None:
    """
    Importing the executor's events module leaves OpenTelemetry unloaded until an Observer.
    """
    code = (
        "import sys, tailkit.executor._events as e\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "e.Observer(tracing=False)\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "e.Observer()\n"
        "assert 'opentelemetry.trace' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
