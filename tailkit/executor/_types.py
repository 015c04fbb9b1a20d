"""
What attempt functions receive and return: the attempt's context, stream chunks, errors.

An attempt function is ``async def fn(attempt: Attempt) -> value`` (one answer) or an async
generator ``async def fn(attempt): yield chunk`` (a stream). A stream's chunks may be `Chunk`
objects, plain strings, or the chunks and events of the OpenAI and Anthropic SDKs (objects or
dicts; `tailkit.executor._chunks` reads them); the executor only needs to tell content from
role-only and keep-alive chunks (which are not a first token) and to see the terminal marker
(a stream that ends without it was cut: a failure, never a short answer).

The errors of provider SDKs are read here too, by their fields (``status_code``, the
response's ``Retry-After``, a class named for a timeout), never by importing an SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailkit.deadline import deadline_headers, now
from tailkit.executor._events import trace_headers


CONTENT, ROLE, KEEPALIVE, USAGE, FINAL_KIND = "content", "role", "keepalive", "usage", "final"
DONE_TEXT = "[DONE]"  # the SSE terminal line, accepted as a terminal marker

# A stream's budgets: what no real answer reaches. 128k output tokens streamed as chat chunks
# are about 40 MB of SSE (with logprobs several times that) and 128k chunks; a stream that
# never ends is cut at these instead of being held in memory until the deadline.
MAX_STREAM_BYTES = 256 * 2**20
MAX_STREAM_CHUNKS = 1_000_000


@dataclass(frozen=True, slots=True)
class Chunk:
    """
    One piece of a streamed answer.

    Args:
        text: Content text (empty for role-only, keep-alive, usage and final chunks).
        kind: ``content``, ``role``, ``keepalive``, ``usage`` or ``final`` (the terminal marker).
        tokens: Output tokens this chunk carries, when known (``None``: count one per
            content chunk).
        usage: Provider usage reported in the stream (``input_tokens``, ``output_tokens``).
    """

    text: str = ""
    kind: str = CONTENT
    tokens: int | None = None
    usage: Mapping[str, int] | None = None


FINAL = Chunk(kind=FINAL_KIND)
# Yield FINAL only where the provider said the answer ended: SDKs end a cut stream silently, so
# a FINAL after the loop would make a stream cut short look whole. A stream of the SDK's own
# chunks needs none: the executor reads their terminal event.


@dataclass(frozen=True, slots=True)
class Attempt:
    """
    What an attempt function gets: where to send the call and by when.

    Args:
        step: Step name.
        route: Route name (``provider/model``), and its ``provider`` and ``model``.
        attempt: 0 for the first attempt of the logical call, then 1, 2, …
        role: ``primary``, ``hedge``, ``retry``, ``downgrade`` or ``upgrade``.
        idempotency_key: Shared by every attempt of one logical call: send it, so a provider
            or tool that sees it twice does the work once.
        deadline: The run deadline, an instant on the loop clock (``math.inf``: none).
        run_id: The workflow run, if any.
        inputs: Results of the steps this one depends on, by step name.
        max_stream_bytes: The stream's byte budget (`StepPolicy.max_stream_bytes`): an
            adapter raises `StreamTooLarge` once it has received more bytes than this (the
            executor itself counts the characters of answer text it keeps).
        max_stream_chunks: The stream's chunk budget (`StepPolicy.max_stream_chunks`),
            counted by the executor.
    """

    step: str
    route: str
    provider: str
    model: str
    attempt: int
    role: str
    idempotency_key: str
    deadline: float = math.inf
    run_id: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    max_stream_bytes: int = MAX_STREAM_BYTES
    max_stream_chunks: int = MAX_STREAM_CHUNKS

    def remaining(self) -> float:
        """
        Seconds left until the run deadline (``math.inf``: none).
        """
        return math.inf if math.isinf(self.deadline) else max(self.deadline - now(), 0.0)

    def headers(self) -> dict[str, str]:
        """
        Headers for the outgoing request: deadline, idempotency key, route and trace context.

        The trace context is the attempt span's ``traceparent`` when the executor traces
        (`trace_headers`). ``x-tailkit-route`` (``provider/model``) is ignored by providers;
        ``tailkit serve`` uses it to pick the route of a model name that several routes share.
        """
        out = deadline_headers(deadline=self.deadline)
        out["Idempotency-Key"] = self.idempotency_key
        out["x-tailkit-route"] = self.route
        out.update(trace_headers())
        return out


AttemptFn = Callable[[Attempt], Awaitable[Any] | AsyncIterator[Any]]


class Validator(Protocol):
    """
    Checks a step's result; returns ``True`` (or ``None``) when it is good.
    """

    def __call__(self, result: Any, /) -> bool | None: ...


class AttemptError(Exception):
    """
    An attempt failed in a way the executor should know about (raise it from adapters).

    Args:
        message: What happened.
        status: Call-record status: ``error``, ``rate_limited``, ``invalid`` or ``timeout``.
        http_status: The HTTP status, if any.
        retry_after_s: The provider's Retry-After, in seconds, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: str = "error",
        http_status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.http_status, self.retry_after_s = status, http_status, retry_after_s


