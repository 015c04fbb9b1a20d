"""
Call an OpenAI-compatible chat endpoint as an executor attempt (extra ``http``: httpx).

``await executor.run_step("draft", chat_attempt(base_url, messages))``: every attempt POSTs
``{base_url}/chat/completions`` with the attempt's model, its deadline headers and its
Idempotency-Key, and never outlives the attempt's deadline. The adapter itself never retries:
retries, hedges and cutoffs are the executor's, decided from the plan under the run's one
deadline. An SDK that retries on its own, or starts a fresh timeout for each retry, is how
``timeout=30`` becomes a 91-second wait; a read timeout that keep-alive comments keep resetting
is how a stuck stream never times out. So the timeout here is the attempt's remaining
deadline, and the whole exchange (every read of a stream included) is also cut at the deadline
itself.

Connections: an adapter made without ``client=`` sends through the *shared client*, one
``httpx.AsyncClient`` per running event loop (httpx clients belong to the loop they first run
in), made on first use. It never retries a connection, has no limit on connections (a pool
limit queues attempts inside the client, and the wait would count as the provider's latency)
and keeps up to 100 idle ones for reuse. Its TLS settings are loaded once per process. An
adapter owns no connection, so leaving ``async with chat_attempt(...)`` closes nothing: an
attempt still running then (a hedge loser the executor lets finish) ends normally.
`shared_client` returns the loop's client, `set_shared_client` puts your own in its place (a
proxy, other limits, HTTP/2), and `close_shared_client` closes it once its attempts end; the
shared client is also closed when its loop shuts down (``asyncio.run`` returns).

Errors are raised as `AttemptError` with the call-record status the executor acts on:

- HTTP 429: ``rate_limited``, with ``retry_after_s`` from ``retry-after-ms`` or ``Retry-After``;
- any other non-2xx: ``error`` with its ``http_status`` (and Retry-After, if sent);
- a 2xx body that is not JSON, or has no ``choices``: ``invalid``; an error object in a 2xx
  body or in the stream: ``error``;
- an httpx timeout, or the deadline passing: ``timeout``;
- connection refused, reset, or closed before the response: ``error``.

The provider's own error message is kept, clipped, in the exception's message. A stream that
ends without ``data: [DONE]`` simply ends: the executor marks it truncated. A body (streamed
or not) is read to the attempt's byte budget (``attempt.max_stream_bytes``, the step's
`StepPolicy.max_stream_bytes`) at most, one SSE event to a sixteenth of that (at least 1 MiB):
past either, `StreamTooLarge`; an error response is read only for its message (its first 64
KiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import ssl
import threading
import weakref

from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
)
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from tailkit.adapters._bodies import answer_of, chunk_of, clip, error_message, loads, retry_after_s
from tailkit.adapters._sse import SSEDecoder
from tailkit.errors import ConfigError, MissingExtraError
from tailkit.executor import FINAL, Attempt, AttemptError, Chunk, StreamTooLarge, now


try:
    import httpx
except ImportError as exc:
    _msg = (
        "tailkit.adapters.openai needs the 'http' extra (httpx is not installed): "
        "pip install 'tailkit[http]'"
    )
    raise MissingExtraError(_msg) from exc


__all__ = [
    "ChatAttempt",
    "chat_attempt",
    "close_shared_client",
    "set_shared_client",
    "shared_client",
]

T = TypeVar("T")
Messages = Callable[[Attempt], list[dict[str, Any]]] | list[dict[str, Any]]

_RESERVED = ("messages", "model", "stream")  # the adapter owns these body keys
_DRAIN_S = 0.25  # after [DONE]: how long to wait for the body's end, to keep the connection
_CLEANUP_S = 1.0  # how long a cancelled attempt waits for its connection to close
_KEEPALIVE = 100  # idle connections the shared client keeps for reuse
_ERROR_BYTES = 64 * 1024  # of an error response's body: enough for its message
_EVENT_BYTES = 2**20  # the least one SSE event may hold (see `_read_stream`)


class ChatAttempt:
    """
    An attempt function for an OpenAI-compatible ``/chat/completions`` endpoint.

    Made by `chat_attempt` (see it for the arguments). Calling it with an `Attempt` returns
    an async iterator of chunk dicts ending in `tailkit.executor.FINAL` (``stream=True``) or
    an awaitable of the response dict. It sends through the client passed as ``client=``, or
    else the running loop's shared client (`shared_client`); it owns neither, so ``async with``
    and `aclose` close nothing.
    """

    __slots__ = ("_client", "_headers", "_where", "extra_body", "max_tokens", "messages",
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
            msg = f"{{field}} may not set {', '.join(map(repr, clash))}: the adapter sends "
            msg += "the attempt's model, the messages argument and stream="
            fix = "Leave them out of extra_body."
            raise ConfigError(msg, field="extra_body", value=dict(extra_body or {}), fix=fix)
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            msg = f"{{field}} must be a positive integer or None, got {max_tokens!r}."
            fix = "Pass 1 or more, or None for the provider's default."
            raise ConfigError(msg, field="max_tokens", value=max_tokens, fix=fix)
        try:
            base = httpx.URL(base_url)
        except httpx.InvalidURL:
            base = httpx.URL("invalid:")
        if base.scheme not in ("http", "https") or not base.host:
            msg = f"{{field}} must be an http(s) URL, got {base_url!r}."
            fix = "Pass the API's root, such as 'https://api.openai.com/v1'."
            raise ConfigError(msg, field="base_url", value=base_url, fix=fix)
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
        self._client = client

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
        Do nothing: the adapter owns no connection (kept so ``async with`` reads as before).

        Attempts still running, a hedge loser left to finish among them, end normally. A
        client passed as ``client=`` is the caller's to close; the shared one is closed by
        `close_shared_client` or when its event loop shuts down.
        """

    async def __aenter__(self) -> ChatAttempt:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _exchange(
        self, work: Callable[[httpx.AsyncClient], Coroutine[Any, Any, T]]
    ) -> asyncio.Task[T]:
        """
        Start one exchange as a task, on the caller's client or the loop's shared one.
        """
        loop = asyncio.get_running_loop()
        if self._client is not None:
            return loop.create_task(work(self._client))
        shared = _current(loop)
        exchange = loop.create_task(work(shared.client))
        shared.exchanges.add(exchange)  # what close_shared_client waits for
        exchange.add_done_callback(shared.exchanges.discard)
        return exchange

    def _what(self, attempt: Attempt) -> str:
        return f"{attempt.route} at {self._where}"

    def _request(self, attempt: Attempt, client: httpx.AsyncClient) -> httpx.Request:
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
        return client.build_request("POST", self.url, json=body, headers=headers, timeout=timeout)

    async def _complete(self, attempt: Attempt) -> dict[str, Any]:
        exchange = self._exchange(functools.partial(self._fetch, attempt))
        try:
            await asyncio.wait({exchange})  # not `await exchange`: see `_stop`
            return exchange.result()
        finally:
            await _stop(exchange)

    async def _stream(self, attempt: Attempt) -> AsyncIterator[dict[str, Any] | Chunk]:
        queue: asyncio.Queue[dict[str, Any] | Chunk | None] = asyncio.Queue()
        exchange = self._exchange(functools.partial(self._pump, attempt, queue.put_nowait))
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

    async def _fetch(self, attempt: Attempt, client: httpx.AsyncClient) -> dict[str, Any]:
        where = self._what(attempt)
        with _transport_errors(where):
            async with _until(attempt.deadline):
                response = await client.send(self._request(attempt, client), stream=True)
                try:
                    limit = attempt.max_stream_bytes if response.is_success else _ERROR_BYTES
                    text = await _read_body(response, limit, where)
                finally:
                    await response.aclose()
        if not response.is_success:
            raise _status_error(response, where, text)
        return answer_of(text, response.status_code, where)

    async def _pump(
        self, attempt: Attempt, put: Callable[[Any], None], client: httpx.AsyncClient
    ) -> None:
        """
        The whole streamed exchange, by the deadline: put each chunk, then ``None``.
        """
        where = self._what(attempt)
        try:
            with _transport_errors(where):
                async with _until(attempt.deadline):
                    request = self._request(attempt, client)
                    response = await client.send(request, stream=True)
                    try:
                        await _read_stream(response, put, where, attempt.max_stream_bytes)
                    finally:
                        # a half-read response closes its connection: the server sees us go
                        await response.aclose()
        finally:
            put(None)


