"""
The OpenAI-compatible adapter against a fake server on a loopback socket (and httpx mocks).

The fake server is a few lines of hand-written HTTP/1.1 on `asyncio.start_server`: JSON
answers, chunked SSE streams, and the faults a real provider has (429, 500, garbage, a cut
stream, a hang). Tests run on the real event loop, since sockets are the point.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import socket
import subprocess
import sys
import time

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, TypeVar

import httpx
import pytest

from tailkit.adapters import chat_attempt
from tailkit.adapters._sse import SSEDecoder
from tailkit.adapters.openai import (
    ChatAttempt,
    close_shared_client,
    set_shared_client,
    shared_client,
)
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed, ConfigError, StepTimeout
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Executor,
    Ledger,
    MemorySink,
    StepPolicy,
    StreamResult,
    TruncatedStream,
    deadline_after,
    idempotency_key,
    now,
)
from tailkit.serve import Faults, ModelProfile, ServeConfig, Server


T = TypeVar("T")

# --- the fake server ------------------------------------------------------------------------


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    gone: asyncio.Event  # the server's: set when a handler sees the client go


Handler = Callable[[Seen, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


@dataclass
class FakeOpenAI:
    """A loopback HTTP/1.1 server; ``handler`` answers a request, True keeps the connection."""

    handler: Handler
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    closed: int = 0  # connections that ended (client gone or server done)
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # a waiting handler saw EOF
    url: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def __aenter__(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):  # waiting handlers see EOF and end
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                first, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = first.split(" ", 2)
                headers = {}
                for line in filter(None, lines):
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                seen = Seen(method, path, headers, json.loads(raw) if raw else None, self.gone)
                self.requests.append(seen)
                try:
                    if not await self.handler(seen, reader, writer):
                        break
                except ConnectionError:  # the client went while we were writing
                    break
        finally:
            self.closed += 1
            writer.close()
            self._writers.discard(writer)


def respond(writer: asyncio.StreamWriter, status: int, body: Any, **headers: str) -> None:
    """A whole response with a Content-Length (keep-alive)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    extra = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}"
    writer.write(f"{head}content-length: {len(data)}\r\n\r\n".encode() + data)


def sse_head(writer: asyncio.StreamWriter) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )


def send(writer: asyncio.StreamWriter, text: str) -> None:
    """One HTTP chunk of a chunked body."""
    data = text.encode()
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def data(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


def delta(
    content: str | None = None, *, role: str | None = None, finish: str | None = None, **kw: Any
) -> dict[str, Any]:
    """An OpenAI chat.completion.chunk."""
    d = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    choice = {"index": 0, "delta": d, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **kw}


USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
ANSWER = {
    "id": "c1", "object": "chat.completion", "model": "m1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"},
                 "finish_reason": "stop"}],
    "usage": USAGE,
}  # fmt: skip


async def stream_words(
    writer: asyncio.StreamWriter, words: list[str], *, first_s: float = 0.0, done: bool = True
) -> None:
    """A role chunk at once, a keep-alive comment, the words after ``first_s``, the end."""
    sse_head(writer)
    send(writer, data(delta(role="assistant")) + ": keep-alive\n\n")
    await writer.drain()
    await asyncio.sleep(first_s)
    for word in words:
        send(writer, data(delta(word)))
        await writer.drain()
        await asyncio.sleep(0.01)
    if done:
        send(writer, data(delta(finish="stop", usage=USAGE)) + "data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
    await writer.drain()


async def until_gone(seen: Seen, reader: asyncio.StreamReader, *_: object) -> bool:
    """A handler that answers nothing: wait for the client to close the connection, note it."""
    await reader.read()
    seen.gone.set()
    return False


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 10))


def plan(step: str = "") -> Plan:
    text = (
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 30\nhedge_budget: 0.05\nroutes:\n"
        "  fake/m1: {provider: fake, model: m1}\n  other/m2: {provider: other, model: m2}\n"
        f"steps:\n  s:\n    route: fake/m1\n{step}"
    )
    return parse_plan(text)


