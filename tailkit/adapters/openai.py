"""
Call an OpenAI-compatible chat endpoint as an executor attempt (extra ``http``: httpx).

``await executor.run_step("draft", chat_attempt(base_url, messages))``: every attempt POSTs
``{base_url}/chat/completions`` with the attempt's model, its deadline headers and its
Idempotency-Key, and never outlives the attempt's deadline. The adapter itself never retries:
retries, hedges and cutoffs belong to the executor (DESIGN.md §4). An SDK that retries on its
own, or starts a fresh timeout for each retry, is how ``timeout=30`` becomes a 91-second wait;
a read timeout that keep-alive comments keep resetting is how a stuck stream never times out.
So the timeout here is the attempt's remaining deadline, and the whole exchange (every read of a
stream included) is also cut at the deadline itself.

Errors are raised as `AttemptError` with the call-record status the executor acts on:

- HTTP 429: ``rate_limited``, with ``retry_after_s`` from ``retry-after-ms`` or ``Retry-After``;
- any other non-2xx: ``error`` with its ``http_status`` (and Retry-After, if sent);
- a 2xx body that is not JSON, or has no ``choices``: ``invalid``; an error object in a 2xx
  body or in the stream: ``error``;
- an httpx timeout, or the deadline passing: ``timeout``;
- connection refused, reset, or closed before the response: ``error``.

The provider's own error message is kept, clipped, in the exception's message. A stream that
ends without ``data: [DONE]`` simply ends: the executor marks it truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from tailkit.adapters._bodies import answer_of, chunk_of, clip, error_message, loads, retry_after_s
from tailkit.adapters._sse import SSEDecoder
from tailkit.errors import ConfigError, MissingExtraError
from tailkit.executor import FINAL, Attempt, AttemptError, Chunk, now


try:
    import httpx
except ImportError as exc:
    _msg = (
        "tailkit.adapters.openai needs the 'http' extra (httpx is not installed): "
        "pip install 'tailkit[http]'"
    )
    raise MissingExtraError(_msg) from exc


__all__ = ["ChatAttempt", "chat_attempt"]

Messages = Callable[[Attempt], list[dict[str, Any]]] | list[dict[str, Any]]

_RESERVED = ("messages", "model", "stream")  # the adapter owns these body keys
_DRAIN_S = 0.25  # after [DONE]: how long to wait for the body's end, to keep the connection
_CLEANUP_S = 1.0  # how long a cancelled attempt waits for its connection to close


class ChatAttempt:
    """
    An attempt function for an OpenAI-compatible ``/chat/completions`` endpoint.

    Made by `chat_attempt` (see it for the arguments). Calling it with an `Attempt` returns
    an async iterator of chunk dicts ending in `tailkit.executor.FINAL` (``stream=True``) or
    an awaitable of the response dict. It owns the httpx client it creates: close it with
    `aclose` or ``async with``.
    """

    __slots__ = ("_client", "_headers", "_own", "_where", "extra_body", "max_tokens", "messages",
                 "stream", "url")  # fmt: skip

    def __init__(
        self,
        base_url: str,
        messages: Messages,
        *,
        api_key: str | None = None,
        stream: bool = True,
        client: httpx.AsyncClient | None = None,
        max_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        clash = sorted(set(extra_body or {}) & set(_RESERVED))
        if clash:
            msg = f"extra_body may not set {', '.join(map(repr, clash))}: the adapter sends "
            msg += "the attempt's model, the messages argument and stream="
            raise ConfigError(msg)
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            msg = f"max_tokens must be a positive integer or None, got {max_tokens!r}"
            raise ConfigError(msg)
        try:
            base = httpx.URL(base_url)
        except httpx.InvalidURL:
            base = httpx.URL("invalid:")
        if base.scheme not in ("http", "https") or not base.host:
            msg = "base_url must be an http(s) URL such as 'https://api.openai.com/v1', "
            msg += f"got {base_url!r}"
            raise ConfigError(msg)
        # the path is joined, the query kept (Azure: ...?api-version=...)
        self.url = base.copy_with(path=base.path.rstrip("/") + "/chat/completions")
        # in error messages: never the query or user info, which may hold a key
        self._where = f"{base.scheme}://{base.netloc.decode('ascii')}{self.url.path}"
        self.messages, self.stream = messages, stream
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self._headers = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._client, self._own = client, client is None

    def __repr__(self) -> str:
        return f"ChatAttempt({self._where!r}, stream={self.stream})"

    def __call__(
        self, attempt: Attempt
    ) -> AsyncIterator[dict[str, Any] | Chunk] | Awaitable[dict[str, Any]]:
        """
        Send one attempt: a stream of chunk dicts, or the response dict (``stream=False``).
        """
        return self._stream(attempt) if self.stream else self._complete(attempt)

    async def aclose(self) -> None:
        """
        Close the httpx client this adapter created (a client passed in stays open).
        """
        if self._own and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> ChatAttempt:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _use(self) -> httpx.AsyncClient:
        if self._client is None:
            # Made on first use, inside the loop that uses it. retries=0: connection retries
            # would spend the deadline behind the executor's back. (With an explicit
            # transport httpx reads no proxy from the environment: pass client= for one.)
            # Its default timeout is never used: every request carries its own.
            transport = httpx.AsyncHTTPTransport(retries=0)
            self._client = httpx.AsyncClient(transport=transport)
        return self._client

    def _what(self, attempt: Attempt) -> str:
        return f"{attempt.route} at {self._where}"

    def _request(self, attempt: Attempt) -> httpx.Request:
        left = attempt.remaining()
        if left <= 0.0:
            msg = f"{self._what(attempt)}: the deadline passed before the request was sent"
            raise AttemptError(msg, status="timeout")
        messages = self.messages(attempt) if callable(self.messages) else self.messages
        body = {**self.extra_body, "model": attempt.model, "messages": messages}
        body["stream"] = self.stream
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        headers = {**self._headers, **attempt.headers()}
        headers["Accept"] = "text/event-stream" if self.stream else "application/json"
        # one timeout for connect, write, pool and each read: what is left of the deadline
        timeout = httpx.Timeout(None if math.isinf(left) else left)
        return self._use().build_request(
            "POST", self.url, json=body, headers=headers, timeout=timeout
        )

    async def _complete(self, attempt: Attempt) -> dict[str, Any]:
        exchange = asyncio.get_running_loop().create_task(self._fetch(attempt))
        try:
            await asyncio.wait({exchange})  # not `await exchange`: see `_stop`
            return exchange.result()
        finally:
            await _stop(exchange)

    async def _stream(self, attempt: Attempt) -> AsyncIterator[dict[str, Any] | Chunk]:
        queue: asyncio.Queue[dict[str, Any] | Chunk | None] = asyncio.Queue()
        exchange = asyncio.get_running_loop().create_task(self._pump(attempt, queue.put_nowait))
        final = False
        try:
            while (item := await queue.get()) is not None:
                final = final or item is FINAL
                yield item
            await asyncio.wait({exchange})
            if not final:  # after [DONE] the answer is whole, whatever ends the connection
                exchange.result()  # raises the exchange's AttemptError, if it failed
        finally:
            await _stop(exchange)

    async def _fetch(self, attempt: Attempt) -> dict[str, Any]:
        where = self._what(attempt)
        with _transport_errors(where):
            async with _until(attempt.deadline):
                response = await self._use().send(self._request(attempt))
        if not response.is_success:
            raise _status_error(response, where)
        return answer_of(_body_text(response), response.status_code, where)

    async def _pump(self, attempt: Attempt, put: Callable[[Any], None]) -> None:
        """
        The whole streamed exchange, by the deadline: put each chunk, then ``None``.
        """
        where = self._what(attempt)
        try:
            with _transport_errors(where):
                async with _until(attempt.deadline):
                    response = await self._use().send(self._request(attempt), stream=True)
                    try:
                        await _read_stream(response, put, where)
                    finally:
                        # a half-read response closes its connection: the server sees us go
                        await response.aclose()
        finally:
            put(None)


async def _read_stream(response: httpx.Response, put: Callable[[Any], None], where: str) -> None:
    if not response.is_success or "json" in response.headers.get("content-type", ""):
        with contextlib.suppress(httpx.HTTPError):
            await response.aread()
        if not response.is_success:
            raise _status_error(response, where)
        # an error object or a broken body raises here; a good answer is still not a stream
        answer_of(_body_text(response), response.status_code, where)
        msg = f"{where}: asked for a stream, got a JSON answer: use stream=False here"
        raise AttemptError(msg, status="invalid")
    sse = SSEDecoder()
    body = response.aiter_bytes()
    try:
        async for raw in body:
            for event, data in sse.feed(raw):
                chunk = chunk_of(event, data, where)
                if chunk is None:  # data: [DONE]
                    put(FINAL)
                    await _drain(body)
                    return
                put(chunk)
    except httpx.RemoteProtocolError:
        pass  # the peer cut a chunked body: the stream lacks its [DONE], like a plain close
    for event, data in sse.close():
        chunk = chunk_of(event, data, where)
        put(FINAL if chunk is None else chunk)


async def _stop(exchange: asyncio.Task[Any]) -> None:
    """
    Cancel an unfinished exchange once, and wait (briefly) for it to close its connection.

    Why a task of its own: httpcore closes a half-used connection in a cleanup that a second
    cancellation interrupts, leaving the connection (and the provider's work) open. The
    executor's cut and the deadline often land together; here they reach this task, and the
    exchange gets exactly one.
    """
    if not exchange.done():
        if not exchange.cancelling():  # its own deadline may be cancelling it already
            exchange.cancel()
        cancelled = False
        give_up = now() + _CLEANUP_S
        while not exchange.done() and now() < give_up:
            try:
                await asyncio.wait({exchange}, timeout=give_up - now())
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError
    if exchange.done() and not exchange.cancelled():
        exchange.exception()  # retrieved: raised to the caller already, or not wanted


def chat_attempt(
    base_url: str,
    messages: Messages,
    *,
    api_key: str | None = None,
    stream: bool = True,
    client: httpx.AsyncClient | None = None,
    max_tokens: int | None = None,
    extra_body: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ChatAttempt:
    """
    An attempt function that sends each attempt to an OpenAI-compatible chat endpoint.

    Args:
        base_url: The API root, e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``;
            ``/chat/completions`` is appended to its path and its query is kept (Azure's
            ``?api-version=``).
        messages: The chat messages, or a function of the `Attempt` that returns them (to use
            ``attempt.inputs``, the results of the steps this one depends on).
        api_key: Sent as ``Authorization: Bearer …`` (``None``: no Authorization header).
        stream: Stream the answer (SSE): the executor then sees the first token and the token
            rate, and can cut a stalled stream. ``False``: one JSON answer.
        client: A shared ``httpx.AsyncClient`` (its connection pool). Turn its retries off
            (``transport=httpx.AsyncHTTPTransport(retries=0)``); it is not closed by `aclose`.
            ``None``: the adapter creates one on first use, without retries. httpx's default
            pool holds 100 connections and queues the rest, and the time an attempt waits
            for a connection counts as the provider's latency: with many runs in flight, pass
            a client with ``limits=httpx.Limits(max_connections=None)`` on its transport.
        max_tokens: Sent as ``max_tokens`` (``None``: not sent).
        extra_body: More request fields (``temperature``, ``stream_options``, …); it may not
            set ``model``, ``messages`` or ``stream``.
        headers: More request headers (Azure: ``{"api-key": …}``).

    Returns:
        A `ChatAttempt`: pass it to ``Executor.run_step`` or ``Executor.run``. The model is the
        attempt's (its route's), never fixed here. Its timeout is the attempt's remaining
        deadline (``math.inf``: none); it never retries.

    Raises:
        ConfigError: ``base_url`` is not an http(s) URL, ``max_tokens`` is not positive, or
            ``extra_body`` sets a field the adapter owns.

    Example::

        async with chat_attempt("https://api.openai.com/v1", msgs, api_key=key) as call:
            answer = await executor.run_step("draft", call)  # StreamResult
    """
    return ChatAttempt(
        base_url, messages, api_key=api_key, stream=stream, client=client,
        max_tokens=max_tokens, extra_body=extra_body, headers=headers,
    )  # fmt: skip


def _until(deadline: float) -> asyncio.Timeout:
    return asyncio.timeout_at(None if math.isinf(deadline) else deadline)


@contextlib.contextmanager
def _transport_errors(where: str) -> Iterator[None]:
    """
    Turn httpx's and the deadline's exceptions into `AttemptError` (never around a yield).
    """
    try:
        yield
    except (httpx.TimeoutException, TimeoutError) as error:
        kind = type(error).__name__ if isinstance(error, httpx.TimeoutException) else "deadline"
        msg = f"{where}: timed out ({kind}) at the attempt's deadline"
        raise AttemptError(msg, status="timeout") from error
    except httpx.TransportError as error:  # refused, reset, closed before the response
        msg = f"{where}: {type(error).__name__}: {clip(str(error)) or 'connection failed'}"
        raise AttemptError(msg, status="error") from error


async def _drain(body: AsyncIterator[bytes]) -> None:
    """
    Read the end of a finished stream, briefly, so its connection can go back to the pool.
    """
    with contextlib.suppress(httpx.HTTPError, TimeoutError):
        async with asyncio.timeout(_DRAIN_S):
            async for _ in body:
                pass


def _body_text(response: httpx.Response) -> str:
    try:
        return response.content.decode("utf-8", "replace")
    except httpx.ResponseNotRead:
        return ""


def _status_error(response: httpx.Response, where: str) -> AttemptError:
    code = response.status_code
    text = _body_text(response)
    detail = clip(error_message(loads(text)) or text) or "(empty body)"
    status = "rate_limited" if code == 429 else "error"
    return AttemptError(
        f"{where}: HTTP {code}: {detail}", status=status, http_status=code,
        retry_after_s=retry_after_s(response.headers),
    )  # fmt: skip
