"""
One attempt in flight: drive the attempt function, watch its stream, write its ledger line.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import time

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tailkit.deadline import now
from tailkit.executor._chunks import answer_usage, read_chunk
from tailkit.executor._types import (
    Attempt,
    AttemptFn,
    StreamResult,
    StreamTooLarge,
    TruncatedStream,
)
from tailkit.ledger import AttemptRecord


@dataclass(slots=True, eq=False)
class Live:
    """
    One attempt in flight, as the step runner watches it.

    Times are instants on the loop clock. ``first_token`` is the first content chunk (for
    a non-streamed answer, the answer itself); ``last_chunk`` the latest *content* chunk (a
    role-only, keep-alive or empty chunk is no sign of progress, so it resets no stall timer).
    ``streamed`` is known as soon as the attempt function returns a stream.
    """

    attempt: Attempt
    started: float
    started_wall: float
    task: asyncio.Task[Any] | None = None
    streamed: bool = False
    first_token: float | None = None
    last_chunk: float | None = None
    tokens: int = 0  # content chunks counted (one token each unless a chunk says otherwise)
    usage_output: int | None = None  # output tokens the provider reported, preferred
    input_tokens: int | None = None
    ended: float | None = None
    watch_chunks: bool = False  # the step wants to hear of every chunk (stall, projection)
    wake: Callable[[], None] | None = None  # called on every chunk while the step listens
    on_end: Callable[..., None] | None = None  # called as its task ends, while the step waits
    recorded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    span: Any = None  # its tracing span handle, when the executor is watched
    pending: bool = False  # a retry still in its wait: not started, its cutoffs not running

    def age(self, at: float) -> float:
        """
        Seconds since the attempt started, at instant ``at``.
        """
        return at - self.started


def call(live: Live, fn: AttemptFn) -> Any:
    """
    Call the attempt function: its stream (``live.streamed`` set) or awaitable.
    """
    result = fn(live.attempt)
    if hasattr(result, "__aiter__"):
        live.streamed = True
    return result


async def drive(live: Live, result: Any) -> Any:
    """
    Run an attempt to its answer; a stream is read to its terminal marker.

    Args:
        live: The attempt.
        result: What its attempt function returned (`call`).

    Raises:
        TruncatedStream: The stream ended without a terminal marker.
    """
    try:
        if inspect.isawaitable(result):
            result = await result
            if hasattr(result, "__aiter__"):
                _streams(live)
        if not hasattr(result, "__aiter__"):
            live.first_token = live.ended = now()
            usage = answer_usage(result)
            if usage:
                live.usage_output = usage.get("output_tokens")
                live.input_tokens = usage.get("input_tokens")
            return result
        return await _read_stream(live, result)
    finally:
        ended(live)


def ended(live: Live) -> None:
    """
    The attempt's task is ending (its coroutine's last act): wake the step waiting on it.

    The step is then resumed in the next turn of the loop, when the task is done. A done
    callback would take one more turn: the loop calls it in the turn after the task ends,
    and only then is the step scheduled. The step registers both (`Live.on_end` and a done
    callback, for a task cancelled before it ever ran); the first to come removes the other.
    """
    wake = live.on_end
    if wake is None:
        return
    live.on_end = None
    if live.task is not None:
        live.task.remove_done_callback(wake)
    wake()


# one loop, every branch inline: it runs per chunk, where a helper call would cost
async def _read_stream(live: Live, result: Any) -> StreamResult:  # noqa: PLR0912
    read = _Reading()
    step = live.attempt.step
    keep = read.parts.append
    # the budgets, as local countdowns: one comparison per chunk (see StepPolicy)
    chunks_left = most = live.attempt.max_stream_chunks
    chars_left = live.attempt.max_stream_bytes
    try:
        async for chunk in result:
            at = now()
            got = read_chunk(chunk, step)
            chunks_left -= 1
            if chunks_left < 0:
                raise _too_large(live, "chunks")
            if got.content:
                if live.first_token is None:
                    live.first_token = at
                live.last_chunk = at
                live.tokens += got.tokens
                text = got.text
                if text:
                    chars_left -= len(text)
                    if chars_left < 0:
                        raise _too_large(live, "characters")
                    keep(text)
            if got.final and not read.final:  # the first terminal chunk (a FINAL after: no news)
                read.final, read.last = True, chunk
            if got.finish_reason is not None:
                read.finish_reason = got.finish_reason
            if got.usage:
                read.output = got.usage.get("output_tokens", read.output)
                live.input_tokens = got.usage.get("input_tokens", live.input_tokens)
            if live.wake is not None:
                live.wake()
    finally:
        # release the stream (its connection) whether it ended, failed or was cancelled
        # (an async generator's aclose; an SDK's stream returned as is has close or aclose)
        close = getattr(result, "aclose", None) or getattr(result, "close", None)
        if close is not None:
            closing = close()
            if inspect.isawaitable(closing):
                await closing
    live.ended = now()
    if not read.final:
        raise TruncatedStream(live.attempt.step, most - chunks_left)
    live.usage_output = read.output
    output = read.output if read.output is not None else live.tokens
    return StreamResult(
        "".join(read.parts), output, live.input_tokens, read.finish_reason, read.last
    )


def _too_large(live: Live, unit: str) -> StreamTooLarge:
    a = live.attempt
    limit = a.max_stream_chunks if unit == "chunks" else a.max_stream_bytes
    return StreamTooLarge(f"step {a.step!r}", limit=limit, unit=unit)


@dataclass(slots=True)
class _Reading:
    """
    What a stream has said so far: its text, the terminal chunk, usage.

    Not its chunks: an SDK's chunk objects weigh a hundred times their text.
    """

    parts: list[str] = field(default_factory=list)
    final: bool = False
    last: Any = None
    finish_reason: str | None = None
    output: int | None = None


def _streams(live: Live) -> None:
    """
    An awaitable attempt turned out to stream: its TTFT cutoff applies from now on.
    """
    live.streamed = True
    if live.wake is not None:
        live.wake()


def record_of(
    live: Live,
    *,
    status: str,
    at: float,
    error: BaseException | None = None,
    http_status: int | None = None,
    winner: bool = False,
    abandoned: bool = False,
    censored: bool = False,
) -> AttemptRecord:
    """
    The ledger line of an attempt that ended (or was cut, ``censored``) at instant ``at``.
    """
    a = live.attempt
    total = None if censored else live.age(live.ended if live.ended is not None else at)
    ttft = None
    if live.streamed and live.first_token is not None:
        ttft = live.first_token - live.started
    deadline_at = None
    if math.isfinite(a.deadline):
        deadline_at = _calendar(live.started_wall + (a.deadline - live.started))
    attrs = dict(live.extra)
    if error is not None:
        attrs["error"] = str(error)[:500]
    return AttemptRecord(
        call_id=f"{a.idempotency_key}-{a.attempt}",
        run_id=a.run_id,
        step=a.step,
        attempt=a.attempt,
        role=a.role,
        provider=a.provider,
        model=a.model,
        started_at=datetime.fromtimestamp(live.started_wall, UTC),
        ttft_s=ttft,
        total_s=total,
        input_tokens=live.input_tokens,
        output_tokens=_output_tokens(live) if status == "ok" else None,
        status=status,
        error_type=None if error is None else type(error).__name__,
        http_status=http_status,
        censored_at_s=live.age(at) if censored else None,
        abandoned=abandoned,
        idempotency_key=a.idempotency_key,
        deadline_at=deadline_at,
        winner=winner,
        attrs=attrs,
    )


def _calendar(epoch_s: float) -> datetime | None:
    """
    An epoch instant as a UTC datetime, or ``None`` past what the calendar holds (year 9999).

    The scopes make a deadline that far ``math.inf`` (`tailkit.deadline.lowlevel.far`); an
    `Attempt` built by hand may still carry one, and its answer must not be lost for it.
    """
    try:
        return datetime.fromtimestamp(epoch_s, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _output_tokens(live: Live) -> int | None:
    # provider usage first (docs/call-record.md), else the content chunks counted; a
    # non-streamed answer without usage has no count
    if live.usage_output is not None:
        return live.usage_output
    return live.tokens if live.streamed else None


def start(
    attempt: Attempt,
    fn: AttemptFn,
    loop: asyncio.AbstractEventLoop,
    *,
    delay_s: float = 0.0,
    started_by: str | None = None,
    begin: Callable[[Live], None] | None = None,
) -> Live:
    """
    Start an attempt as a task on ``loop``, the running loop (after ``delay_s`` seconds, if given).

    ``started_by`` goes on its ledger line (``attrs.started_by``: what started an attempt
    other than the first). ``begin`` is called with the attempt before its function is (the
    step runner starts its span there). The attempt runs in its own copy of the caller's
    context in which its span, when it has one, is the current span: the spans an SDK or an
    HTTP client makes inside the attempt function are its children, and
    `tailkit.executor._events.trace_headers` gives its W3C ``traceparent``.

    Without a delay the attempt function is called here, so the step knows at once whether
    the attempt streams; an exception it raises is the attempt's, raised from its task.
    """
    live = Live(attempt, loop.time(), time.time(), pending=delay_s > 0.0)
    if started_by is not None:
        live.extra["started_by"] = started_by
    if begin is not None:
        begin(live)
    context = contextvars.copy_context()
    if live.span is not None:
        context.run(live.span.activate)
    if delay_s > 0.0:
        coro = _delayed(delay_s, live, fn)
    else:
        try:
            coro = drive(live, context.run(call, live, fn))
        except Exception as error:  # the attempt's failure, settled as such
            coro = _raise(live, error)
    live.task = loop.create_task(coro, context=context)
    return live


async def _raise(live: Live, error: Exception) -> Any:
    try:
        raise error
    finally:
        ended(live)


async def _delayed(delay_s: float, live: Live, fn: AttemptFn) -> Any:
    try:
        await asyncio.sleep(delay_s)
        live.started, live.started_wall, live.pending = now(), time.time(), False
        result = call(live, fn)
        if live.wake is not None:  # the step watches it: its cutoffs' clocks start now
            live.wake()
    except BaseException:
        ended(live)
        raise
    return await drive(live, result)