def attempt(deadline_s: float = 5.0, model: str = "m1") -> Attempt:
    """An attempt as the executor makes it (call inside the running loop)."""
    deadline = math.inf if math.isinf(deadline_s) else now() + deadline_s
    return Attempt("s", f"fake/{model}", "fake", model, 0, "primary", "key-1", deadline)


async def call(fn: ChatAttempt, a: Attempt) -> Any:
    """Run one attempt outside the executor: the answer, or the list of chunks."""
    result = fn(a)
    if isinstance(result, Awaitable):
        return await result
    return [chunk async for chunk in result]


# --- requests and answers -------------------------------------------------------------------


def test_streamed_step_end_to_end_sends_the_attempt_and_measures_the_first_token() -> None:
    """Through run_step: model, headers, body as sent; StreamResult and ledger TTFT/total."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await stream_words(w, ["Hello", " there", "!"], first_s=0.15)
        return True

    async def main() -> tuple[Any, FakeOpenAI, MemorySink, float]:
        sink = MemorySink()
        executor = Executor(plan(), ledger=Ledger(sink))
        async with FakeOpenAI(handler) as server:
            msgs = [{"role": "user", "content": "hi"}]
            shared_client()  # made (TLS settings loaded) before the deadline runs, as at start-up
            async with chat_attempt(server.url, msgs, api_key="sk-test", max_tokens=16) as fn:
                with deadline_after(5.0):
                    sent_wall = time.time()
                    result = await executor.run_step("s", fn, run_id="r1")
        return result, server, sink, sent_wall

    result, server, sink, sent_wall = run(main())
    left = 5.0
    [seen] = server.requests
    assert ("POST", "/v1/chat/completions") == (seen.method, seen.path)
    assert {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": 16} == seen.body  # fmt: skip
    assert "Bearer sk-test" == seen.headers["authorization"]
    assert idempotency_key("r1", "s", 0) == seen.headers["idempotency-key"]
    assert "fake/m1" == seen.headers["x-tailkit-route"]  # serve picks a shared model's route
    assert left - 0.5 < float(seen.headers["x-tailkit-remaining-s"]) <= left
    assert abs(float(seen.headers["x-tailkit-deadline"]) - (sent_wall + left)) < 0.5
    assert isinstance(result, StreamResult)
    assert ("Hello there!", 4, 5) == (result.text, result.output_tokens, result.input_tokens)
    assert "stop" == result.finish_reason  # the text and the terminal chunk, not every chunk
    assert "stop" == result.final["choices"][0]["finish_reason"]
    [line] = sink.records
    assert ("ok", True, "fake", "m1") == (line.status, line.winner, line.provider, line.model)
    assert line.ttft_s is not None
    assert line.total_s is not None
    assert 0.15 <= line.ttft_s < line.total_s < 2.0  # the role chunk is not the first token


def test_non_streamed_answer_is_the_parsed_json() -> None:
    """stream=False: one POST with stream false; the result is the response dict."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        respond(w, 200, ANSWER)
        return True

    async def main() -> tuple[Any, FakeOpenAI]:
        async with FakeOpenAI(handler) as server, chat_attempt(server.url, [], stream=False) as fn:
            result = await Executor(plan()).run_step("s", fn)
        return result, server

    result, server = run(main())
    assert ANSWER == result
    [seen] = server.requests
    assert (False, "application/json") == (seen.body["stream"], seen.headers["accept"])
    assert "authorization" not in seen.headers
    assert "x-tailkit-deadline" not in seen.headers  # no deadline: none is sent


