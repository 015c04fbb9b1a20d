"""
The life of a chat request, from its receipt to its one record: the base of `Server`.

A request comes by one of two APIs (`Api`): OpenAI's chat completions or Anthropic's Messages.
The API reads its body and renders its answer and its errors; all the rest below is the same
for both, so the two SDKs meet the same tail, the same faults and the same access log.

A request is read whole, then *received*: the server notes the time on the loop clock and on
the wall clock, counts its ``Idempotency-Key``, and turns the ``x-tailkit-*`` headers into a
deadline (`deadline_from_headers`: the queueing before it arrived counts; one further away than
`MAX_REMAINING_S` is clamped to it). A bad body answers 400 and an unknown model 404. A model
is named by its id (``openai/gpt-4.1``) or, when exactly one id ends in it, by the bare model
an adapter sends (``gpt-4.1``): the answer and the record then carry the id. A bare model
that more than one id ends in is resolved by an ``x-tailkit-route`` header naming one of them,
else answers 400, listing them.
Otherwise the request takes its draws from the server's one generator (`draw`: fault, stall,
TTFT, speed, length; from a step's aligned outcome tables, the row its key drew: `Jobs`), the
model's tokens-per-minute bucket may refuse it (429 with ``Retry-After``), and the answer is
sent on the drawn schedule, every sleep scaled by ``time_scale``.

Three things can end the answer early, and each is watched at once: the deadline (not yet
answered: 504; mid-stream: the stream is closed), the client closing its socket (a second
task reads until EOF; a failed write counts too) and `Server.stop`. Either way the work is
cancelled, the connection is closed when it cannot carry another request, and exactly one
`AttemptRecord` is written: the access log is the call record, so ingesting it
(``format="trace"``) reads it next to the executor's ledger. Its times are real seconds.

A failure of the server's own (a bug) answers 500 if nothing was sent yet, and is recorded
``internal_error``: no request goes unanswered or unlogged. Records stream to the ledger's
sinks; the server itself keeps the latest ``keep_records`` and counts the rest.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import random
import time
import uuid

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from tailkit.deadline import deadline_from_headers
from tailkit.ledger import AttemptRecord, Ledger
from tailkit.serve._api import Api, ChatRequest, RequestError
from tailkit.serve._draw import Draw, TokenBucket, draw
from tailkit.serve._exchange import Exchange
from tailkit.serve._http import ClientGone, Connection, Request, json_response
from tailkit.serve._jobs import Jobs
from tailkit.serve._limits import MAX_REMAINING_S, Limits, clip, remember
from tailkit.serve._profile import ServeConfig
from tailkit.serve._stream import answer


__all__ = ["ROUTE_HEADER", "Requests", "bare_models"]

logger = logging.getLogger("tailkit.serve")

ROUTE_HEADER = "x-tailkit-route"  # the caller's route, e.g. openai/gpt-4.1: picks a bare model's id


def bare_models(ids: Iterable[str]) -> dict[str, list[str]]:
    """
    The model ids each bare model name stands for: ``gpt-4.1`` for ``openai/gpt-4.1``.

    The bare name is what follows the id's first ``/`` (its provider), so ``together/meta-llama/
    Llama-3`` is also reached by ``meta-llama/Llama-3``. Ids without a ``/`` have none.

    Args:
        ids: The configured model ids, in order.

    Returns:
        Each bare name and the ids, in order, that it names.
    """
    routes: dict[str, list[str]] = {}
    for model_id in ids:
        _, slash, bare = model_id.partition("/")
        if slash and bare:
            routes.setdefault(bare, []).append(model_id)
    return routes


class Requests:
    """
    Chat requests answered and recorded: the part of `Server` that knows no socket.

    Args:
        config: The models and their behaviour, the time scale and the seed.
        limits: The bounds on what is kept.
    """

    def __init__(self, config: ServeConfig, limits: Limits) -> None:
        self.config = config
        self.limits = limits
        self.records: collections.deque[AttemptRecord] = collections.deque(
            maxlen=limits.keep_records
        )
        self.counts: collections.Counter[str] = collections.Counter()
        self.seen_keys: collections.Counter[str] = collections.Counter()
        self._rng = random.Random(config.seed)  # noqa: S311 - a seeded simulation, not cryptography
        self._buckets: dict[str, TokenBucket] = {}
        self._ledger = Ledger()
        self._run_id = uuid.uuid4().hex[:8]  # call ids stay unique across server runs
        self._workers = None if config.workers is None else asyncio.Semaphore(config.workers)
        self._count = 0
        self._bare = bare_models(config.models)
        self._jobs = Jobs(keep=limits.keep_keys)

    def _model_id(self, asked: str, route: str) -> str | list[str]:
        """
        The model id ``asked`` names: itself, or the one id its bare name stands for.

        Args:
            asked: The body's ``model``.
            route: The ``x-tailkit-route`` header (``""``: none): picks among the ids a bare
                name stands for.

        Returns:
            The id; or every id it may stand for (none: unknown; more than one: ambiguous).
        """
        if asked in self.config.models:
            return asked
        routes = self._bare.get(asked, [])
        if route in routes:
            return route
        return routes[0] if len(routes) == 1 else routes

    def _receive(self, request: Request, api: Api) -> Exchange:
        loop_now, wall = asyncio.get_running_loop().time(), time.time()
        deadline = deadline_from_headers(request.headers, now_mono=loop_now, now_wall=wall)
        deadline -= self.config.deadline_margin_s * self.config.time_scale  # time to answer back
        if self.config.own_budget_s is not None:  # two clocks: its own budget, from now
            deadline = loop_now + self.config.own_budget_s * self.config.time_scale
        asked_s = deadline - loop_now
        if math.isfinite(asked_s) and asked_s > MAX_REMAINING_S:  # e.g. 1e300: no date, no timer
            deadline = loop_now + MAX_REMAINING_S
        key = clip(request.headers.get("idempotency-key", ""))
        attempt = remember(self.seen_keys, key, keep=self.limits.keep_keys) if key else 0
        self._count += 1
        ex = Exchange(
            call_id=f"{self._run_id}-{self._count:06d}",
            received=loop_now,
            started_at=datetime.fromtimestamp(wall, UTC),
            wall=wall,
            deadline=deadline,
            key=key,
            attempt=attempt,
            api=api,
            keep_alive=request.keep_alive,
        )
        if deadline - loop_now < asked_s:
            ex.attrs["remaining_s_asked"] = asked_s
        return ex

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

    async def _chat(self, conn: Connection, request: Request, api: Api) -> bool:
        """
        Answer one request of ``api`` and record it; whether the connection stays open.

        With ``workers``, the request first waits for a worker (its clock starts then).
        """
        if self._workers is None:
            return await self._chat_now(conn, request, api)
        try:
            await self._workers.acquire()
        except asyncio.CancelledError:  # stop() while it waited: in flight all the same
            ex = self._receive(request, api)
            self._record(ex, status="cancelled", error_type="server_stopped", cut=ex.received)
            raise
        try:
            return await self._chat_now(conn, request, api)
        finally:
            self._workers.release()

    async def _chat_now(self, conn: Connection, request: Request, api: Api) -> bool:
        ex = self._receive(request, api)
        try:
            return await self._exchange(conn, ex, request)
        except Exception as exc:  # a bug of ours: the client is answered, the log has its line
            return await self._failed(conn, ex, exc)

    async def _failed(self, conn: Connection, ex: Exchange, exc: BaseException) -> bool:
        """
        Answer 500 if nothing was sent yet, record ``internal_error``, close the connection.
        """
        logger.error("tailkit serve: request %s failed", ex.call_id, exc_info=exc)
        ex.attrs["error"] = f"{type(exc).__name__}: {exc}"[:200]
        ex.keep_alive = False
        if ex.http_status is None:
            body = ex.api.error(500, "the server failed on this request", type_="server_error")
            return await self._refuse(
                conn, ex, 500, body, status="error", error_type="internal_error"
            )
        now = asyncio.get_running_loop().time()
        self._record(ex, status="error", error_type="internal_error", ended=now)
        return False

    async def _exchange(self, conn: Connection, ex: Exchange, request: Request) -> bool:
        try:
            chat = ex.api.parse(request.body)
        except RequestError as exc:
            body = ex.api.error(
                400, str(exc), type_="invalid_request_error", code="invalid_request",
                param=exc.param,
            )  # fmt: skip
            return await self._refuse(
                conn, ex, 400, body, status="error", error_type="invalid_request"
            )
        ex.model, ex.stream, ex.prompt_tokens = clip(chat.model), chat.stream, chat.prompt_tokens
        model_id = self._model_id(chat.model, request.headers.get(ROUTE_HEADER, ""))
        if isinstance(model_id, list):
            return await self._unknown_model(conn, ex, model_id)
        if model_id != chat.model:  # a bare model: answered and recorded as its id
            ex.attrs["model_asked"] = ex.model
            ex.model, chat = model_id, dataclasses.replace(chat, model=model_id)
        profile = self.config.models[model_id]
        scale = self.config.time_scale
        entry = None
        if profile.outcomes is not None and profile.outcomes.group is not None:
            # one step's aligned tables: every attempt of a call (one key) does one job
            entry, row = self._jobs.entry(self._rng, profile.outcomes, model=model_id, key=ex.key)
            ex.attrs["job_row"] = row
        drawn = draw(self._rng, profile, time_scale=scale, max_tokens=chat.max_tokens, entry=entry)
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

    async def _unknown_model(self, conn: Connection, ex: Exchange, routes: list[str]) -> bool:
        """
        Answer a model no id matches (404) or a bare model more than one id ends in (400).
        """
        if routes:
            message = (
                f"The model {ex.model!r} is served by {len(routes)} routes: "
                f"{', '.join(routes)}; send one of them as the model"
            )
            body = ex.api.error(
                400, message, type_="invalid_request_error", code="model_ambiguous",
                param="model",
            )  # fmt: skip
            return await self._refuse(
                conn, ex, 400, body, status="error", error_type="model_ambiguous"
            )
        message = f"The model {ex.model!r} does not exist; this server has: " + ", ".join(
            self.config.models
        )
        body = ex.api.error(
            404, message, type_="invalid_request_error", code="model_not_found", param="model"
        )
        return await self._refuse(conn, ex, 404, body, status="error", error_type="model_not_found")

    async def _rate_limited(
        self, conn: Connection, ex: Exchange, tokens_per_minute: int, wait_s: float
    ) -> bool:
        retry_ms = max(math.ceil(wait_s * 1000), 1)
        message = (
            f"Rate limit reached for {ex.model}: {tokens_per_minute} tokens per minute. "
            f"Please try again in {retry_ms / 1000:g}s."
        )
        body = ex.api.error(429, message, type_="requests", code="rate_limit_exceeded")
        # Retry-After in whole seconds (HTTP's delay-seconds, what providers send: a client that
        # reads it as an integer is not left without one), the exact wait in retry-after-ms
        whole = str(math.ceil(retry_ms / 1000))
        headers = [("Retry-After", whole), ("retry-after-ms", str(retry_ms))]
        ex.attrs["retry_after_s"] = retry_ms / 1000
        return await self._refuse(
            conn, ex, 429, body, status="rate_limited", error_type="rate_limit_exceeded",
            headers=headers,
        )  # fmt: skip

    async def _answer(self, conn: Connection, ex: Exchange, chat: ChatRequest, d: Draw) -> None:
        chunk_tokens = self.config.models[chat.model].chunk_tokens
        status, error_type = await answer(conn, ex, chat, d, chunk_tokens=chunk_tokens)
        # Recorded before this task yields again: a client in this process that has read the
        # whole answer finds its record in `records`.
        tokens = d.tokens if status in ("ok", "invalid") else None
        now = asyncio.get_running_loop().time()
        self._record(ex, status=status, error_type=error_type, ended=now, tokens=tokens)

    async def _work(self, conn: Connection, ex: Exchange, chat: ChatRequest, d: Draw) -> bool:
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
            await self._failed(conn, ex, failure)
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
            body = ex.api.error(504, message, type_="timeout", code="deadline_exceeded")
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
        record = ex.record(**outcome)
        ex.recorded = True
        self.records.append(record)
        self.counts[record.status] += 1
        try:
            self._ledger.write(record)
        except Exception:  # a record the ledger refuses is a bug of ours: the request is answered
            logger.exception("tailkit serve: the record of request %s was not written", ex.call_id)