async def _read_stream(
    response: httpx.Response, put: Callable[[Any], None], where: str, max_bytes: int
) -> None:
    """
    Put the chunks of a streamed response, its first ``max_bytes`` bytes at most.

    Raises:
        StreamTooLarge: The body passed ``max_bytes`` (the attempt's byte budget).
    """
    if not response.is_success or "json" in response.headers.get("content-type", ""):
        limit = max_bytes if response.is_success else _ERROR_BYTES
        text = ""
        with contextlib.suppress(httpx.HTTPError):
            text = await _read_body(response, limit, where)
        if not response.is_success:
            raise _status_error(response, where, text)
        # an error object or a broken body raises here; a good answer is still not a stream
        answer_of(text, response.status_code, where)
        msg = f"{where}: asked for a stream, got a JSON answer: use stream=False here"
        raise AttemptError(msg, status="invalid")
    # one event is parsed whole (its JSON weighs several times its text): a sixteenth of the
    # budget at most, 16 MiB by default, though never under 1 MiB (nor over the budget)
    largest = max(max_bytes // 16, min(max_bytes, _EVENT_BYTES))
    sse = SSEDecoder(max_bytes=max_bytes, max_event_bytes=largest, where=where)
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
        client: Your own ``httpx.AsyncClient`` to send with; the adapter never closes it.
            Turn its retries off (``transport=httpx.AsyncHTTPTransport(retries=0)``) and lift
            its pool limit (``limits=httpx.Limits(max_connections=None)`` on that transport):
            httpx's default pool holds 100 connections and queues the rest, and the time an
            attempt waits for a connection counts as the provider's latency. ``None``: the
            running loop's shared client (see `shared_client`), which is set up that way.
        max_tokens: Sent as ``max_tokens`` (``None``: not sent).
        extra_body: More request fields (``temperature``, ``stream_options``, …); it may not
            set ``model``, ``messages`` or ``stream``.
        headers: More request headers (Azure: ``{"api-key": …}``).

    Returns:
        A `ChatAttempt`: pass it to ``Executor.run_step`` or ``Executor.run``. The model is the
        attempt's (its route's), never fixed here. Its timeout is the attempt's remaining
        deadline (``math.inf``: none); it never retries. It holds no connection of its own:
        making one per request costs nothing, and leaving ``async with`` does not stop an
        attempt still running (a hedge loser that a ``losers="finish"`` step lets finish).

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