def test_messages_can_be_built_from_the_attempt_and_a_shared_client_is_reused() -> None:
    """A messages function sees the attempt; two calls share one kept-alive connection."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await stream_words(w, ["ok"])
        return True

    async def main() -> FakeOpenAI:
        async with FakeOpenAI(handler) as server:
            fn = chat_attempt(server.url, lambda a: [{"role": "user", "content": a.route}])
            for _ in range(2):
                chunks = await call(fn, attempt())
                assert FINAL == chunks[-1]
            await fn.aclose()
            await asyncio.sleep(0.05)
            assert 0 == server.closed  # the adapter owns no connection: it stays pooled
            await close_shared_client()  # released the pooled connection
            while server.closed < 1:
                await asyncio.sleep(0.01)
        return server

    server = run(main())
    assert 1 == server.connections
    assert [[{"role": "user", "content": "fake/m1"}]] * 2 == [s.body["messages"] for s in
                                                              server.requests]  # fmt: skip


# --- errors ---------------------------------------------------------------------------------


def error_server(status: int, body: Any, **headers: str) -> Handler:
    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        respond(w, status, body, **headers)
        return True

    return handler


async def failure(handler: Handler, *, stream: bool = True, gone: bool = False) -> AttemptError:
    """The error of one attempt; with ``gone``, the server also saw the connection close."""
    async with FakeOpenAI(handler) as server, chat_attempt(server.url, [], stream=stream) as fn:
        with pytest.raises(AttemptError) as info:
            await call(fn, attempt())
        if gone:
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes
    return info.value


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_429_is_rate_limited_with_retry_after(stream: bool) -> None:
    """429 + Retry-After: status rate_limited, retry_after_s, the provider's message kept."""
    body = {"error": {"message": "Rate limit reached for m1 on tokens per min", "type": "tokens"}}
    error = run(failure(error_server(429, body, retry_after="7"), stream=stream))
    assert ("rate_limited", 429, 7.0) == (error.status, error.http_status, error.retry_after_s)
    assert "HTTP 429: Rate limit reached for m1 on tokens per min" in str(error)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_500_is_an_error_with_its_http_status(stream: bool) -> None:
    """500: status error, http_status 500, the provider's message (clipped) in the error."""
    body = {"error": {"message": "The server had an error. " * 40, "type": "server_error"}}
    error = run(failure(error_server(500, body), stream=stream))
    assert ("error", 500, None) == (error.status, error.http_status, error.retry_after_s)
    assert "HTTP 500: The server had an error. The server" in str(error)
    assert str(error).endswith("…")
    assert len(str(error)) < 420


@pytest.mark.parametrize(
    ("stream", "body"),
    [(False, b"<html>Bad gateway</html>"), (False, {"id": "x", "object": "chat.completion"}),
     (True, b"data: {not json\n\n"), (True, b'data: {"id": "x"}\n\n')],
    ids=["json-garbage", "json-no-choices", "sse-garbage", "sse-no-choices"],
)  # fmt: skip
def test_a_body_that_is_not_an_answer_is_invalid(stream: bool, body: Any) -> None:
    """A 200 whose body is not JSON, or lacks choices, is status invalid."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if stream:  # and the stream stays open: a failed attempt must close it
            sse_head(w)
            send(w, body.decode())
            await w.drain()
            return await until_gone(seen, r)
        respond(w, 200, body)
        return True

    error = run(failure(handler, stream=stream, gone=stream))
    assert "invalid" == error.status
    assert "Bad gateway" in str(error) or '"id"' in str(error) or "{not json" in str(error)


def test_a_stream_cut_without_done_is_reported_truncated_by_the_executor() -> None:
    """The server closes mid-stream: the attempt (and its retry) end as truncated streams."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await stream_words(w, ["Half", " an"], done=False)
        return False  # close without the chunked body's end

    async def main() -> tuple[BaseException, MemorySink]:
        sink = MemorySink()
        async with FakeOpenAI(handler) as server, chat_attempt(server.url, []) as fn:
            with pytest.raises(AllAttemptsFailed) as info:
                await Executor(plan(), ledger=Ledger(sink)).run_step("s", fn)
        return info.value, sink

    error, sink = run(main())
    assert all(isinstance(e, TruncatedStream) for e in error.exceptions)  # type: ignore[attr-defined]
    assert [("primary", "error"), ("retry", "error")] == [(r.role, r.status) for r in sink.records]


