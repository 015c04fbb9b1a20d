"""
What attempt functions receive and return: the attempt's context, stream chunks, errors.

An attempt function is ``async def fn(attempt: Attempt) -> value`` (one answer) or an async
generator ``async def fn(attempt): yield chunk`` (a stream). A stream's chunks may be `Chunk`
objects, plain strings, or OpenAI-style chunk dicts; the executor only needs to tell content
from role-only and keep-alive chunks (which are not a first token) and to see the terminal
marker (a stream that ends without it was cut: a failure, never a short answer).
"""

from __future__ import annotations

import asyncio
import math

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailkit.executor._deadline import deadline_headers, now


CONTENT, ROLE, KEEPALIVE, USAGE, FINAL_KIND = "content", "role", "keepalive", "usage", "final"
DONE_TEXT = "[DONE]"  # the SSE terminal line, accepted as a terminal marker


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


def chunk_kind(chunk: object) -> tuple[str, int, Mapping[str, Any] | None]:
    """
    Classify a chunk: (kind, output tokens it carries, usage or None).

    Strings are content when non-empty (``"[DONE]"`` is the terminal marker); OpenAI-style
    dicts are content when ``choices[0].delta.content`` is non-empty, final when
    ``choices[0].finish_reason`` is set, usage when only ``usage`` is there, else role-only.
    """
    if isinstance(chunk, Chunk):
        tokens = chunk.tokens if chunk.tokens is not None else (1 if chunk.text else 0)
        kind = chunk.kind if chunk.kind != CONTENT or chunk.text else KEEPALIVE
        return kind, tokens, chunk.usage
    if isinstance(chunk, str | bytes):
        text = chunk.decode() if isinstance(chunk, bytes) else chunk
        if text.strip() == DONE_TEXT:
            return FINAL_KIND, 0, None
        return (CONTENT, 1, None) if text else (KEEPALIVE, 0, None)
    if isinstance(chunk, Mapping):
        return _dict_kind(chunk)
    return CONTENT, 1, None


def _dict_kind(chunk: Mapping[str, Any]) -> tuple[str, int, Mapping[str, Any] | None]:
    usage = chunk.get("usage")
    choices = chunk.get("choices") or []
    first = choices[0] if choices and isinstance(choices[0], Mapping) else {}
    delta = first.get("delta") or {}
    content = delta.get("content") if isinstance(delta, Mapping) else None
    if content:
        return CONTENT, 1, usage
    if first.get("finish_reason"):
        return FINAL_KIND, 0, usage
    return (USAGE if usage else ROLE), 0, usage


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

    def remaining(self) -> float:
        """
        Seconds left until the run deadline (``math.inf``: none).
        """
        return math.inf if math.isinf(self.deadline) else max(self.deadline - now(), 0.0)

    def headers(self) -> dict[str, str]:
        """
        Headers for the outgoing request: the deadline, the idempotency key and the route.

        ``x-tailkit-route`` (``provider/model``) is ignored by providers; ``tailkit serve`` uses
        it to pick the route of a model name that several routes share.
        """
        out = deadline_headers(deadline=self.deadline)
        out["Idempotency-Key"] = self.idempotency_key
        out["x-tailkit-route"] = self.route
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
        msg += "marker (Chunk(kind='final'), '[DONE]' or a finish_reason)"
        super().__init__(msg)


def classify(error: BaseException) -> tuple[str, int | None, float | None]:
    """
    An attempt's error as (status, HTTP status, Retry-After seconds).

    `AttemptError` says it directly; other exceptions are read by their ``status_code`` /
    ``http_status`` attribute (429 is ``rate_limited``) and a ``retry_after`` attribute;
    a `TimeoutError` raised by the attempt itself is ``timeout``.
    """
    if isinstance(error, AttemptError):
        return error.status, error.http_status, error.retry_after_s
    code = getattr(error, "http_status", None) or getattr(error, "status_code", None)
    http = code if isinstance(code, int) else None
    after = getattr(error, "retry_after", None)
    retry_after = float(after) if isinstance(after, int | float) else None
    if http == 429:
        return "rate_limited", http, retry_after
    if isinstance(error, TimeoutError):
        return "timeout", http, retry_after
    return "error", http, retry_after


_PROVIDER_MODULES = (
    "aiohttp", "anthropic", "botocore", "google", "grpc", "h11", "h2", "httpcore", "httpx",
    "litellm", "mistralai", "openai", "requests", "ssl", "urllib3", "websockets",
)  # fmt: skip


def provider_failure(error: BaseException, extra: tuple[type[BaseException], ...] = ()) -> bool:
    """
    Whether an attempt's error is the provider's (retried, counted by the throttle).

    It is: an `AttemptError`, a timeout, a connection or other OS error, an error carrying an
    HTTP status (``status_code`` / ``http_status``), an exception of an HTTP or provider
    client library (httpx, aiohttp, openai, anthropic, …), a cancelled attempt, or one of
    ``extra``. Anything else (``KeyError``, ``TypeError``, …) is a bug in the caller's own
    attempt code, which no retry can fix.
    """
    if isinstance(error, AttemptError | TimeoutError | OSError | asyncio.CancelledError):
        return True
    if extra and isinstance(error, extra):
        return True
    code = getattr(error, "http_status", None) or getattr(error, "status_code", None)
    if isinstance(code, int):
        return True
    return any(
        (klass.__module__ or "").split(".")[0] in _PROVIDER_MODULES for klass in type(error).__mro__
    )


@dataclass(frozen=True, slots=True)
class StreamResult:
    """
    A finished stream: its text and what it cost.

    Args:
        text: The content chunks' text joined.
        chunks: Every chunk as received.
        output_tokens: Output tokens (usage when reported, else counted chunks).
        input_tokens: Input tokens from usage, if reported.
    """

    text: str
    chunks: tuple[Any, ...]
    output_tokens: int
    input_tokens: int | None = None
