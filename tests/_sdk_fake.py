"""
A loopback HTTP/1.1 server that answers with scripted replies: SSE streams, JSON, errors.

For the SDK endpoints `tailkit serve` does not answer (the OpenAI Responses API), and for the
exact event sequences a test needs (an Anthropic stream cut before ``message_stop``). Each
request takes the next reply of the script (the last one repeats); a stream is written and the
connection closed, so a reply without its terminal event is a cut stream.
"""

from __future__ import annotations

import asyncio
import json

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tailkit.config import Plan, parse_plan
from tailkit.serve import ModelProfile


T = TypeVar("T")
FAST = ModelProfile(
    ttft_median_s=0.0, ttft_sigma=0.0, tokens_per_s=1000.0, gen_sigma=0.0, output_tokens=5
)
"""A profile that answers at once: what a fault test needs around its fault."""
MESSAGES = [{"role": "user", "content": "hi"}]


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test's coroutine on a real event loop (the SDKs do real I/O)."""
    return asyncio.run(coro)


def plan(hedge: bool = False) -> Plan:
    """One step on route fake/a, with a hedge route on another provider when ``hedge``."""
    step = "    hedge_route: other/b\n" if hedge else ""
    text = (
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 30\nhedge_budget: 0.05\nroutes:\n"
        "  fake/a: {provider: fake, model: a}\n  other/b: {provider: other, model: b}\n"
        f"steps:\n  s:\n    route: fake/a\n{step}"
    )
    return parse_plan(text)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, headers, and SSE events or a JSON body."""

    status: int = 200
    events: tuple[tuple[str, Any], ...] = ()  # (event name or "", data: a dict or raw text)
    body: Any = None  # a JSON answer instead of a stream
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False  # send nothing until the client goes


@dataclass
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeSDKServer:
    """``async with FakeSDKServer([Reply(...), ...]) as server:`` then use ``server.url``."""

    replies: list[Reply]
    requests: list[Seen] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def __aenter__(self) -> FakeSDKServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            first, *lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in filter(None, lines):
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Seen(first.split(" ")[1], headers, json.loads(raw or b"null")))
            reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
            if reply.hang:
                await reader.read()  # until the client goes
                return
            await self._answer(reply, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        extra = "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
        if reply.body is not None or not reply.events:
            data = json.dumps(reply.body if reply.body is not None else {}).encode()
            writer.write(
                f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return
        writer.write(
            f"HTTP/1.1 {reply.status} OK\r\nContent-Type: text/event-stream\r\n{extra}"
            "Connection: close\r\n\r\n".encode()
        )
        for name, data in reply.events:
            text = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
            writer.write(frame.encode())
            await writer.drain()