def test_connection_refused_is_an_error() -> None:
    """Nothing listens: status error, and the message names the URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> AttemptError:
        async with chat_attempt(f"http://127.0.0.1:{port}/v1", []) as fn:
            with pytest.raises(AttemptError) as info:
                await call(fn, attempt())
        return info.value

    error = run(main())
    assert ("error", None) == (error.status, error.http_status)
    assert f"fake/m1 at http://127.0.0.1:{port}/v1/chat/completions: ConnectError" in str(error)


# --- deadlines and cancellation -------------------------------------------------------------


def test_a_hanging_server_times_out_at_the_attempt_deadline() -> None:
    """No answer: the attempt raises status timeout at its deadline, not later."""

    async def main() -> tuple[AttemptError, float, FakeOpenAI]:
        async with (
            FakeOpenAI(until_gone) as server,
            chat_attempt(server.url, [], stream=False) as fn,
        ):
            t0 = time.monotonic()
            with pytest.raises(AttemptError) as info:
                await call(fn, attempt(0.3))
            spent = time.monotonic() - t0
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes
        return info.value, spent, server

    error, spent, _ = run(main())
    assert "timeout" == error.status
    assert 0.29 <= spent < 0.6


def test_keepalive_comments_do_not_keep_a_stream_past_its_deadline() -> None:
    """A stream that only sends keep-alives is cut at the deadline (a read timeout never would)."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        sse_head(w)
        send(w, data(delta(role="assistant")))
        while True:
            send(w, ": keep-alive\n\n")
            await w.drain()
            await asyncio.sleep(0.05)

    async def main() -> tuple[AttemptError, float]:
        async with FakeOpenAI(handler) as server, chat_attempt(server.url, []) as fn:
            t0 = time.monotonic()
            with pytest.raises(AttemptError) as info:
                await call(fn, attempt(0.3))
        return info.value, time.monotonic() - t0

    error, spent = run(main())
    assert "timeout" == error.status
    assert 0.29 <= spent < 0.6


def test_a_short_deadline_ends_the_step_by_the_deadline() -> None:
    """run_step under a 0.3 s deadline against a hang: it ends at 0.3 s, the attempt timed out."""

    async def main() -> tuple[Exception, float, MemorySink]:
        sink = MemorySink()
        async with FakeOpenAI(until_gone) as server, chat_attempt(server.url, []) as fn:
            t0 = time.monotonic()
            with pytest.raises((StepTimeout, AllAttemptsFailed)) as info:
                await Executor(plan(), ledger=Ledger(sink)).run_step("s", fn, deadline=now() + 0.3)
            spent = time.monotonic() - t0
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes
        return info.value, spent, sink

    _, spent, sink = run(main())
    assert 0.29 <= spent < 0.6
    assert ["timeout"] == [r.status for r in sink.records]