# --- the shared client ---------------------------------------------------------------------
#
# One client per event loop, because an httpx client's connections belong to the loop they
# were opened in. The registry holds loops weakly and forgets closed ones. Each entry also
# starts a tiny async generator and keeps it alive: asyncio.run (like every asyncio Runner)
# closes the async generators still alive when it shuts the loop down, after cancelling the
# loop's tasks, and that generator's `finally` closes the client then, inside its loop, where
# its sockets can still be closed cleanly. A loop closed without that shutdown leaves its
# client to the garbage collector.


@dataclass(eq=False, slots=True)
class _Shared:
    """
    One loop's shared client, and the exchanges in flight on it.
    """

    client: httpx.AsyncClient
    owned: bool  # made here, so closed here; a client set by the caller is never closed
    exchanges: set[asyncio.Task[Any]] = field(default_factory=set)


_registry: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[_Shared, AsyncGenerator[None, None]]
] = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # loops in other threads have entries too
_retiring: set[asyncio.Task[None]] = set()  # strong references to background closes


def shared_client() -> httpx.AsyncClient:
    """
    The running event loop's shared client: adapters made without ``client=`` send with it.

    Made on first use, with no connection retries (``retries=0``), no connection limit
    (``max_connections=None``) and up to 100 idle connections kept alive; the TLS settings
    (the slow part, tens of milliseconds of CPU) are loaded once per process. Call it at
    start-up to pay that before the first deadline runs. It reads no proxy from the
    environment (``HTTPS_PROXY``…): for a proxy, put a client of yours in its place with
    `set_shared_client`.

    Returns:
        The client. Use it for your own requests too, but do not close it yourself: see
        `close_shared_client`.

    Raises:
        RuntimeError: No event loop is running in this thread.
    """
    return _current(_running_loop("shared_client")).client


def set_shared_client(client: httpx.AsyncClient) -> None:
    """
    Make ``client`` the running event loop's shared client, for every adapter without ``client=``.

    Requests already in flight on the previous shared client go on; a previous client made by
    tailkit is closed once they end, one you set stays open. tailkit never closes ``client``:
    close it yourself after `close_shared_client` or when the loop is done with it. Turn its
    retries off and lift its pool limit, as the default does (see `chat_attempt`).

    Args:
        client: The client, used in this event loop only (httpx clients belong to one loop).

    Raises:
        ConfigError: ``client`` is not an ``httpx.AsyncClient``.
        RuntimeError: No event loop is running in this thread.
    """
    if not isinstance(client, httpx.AsyncClient):
        msg = f"set_shared_client needs an httpx.AsyncClient, got {type(client).__name__}."
        fix = "Pass httpx.AsyncClient(...)."
        raise ConfigError(msg, field="client", value=client, fix=fix)
    loop = _running_loop("set_shared_client")
    held = _registry.get(loop)
    if held is not None and held[0].client is client:
        return  # already shared: keep its owner
    _install(loop, _Shared(client, owned=False))