class TruncatedStream(AttemptError):  # noqa: N818 - reads as what happened
    """
    A stream ended without its terminal marker: the answer may be cut short.
    """

    def __init__(self, step: str, chunks: int) -> None:
        msg = f"step {step!r}: the stream ended after {chunks} chunk(s) without its terminal "
        msg += "marker (FINAL, '[DONE]', a finish_reason, response.completed or message_stop)"
        super().__init__(msg)


class StreamTooLarge(AttemptError):  # noqa: N818 - reads as what happened
    """
    A stream went past its byte or chunk budget without ending: a runaway, failed (``error``).

    Its ledger line says ``error_type: StreamTooLarge``; the step treats it as any failed
    attempt (retried, failed over, hedged around). The budgets are the step's
    (`StepPolicy.max_stream_bytes`, `StepPolicy.max_stream_chunks`).

    Args:
        where: The step (or route and endpoint) whose stream it is.
        limit: The budget passed.
        unit: What it counts: ``bytes``, ``characters`` (of answer text) or ``chunks``.
    """

    def __init__(self, where: str, *, limit: int, unit: str) -> None:
        option = "max_stream_chunks" if unit == "chunks" else "max_stream_bytes"
        msg = (
            f"{where}: the stream passed its budget of {limit:,} {unit} without ending; a "
            f"real answer never gets there (raise StepPolicy({option}=...) if this one does)"
        )
        super().__init__(msg, status="error")
        self.limit, self.unit = limit, unit


def classify(error: BaseException) -> tuple[str, int | None, float | None]:
    """
    An attempt's error as (status, HTTP status, Retry-After seconds).

    `AttemptError` says it directly. Other exceptions (an SDK's, raised through a wrapper of
    your own) are read by their fields: the HTTP status from ``status_code`` / ``http_status``
    (429, or an error body whose type is a rate limit, is ``rate_limited``; a status below 400
    is an error event inside a stream, not an HTTP error); the Retry-After from a
    ``retry_after`` attribute or else the ``retry-after-ms`` / ``Retry-After`` header of the
    error's ``response`` (how the OpenAI and Anthropic SDKs keep it); an error without an HTTP
    status is ``timeout`` when it is a `TimeoutError` or its class is named for one
    (``APITimeoutError``, ``ReadTimeout``).
    """
    if isinstance(error, AttemptError):
        return error.status, error.http_status, error.retry_after_s
    code = getattr(error, "http_status", None) or getattr(error, "status_code", None)
    http = code if isinstance(code, int) and not isinstance(code, bool) else None
    if http is not None and http < 400:  # an error event inside a 200 stream: no HTTP error
        http = None
    after = getattr(error, "retry_after", None)
    retry_after = float(after) if isinstance(after, int | float) else None
    if retry_after is None:
        retry_after = retry_after_from(getattr(getattr(error, "response", None), "headers", None))
    if http == 429 or _error_type(getattr(error, "body", None)) in _RATE_LIMIT_TYPES:
        return "rate_limited", http, retry_after
    if http is None and _timed_out(error):
        return "timeout", http, retry_after
    return "error", http, retry_after


_RATE_LIMIT_TYPES = ("rate_limit_error", "rate_limit_exceeded")  # Anthropic's, OpenAI's