def test_a_cancelled_attempt_closes_its_connection() -> None:
    """A hedge wins: the stuck primary is cancelled and the server sees its client go."""

    async def handler(seen: Seen, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if seen.body["model"] == "m2":
            await stream_words(w, ["fast"])
            return True
        sse_head(w)
        send(w, data(delta(role="assistant")))
        await w.drain()
        return await until_gone(seen, r)

    step = "    signal: ttft\n    ttft_cutoff_s: 0.2\n    on_cutoff: hedge\n"
    step += "    hedge_route: other/m2\n"

    async def main() -> tuple[Any, MemorySink]:
        sink = MemorySink()
        async with FakeOpenAI(handler) as server, chat_attempt(server.url, []) as fn:
            result = await Executor(plan(step), ledger=Ledger(sink)).run_step("s", fn)
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes
        return result, sink

    result, sink = run(main())
    assert "fast" == result.text
    assert [("hedge", "ok", True), ("primary", "cancelled", False)] == [
        (r.role, r.status, r.winner) for r in sink.records]  # fmt: skip


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_an_attempt_cancelled_twice_still_closes_its_connection(stream: bool) -> None:
    """A cut and the deadline landing together (two cancellations) still close the socket."""

    async def main() -> None:
        async with (
            FakeOpenAI(until_gone) as server,
            chat_attempt(server.url, [], stream=stream) as fn,
        ):
            task = asyncio.ensure_future(call(fn, attempt(math.inf)))
            while not server.requests:
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.sleep(0)  # the first cancellation is being handled...
            task.cancel()  # ...when the second lands
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes

    run(main())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_cut_at_the_deadline_instant_closes_the_connection(stream: bool) -> None:
    """The attempt's own deadline and the caller's cut fire together: the socket still closes."""

    async def main() -> None:
        async with (
            FakeOpenAI(until_gone) as server,
            chat_attempt(server.url, [], stream=stream) as fn,
        ):
            a = attempt(0.3)
            task = asyncio.ensure_future(call(fn, a))
            while not server.requests:
                await asyncio.sleep(0.01)
            asyncio.get_running_loop().call_at(a.deadline, task.cancel)  # after its own timer
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.gone.wait(), 2)  # before the client closes

    run(main())


# --- connections: the shared client (against tailkit serve) --------------------------------

FAST = ModelProfile(
    ttft_median_s=0.0, ttft_sigma=0.0, tokens_per_s=1000.0, gen_sigma=0.0, output_tokens=3
)
SLOW = dataclasses.replace(FAST, ttft_median_s=0.3)  # real seconds: time_scale is 1
HANG = dataclasses.replace(FAST, faults=Faults(hang=1.0))
MESSAGES = [{"role": "user", "content": "hi"}]


def serve(**models: ModelProfile) -> Server:
    return Server(ServeConfig(models=models, seed=1))


def watch(client: httpx.AsyncClient) -> list[httpx.Request]:
    """The requests ``client`` sends from now on."""
    sent: list[httpx.Request] = []

    async def hook(request: httpx.Request) -> None:
        sent.append(request)

    client.event_hooks["request"].append(hook)
    return sent


def own_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=0))


async def received(server: Server, n: int = 1) -> None:
    """Wait until the server has taken ``n`` requests (they are then in flight)."""
    while sum(server.seen_keys.values()) < n:
        await asyncio.sleep(0.01)


def test_adapters_in_one_loop_send_through_one_shared_client() -> None:
    """Two adapters made without client= both send through the loop's shared client."""

    async def main() -> None:
        async with serve(m1=FAST) as server:
            sent = watch(shared_client())
            first = chat_attempt(server.url, MESSAGES, stream=False)
            second = chat_attempt(server.url, MESSAGES)
            assert (await call(first, attempt()))["choices"]
            assert FINAL == (await call(second, attempt()))[-1]
            assert 2 == len(sent)
            assert shared_client() is shared_client()

    run(main())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_leaving_async_with_does_not_stop_an_attempt_in_flight(stream: bool) -> None:
    """An attempt started inside the block and still running after it ends normally."""

    async def main() -> tuple[Any, Server]:
        async with serve(m1=SLOW) as server:
            async with chat_attempt(server.url, MESSAGES, stream=stream) as fn:
                task = asyncio.ensure_future(call(fn, attempt()))
                await received(server)
            assert not task.done()
            return await task, server

    result, server = run(main())
    if stream:
        assert FINAL == result[-1]
    else:
        assert result["choices"][0]["message"]["content"]
    assert ["ok"] == [r.status for r in server.records]