async def close_shared_client() -> None:
    """
    Forget the running loop's shared client, wait for its requests to end, and close it.

    The next request starts a new default client. Attempts in flight on it end normally, by
    their deadline at the latest (so one without a deadline may keep this waiting: wrap it in
    ``asyncio.timeout`` to cut them); requests you sent on it yourself are not waited for. A
    client given to `set_shared_client` is only forgotten, never closed. Calling it when there
    is no shared client does nothing. ``asyncio.run`` (and any ``asyncio.Runner``) closes the
    shared client for you when it shuts its loop down, after cancelling the loop's tasks; a
    loop you close yourself with ``loop.close()``: call this first, or its connections are
    only closed by the garbage collector.

    Raises:
        RuntimeError: No event loop is running in this thread.
    """
    loop = _running_loop("close_shared_client")
    with _lock:
        held = _registry.pop(loop, None)
    if held is not None:
        await held[1].aclose()  # runs its finally: _retire


def _running_loop(caller: str) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        msg = f"{caller}() needs a running event loop: call it from async code "
        msg += "(an httpx client belongs to the loop it runs in)"
        raise RuntimeError(msg) from None


def _current(loop: asyncio.AbstractEventLoop) -> _Shared:
    """
    The loop's shared client, made now if it has none (or the one it had was closed).
    """
    held = _registry.get(loop)
    if held is not None and not held[0].client.is_closed:
        return held[0]
    shared = _Shared(_default_client(), owned=True)
    _install(loop, shared)
    return shared


def _default_client() -> httpx.AsyncClient:
    # retries=0: connection retries would spend the deadline behind the executor's back. No
    # connection limit: a queue in the pool would count as the provider's latency. Its default
    # timeout is never used: every request carries its own.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=_KEEPALIVE)
    transport = httpx.AsyncHTTPTransport(verify=_tls(), retries=0, limits=limits)
    return httpx.AsyncClient(transport=transport)


@functools.cache
def _tls() -> ssl.SSLContext:
    """
    The default TLS context of httpx (certifi, or SSL_CERT_FILE/SSL_CERT_DIR), once per process.
    """
    return httpx.create_ssl_context()


def _install(loop: asyncio.AbstractEventLoop, shared: _Shared) -> None:
    """
    Make ``shared`` the loop's entry; the entry it replaces is retired in the background.
    """
    closer = _at_shutdown(loop, shared)
    # Started here, synchronously (it yields before awaiting anything), so the loop's
    # async-generator hook registers it now and asyncio.run will close it.
    with contextlib.suppress(StopIteration):
        closer.asend(None).send(None)
    with _lock:
        for gone in [other for other in _registry if other.is_closed()]:
            del _registry[gone]
        replaced = _registry.get(loop)
        _registry[loop] = (shared, closer)
    if replaced is not None:
        task = loop.create_task(_close(replaced[1]))
        _retiring.add(task)
        task.add_done_callback(_retiring.discard)


async def _at_shutdown(
    loop: asyncio.AbstractEventLoop, shared: _Shared
) -> AsyncGenerator[None, None]:
    """
    Yield once; when closed (at the loop's shutdown, or when replaced), retire ``shared``.
    """
    try:
        yield
    finally:
        with _lock:
            held = _registry.get(loop)
            if held is not None and held[0] is shared:
                del _registry[loop]
        await _retire(shared)


async def _close(closer: AsyncGenerator[None, None]) -> None:
    await closer.aclose()


async def _retire(shared: _Shared) -> None:
    """
    Wait for the exchanges on a shared client to end, then close it if tailkit made it.
    """
    try:
        if shared.exchanges:
            await asyncio.wait(set(shared.exchanges))
    finally:  # cancelled while waiting: close anyway, the caller chose to cut them
        if shared.owned:
            await shared.client.aclose()


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


async def _read_body(response: httpx.Response, limit: int, where: str) -> str:
    """
    A response body, read to its end or ``limit`` bytes, as text.

    A success's body past ``limit`` (the attempt's byte budget) is a runaway:
    `StreamTooLarge`. An error's body is only read for its message: its first ``limit``
    bytes (`_ERROR_BYTES`) are kept and the rest is not read.
    """
    parts: list[bytes] = []
    left = limit
    async for piece in response.aiter_bytes():
        left -= len(piece)
        if left < 0:
            if response.is_success:
                raise StreamTooLarge(where, limit=limit, unit="bytes")
            parts.append(piece[: len(piece) + left])
            break
        parts.append(piece)
    return b"".join(parts).decode("utf-8", "replace")


def _status_error(response: httpx.Response, where: str, text: str) -> AttemptError:
    code = response.status_code
    detail = clip(error_message(loads(text)) or text) or "(empty body)"
    status = "rate_limited" if code == 429 else "error"
    return AttemptError(
        f"{where}: HTTP {code}: {detail}", status=status, http_status=code,
        retry_after_s=retry_after_s(response.headers),
    )  # fmt: skip
