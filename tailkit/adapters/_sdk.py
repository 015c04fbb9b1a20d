"""
What the OpenAI and Anthropic SDK attempt functions share: errors, deadlines, the stream loop.

Both SDKs are built the same way (httpx underneath, the same exception names, an ``AsyncStream``
of typed events), so one reading serves both, by the exceptions' fields rather than by their
classes: this module imports neither SDK.

The rules, each the executor's and not the SDK's to decide:

- **No SDK retries.** The SDK's own retries (two by default, with backoff) would be invisible
  in the ledger and would spend the run's deadline behind the executor's back; the adapters
  send through ``client.with_options(max_retries=0)``.
- **The SDK's timeout is what is left of the deadline**, set per request; the exchange (each
  read of a stream included) is also cut at the deadline itself, since an httpx read timeout
  restarts at every byte.
- **Every exception becomes an `AttemptError`** with the status the executor acts on (see
  `sdk_error`); an exception that is not the provider's (a ``TypeError`` about the caller's
  own arguments) passes through unchanged, to be raised at once.
- **A stream is read to its terminal event**; the SDKs end a cut stream silently, so the
  adapters yield the SDK's chunks as they come and the executor, which reads the terminal
  event, calls a stream that lacks it truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from tailkit.adapters._bodies import clip
from tailkit.errors import ConfigError
from tailkit.executor import Attempt, AttemptError, StreamTooLarge
from tailkit.executor.lowlevel import classify, provider_failure


def sdk_error(error: BaseException, where: str) -> AttemptError | None:
    """
    An SDK's exception as the attempt's `AttemptError`, or ``None`` when it is the caller's bug.

    - ``RateLimitError`` (HTTP 429): ``rate_limited``, with ``retry_after_s`` from the
      response's ``retry-after-ms`` or ``Retry-After`` header;
    - ``APIStatusError`` (any other 4xx/5xx): ``error`` with its ``http_status``;
    - ``APITimeoutError``, an httpx timeout, the deadline passing: ``timeout``;
    - ``APIConnectionError`` (refused, reset, a body cut short): ``error``;
    - an error event inside a stream (a 200 response whose stream says ``error``): ``error``,
      or ``rate_limited`` when its type says so;
    - what the provider sent failing to decode inside the SDK (a malformed SSE chunk surfaces
      as ``json.JSONDecodeError``): ``error``, the provider's failure.

    Args:
        error: The exception the SDK raised.
        where: The route and endpoint, for the message.
    """
    if isinstance(error, AttemptError):
        return error
    if isinstance(error.__cause__, StreamTooLarge):  # raised inside the SDK, wrapped by it
        return error.__cause__
    if isinstance(error, TimeoutError):
        return AttemptError(f"{where}: timed out at the attempt's deadline", status="timeout")
    if not provider_failure(error):
        return None
    status, http, retry_after = classify(error)
    code = f" HTTP {http}" if http is not None else ""
    detail = clip(str(error)) or "(no message)"
    msg = f"{where}: {type(error).__name__}{code}: {detail}"
    return AttemptError(msg, status=status, http_status=http, retry_after_s=retry_after)


@contextlib.contextmanager
def sdk_errors(where: str) -> Iterator[None]:
    """
    Raise the SDK's exceptions as `AttemptError` (never around a ``yield`` of a stream).
    """
    try:
        yield
    except Exception as error:
        mapped = sdk_error(error, where)
        if mapped is None or mapped is error:
            raise
        raise mapped from error


def without_retries(client: Any, *, what: str) -> Any:
    """
    A copy of an SDK client that never retries (the caller's client is left as it is).

    Raises:
        ConfigError: ``client`` is not an SDK client (it has no ``with_options``).
    """
    with_options = getattr(client, "with_options", None)
    if with_options is None:
        msg = f"{{field}} must be an {what}, got {type(client).__name__}"
        raise ConfigError(msg, field="client", value=client)
    return with_options(max_retries=0)


def request_options(attempt: Attempt, where: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """
    The per-request options: the attempt's headers beside the caller's, the deadline's timeout.

    Raises:
        AttemptError: The deadline has passed (``timeout``): nothing is sent.
    """
    left = attempt.remaining()
    if left <= 0.0:
        msg = f"{where}: the deadline passed before the request was sent"
        raise AttemptError(msg, status="timeout")
    headers = {**dict(params.get("extra_headers") or {}), **attempt.headers()}
    out: dict[str, Any] = {"extra_headers": headers}
    if not math.isinf(left):
        out["timeout"] = left
    return out


def check_params(params: Mapping[str, Any], reserved: tuple[str, ...]) -> None:
    """
    Refuse the parameters the adapter sets itself, naming why.

    Raises:
        ConfigError: ``params`` sets one of ``reserved``, or ``timeout`` (the deadline's).
    """
    clash = sorted(set(params) & {*reserved, "timeout"})
    if clash:
        msg = f"the adapter sets {', '.join(map(repr, clash))} itself: the attempt's model, "
        msg += "the messages argument, stream=, and a timeout from the attempt's deadline "
        msg += "(the executor's cutoffs bound each attempt)."
        fix = "Leave them out; for a time limit, give the plan a cutoff."
        raise ConfigError(msg, field="params", value=dict(params), fix=fix)


def _until(deadline: float) -> asyncio.Timeout:
    return asyncio.timeout_at(None if math.isinf(deadline) else deadline)


async def answer(
    attempt: Attempt, where: str, send: Callable[[], Awaitable[Any]], *, field: str
) -> Any:
    """
    One non-streamed exchange, by the deadline, with the SDK's errors mapped.

    The SDKs build their response objects without validating them: an answer whose ``field``
    (``choices``, ``output``, ``content``) is missing is the provider's malformed answer.

    Raises:
        AttemptError: The exchange failed, or the answer has no ``field`` list (``error``).
    """
    with sdk_errors(where):
        async with _until(attempt.deadline):
            response = await send()
    if not isinstance(getattr(response, field, None), list):
        msg = f"{where}: the answer has no {field}: {clip(repr(response))}"
        raise AttemptError(msg, status="error")
    return response


async def stream(
    attempt: Attempt, where: str, send: Callable[[], Awaitable[Any]]
) -> AsyncIterator[Any]:
    """
    One streamed exchange: the SDK's chunks as they come, each read by the deadline.

    The bytes the SDK reads count against the attempt's byte budget (`_count_bytes`). The
    stream is closed (its connection released) however the iteration ends: read to its end,
    failed, or closed by the executor (a cutoff, a lost hedge race, the deadline).
    """
    with sdk_errors(where):
        async with _until(attempt.deadline):
            sdk_stream = await send()
    _count_bytes(sdk_stream, attempt.max_stream_bytes, where)
    try:
        chunks = sdk_stream if hasattr(sdk_stream, "__anext__") else aiter(sdk_stream)
        while True:
            with sdk_errors(where):
                async with _until(attempt.deadline):
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
            yield chunk
    finally:
        close = getattr(sdk_stream, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


def _count_bytes(sdk_stream: Any, limit: int, where: str) -> None:
    """
    Make the SDK's stream raise `StreamTooLarge` once its body passes ``limit`` bytes.

    Both SDKs read a stream's body through its response's ``aiter_bytes`` (decoded bytes,
    after any decompression) when the first chunk is asked for: that method of this one
    response is replaced by one that counts. The SDK's own SSE decoder holds a line until it
    ends, so a line that never ends is cut here too, not only at the deadline. A stream
    object of another shape is left alone (the executor's own budgets still apply).
    """
    response: Any = getattr(sdk_stream, "response", None)
    read = getattr(response, "aiter_bytes", None)
    if read is None or not callable(read):
        return

    async def counted(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        left = limit
        async for piece in read(*args, **kwargs):
            left -= len(piece)
            if left < 0:
                raise StreamTooLarge(where, limit=limit, unit="bytes")
            yield piece

    with contextlib.suppress(AttributeError, TypeError):  # a response that takes no attribute
        response.aiter_bytes = counted