def test_a_hedge_loser_let_finish_outlives_the_adapter_block() -> None:
    """losers="finish": the slow primary lands after the block, as an ok abandoned attempt."""
    step = "    signal: ttft\n    ttft_cutoff_s: 0.05\n    on_cutoff: hedge\n"
    step += "    hedge_route: other/m2\n"

    async def main() -> tuple[Any, MemorySink, Server]:
        sink = MemorySink()
        policies = {"s": StepPolicy(losers="finish")}
        executor = Executor(plan(step), ledger=Ledger(sink), policies=policies)
        slow = dataclasses.replace(FAST, ttft_median_s=1.0)  # well after the hedge's answer
        async with serve(m1=slow, m2=FAST) as server:
            async with chat_attempt(server.url, MESSAGES) as fn:
                result = await executor.run_step("s", fn)
            while len(sink.records) < 2:  # the loser's line is written when it lands
                await asyncio.sleep(0.01)
        return result, sink, server

    result, sink, server = run(main())
    assert isinstance(result, StreamResult)
    assert [("hedge", "ok", True, False), ("primary", "ok", False, True)] == [
        (r.role, r.status, r.winner, r.abandoned) for r in sink.records]  # fmt: skip
    assert ["ok", "ok"] == [r.status for r in server.records]


def test_a_client_passed_in_is_used_and_left_open() -> None:
    """client=: requests go through it, not the shared one, and it stays open after the block."""

    async def main() -> tuple[int, int]:
        async with serve(m1=FAST) as server, own_client() as mine:
            via_shared, via_mine = watch(shared_client()), watch(mine)
            async with chat_attempt(server.url, MESSAGES, stream=False, client=mine) as fn:
                await call(fn, attempt())
            assert not mine.is_closed
            await call(fn, attempt())  # still usable
        return len(via_shared), len(via_mine)

    assert (0, 2) == run(main())


def test_the_shared_client_has_no_connection_limit() -> None:
    """120 attempts at once (httpx's default pool: 100) all reach the server together."""
    n = 120

    async def main() -> int:
        async with serve(m1=HANG) as server:
            fn = chat_attempt(server.url, MESSAGES, stream=False)
            tasks = [asyncio.ensure_future(call(fn, attempt(math.inf))) for _ in range(n)]
            await received(server, n)  # with a limit, the rest would queue in the client
            held = server.open_connections
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return held

    assert n == run(main())


def test_each_event_loop_gets_its_own_working_client() -> None:
    """A second asyncio.run gets a fresh client that works; each is closed when its loop ends."""

    async def one() -> httpx.AsyncClient:
        async with serve(m1=FAST) as server:
            fn = chat_attempt(server.url, MESSAGES, stream=False)
            assert (await call(fn, attempt()))["choices"]
            return shared_client()

    first = run(one())
    second = run(one())
    assert first is not second
    assert first.is_closed
    assert second.is_closed


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_close_shared_client_waits_for_attempts_in_flight(stream: bool) -> None:
    """close_shared_client lets a running attempt finish, closes the client; a new one follows."""

    async def main() -> None:
        async with serve(m1=SLOW) as server:
            fn = chat_attempt(server.url, MESSAGES, stream=stream)
            before = shared_client()
            task = asyncio.ensure_future(call(fn, attempt()))
            await received(server)
            await close_shared_client()
            assert before.is_closed
            await task  # it ended well: the close waited for its exchange
            assert ["ok"] == [r.status for r in server.records]
            after = shared_client()
            assert after is not before
            await call(fn, attempt())  # sends through the new one

    run(main())


