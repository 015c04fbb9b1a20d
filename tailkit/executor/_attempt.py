"""
One attempt in flight: drive the attempt function, watch its stream, write its ledger line.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tailkit.executor._deadline import now
from tailkit.executor._ledger import AttemptRecord
from tailkit.executor._types import (
    CONTENT,
    FINAL_KIND,
    Attempt,
    AttemptFn,
    StreamResult,
    TruncatedStream,
    chunk_kind,
)


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
    recorded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    span: Any = None  # its tracing span handle, when the executor is watched

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
    if inspect.isawaitable(result):
        result = await result
        if hasattr(result, "__aiter__"):
            _streams(live)
    if not hasattr(result, "__aiter__"):
        live.first_token = live.ended = now()
        return result
    chunks: list[Any] = []
    parts: list[str] = []
    final = False
    usage_out: int | None = None
    try:
        async for chunk in result:
            at = now()
            kind, tokens, usage = chunk_kind(chunk)
            chunks.append(chunk)
            if kind == CONTENT:
                if live.first_token is None:
                    live.first_token = at
                live.last_chunk = at
                live.tokens += tokens
                parts.append(_text(chunk))
            elif kind == FINAL_KIND:
                final = True
            if usage:
                usage_out = usage.get("output_tokens", usage.get("completion_tokens", usage_out))
                live.input_tokens = usage.get("input_tokens", usage.get("prompt_tokens"))
            if live.wake is not None:
                live.wake()
    finally:
        # release the stream (its connection) whether it ended, failed or was cancelled
        close = getattr(result, "aclose", None)
        if close is not None:
            await close()
    live.ended = now()
    if not final:
        raise TruncatedStream(live.attempt.step, len(chunks))
    output = usage_out if isinstance(usage_out, int) else live.tokens
    live.usage_output = usage_out if isinstance(usage_out, int) else None
    return StreamResult("".join(parts), tuple(chunks), output, live.input_tokens)


def _streams(live: Live) -> None:
    """
    An awaitable attempt turned out to stream: its TTFT cutoff applies from now on.
    """
    live.streamed = True
    if live.wake is not None:
        live.wake()


def _text(chunk: object) -> str:
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, bytes):
        return chunk.decode()
    text = getattr(chunk, "text", None)
    if isinstance(text, str):
        return text
    if isinstance(chunk, dict):
        try:
            return str(chunk["choices"][0]["delta"]["content"])
        except (KeyError, IndexError, TypeError):
            return ""
    return ""


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
    if not math.isinf(a.deadline):
        deadline_at = datetime.fromtimestamp(live.started_wall + (a.deadline - live.started), UTC)
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
        output_tokens=_output_tokens(live) if status == "ok" and live.streamed else None,
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


def _output_tokens(live: Live) -> int:
    # provider usage first (docs/call-record.md), else the content chunks counted
    return live.usage_output if live.usage_output is not None else live.tokens


def start(attempt: Attempt, fn: AttemptFn, *, delay_s: float = 0.0) -> Live:
    """
    Start an attempt as a task on the running loop (after ``delay_s`` seconds, if given).

    Without a delay the attempt function is called here, so the step knows at once whether
    the attempt streams; an exception it raises is the attempt's, raised from its task.
    """
    live = Live(attempt, now(), time.time())
    if delay_s > 0.0:
        coro = _delayed(delay_s, live, fn)
    else:
        try:
            coro = drive(live, call(live, fn))
        except Exception as error:  # the attempt's failure, settled as such
            coro = _raise(error)
    live.task = asyncio.get_running_loop().create_task(coro)
    return live


async def _raise(error: Exception) -> Any:
    raise error


async def _delayed(delay_s: float, live: Live, fn: AttemptFn) -> Any:
    await asyncio.sleep(delay_s)
    live.started, live.started_wall = now(), time.time()
    return await drive(live, call(live, fn))
