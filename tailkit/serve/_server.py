"""
`Server`: an OpenAI- and Anthropic-compatible provider on loopback, with a tail and faults.

This module holds the sockets: listening, one task per connection, requests read one after
another on it, and stopping. What a chat request does once read is in `_requests`; a route
that answers a model (`APIS`) names the API it speaks.

Every chat request is answered and recorded, whatever it holds: a request to the chat route
that is not valid HTTP answers its 4xx and is recorded ``bad_http_request``, and a failure of
the server's own (a bug) answers 500 and is recorded ``internal_error``. What a client can
hold is bounded (`Limits`): a connection that sends no whole request within the idle timeout
is closed, one over the connection cap is answered 503 at once, a connection holds at most
one request's bytes, and all bodies together at most the body budget.

The connection cap never exceeds what the open-file limit (``ulimit -n``) leaves: a server
past it could not accept, so good requests would wait instead of being refused. The cap is
lowered to fit at `Server.start` (a warning says so), and a failure to accept (the limit
reached all the same, by other files) is counted and warned of once, never a traceback per
attempt: accepting waits a moment and goes on (`tailkit.serve._listen`). Every request must
name the server in its ``Host`` (and ``Origin``, when sent), which stops a web page from
reaching it by DNS rebinding (`tailkit.serve._hosts`); listening beyond loopback is warned
of.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from tailkit.errors import ConfigError
from tailkit.ledger import AttemptRecord, CallbackSink, JsonlSink, Ledger, Sink
from tailkit.serve import _openai as wire
from tailkit.serve._anthropic import Anthropic
from tailkit.serve._api import Api
from tailkit.serve._hosts import HostCheck, is_loopback
from tailkit.serve._http import (
    ClientGone,
    Connection,
    HttpError,
    IdleTimeout,
    Request,
    json_response,
)
from tailkit.serve._limits import BodyBudget, Limits
from tailkit.serve._listen import Acceptor, bind
from tailkit.serve._openfiles import connection_cap
from tailkit.serve._profile import ServeConfig
from tailkit.serve._requests import Requests


__all__ = ["Server"]

logger = logging.getLogger("tailkit.serve")

APIS: dict[str, Api] = {api.path: api for api in (wire.OpenAI(), Anthropic())}
"""The routes that answer a model, and the API each speaks."""

_REFUSING_AT_ONCE = 16  # connections over the cap answered 503 at once; more are reset


class Server(Requests):
    """
    Serve the models of a `ServeConfig` over HTTP/1.1 on loopback, OpenAI and Anthropic style.

    ``GET /v1/models`` lists the model ids; ``POST /v1/chat/completions`` (OpenAI) and
    ``POST /v1/messages`` (Anthropic) answer, streamed or not, after the drawn TTFT and
    generation time, or fail as the profile's faults say, each in its API's bodies, events and
    errors; the draws, the deadline and the access log do not depend on the API. Use it as
    ``async with Server(config) as server:`` and point an OpenAI client at ``server.url``, an
    Anthropic one at ``server.root_url``.

    Args:
        config: The models and their behaviour, the time scale and the seed.
        host: Interface to listen on.
        port: TCP port; 0 picks a free one (read `port` after `start`).
        access_log: A JSON-lines file that gets every request's record (appended).
        on_record: Called with every request's record, e.g. to assert on it in a test.
        limits: Connection and memory bounds (`Limits`; ``None``: the defaults).
        allowed_hosts: Names (or addresses) a request's ``Host`` and ``Origin`` may name
            besides loopback names, ``host`` and the address a connection came in on;
            ``"*"``: any (no check against DNS rebinding). Others answer 403.

    Attributes:
        records: The latest chat requests' `AttemptRecord`, in the order they ended: at most
            ``limits.keep_records`` (the access log and ``on_record`` get all of them).
        counts: Chat requests recorded since the start, by status, counted as they end
            (``counts.total()``: all of them, however many `records` still holds).
        seen_keys: How many times each ``Idempotency-Key`` arrived, for the
            ``limits.keep_keys`` most recently seen keys (a key longer than 256 characters is
            kept as its start and a hash).
        closed_early: Connections the server closed on its own, by cause: ``refused``
            (``limits.max_connections`` were open; answered 503), ``idle`` (no request
            within ``limits.idle_timeout_s``), ``flooded`` (more than a request head arrived
            while a request was answered).
        max_connections: The connection cap in force: ``limits.max_connections``, lowered at
            `start` to what the open-file limit leaves.
        port: The port it listens on, once started.
    """

    def __init__(
        self,
        config: ServeConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        access_log: str | os.PathLike[str] | None = None,
        on_record: Callable[[AttemptRecord], None] | None = None,
        limits: Limits | None = None,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        super().__init__(config, Limits() if limits is None else limits)
        self.host = host
        self.port = port
        self.closed_early: collections.Counter[str] = collections.Counter()
        self._accept_errors = 0
        self.max_connections = self.limits.max_connections
        self._hosts = HostCheck(host, allowed_hosts)
        self._budget = BodyBudget(self.limits.body_budget_bytes)
        self._refusing = 0
        self._budget_warned = False
        self._access_log = access_log
        self._on_record = on_record
        self._listener: Acceptor | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open = 0
        self._closing = False

    @property
    def url(self) -> str:
        """
        The base URL clients use, e.g. ``http://127.0.0.1:8000/v1``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """
        The URL without ``/v1``, e.g. ``http://127.0.0.1:8000``: the Anthropic SDK's base URL.
        """
        return self.url.removesuffix("/v1")

    @property
    def accept_errors(self) -> int:
        """
        Times accepting a connection failed, mostly for want of a file descriptor (``EMFILE``).

        Accepting goes on after a short wait (see `tailkit.serve._listen`).
        """
        now = 0 if self._listener is None else self._listener.errors
        return self._accept_errors + now

    @property
    def open_connections(self) -> int:
        """
        Client connections open now (0 after `stop`).
        """
        return self._open

    async def start(self) -> None:
        """
        Open the access log and listen; `port` is the real port afterwards.

        Raises:
            ConfigError: The access log cannot be opened.
            OSError: The port cannot be bound.
        """
        sinks: list[Sink] = []
        if self._access_log is not None:
            try:
                sinks.append(JsonlSink(self._access_log))
            except ConfigError as exc:  # its message speaks of the executor's ledger
                msg = str(exc).replace("ledger file", "access log", 1)
                raise ConfigError(msg) from None
        if self._on_record is not None:
            sinks.append(CallbackSink(self._on_record))
        self._ledger = Ledger(*sinks)
        self._closing = False
        # A deep accept queue: load tests connect by the thousand, and a full queue drops SYNs
        # that clients retry only after 1, 3, 7 … seconds.
        sockets = bind(self.host, self.port, backlog=4096)
        self.port = sockets[0].getsockname()[1]
        if not is_loopback(self.host):
            logger.warning(
                "tailkit serve: listening on %s, not loopback: whoever reaches this address "
                "can use the server (Host and Origin must still name it)",
                self.host or "every interface",
            )
        self.max_connections = connection_cap(self.limits.max_connections)
        if self.max_connections < self.limits.max_connections:
            logger.warning(
                "tailkit serve: the open-file limit allows %d connections at once, not %d: "
                "more are answered 503 (raise it with ulimit -n)",
                self.max_connections,
                self.limits.max_connections,
            )
        self._listener = Acceptor(sockets, self._connected)
        self._listener.tasks = [asyncio.create_task(self._accept(sock)) for sock in sockets]

    async def stop(self) -> None:
        """
        Stop listening, close every open connection, wait for their handlers; close the log.

        Requests still being answered are recorded with status ``cancelled``. Calling it
        again does nothing.
        """
        if self._listener is None:
            return
        self._closing = True
        self._accept_errors += self._listener.errors
        await self._listener.close()
        await asyncio.sleep(0)  # connections accepted just before the close start their task
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._listener = None
        self._ledger.close()

    async def _accept(self, sock: socket.socket) -> None:
        assert self._listener is not None  # noqa: S101 - started before its tasks
        await self._listener.accept(sock)

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - start_server runs each connection in a task
        self._tasks.add(task)
        limits = self.limits
        over = self._open >= self.max_connections
        if not over:
            self._open += 1
        sockname = writer.get_extra_info("sockname")
        local = sockname[0] if isinstance(sockname, tuple) else None
        conn = Connection(
            reader,
            writer,
            max_body_bytes=limits.max_body_bytes,
            idle_timeout_s=limits.idle_timeout_s,
            budget=self._budget,
            check_head=lambda headers: self._hosts.check(headers, local),
        )
        try:
            try:
                if over and self._refusing >= _REFUSING_AT_ONCE:
                    self.closed_early["refused"] += 1
                    conn.reset()  # a flood: no descriptor held to answer it
                elif over:
                    self._refusing += 1
                    try:
                        await self._refuse_connection(conn)
                    finally:
                        self._refusing -= 1
                elif not self._closing:
                    await self._serve(conn)
            except asyncio.CancelledError:
                pass  # stop(); a task that ends cancelled is logged as failed by asyncio
            except Exception:
                logger.exception(
                    "tailkit serve: a connection failed; it is closed, the server goes on"
                )
            if conn.flooded:
                self.closed_early["flooded"] += 1
            await conn.close(abort=self._closing)
        except asyncio.CancelledError:  # stop() came while it was closing: drop it now
            writer.transport.abort()
        finally:
            conn.release()
            self._open -= 0 if over else 1
            self._tasks.discard(task)

    async def _refuse_connection(self, conn: Connection) -> None:
        """
        Answer 503 without reading anything: ``max_connections`` are open.
        """
        self.closed_early["refused"] += 1
        if self.closed_early["refused"] == 1:
            logger.warning(
                "tailkit serve: %d connections are open; more are refused (503) meanwhile",
                self.max_connections,
            )
        message = (
            f"This server serves at most {self.max_connections} connections at once; "
            "try again later."
        )
        body = wire.error(message, "server_error", "too_many_connections")
        data = json_response(503, body, keep_alive=False, headers=[("Retry-After", "1")])
        with contextlib.suppress(ClientGone):
            await conn.send(data)

    async def _serve(self, conn: Connection) -> None:
        """
        Answer requests on one connection until either side closes it.
        """
        while True:
            request: Request | None = None
            try:
                request = await conn.read_request()
                if request is None:
                    return
                keep_alive = await self._dispatch(conn, request)
            except IdleTimeout:
                self.closed_early["idle"] += 1
                return
            except HttpError as exc:
                await self._bad_http(conn, exc)
                return
            except ClientGone:
                return
            except Exception:  # a bug of ours: an answer all the same, not a dropped connection
                logger.exception("tailkit serve: a request failed; answered 500")
                await self._failed_early(conn, reading=request is None)
                return
            finally:
                conn.release()
            if not keep_alive or not request.keep_alive:
                return

    async def _failed_early(self, conn: Connection, *, reading: bool) -> None:
        """
        Answer 500 for a failure of ours outside a chat exchange.

        A failure while reading a chat request is recorded ``internal_error``, as one inside
        the exchange is.
        """
        if reading:
            failed = HttpError(
                500, "the server failed on this request", error_type="internal_error"
            )
            with contextlib.suppress(Exception):  # a failure again: the plain answer below
                await self._bad_http(conn, failed)
                return
        body = wire.error("the server failed on this request", "server_error")
        with contextlib.suppress(ClientGone):
            await conn.send(json_response(500, body, keep_alive=False))

    async def _bad_http(self, conn: Connection, exc: HttpError) -> None:
        """
        Answer a request that cannot be read; one to the chat route is recorded too.

        A request cut short by the client closing its connection is not recorded: it never
        arrived (a caller that gives up while sending is not a call the server received).
        """
        method, path = conn.target or ("", "")
        api = APIS.get(path.rstrip("/"))
        type_ = "server_error" if exc.status >= 500 else "invalid_request_error"
        code = exc.error_type
        headers = None if exc.retry_after_s is None else [("Retry-After", str(exc.retry_after_s))]
        if exc.status == 503 and self._budget_warned is False:
            self._budget_warned = True
            logger.warning(
                "tailkit serve: request bodies hold the whole budget (%d bytes); more are "
                "answered 503 meanwhile",
                self._budget.total_bytes,
            )
        if exc.cut or method != "POST" or api is None:
            body = wire.error(exc.message, type_, code)
            data = json_response(exc.status, body, keep_alive=False, headers=headers)
            with contextlib.suppress(ClientGone):
                await conn.send(data)
            return
        ex = self._receive(Request(method, path, "HTTP/1.1", conn.headers, b""), api)
        ex.keep_alive = False
        body = api.error(exc.status, exc.message, type_=type_, code=code)
        await self._refuse(
            conn, ex, exc.status, body, status="error", error_type=code, headers=headers
        )

    async def _dispatch(self, conn: Connection, request: Request) -> bool:
        path = request.path.rstrip("/")
        api = APIS.get(path)
        if api is not None and request.method == "POST":
            return await self._chat(conn, request, api)
        if path == "/v1/models" and request.method == "GET":
            status, body = 200, wire.models_list(list(self.config.models))
        elif api is not None or path == "/v1/models":
            status, message = 405, f"{request.method} is not allowed on {path}"
            body = (api or wire.OpenAI()).error(status, message, type_="invalid_request_error")
        else:
            status = 404
            body = wire.error(f"no route {request.path[:100]!r}", "invalid_request_error")
        await conn.send(json_response(status, body, keep_alive=request.keep_alive))
        return True
