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
    conn: Connection, ex: Exchange, chat: wire.ChatRequest, d: Draw, *, chunk_tokens: int = 1
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
        body = wire.error(message, "server_error", "server_error")
        ex.http_status = d.error_status
        await conn.send(json_response(d.error_status, body, keep_alive=ex.keep_alive))
        return "error", "server_error"
    if chat.stream:
        return await _streamed(conn, ex, chat, d, chunk_tokens)
    return await _whole(conn, ex, chat, d)


async def _whole(
    conn: Connection, ex: Exchange, chat: wire.ChatRequest, d: Draw
) -> tuple[str, str | None]:
    await _sleep_until(ex.received + d.ttft_s + d.gen_s)
    body = wire.completion(
        ex.call_id, chat.model, int(time.time()), tokens=d.tokens, finish=d.finish_reason,
        prompt_tokens=chat.prompt_tokens,
    )  # fmt: skip
    ex.http_status = 200
    if d.fault == "garbage":  # the first half of the JSON: a proxy that lost the rest
        text = json.dumps(body).encode()
        raw = text[: len(text) // 2]
        await conn.send(json_response(200, None, keep_alive=ex.keep_alive, raw=raw))
        return "invalid", "garbage"
    if d.fault == "schema_invalid":
        del body["choices"]
        await conn.send(json_response(200, body, keep_alive=ex.keep_alive))
        return "invalid", "schema_invalid"
    if d.fault == "cut_stream":  # promises the whole body, sends half, closes
        raw = json.dumps(body, separators=(",", ":")).encode()
        data = json_response(200, None, keep_alive=False, raw=raw)
        ex.keep_alive = False
        await conn.send(data[: len(data) - len(raw) // 2])
        return "error", "cut_stream"
    if d.invalid:  # a replayed call whose output failed validation: well-formed, wrong text
        message = body["choices"][0]["message"]
        message["content"] = INVALID_MARK + message["content"]
    await conn.send(json_response(200, body, keep_alive=ex.keep_alive))
    return ("invalid", "invalid_output") if d.invalid else ("ok", None)


class _Events:
    """
    The events of one stream, shaped by its fault, and written in batches.
    """

    def __init__(self, conn: Connection, ex: Exchange, chat: wire.ChatRequest, fault: str | None):
        self.conn, self.ex, self.fault = conn, ex, fault
        self.created = int(time.time())
        self.model = chat.model
        self._pending: list[bytes] = []
        self._tokens = 0

    def event(self, delta: dict[str, str], **extra: Any) -> bytes:
        payload = wire.chunk(self.ex.call_id, self.model, self.created, delta, **extra)
        if self.fault == "schema_invalid":
            del payload["choices"]
        elif self.fault == "garbage":  # cut inside the JSON: not parseable
            text = json.dumps(payload, separators=(",", ":")).encode()
            return b"data: " + text[: len(text) // 2] + b"\n\n"
        return wire.sse(payload)

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
    conn: Connection, ex: Exchange, chat: wire.ChatRequest, d: Draw, chunk_tokens: int
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
    # The role chunk goes out with the first token, as providers send it (a client that reads
    # the first chunk to know the model started is not told so before it has), and it is
    # always well-formed: a broken stream breaks where the content starts.
    role = wire.chunk(ex.call_id, chat.model, events.created, {"role": "assistant", "content": ""})
    events.add(wire.sse(role))
    first = ex.received + d.ttft_s
    stop = d.cut_after if d.fault in ("stall_mid", "cut_stream") else d.tokens
    size = max(chunk_tokens, 1)
    for k in range(0, stop, size):
        due = first + d.gen_s * k / d.tokens
        if due > loop.time():
            if k > 0:
                await events.flush()
            await _sleep_until(due)
        n = min(size, stop - k)
        text = "".join(wire.word(k + i) for i in range(n))
        if k == 0 and d.invalid:
            text = INVALID_MARK + text
        events.add(events.event({"content": text}), token=n)
    await events.flush()
    if d.fault == "stall_mid":
        await _forever()
    if d.fault == "cut_stream":
        return "error", "cut_stream"
    await _sleep_until(first + d.gen_s)
    usage = wire.usage(chat.prompt_tokens, d.tokens)
    events.add(events.event({}, finish=d.finish_reason, usage_=usage))
    events.add(wire.DONE)
    await events.flush()
    if d.fault is not None:
        return "invalid", d.fault
    return ("invalid", "invalid_output") if d.invalid else ("ok", None)
