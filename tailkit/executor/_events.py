"""
What the executor decides, as it decides it: decision events for a hook, and tracing spans.

The ledger says what every attempt did once it ended. An `Observer` says it while it happens,
in two forms, each optional:

- **Events.** A hook (any ``Callable[[Event], None]``, e.g. ``queue.put_nowait`` or a metrics
  counter) gets an `Event` for each step and attempt that starts or ends and for each decision
  the step runner takes: a cutoff that fired, an extra attempt granted or denied (and why), a
  retry scheduled, a provider throttle that engaged or released. A hook that raises is logged
  once and otherwise ignored: watching the executor must never break it.
- **Spans.** When OpenTelemetry's API is installed, each logical step call is a span and each
  attempt a child span named and annotated after the GenAI semantic conventions (``chat
  {model}``, ``gen_ai.*``), with tailkit's own facts -- the run, the role, the route, the
  idempotency key, the run deadline -- as ``tailkit.*`` attributes. Spans carry the events too
  (as span events). Without the library nothing is imported and nothing is recorded.

The executor stays standard-library-only: ``opentelemetry.trace`` is imported by name, at most
once per process, when the first `Observer` asks for it. With neither a hook nor tracing an
observer is inactive (``Observer.active`` is false) and the executor builds no events at all;
its span calls then return one shared handle whose methods do nothing.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import math
import time

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from tailkit.deadline import now
from tailkit.errors import ConfigError, MissingExtraError


__all__ = [
    "EVENT_KINDS", "NO_SPAN", "Event", "Observer", "SpanHandle", "deadline_wall", "trace_headers",
]  # fmt: skip

EVENT_KINDS: tuple[str, ...] = (
    "step_started",  # a logical step call began; detail: workflow, deadline_remaining_s
    "step_ended",  # it returned or raised; detail: status, attempts, elapsed_s
    "attempt_started",  # detail: role, model, started_by (cutoff, error, invalid; not for #0)
    "attempt_ended",  # detail: status, winner, censored, abandoned, ttft_s, total_s
    "cutoff_fired",  # the first attempt passed a cutoff; detail: cutoff, action, age_s
    "extra_granted",  # a hedge/retry/downgrade may start; detail: action, firsts, extras
    "extra_denied",  # it may not; detail: reason ("budget"/"throttle"), action, firsts, extras
    "retry_scheduled",  # a failed attempt is retried; detail: reason (its status), delay_s
    "throttle_engaged",  # a provider's tokens fell to half: no more hedges to it; detail: tokens
    "throttle_released",  # successes refilled them above half; detail: tokens
    "breaker_opened",  # a provider failing repeatedly is out of first attempts; detail: reason
    "breaker_closed",  # a success after its cool-down closed its breaker; detail: reason
)
"""Every `Event.kind`, in the order a step meets them; the comments list the usual details."""

TRACER_NAME = "tailkit.executor"
logger = logging.getLogger("tailkit.executor")

_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})

# Short names a caller may use for well-known attributes when it ends an attempt span: the
# GenAI conventions' names are what ``tailkit ingest --format otel`` reads back.
_END_ALIASES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "ttft_s": "gen_ai.response.time_to_first_chunk",
    "http_status": "http.response.status_code",
}
_CUT = ("timeout", "cancelled")  # statuses that are the error type themselves (cut, not failed)


@dataclass(frozen=True, slots=True)
class Event:
    """
    One thing the executor did or decided.

    Args:
        kind: One of `EVENT_KINDS`.
        step: The step's name (``None``: not about one step, e.g. a provider's throttle).
        run_id: The workflow run (``None``: a call outside a workflow, or not about a run).
        attempt: The attempt's number within its logical call (``None``: not about one).
        route: The route involved (``None``: none), e.g. the hedge route an extra was denied.
        provider: The provider involved (``None``: none).
        at: When, in wall-clock seconds since the epoch (default: now).
        detail: The facts of the decision, by name: a denial's ``reason`` (``budget`` or
            ``throttle``), an attempt's ``status``, the budget's ``firsts`` and ``extras``, a
            throttle's ``tokens``, a retry's ``delay_s``; see `EVENT_KINDS`.

    Raises:
        ConfigError: ``kind`` is not one of `EVENT_KINDS`.
    """

    kind: str
    step: str | None = None
    run_id: str | None = None
    attempt: int | None = None
    route: str | None = None
    provider: str | None = None
    at: float = field(default_factory=time.time)
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            msg = f"event kind must be one of {', '.join(EVENT_KINDS)}, got {self.kind!r}"
            raise ConfigError(msg, field="kind", value=self.kind)


class SpanHandle:
    """
    A step's or an attempt's span, as the executor holds it; this base class does nothing.

    `NO_SPAN`, the one instance of this class, is what an observer without tracing hands out,
    so the executor calls the same methods either way.

    Attributes:
        span: The OpenTelemetry span (``None`` for `NO_SPAN`).
    """

    __slots__ = ()

    @property
    def span(self) -> Any:
        """
        The OpenTelemetry span, or ``None``.
        """
        return None

    def end(
        self,
        status: str,
        *,
        error: BaseException | None = None,
        attrs: Mapping[str, Any] = _NO_DETAIL,
    ) -> None:
        """
        End the span with the call-record ``status`` (``ok``, ``error``, ``timeout``, …).

        Ending twice does nothing; the first end counts.

        Args:
            status: ``ok`` leaves the span's status unset; anything else makes it an error.
            error: The exception that ended it, recorded on the span (``None``: none).
            attrs: More attributes; ``input_tokens``, ``output_tokens``, ``ttft_s`` and
                ``http_status`` are written under their GenAI / HTTP convention names,
                ``None`` values are left out.
        """
        del status, error, attrs

    def add_event(self, event: Event) -> None:
        """
        Record ``event`` on the span, as a span event named ``tailkit.{kind}``.
        """
        del event

    def use(self) -> AbstractContextManager[Any]:
        """
        Make the span the current one within a ``with`` block (it is not ended on exit).

        Spans started inside the block (an HTTP client's, an SDK's) become its children.
        """
        return _nothing()

    def activate(self) -> None:
        """
        Make the span current in the running context for good (an attempt's own context copy).

        Its W3C ``traceparent`` is then what `trace_headers` returns there.
        """


@contextmanager
def _nothing() -> Iterator[None]:
    yield


NO_SPAN = SpanHandle()
"""The shared handle that does nothing: what an observer without tracing returns."""


class _Span(SpanHandle):
    """
    A live OpenTelemetry span.
    """

    __slots__ = ("_ended", "_span", "_trace")

    def __init__(self, trace: Any, span: Any) -> None:
        self._trace, self._span, self._ended = trace, span, False

    @property
    def span(self) -> Any:
        """
        The OpenTelemetry span.
        """
        return self._span

    def end(
        self,
        status: str,
        *,
        error: BaseException | None = None,
        attrs: Mapping[str, Any] = _NO_DETAIL,
    ) -> None:
        """
        End the span (see `SpanHandle.end`).
        """
        if self._ended:
            return
        self._ended = True
        span = self._span
        names = ((_END_ALIASES.get(key, key), value) for key, value in attrs.items())
        span.set_attributes({"tailkit.status": status, **_attributes(names)})
        if status != "ok":
            if error is not None:
                span.record_exception(error)
            # The ingest of OTel spans reads a cut attempt from its error type: keep the
            # status there for cuts, the exception's class for failures.
            cause = status if status in _CUT or error is None else type(error).__qualname__
            span.set_attribute("error.type", cause)
            description = status if error is None else f"{status}: {error}"[:500]
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))
        span.end()

    def add_event(self, event: Event) -> None:
        """
        Record ``event`` on the span (see `SpanHandle.add_event`).
        """
        if self._ended:
            return
        facts = {"attempt": event.attempt, "route": event.route, "provider": event.provider}
        items = [*facts.items(), *event.detail.items()]
        self._span.add_event(
            f"tailkit.{event.kind}", _attributes(items), timestamp=round(event.at * 1e9)
        )

    def use(self) -> AbstractContextManager[Any]:
        """
        Make the span current in a ``with`` block (see `SpanHandle.use`).
        """
        return self._trace.use_span(  # type: ignore[no-any-return]
            self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def activate(self) -> None:
        """
        Make the span current in the running context (see `SpanHandle.activate`).

        Never detached: the context is the attempt's own copy, dropped with its task.
        """
        context_api = load_module("opentelemetry.context")
        if context_api is not None:
            context_api.attach(self._trace.set_span_in_context(self._span))
        found = self._span.get_span_context()
        if found.is_valid:
            flags = int(found.trace_flags)
            _TRACEPARENT.set(f"00-{found.trace_id:032x}-{found.span_id:016x}-{flags:02x}")


class Observer:
    """
    What the executor tells as it runs: events to a hook, spans to OpenTelemetry.

    Args:
        on_event: Called with every `Event` (``None``: no hook). It runs inside the event
            loop, so it should be quick; what it raises is logged once on the
            ``tailkit.executor`` logger and otherwise ignored.
        tracing: ``True``: make spans (OpenTelemetry's API must be installed); ``False``:
            never; ``None``: make spans when ``opentelemetry.trace`` can be imported and a
            tracer provider is configured (an SDK's), decided each time a step starts, so an
            observer made before OpenTelemetry is configured traces once it is: the API alone
            records nothing, and its no-op spans would still cost each call.
        tracer_provider: The OpenTelemetry tracer provider to use (``None``: the global one).

    Attributes:
        active: There is a hook or tracing (now); when false, the executor skips building
            events.
        tracing: Spans are made (now).
        hook_failures: How many times the hook raised.

    Raises:
        MissingExtraError: ``tracing=True`` but OpenTelemetry's API is not installed.

    Example::

        seen: list[Event] = []
        executor = Executor(plan, observer=Observer(seen.append))
    """

    __slots__ = ("_auto", "_trace", "_tracer", "_tracer_of", "hook_failures", "on_event")

    def __init__(
        self,
        on_event: Callable[[Event], None] | None = None,
        *,
        tracing: bool | None = None,
        tracer_provider: Any = None,
    ) -> None:
        self.on_event = on_event
        self.hook_failures = 0
        self._trace: Any = None
        self._tracer: Any = None
        self._tracer_of: Any = None  # the global provider ``_tracer`` came from (auto mode)
        # auto: whether to trace is decided when a step starts (OpenTelemetry may be
        # configured after this observer is made)
        self._auto = tracing is None and tracer_provider is None
        if tracing is not False:
            self._trace = load_trace()
            if self._trace is None and tracing:
                msg = "tracing=True needs OpenTelemetry: pip install opentelemetry-api"
                msg += " (and opentelemetry-sdk, or another SDK, to export spans)"
                raise MissingExtraError(msg)
        if self._trace is not None and not self._auto:
            self._tracer = self._trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)

    @property
    def tracing(self) -> bool:
        """
        Whether spans are made now (see the ``tracing`` argument).
        """
        return self._tracer_now() is not None

    @property
    def active(self) -> bool:
        """
        Whether there is a hook or tracing now: when false, the executor builds no events.
        """
        return self.on_event is not None or self._tracer_now() is not None

    def _tracer_now(self) -> Any:
        """
        The tracer to make spans with now, or ``None``.

        In auto mode, the global tracer provider's once one is configured (a provider set
        later, or replaced, is picked up at the next step).
        """
        if not self._auto:
            return self._tracer
        trace = self._trace
        if trace is None:
            return None
        provider = trace.get_tracer_provider()
        if provider is self._tracer_of:
            return self._tracer
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            # nothing would record the spans: do not pay for them (and remember that this
            # provider records nothing: asked at every step, the check costs a microsecond)
            self._tracer_of, self._tracer = provider, None
            return None
        self._tracer_of, self._tracer = provider, provider.get_tracer(TRACER_NAME)
        return self._tracer

    def emit(self, event: Event, *, span: SpanHandle = NO_SPAN) -> None:
        """
        Hand ``event`` to the hook, and record it on ``span`` (the step's or attempt's span).

        Never raises because of the hook: its first failure is logged, later ones only counted.
        """
        span.add_event(event)
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:
            self.hook_failures += 1
            if self.hook_failures == 1:
                logger.exception(
                    "the executor's event hook %r failed on a %s event; the executor goes on, "
                    "and later failures of this hook are not logged",
                    self.on_event,
                    event.kind,
                )

    def step_span(
        self, step: str, run_id: str | None, deadline_wall: float | None, workflow: str
    ) -> SpanHandle:
        """
        Start the span of one logical call of ``step`` (a child of the current span, if any).

        Args:
            step: The step's name.
            run_id: The workflow run (``None``: none).
            deadline_wall: The run deadline, wall-clock seconds since the epoch (``None``:
                no deadline); see `deadline_wall`.
            workflow: The plan's workflow name.

        Returns:
            Its handle; `NO_SPAN` without tracing.
        """
        tracer = self._tracer_now()
        if tracer is None:
            return NO_SPAN
        attrs = {"tailkit.workflow": workflow, "tailkit.step": step, "tailkit.run_id": run_id}
        attrs.update(_deadline_attributes(deadline_wall))
        span = tracer.start_span(f"tailkit.step {step}", attributes=_attributes(attrs))
        return _Span(self._trace, span)

    def attempt_span(
        self,
        parent: SpanHandle,
        *,
        step: str,
        attempt: int,
        role: str,
        route: str,
        provider: str,
        model: str,
        idempotency_key: str,
        deadline_wall: float | None,
        run_id: str | None = None,
    ) -> SpanHandle:
        """
        Start an attempt's span, a child of ``parent`` whichever task it runs in.

        Named ``chat {model}`` with kind CLIENT, as the GenAI conventions name an inference
        call.

        Args:
            parent: The step's span handle (`NO_SPAN`: the current span is the parent).
            step: The step's name.
            attempt: 0 for the first attempt of the logical call, then 1, 2, …
            role: ``primary``, ``hedge``, ``retry``, ``downgrade`` or ``upgrade``.
            route: The route's name; ``provider`` and ``model`` are its parts.
            provider: The provider, written as ``gen_ai.provider.name`` and ``gen_ai.system``.
            model: The model, written as ``gen_ai.request.model``.
            idempotency_key: The key shared by every attempt of the logical call.
            deadline_wall: The run deadline, wall-clock seconds since the epoch (``None``:
                no deadline).
            run_id: The workflow run (``None``: none).

        Returns:
            Its handle; `NO_SPAN` without tracing.
        """
        tracer = self._tracer_now()
        if tracer is None:
            return NO_SPAN
        trace = self._trace
        context = None if parent.span is None else trace.set_span_in_context(parent.span)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,  # the name before the conventions' 1.37
            "tailkit.step": step,
            "tailkit.run_id": run_id,
            "tailkit.attempt": attempt,
            "tailkit.role": role,
            "tailkit.route": route,
            "tailkit.idempotency_key": idempotency_key,
        }
        attrs.update(_deadline_attributes(deadline_wall))
        span = tracer.start_span(
            f"chat {model}",
            context=context,
            kind=trace.SpanKind.CLIENT,
            attributes=_attributes(attrs),
        )
        return _Span(trace, span)

    def __repr__(self) -> str:
        return f"Observer({self.on_event!r}, tracing={self.tracing!r})"


def deadline_wall(
    deadline: float, *, loop_now: float | None = None, wall_now: float | None = None
) -> float | None:
    """
    A deadline on the loop clock as wall-clock seconds since the epoch, for the span calls.

    Args:
        deadline: An instant on the loop clock (``math.inf``: none).
        loop_now: The loop clock now (``None``: read it).
        wall_now: Wall-clock seconds since the epoch now (``None``: ``time.time()``).

    Returns:
        The same instant on the wall clock, or ``None`` when there is no deadline.
    """
    if not math.isfinite(deadline):
        return None
    loop = now() if loop_now is None else loop_now
    return (time.time() if wall_now is None else wall_now) + (deadline - loop)


def _deadline_attributes(wall: float | None) -> dict[str, Any]:
    if wall is None or not math.isfinite(wall):
        return {}
    try:
        instant = datetime.fromtimestamp(wall, UTC)
    except (OverflowError, OSError, ValueError):  # beyond the calendar: say only what is left
        return {"tailkit.deadline_remaining_s": max(wall - time.time(), 0.0)}
    iso = instant.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return {"tailkit.deadline": iso, "tailkit.deadline_remaining_s": max(wall - time.time(), 0.0)}


def _attributes(items: Iterable[tuple[str, Any]] | Mapping[str, Any]) -> dict[str, Any]:
    """
    Span attributes from ``items``: ``None`` left out, values OpenTelemetry cannot hold as str.
    """
    pairs = items.items() if isinstance(items, Mapping) else items
    out: dict[str, Any] = {}
    for key, value in pairs:
        if value is None:
            continue
        out[key] = value if isinstance(value, str | bool | int | float) else str(value)
    return out


# The importer and what it found, kept here so tests can stand in for a missing library.
_import_module: Callable[[str], Any] = importlib.import_module
_loaded: dict[str, Any] = {}

# The W3C traceparent of the attempt span current in this context (an attempt's own copy).
_TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tailkit_traceparent", default=None
)


def trace_headers() -> dict[str, str]:
    """
    The W3C trace context headers of the attempt running here: ``{"traceparent": ...}``.

    Inside an attempt function whose executor traces, the attempt's span is current and this
    is its ``traceparent``, for a provider or gateway that continues the trace (an HTTP client
    instrumented by OpenTelemetry sends it by itself). Elsewhere, or without tracing: ``{}``.
    """
    value = _TRACEPARENT.get()
    return {} if value is None else {"traceparent": value}


def _configured(trace: Any) -> bool:
    """
    Whether OpenTelemetry has a tracer provider that records (not its default proxy / no-op).
    """
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def load_trace() -> Any:
    """
    The ``opentelemetry.trace`` module, or ``None`` when it cannot be imported (tried once).
    """
    if "trace" not in _loaded:
        try:
            _loaded["trace"] = _import_module("opentelemetry.trace")
        except ImportError:
            _loaded["trace"] = None
    return _loaded["trace"]


def load_module(name: str) -> Any:
    """
    An OpenTelemetry module by name, or ``None`` when it cannot be imported (tried once).
    """
    if name not in _loaded:
        try:
            _loaded[name] = _import_module(name)
        except ImportError:
            _loaded[name] = None
    return _loaded[name]
