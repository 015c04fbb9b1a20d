"""
Sending one drawn answer on its schedule: whole, streamed, or broken the way the fault says.

Times are absolute instants on the loop clock counted from the request's receipt, so a slow
write never shifts the rest of the schedule, and tokens that are due together go out in one
write (at 1 % time scale a long answer has thousands of tokens due within a millisecond).
"""

from __future__ import annotations

import asyncio
import json
import time

from typing import Any

from tailkit.serve import _openai as wire
from tailkit.serve._api import ChatRequest, Reply, compact
from tailkit.serve._draw import Draw
from tailkit.serve._exchange import Exchange
from tailkit.serve._http import Connection, json_response, response_head
from tailkit.serve._outcomes import INVALID_MARK


__all__ = ["answer"]


async def _sleep_until(when: float) -> None:
    delay = when - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _forever() -> None:
    await asyncio.Future()  # until the client leaves, or the server stops


async def answer(
    conn: Connection, ex: Exchange, chat: ChatRequest, d: Draw, *, chunk_tokens: int = 1
) -> tuple[str, str | None]:
    """
    Send the answer ``d`` describes (a stream in chunks of ``chunk_tokens`` tokens).

    Returns:
        The access-log status and error type.

    Raises:
        ClientGone: A write failed.
    """
    if d.fault == "hang" or (d.fault == "stall_mid" and not chat.stream):
        await _forever()
    if d.fault == "reset":
        await _sleep_until(ex.received + d.ttft_s)
        conn.reset()
        ex.keep_alive = False
        return "error", "connection_reset"
    if d.fault == "error_5xx":
        await _sleep_until(ex.received + d.ttft_s)
        message = f"The server had an error while processing your request ({d.error_status})."
        body = ex.api.error(d.error_status, message, type_="server_error", code="server_error")
        ex.http_status = d.error_status
        await conn.send(json_response(d.error_status, body, keep_alive=ex.keep_alive))
        return "error", "server_error"
    if chat.stream:
        return await _streamed(conn, ex, chat, d, chunk_tokens)
    return await _whole(conn, ex, chat, d)


async def _whole(
    conn: Connection, ex: Exchange, chat: ChatRequest, d: Draw
) -> tuple[str, str | None]:
    await _sleep_until(ex.received + d.ttft_s + d.gen_s)
    text = "".join(wire.word(i) for i in range(d.tokens))
    if d.invalid:  # a replayed call whose output failed validation: well-formed, wrong text
        text = INVALID_MARK + text
    reply = Reply(ex.call_id, chat.model, int(time.time()), chat.prompt_tokens)
    body = ex.api.whole(reply, text=text, tokens=d.tokens, finish=d.finish_reason)
    ex.http_status = 200
    if d.fault == "garbage":  # the first half of the JSON: a proxy that lost the rest
        data = json.dumps(body).encode()
        raw = data[: len(data) // 2]
        await conn.send(json_response(200, None, keep_alive=ex.keep_alive, raw=raw))
        return "invalid", "garbage"
    if d.fault == "schema_invalid":
        ex.api.strip(body)
        await conn.send(json_response(200, body, keep_alive=ex.keep_alive))
        return "invalid", "schema_invalid"
    if d.fault == "cut_stream":  # promises the whole body, sends half, closes
        raw = compact(body)
        data = json_response(200, None, keep_alive=False, raw=raw)
        ex.keep_alive = False
        await conn.send(data[: len(data) - len(raw) // 2])
        return "error", "cut_stream"
    await conn.send(json_response(200, body, keep_alive=ex.keep_alive))
    return ("invalid", "invalid_output") if d.invalid else ("ok", None)


class _Events:
    """
    The events of one stream, shaped by its fault, and written in batches.
    """

    def __init__(self, conn: Connection, ex: Exchange, chat: ChatRequest, fault: str | None):
        self.conn, self.ex, self.fault = conn, ex, fault
        self.api = ex.api
        self.reply = Reply(ex.call_id, chat.model, int(time.time()), chat.prompt_tokens)
        self._pending: list[bytes] = []
        self._tokens = 0

    def event(self, payload: dict[str, Any], *, whole: bool = False) -> bytes:
        """
        The event of ``payload``, broken as the fault says unless ``whole``.
        """
        if self.fault == "schema_invalid" and not whole:
            self.api.strip(payload)
        data = compact(payload)
        if self.fault == "garbage" and not whole:  # cut inside the JSON: not parseable
            data = data[: len(data) // 2]
        return self.api.frame(payload, data)

    def add(self, data: bytes, *, token: int = 0) -> None:
        self._pending.append(data)
        self._tokens += token

    async def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if self._tokens and self.ex.first_content is None and self.fault is None:
            self.ex.first_content = asyncio.get_running_loop().time()
        self.ex.tokens_sent += self._tokens
        self._tokens = 0
        await self.conn.send(data)


async def _streamed(
    conn: Connection, ex: Exchange, chat: ChatRequest, d: Draw, chunk_tokens: int
) -> tuple[str, str | None]:
    loop = asyncio.get_running_loop()
    events = _Events(conn, ex, chat, d.fault if d.fault in ("garbage", "schema_invalid") else None)
    head = response_head(
        200,
        [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
         ("Connection", "close")],
    )  # fmt: skip
    ex.http_status, ex.keep_alive = 200, False  # the stream ends when the connection does
    events.add(head)
    await events.flush()
    # The opening (OpenAI's role chunk, Anthropic's message_start) goes out with the first
    # token, as providers send it (a client that reads the first event to know the model
    # started is not told so before it has), and it is always well-formed: a broken stream
    # breaks where the content starts.
    for payload in ex.api.opening(events.reply):
        events.add(events.event(payload, whole=True))
    first = ex.received + d.ttft_s
    stop = d.cut_after if d.fault in ("stall_mid", "cut_stream") else d.tokens
    size = max(chunk_tokens, 1)
    normal = d.gen_s - d.pause_s  # the even pace; a replayed stall pauses the stream mid-way
    for k in range(0, stop, size):
        due = first + normal * k / d.tokens
        if d.pause_after and k >= d.pause_after:
            due += d.pause_s
        if due > loop.time():
            if k > 0:
                await events.flush()
            await _sleep_until(due)
        n = min(size, stop - k)
        text = "".join(wire.word(k + i) for i in range(n))
        if k == 0 and d.invalid:
            text = INVALID_MARK + text
        events.add(events.event(ex.api.delta(events.reply, text)), token=n)
    await events.flush()
    if d.fault == "stall_mid":
        await _forever()
    if d.fault == "cut_stream":
        return "error", "cut_stream"
    await _sleep_until(first + d.gen_s)
    for payload in ex.api.closing(events.reply, tokens=d.tokens, finish=d.finish_reason):
        events.add(events.event(payload))
    events.add(ex.api.end)
    await events.flush()
    if d.fault is not None:
        return "invalid", d.fault
    return ("invalid", "invalid_output") if d.invalid else ("ok", None)
