"""
`Server`: an OpenAI-compatible chat-completions provider on loopback, with a tail and faults.

The life of a chat request. It is read whole, then *received*: the server notes the time on
the loop clock and on the wall clock, counts its ``Idempotency-Key``, and turns the
``x-tailkit-*`` headers into a deadline (`deadline_from_headers`: the queueing before it
arrived counts). A bad body answers 400 and an unknown model 404. Otherwise the request takes
its draws from the server's one generator (`draw`: fault, stall, TTFT, speed, length), the
model's tokens-per-minute bucket may refuse it (429 with ``Retry-After``), and the answer is
sent on the drawn schedule, every sleep scaled by ``time_scale``.

Three things can end the answer early, and each is watched at once: the deadline (not yet
answered: 504; mid-stream: the stream is closed), the client closing its socket (a second
task reads until EOF; a failed write counts too) and `Server.stop`. Either way the work is
cancelled, the connection is closed when it cannot carry another request, and exactly one
`AttemptRecord` is written: the access log is the call record, so ``tailkit ingest --format
trace`` reads it next to the executor's ledger. Its times are real seconds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import random
import time
import uuid

from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tailkit.errors import ConfigError
from tailkit.executor._deadline import deadline_from_headers
from tailkit.executor._ledger import AttemptRecord, CallbackSink, JsonlSink, Ledger, Sink
from tailkit.serve import _openai as wire
from tailkit.serve._draw import Draw, TokenBucket, draw
from tailkit.serve._exchange import Exchange
from tailkit.serve._http import ClientGone, Connection, HttpError, Request, json_response
from tailkit.serve._profile import ServeConfig
from tailkit.serve._stream import answer


__all__ = ["Server"]

logger = logging.getLogger("tailkit.serve")


class Server:
    """
    Serve the models of a `ServeConfig` over HTTP/1.1 on loopback, OpenAI style.

    ``GET /v1/models`` lists the model ids; ``POST /v1/chat/completions`` answers, streamed
    or not, after the drawn TTFT and generation time, or fails as the profile's faults say.
    Use it as ``async with Server(config) as server:`` and point a client at ``server.url``.

    Args:
        config: The models and their behaviour, the time scale and the seed.
        host: Interface to listen on.
        port: TCP port; 0 picks a free one (read `port` after `start`).
        access_log: A JSON-lines file that gets every request's record (appended).
        on_record: Called with every request's record, e.g. to assert on it in a test.

    Attributes:
        records: Every chat request's `AttemptRecord`, in the order they ended.
        seen_keys: How many times each ``Idempotency-Key`` arrived.
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
    ) -> None:
        self.config = config
        self.host = host
        self.port = port
        self.records: list[AttemptRecord] = []
        self.seen_keys: collections.Counter[str] = collections.Counter()
        self._access_log = access_log
        self._on_record = on_record
        self._rng = random.Random(config.seed)  # noqa: S311 - a seeded simulation, not cryptography
        self._buckets: dict[str, TokenBucket] = {}
        self._listener: asyncio.Server | None = None
        self._ledger = Ledger()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open = 0
        self._closing = False
        self._run_id = uuid.uuid4().hex[:8]  # call ids stay unique across server runs
        self._workers = None if config.workers is None else asyncio.Semaphore(config.workers)
        self._count = 0

    @property
    def url(self) -> str:
        """
        The base URL clients use, e.g. ``http://127.0.0.1:8000/v1``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

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
        listener = await asyncio.start_server(self._connected, self.host, self.port, backlog=4096)
        self._listener = listener
        self.port = listener.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """
        Stop listening, close every open connection, wait for their handlers; close the log.

        Requests still being answered are recorded with status ``cancelled``. Calling it
        again does nothing.
        """
        if self._listener is None:
            return
        self._closing = True
        self._listener.close()
        await asyncio.sleep(0)  # connections accepted just before the close start their task
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._listener.wait_closed()
        self._listener = None
        self._ledger.close()

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
        self._open += 1
        conn = Connection(reader, writer)
        try:
            try:
                if not self._closing:
                    await self._serve(conn)
            except asyncio.CancelledError:
                pass  # stop(); a task that ends cancelled is logged as failed by asyncio
            except Exception:
                logger.exception(
                    "tailkit serve: a connection failed; it is closed, the server goes on"
                )
            await conn.close(abort=self._closing)
        except asyncio.CancelledError:  # stop() came while it was closing: drop it now
            writer.transport.abort()
        finally:
            self._open -= 1
            self._tasks.discard(task)

    async def _serve(self, conn: Connection) -> None:
        """
        Answer requests on one connection until either side closes it.
        """
        while True:
            try:
                request = await conn.read_request()
            except HttpError as exc:
                body = wire.error(exc.message, "invalid_request_error", "bad_http_request")
                with contextlib.suppress(ClientGone):
                    await conn.send(json_response(exc.status, body, keep_alive=False))
                return
            if request is None:
                return
            try:
                keep_alive = await self._dispatch(conn, request)
            except ClientGone:
                return
            if not keep_alive or not request.keep_alive:
                return

    async def _dispatch(self, conn: Connection, request: Request) -> bool:
        path = request.path.rstrip("/")
        if path == "/v1/chat/completions" and request.method == "POST":
            return await self._chat(conn, request)
        if path == "/v1/models" and request.method == "GET":
            status, body = 200, wire.models_list(list(self.config.models))
        elif path in ("/v1/chat/completions", "/v1/models"):
            status = 405
            body = wire.error(f"{request.method} is not allowed on {path}", "invalid_request_error")
        else:
            status = 404
            body = wire.error(f"no route {request.path[:100]!r}", "invalid_request_error")
        await conn.send(json_response(status, body, keep_alive=request.keep_alive))
        return True

    def _receive(self, request: Request) -> Exchange:
        loop_now, wall = asyncio.get_running_loop().time(), time.time()
        deadline = deadline_from_headers(request.headers, now_mono=loop_now, now_wall=wall)
        deadline -= self.config.deadline_margin_s * self.config.time_scale  # time to answer back
        if self.config.own_budget_s is not None:  # two clocks: its own budget, from now
            deadline = loop_now + self.config.own_budget_s * self.config.time_scale
        key = request.headers.get("idempotency-key", "")
        attempt = self.seen_keys[key] if key else 0
        if key:
            self.seen_keys[key] += 1
        self._count += 1
        return Exchange(
            call_id=f"{self._run_id}-{self._count:06d}",
            received=loop_now,
            started_at=datetime.fromtimestamp(wall, UTC),
            wall=wall,
            deadline=deadline,
            key=key,
            attempt=attempt,
            keep_alive=request.keep_alive,
        )

    async def _refuse(
        self,
        conn: Connection,
        ex: Exchange,
        http_status: int,
        body: dict[str, Any],
        *,
        status: str,
        error_type: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> bool:
        """
        Answer at once with an error, and record it.
        """
        ex.http_status = http_status
        data = json_response(http_status, body, keep_alive=ex.keep_alive, headers=headers)
        try:
            await conn.send(data)
        except ClientGone:
            ex.keep_alive, ex.client_gone = False, True
        now = asyncio.get_running_loop().time()
        self._record(ex, status=status, error_type=error_type, ended=now)
        return ex.keep_alive

    async def _chat(self, conn: Connection, request: Request) -> bool:
        """
        Answer one chat-completions request and record it; whether the connection stays open.

        With ``workers``, the request first waits for a worker (its clock starts then).
        """
        if self._workers is None:
            return await self._chat_now(conn, request)
        async with self._workers:
            return await self._chat_now(conn, request)

    async def _chat_now(self, conn: Connection, request: Request) -> bool:
        ex = self._receive(request)
        try:
            chat = wire.parse_chat(request.body)
        except wire.RequestError as exc:
            body = wire.error(str(exc), "invalid_request_error", "invalid_request", exc.param)
            return await self._refuse(
                conn, ex, 400, body, status="error", error_type="invalid_request"
            )
        ex.model, ex.stream, ex.prompt_tokens = chat.model, chat.stream, chat.prompt_tokens
        profile = self.config.models.get(chat.model)
        if profile is None:
            message = f"The model {chat.model!r} does not exist; this server has: " + ", ".join(
                self.config.models
            )
            body = wire.error(message, "invalid_request_error", "model_not_found", "model")
            return await self._refuse(
                conn, ex, 404, body, status="error", error_type="model_not_found"
            )
        scale = self.config.time_scale
        drawn = draw(self._rng, profile, time_scale=scale, max_tokens=chat.max_tokens)
        ex.stalled = drawn.stalled
        if drawn.intended_total_s is not None:  # a replay: what its timing error is measured by
            ex.attrs["intended_ttft_s"] = drawn.intended_ttft_s
            ex.attrs["intended_total_s"] = drawn.intended_total_s
        if profile.faults.tpm_limit is not None:
            if chat.model not in self._buckets:  # full when the model is first asked
                self._buckets[chat.model] = TokenBucket(
                    profile.faults.tpm_limit, time_scale=scale, now=ex.received
                )
            cost = chat.prompt_tokens + drawn.tokens
            if (wait_s := self._buckets[chat.model].take(cost, ex.received)) > 0:
                return await self._rate_limited(conn, ex, profile.faults.tpm_limit, wait_s)
        ex.fault = drawn.fault
        return await self._work(conn, ex, chat, drawn)

    async def _rate_limited(
        self, conn: Connection, ex: Exchange, tokens_per_minute: int, wait_s: float
    ) -> bool:
        retry_ms = max(math.ceil(wait_s * 1000), 1)
        message = (
            f"Rate limit reached for {ex.model}: {tokens_per_minute} tokens per minute. "
            f"Please try again in {retry_ms / 1000:g}s."
        )
        body = wire.error(message, "requests", "rate_limit_exceeded")
        headers = [("Retry-After", f"{retry_ms / 1000:g}"), ("retry-after-ms", str(retry_ms))]
        ex.attrs["retry_after_s"] = retry_ms / 1000
        return await self._refuse(
            conn, ex, 429, body, status="rate_limited", error_type="rate_limit_exceeded",
            headers=headers,
        )  # fmt: skip

    async def _answer(
        self, conn: Connection, ex: Exchange, chat: wire.ChatRequest, d: Draw
    ) -> None:
        chunk_tokens = self.config.models[chat.model].chunk_tokens
        status, error_type = await answer(conn, ex, chat, d, chunk_tokens=chunk_tokens)
        # Recorded before this task yields again: a client in this process that has read the
        # whole answer finds its record in `records`.
        tokens = d.tokens if status in ("ok", "invalid") else None
        now = asyncio.get_running_loop().time()
        self._record(ex, status=status, error_type=error_type, ended=now, tokens=tokens)

    async def _work(self, conn: Connection, ex: Exchange, chat: wire.ChatRequest, d: Draw) -> bool:
        """
        Send the drawn answer, racing the deadline and the client's EOF.
        """
        loop = asyncio.get_running_loop()
        work = asyncio.create_task(self._answer(conn, ex, chat, d))
        # Two clocks: a tool on its own budget does not notice the caller leaving.
        own_clock = self.config.own_budget_s is not None
        watch = asyncio.create_task(asyncio.Event().wait() if own_clock else conn.watch_eof())
        # A hung server honours nothing: only the client (or stop) ends a hang or a stall.
        honours = d.fault not in ("hang", "stall_mid") and math.isfinite(ex.deadline)
        timeout = max(ex.deadline - loop.time(), 0.0) if honours else None
        try:
            done, _ = await asyncio.wait(
                {work, watch}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            now = loop.time()
        except asyncio.CancelledError:  # stop(): unless the answer made it out first
            ex.keep_alive = False
            self._record(ex, status="cancelled", error_type="server_stopped", cut=loop.time())
            raise
        finally:
            for task in (work, watch):
                task.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)
        failure = work.exception() if work in done else None
        if work in done and failure is None:
            pass  # recorded by _answer
        elif own_clock and isinstance(failure, ClientGone):
            # the work is done on the tool's clock; only the answer found nobody to take it
            ex.keep_alive, ex.client_gone = False, True
            self._record(ex, status="ok", error_type=None, ended=now, tokens=d.tokens)
        elif failure is not None and not isinstance(failure, ClientGone):
            logger.error("tailkit serve: request %s failed", ex.call_id, exc_info=failure)
            ex.keep_alive = False
            self._record(ex, status="error", error_type=type(failure).__name__, ended=now)
        elif work in done or watch in done:
            ex.keep_alive, ex.client_gone = False, True
            self._record(ex, status="timeout", error_type="client_gone", cut=now)
        else:
            await self._deadline_passed(conn, ex, now)
        return ex.keep_alive

    async def _deadline_passed(self, conn: Connection, ex: Exchange, now: float) -> None:
        if ex.http_status is None:  # nothing sent yet: say so
            message = (
                f"The request's deadline ({ex.deadline - ex.received:.3f} s after receipt) "
                "passed before the answer was ready."
            )
            body = wire.error(message, "timeout", "deadline_exceeded")
            ex.http_status = 504
            try:
                await conn.send(json_response(504, body, keep_alive=ex.keep_alive))
            except ClientGone:
                ex.keep_alive, ex.client_gone = False, True
        else:  # mid-stream: the stream ends without [DONE]
            ex.keep_alive = False
        self._record(ex, status="timeout", error_type="deadline_exceeded", cut=now)

    def _record(self, ex: Exchange, **outcome: Any) -> None:
        """
        Write the request's one access-log record (see `Exchange.record`).
        """
        if ex.recorded:  # exactly one record per request
            return
        ex.recorded = True
        record = ex.record(**outcome)
        self.records.append(record)
        self._ledger.write(record)