def test_set_shared_client_replaces_it_without_stopping_requests_in_flight() -> None:
    """A client set in its place takes new requests; the old default finishes hers, then closes."""

    async def main() -> None:
        async with serve(m1=SLOW) as server, own_client() as mine:
            fn = chat_attempt(server.url, MESSAGES, stream=False)
            default = shared_client()
            in_flight = asyncio.ensure_future(call(fn, attempt()))
            await received(server)
            sent = watch(mine)
            set_shared_client(mine)
            assert shared_client() is mine
            await call(fn, attempt())
            assert 1 == len(sent)
            assert (await in_flight)["choices"]  # the old default's request went on
            while not default.is_closed:  # and then it was closed
                await asyncio.sleep(0.01)
            await close_shared_client()
            assert not mine.is_closed  # a client set by the caller is never closed by tailkit
            assert shared_client() is not mine

    run(main())


def test_the_shared_client_needs_a_running_loop_and_an_httpx_client() -> None:
    """Outside a loop: RuntimeError that says why; set_shared_client refuses a non-client."""
    with pytest.raises(RuntimeError, match=r"shared_client\(\) needs a running event loop"):
        shared_client()

    async def main() -> None:
        with pytest.raises(ConfigError, match=r"needs an httpx\.AsyncClient, got str"):
            set_shared_client("http://x")  # type: ignore[arg-type]

    run(main())


# --- SSE edge cases and header parsing (httpx.MockTransport) --------------------------------


def mock(respond_with: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(respond_with))


async def pieces(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def sse_response(parts: list[bytes]) -> Callable[[httpx.Request], httpx.Response]:
    def respond_with(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=pieces(parts)
        )

    return respond_with


EDGY = (
    ': hello\r\n\r\nevent: message\r\nid: 1\r\nretry: 100\r\ndata:{"choices":[{"delta":{"role":'
    '"assistant"}}]}\r\n\r\ndata: {"choices":[{"delta":{"content":"héllo → ✓"}}]}\n'
    'data: {"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]}\r'
    "\r: keep-alive\n\n\n\ndata: [DONE]"
).encode()


@pytest.mark.parametrize("size", [1, 2, 7, len(EDGY)], ids=lambda n: f"pieces-of-{n}")
def test_sse_lines_split_anywhere_comments_and_line_ends(size: int) -> None:
    """Bytewise-split lines, UTF-8, CR/LF/CRLF, comments, fields, no blank line, [DONE] at EOF."""
    parts = [EDGY[i : i + size] for i in range(0, len(EDGY), size)]

    async def main() -> Any:
        async with mock(sse_response(parts)) as client:
            return await call(chat_attempt("http://x/v1", [], client=client), attempt())

    chunks = run(main())
    assert [
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "héllo → ✓"}}]},
        {"choices": [{"delta": {"content": "!"}, "finish_reason": "stop"}]},
        FINAL,
    ] == chunks


def test_sse_multiline_data_and_nothing_after_done() -> None:
    """Data lines of one event are joined; events after [DONE] are not read as chunks."""
    sse = SSEDecoder()
    events = sse.feed(b'event: x\ndata: {"choices":\ndata: []}\n\ndata: [DONE]\n\n')
    assert [("x", '{"choices":\n[]}'), ("", "[DONE]")] == events + sse.close()

    body = b'data: {"choices":[]}\n\ndata: [DONE]\n\ndata: {"choices": 1}\n\n'

    async def main() -> Any:
        async with mock(sse_response([body])) as client:
            return await call(chat_attempt("http://x/v1", [], client=client), attempt())

    assert [{"choices": []}, FINAL] == run(main())


def test_a_stream_that_just_ends_has_no_final_chunk() -> None:
    """A clean end of body without [DONE] ends the iterator without FINAL (the executor's cue)."""
    body = data(delta(role="assistant")) + data(delta("cut"))

    async def main() -> Any:
        async with mock(sse_response([body.encode()])) as client:
            return await call(chat_attempt("http://x/v1", [], client=client), attempt())

    assert [delta(role="assistant"), delta("cut")] == run(main())