def _error_type(body: object) -> object:
    """
    The ``type`` of an SDK exception's error body (``{"error": {"type": ...}}`` or flat).
    """
    if isinstance(body, Mapping):
        inner = body.get("error")
        return inner.get("type") if isinstance(inner, Mapping) else body.get("type")
    return None


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, TimeoutError) or any(
        "Timeout" in klass.__name__ and klass.__name__ != "RequestTimeoutError"
        for klass in type(error).__mro__
    )


def retry_after_from(headers: Any, *, now_wall: float | None = None) -> float | None:
    """
    Seconds a response's headers ask to wait, or ``None`` when they do not say (or say nonsense).

    ``retry-after-ms`` (OpenAI, Azure) wins over ``Retry-After``, which is seconds or an HTTP
    date; a date in the past gives 0.

    Args:
        headers: Response headers: a case-insensitive mapping (httpx's) or anything with
            ``get`` (``None``: no headers).
        now_wall: Wall-clock epoch seconds now, for a date (``None``: ``time.time()``).
    """
    get = getattr(headers, "get", None)
    if get is None:
        return None
    millis = get("retry-after-ms")
    if millis:
        with contextlib.suppress(TypeError, ValueError):
            seconds = float(millis) / 1000.0
            if math.isfinite(seconds):
                return max(seconds, 0.0)
    value = get("retry-after")
    if not value or not isinstance(value, str):
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime  # only for a date: cheap imports

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT; a zoneless one is not an HTTP date
            return None
        seconds = when.timestamp() - (time.time() if now_wall is None else now_wall)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


_PROVIDER_MODULES = (
    "aiohttp", "anthropic", "botocore", "google", "grpc", "h11", "h2", "httpcore", "httpx",
    "httpx2", "litellm", "mistralai", "openai", "requests", "ssl", "urllib3", "websockets",
)  # fmt: skip


def provider_failure(error: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """
    Whether an attempt's error is the provider's (retried, counted by the throttle).

    It is: an `AttemptError`, a timeout, a connection or other OS error, an error carrying an
    HTTP status (``status_code`` / ``http_status``), an exception of an HTTP or provider
    client library (httpx, aiohttp, openai, anthropic, …), what the provider sent failing to
    decode inside such a library (a malformed stream chunk surfaces from the SDK as
    ``json.JSONDecodeError``), a cancelled attempt, or one of ``extra``. Anything else
    (``KeyError``, ``TypeError``, …) is a bug in the caller's own attempt code, which no retry
    can fix.
    """
    if isinstance(error, AttemptError | TimeoutError | OSError | asyncio.CancelledError):
        return True
    if extra and isinstance(error, extra):
        return True
    code = getattr(error, "http_status", None) or getattr(error, "status_code", None)
    if isinstance(code, int):
        return True
    if any(_provider_module(klass.__module__) for klass in type(error).__mro__):
        return True
    return isinstance(error, ValueError) and _raised_in_provider(error)


def _provider_module(name: str | None) -> bool:
    return (name or "").split(".")[0] in _PROVIDER_MODULES


def _raised_in_provider(error: BaseException) -> bool:
    """
    Whether a decoding error (JSON, UTF-8) was raised inside a provider library's code.

    Only decoding errors: a ``TypeError`` or ``ValueError`` an SDK raises about the caller's
    own arguments stays the caller's bug.
    """
    if not isinstance(error, json.JSONDecodeError | UnicodeDecodeError):
        return False
    tb = error.__traceback__
    while tb is not None:
        if _provider_module(tb.tb_frame.f_globals.get("__name__")):
            return True
        tb = tb.tb_next
    return False


@dataclass(frozen=True, slots=True)
class StreamResult:
    """
    A finished stream: its text and what it cost.

    Not its chunks: a result stays about as small as its answer.

    Args:
        text: The content chunks' text joined.
        output_tokens: Output tokens (usage when reported, else counted content chunks).
        input_tokens: Input tokens from usage, if reported.
        finish_reason: Why the answer ended, when the stream said (``stop``, ``length``,
            ``tool_calls``, ``end_turn``, ``completed``, …).
        final: The terminal chunk as received: for the OpenAI Responses API the
            ``response.completed`` event, which holds the whole response (tool calls
            included); `FINAL` or ``"[DONE]"`` for streams that end with those.
    """

    text: str
    output_tokens: int
    input_tokens: int | None = None
    finish_reason: str | None = None
    final: Any = None