def test_an_error_event_in_the_stream_is_an_error() -> None:
    """vLLM/gateways report a failure mid-stream as an error object: status error, its message."""
    body = data(delta(role="assistant")) + data({"error": {"message": "CUDA out of memory"}})

    async def main() -> AttemptError:
        async with mock(sse_response([body.encode()])) as client:
            with pytest.raises(AttemptError) as info:
                await call(chat_attempt("http://x/v1", [], client=client), attempt())
        return info.value

    error = run(main())
    assert "error" == error.status
    assert "error in the stream: CUDA out of memory" in str(error)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
     ({"retry-after": "in 30 s"}, 30.0),
     ({"retry-after": "soon"}, None), ({}, None)],
    ids=["seconds", "ms-wins", "http-date", "garbage", "none"],
)  # fmt: skip
def test_retry_after_forms(headers: dict[str, str], expected: float | None) -> None:
    """Retry-After in seconds or as a date, and OpenAI/Azure's retry-after-ms, all read."""
    if headers.get("retry-after") == "in 30 s":
        headers = {"retry-after": formatdate(time.time() + 30, usegmt=True)}

    async def main() -> AttemptError:
        answer = httpx.Response(429, headers=headers, json={"error": "slow down"})
        async with mock(lambda request: answer) as client:
            with pytest.raises(AttemptError) as info:
                await call(chat_attempt("http://x/v1", [], client=client), attempt())
        return info.value

    error = run(main())
    assert ("rate_limited", 429) == (error.status, error.http_status)
    if expected is None:
        assert error.retry_after_s is None
    else:
        assert error.retry_after_s == pytest.approx(expected, abs=1.5)
    assert "HTTP 429: slow down" in str(error)


def test_url_query_kept_extra_body_sent_and_a_passed_deadline_sends_nothing() -> None:
    """Azure-style ?api-version stays; extra_body and headers go out; no time left: no request."""
    seen: list[httpx.Request] = []

    def respond_with(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    async def main() -> AttemptError:
        async with mock(respond_with) as client:
            fn = chat_attempt(
                "https://r.openai.azure.com/openai/deployments/d/?api-version=2024-10-21", [],
                stream=False, client=client, extra_body={"temperature": 0},
                headers={"api-key": "k"},
            )  # fmt: skip
            assert ANSWER == await call(fn, attempt())
            with pytest.raises(AttemptError) as info:
                await call(fn, attempt(0.0))
            await fn.aclose()
            assert not client.is_closed  # a client passed in is the caller's to close
        return info.value

    error = run(main())
    [request] = seen
    assert (
        "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
        == str(request.url)
    )
    assert ("k", 0) == (request.headers["api-key"], json.loads(request.content)["temperature"])
    assert "timeout" == error.status
    assert "api-version" not in str(error)


def test_bad_configuration_is_refused_with_the_value() -> None:
    """extra_body may not override model/messages/stream; base_url must be http(s)."""
    with pytest.raises(ConfigError, match="extra_body may not set 'model', 'stream'"):
        chat_attempt("http://x/v1", [], extra_body={"stream": False, "model": "m"})
    with pytest.raises(ConfigError, match="got 'localhost:8000'"):
        chat_attempt("localhost:8000", [])
    with pytest.raises(ConfigError, match=r"got 'http://\[::1'"):
        chat_attempt("http://[::1", [])
    with pytest.raises(ConfigError, match="max_tokens must be a positive integer or None, got 0"):
        chat_attempt("http://x/v1", [], max_tokens=0)


def test_without_httpx_the_import_names_the_extra() -> None:
    """`import tailkit.adapters` stays cheap; the adapter without httpx says what to install."""
    code = (
        "import sys; import tailkit.adapters; print('httpx' in sys.modules)\n"
        "sys.modules['httpx'] = None\n"
        "try:\n    import tailkit.adapters.openai\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert (
        "False\nMissingExtraError tailkit.adapters.openai needs the 'http' extra (httpx is not "
        "installed): pip install 'tailkit[http]'\n"
    ) == out
