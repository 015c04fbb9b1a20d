"""
`tailkit serve` on real loopback sockets, with hand-written HTTP/1.1 as the only client.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import signal
import subprocess
import sys
import time
import urllib.request

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.errors import ConfigError
from tailkit.ledger import AttemptRecord
from tailkit.replay.lowlevel import LagMonitor
from tailkit.serve import (
    Faults,
    ModelProfile,
    ServeConfig,
    Server,
    load_profile,
    profile_from_stats,
)
from tests._fakeloop import WaitLog, run_logged

from .conftest import ROOT


PROMPT = [{"role": "user", "content": "how slow is the tail"}]  # 5 prompt tokens
WORDS = "the tail of latency is"  # the first five tokens of every answer
CLOSE = {"Connection": "close"}
CHAT = "/v1/chat/completions"
TICK_S = 0.002  # the lag monitor's tick
TURNS_S = 0.005  # a few loop turns between a timer firing and the record of what it did


def fixed(ttft_s: float = 1.0, *, tokens_per_s: float = 1e6, **more: Any) -> ModelProfile:
    """
    A model without randomness in its timing: sigma 0, decode as fast as asked.
    """
    return ModelProfile(
        ttft_median_s=ttft_s, ttft_sigma=0.0, tokens_per_s=tokens_per_s, gen_sigma=0.0, **more
    )


def config(
    model: ModelProfile | None = None, *, time_scale: float = 0.01, seed: int = 0
) -> ServeConfig:
    return ServeConfig(models={"m": model or fixed()}, time_scale=time_scale, seed=seed)


@contextlib.asynccontextmanager
async def serving(cfg: ServeConfig, **kw: Any) -> AsyncIterator[Server]:
    """
    A running server; on exit it must have closed every connection and left no task behind.
    """
    async with Server(cfg, **kw) as server:
        yield server
    assert 0 == server.open_connections
    assert {asyncio.current_task()} == asyncio.all_tasks()


@dataclass
class Reply:
    """
    A parsed HTTP response.
    """

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """
        The body as JSON.
        """
        return json.loads(self.body)

    def events(self) -> list[str]:
        """
        The ``data:`` payloads of a server-sent event stream.
        """
        return [line[6:] for line in self.body.decode().split("\n") if line.startswith("data: ")]


def request_bytes(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> bytes:
    data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if data:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def parse(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return Reply(int(status_line.split(" ")[1]), headers, body)


async def send(port: int, data: bytes) -> Reply:
    """
    Send raw bytes on a new connection and read the answer until the server closes it.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return parse(await asyncio.wait_for(reader.read(), 10.0))  # a hang fails, not stalls
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def chat(
    port: int,
    *,
    stream: bool = False,
    max_tokens: int | None = 5,
    headers: dict[str, str] | None = None,
    model: str = "m",
) -> Reply:
    body: dict[str, Any] = {"model": model, "messages": PROMPT, "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    all_headers = {"Connection": "close", **(headers or {})}
    return await send(port, request_bytes("POST", "/v1/chat/completions", body, all_headers))


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    """
    One response with a Content-Length, leaving the connection open.
    """
    reply = parse(await reader.readuntil(b"\r\n\r\n"))
    reply.body = await reader.readexactly(int(reply.headers["content-length"]))
    return reply


@contextlib.asynccontextmanager
async def timer_slack() -> AsyncIterator[Callable[[], float]]:
    """
    Measure the loop's lag meanwhile; the function it gives says how late a timer may have run.

    The server shares this loop, so each of its timers fires late by at most how long the loop
    was stalled, which a busy machine stretches. The slack is the worst lag measured in this
    very run plus a few loop turns, never a figure from an idle machine.
    """
    async with LagMonitor(tick_s=TICK_S) as lag:
        yield lambda: max(lag.samples_s, default=0.0) + TURNS_S


async def until(check: Callable[[], object], timeout: float = 30.0) -> None:
    """
    Poll ``check`` until it holds; ``timeout`` only keeps a broken server from hanging the test.
    """
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


def only(server: Server) -> AttemptRecord:
    assert 1 == len(server.records)
    return server.records[0]


# --- answers -------------------------------------------------------------------------------


def test_models_lists_the_configured_ids() -> None:
    """
    GET /v1/models names every configured model, in order.
    """

    async def main() -> Reply:
        cfg = ServeConfig(models={"openai/gpt-4.1": fixed(), "mini": fixed()})
        async with serving(cfg) as server:
            return await send(server.port, request_bytes("GET", "/v1/models", None, CLOSE))

    reply = asyncio.run(main())

    assert 200 == reply.status
    assert ["openai/gpt-4.1", "mini"] == [m["id"] for m in reply.json()["data"]]


def test_a_whole_answer_has_the_message_and_usage() -> None:
    """
    Not streamed: one chat.completion with the words, the finish reason and the usage.
    """

    async def main() -> tuple[Reply, AttemptRecord]:
        async with serving(config()) as server:
            reply = await chat(server.port)
        return reply, only(server)

    reply, record = asyncio.run(main())
    body = reply.json()

    assert (200, "application/json") == (reply.status, reply.headers["content-type"])
    assert "chat.completion" == body["object"]
    assert {"role": "assistant", "content": WORDS} == body["choices"][0]["message"]
    assert "length" == body["choices"][0]["finish_reason"]  # max_tokens 5 cut the answer
    assert {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10} == body["usage"]
    assert ("ok", 200, 5, 5, None) == (
        record.status, record.http_status, record.input_tokens, record.output_tokens, record.ttft_s
    )  # fmt: skip


def test_a_stream_has_role_content_finish_and_done() -> None:
    """
    Streamed: a role chunk, one chunk per word, a finish chunk with usage, then [DONE].
    """

    async def main() -> tuple[Reply, AttemptRecord]:
        async with serving(config()) as server:
            reply = await chat(server.port, stream=True)
        return reply, only(server)

    reply, record = asyncio.run(main())
    events = reply.events()
    chunks = [json.loads(e) for e in events[:-1]]

    assert "text/event-stream" == reply.headers["content-type"]
    assert "[DONE]" == events[-1]
    assert {"role": "assistant", "content": ""} == chunks[0]["choices"][0]["delta"]
    assert WORDS.split(" ") == [c["choices"][0]["delta"]["content"].strip() for c in chunks[1:-1]]
    assert WORDS == "".join(c["choices"][0]["delta"]["content"] for c in chunks[1:-1])
    assert "length" == chunks[-1]["choices"][0]["finish_reason"]
    assert 5 == chunks[-1]["usage"]["completion_tokens"]
    assert {"chat.completion.chunk"} == {c["object"] for c in chunks}
    assert ("ok", 5, 5) == (record.status, record.output_tokens, record.attrs["tokens_sent"])
    assert record.ttft_s is not None
    assert record.total_s is not None
    assert 0 < record.ttft_s <= record.total_s


def test_chunk_tokens_groups_tokens_into_fewer_events() -> None:
    """
    With chunk_tokens=2 the same five words come in three content chunks; usage still says 5.
    """

    async def main() -> tuple[Reply, AttemptRecord]:
        profile = dataclasses.replace(fixed(), chunk_tokens=2)
        async with serving(config(profile)) as server:
            reply = await chat(server.port, stream=True)
        return reply, only(server)

    reply, record = asyncio.run(main())
    chunks = [json.loads(e) for e in reply.events()[:-1]]
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]

    assert 3 == len(contents)
    assert WORDS == "".join(contents)
    assert 5 == chunks[-1]["usage"]["completion_tokens"]
    assert ("ok", 5, 5) == (record.status, record.output_tokens, record.attrs["tokens_sent"])


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    """
    JSON answers keep the connection open; it closes (and is counted closed) when the client goes.
    """

    async def main() -> tuple[list[int], int, int]:
        async with serving(config()) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            body = {"model": "m", "messages": PROMPT, "max_tokens": 3}
            statuses = []
            for _ in range(3):
                writer.write(request_bytes("POST", "/v1/chat/completions", body))
                statuses.append((await read_reply(reader)).status)
            during = server.open_connections
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.open_connections == 0)
            return statuses, during, len(server.records)

    statuses, during, records = asyncio.run(main())

    assert [200, 200, 200] == statuses
    assert (1, 3) == (during, records)


def test_latencies_scale_with_time_scale() -> None:
    """
    A 2 s TTFT (sigma 0) takes 0.1 s at time scale 0.05 and 0.2 s at 0.1, in the log too.
    """

    async def measure(time_scale: float, *, stream: bool) -> tuple[float, AttemptRecord, float]:
        cfg = config(fixed(2.0, tokens_per_s=50.0), time_scale=time_scale)
        async with serving(cfg) as server:
            async with timer_slack() as slack:
                start = time.perf_counter()
                await chat(server.port, stream=stream)
                took = time.perf_counter() - start
            return took, only(server), slack()

    async def main() -> list[tuple[float, AttemptRecord, float]]:
        return [await measure(0.05, stream=False), await measure(0.1, stream=True)]

    (fast, fast_record, fast_slack), (slow, slow_record, slow_slack) = asyncio.run(main())

    # 2 s TTFT + 5 tokens at 50/s = 2.1 profile seconds; each instant is a timer of the
    # server's, late by at most the loop's lag; the client sees all of it.
    assert fast_record.total_s is not None
    assert 0.105 - 1e-3 <= fast_record.total_s <= 0.105 + fast_slack
    assert fast_record.total_s <= fast
    assert slow_record.ttft_s is not None
    assert 0.2 - 1e-3 <= slow_record.ttft_s <= 0.2 + slow_slack
    assert slow_record.total_s is not None
    assert 0.21 - 1e-3 <= slow_record.total_s <= 0.21 + slow_slack
    assert slow_record.total_s <= slow


def test_the_same_seed_gives_the_same_answers() -> None:
    """
    One generator per server, drawn in arrival order: same seed, same lengths and faults.
    """

    async def run(seed: int) -> list[tuple[int, int | None]]:
        model = ModelProfile(ttft_median_s=0.1, output_tokens=40, faults=Faults(error_5xx=0.3))
        async with serving(config(model, time_scale=0.001, seed=seed)) as server:
            for _ in range(12):
                await chat(server.port, max_tokens=None)
        return [(r.http_status or 0, r.output_tokens) for r in server.records]

    async def main() -> list[list[tuple[int, int | None]]]:
        return [await run(3), await run(3), await run(4)]

    first, again, other = asyncio.run(main())

    assert first == again
    assert first != other
    assert {200, 500, 502, 503} >= {status for status, _ in first}


# --- faults --------------------------------------------------------------------------------


async def silent_after(reader: asyncio.StreamReader, quiet_s: float) -> bytes:
    """
    Read until nothing arrives for ``quiet_s`` while the loop is free; what arrived so far.

    Runs on a `WaitLog` loop. A stretch in which the loop was mostly stalled (a busy machine)
    says nothing about the server, which shares the loop, so it is waited again.
    """
    loop = asyncio.get_running_loop()
    assert isinstance(loop, WaitLog)
    data = b""
    while True:
        start = loop.time()
        try:
            more = await asyncio.wait_for(reader.read(65536), quiet_s)
        except TimeoutError:
            if loop.waited(start, loop.time()) >= quiet_s / 2:
                return data  # the loop sat idle most of the time, and nothing came
            continue
        assert more, "the server closed the connection instead of hanging"
        data += more


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fault", ["hang", "stall_mid"])
def test_hang_and_stall_stay_silent_until_the_client_goes(fault: str, stream: bool) -> None:
    """
    A hang sends nothing, a stall some tokens; the client leaving is logged as client_gone.
    """

    async def main(_loop: WaitLog) -> tuple[bytes, AttemptRecord]:
        faults = Faults(hang=1.0) if fault == "hang" else Faults(stall_mid=1.0)
        cfg = config(fixed(0.5, tokens_per_s=100.0, faults=faults))
        async with serving(cfg) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            body = {"model": "m", "messages": PROMPT, "stream": stream, "max_tokens": 20}
            writer.write(request_bytes("POST", "/v1/chat/completions", body))
            seen = await silent_after(reader, 0.3)
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.records)
            return seen, only(server)

    seen, record = run_logged(main)
    events = parse(seen).events() if seen else []

    assert ("timeout", "client_gone", True, fault) == (
        record.status, record.error_type, record.attrs["client_gone"], record.attrs["fault"]
    )  # fmt: skip
    assert record.censored_at_s is not None
    assert record.censored_at_s >= 0.25  # the client started its 0.3 s before the receipt
    assert record.total_s is None
    if fault == "stall_mid" and stream:
        assert 1 <= record.attrs["tokens_sent"] < 20
        assert 1 + record.attrs["tokens_sent"] == len(events)  # the role chunk, then tokens
        assert "[DONE]" not in events
    else:
        assert b"" == seen


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_error_5xx_answers_an_openai_error(stream: bool) -> None:
    """
    A 5xx fault answers 500, 502 or 503 with an OpenAI error body, logged as error.
    """

    async def main() -> tuple[Reply, AttemptRecord]:
        async with serving(config(fixed(faults=Faults(error_5xx=1.0)))) as server:
            return await chat(server.port, stream=stream), only(server)

    reply, record = asyncio.run(main())

    assert reply.status in (500, 502, 503)
    assert "server_error" == reply.json()["error"]["type"]
    assert ("error", reply.status, "error_5xx") == (
        record.status, record.http_status, record.attrs["fault"]
    )  # fmt: skip


def test_reset_drops_the_connection_without_an_answer() -> None:
    """
    A reset fault closes the socket with a TCP reset: the client reads no HTTP at all.
    """

    async def main() -> tuple[bytes | None, AttemptRecord]:
        async with serving(config(fixed(faults=Faults(reset=1.0)))) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                request_bytes("POST", "/v1/chat/completions", {"model": "m", "messages": []})
            )
            try:
                data: bytes | None = await reader.read()
            except ConnectionResetError:
                data = None
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            return data, only(server)

    data, record = asyncio.run(main())

    assert data in (None, b"")
    assert ("error", "connection_reset", None) == (
        record.status, record.error_type, record.http_status
    )  # fmt: skip


def test_garbage_is_not_json() -> None:
    """
    Garbage: a 200 whose body (or every SSE data line but [DONE]) is not JSON; logged invalid.
    """

    async def main() -> tuple[Reply, Reply, list[AttemptRecord]]:
        async with serving(config(fixed(faults=Faults(garbage=1.0)))) as server:
            whole = await chat(server.port)
            streamed = await chat(server.port, stream=True)
        return whole, streamed, server.records

    whole, streamed, records = asyncio.run(main())

    assert 200 == whole.status == streamed.status
    with pytest.raises(json.JSONDecodeError):
        whole.json()
    events = streamed.events()
    assert "[DONE]" == events[-1]
    assert "assistant" == json.loads(events[0])["choices"][0]["delta"]["role"]
    for event in events[1:-1]:  # the role chunk is well-formed; everything after it is not
        with pytest.raises(json.JSONDecodeError):
            json.loads(event)
    assert [("invalid", "garbage")] * 2 == [(r.status, r.error_type) for r in records]


def test_schema_invalid_has_no_choices() -> None:
    """
    Schema-invalid: valid JSON without choices (every chunk of a stream too); logged invalid.
    """

    async def main() -> tuple[Reply, Reply, list[AttemptRecord]]:
        async with serving(config(fixed(faults=Faults(schema_invalid=1.0)))) as server:
            whole = await chat(server.port)
            streamed = await chat(server.port, stream=True)
        return whole, streamed, server.records

    whole, streamed, records = asyncio.run(main())
    chunks = [json.loads(e) for e in streamed.events()[1:-1]]

    assert "choices" not in whole.json()
    assert "usage" in whole.json()
    assert chunks
    assert all("choices" not in c for c in chunks)
    assert [("invalid", "schema_invalid")] * 2 == [(r.status, r.error_type) for r in records]


def test_cut_stream_ends_without_done() -> None:
    """
    A cut stream closes without [DONE]; a cut whole answer is shorter than its Content-Length.
    """

    async def main() -> tuple[Reply, Reply, list[AttemptRecord]]:
        cfg = config(fixed(faults=Faults(cut_stream=1.0)))
        async with serving(cfg) as server:
            whole = await chat(server.port)
            streamed = await chat(server.port, stream=True, max_tokens=20)
        return whole, streamed, server.records

    whole, streamed, records = asyncio.run(main())
    events = streamed.events()

    assert len(whole.body) < int(whole.headers["content-length"])
    assert "[DONE]" not in events
    assert 1 + records[1].attrs["tokens_sent"] == len(events)
    assert 1 <= records[1].attrs["tokens_sent"] < 20
    assert [("error", "cut_stream")] * 2 == [(r.status, r.error_type) for r in records]


def test_tpm_limit_answers_429_with_retry_after_and_refills() -> None:
    """
    Over the tokens-per-minute bucket: 429 and Retry-After; after that wait it admits again.
    """

    async def main() -> tuple[list[Reply], list[AttemptRecord]]:
        # 20 tokens per profile minute at time scale 0.01: 20 tokens per 0.6 real seconds.
        # Each request costs 5 prompt + 5 completion tokens.
        cfg = config(fixed(0.1, faults=Faults(tpm_limit=20)))
        async with serving(cfg) as server:
            start = time.perf_counter()
            replies = [await chat(server.port) for _ in range(3)]
            took.append(time.perf_counter() - start)
            await asyncio.sleep(int(replies[2].headers["retry-after-ms"]) / 1000)
            replies.append(await chat(server.port))
        return replies, server.records

    took: list[float] = []
    replies, records = asyncio.run(main())
    retry_after_s = int(replies[2].headers["retry-after-ms"]) / 1000

    assert [200, 200, 429, 200] == [r.status for r in replies]
    assert "rate_limit_exceeded" == replies[2].json()["error"]["code"]
    # Empty after two: 10 tokens take 10 / (20 / 0.6 s) = 0.3 s, less what refilled while the
    # three requests went by (however long a busy machine made that).
    assert 0.3 - took[0] <= retry_after_s <= 0.3
    assert replies[2].headers["retry-after"] == "1"  # whole seconds: the wait, rounded up
    assert ["ok", "ok", "rate_limited", "ok"] == [r.status for r in records]
    assert retry_after_s == records[2].attrs["retry_after_s"]


# --- the access log, deadlines, clients that leave, stop -----------------------------------


def test_the_access_log_has_one_call_record_per_request(tmp_path: Path) -> None:
    """
    Every chat request, refused or not, is one record in memory, in the JSONL file and the callback.
    """
    log = tmp_path / "access.jsonl"
    seen: list[AttemptRecord] = []

    async def main() -> Server:
        deadline = {"x-tailkit-remaining-s": "30", "x-tailkit-deadline": f"{time.time() + 60}"}
        async with serving(config(), access_log=log, on_record=seen.append) as server:
            await chat(server.port, headers={"Idempotency-Key": "k1", **deadline})
            await chat(server.port, headers={"Idempotency-Key": "k1"})
            await chat(server.port, model="nope")
            await send(server.port, request_bytes("GET", "/v1/models", None, CLOSE))
        return server

    server = asyncio.run(main())
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    first = server.records[0]

    assert (
        [r.call_id for r in server.records]
        == [r.call_id for r in seen]
        == [x["call_id"] for x in lines]
    )
    assert ["ok", "ok", "error"] == [x["status"] for x in lines]
    assert [200, 200, 404] == [x["http_status"] for x in lines]
    assert ["k1", "k1", ""] == [x["idempotency_key"] for x in lines]
    assert [(0, "primary"), (1, "retry"), (0, "primary")] == [
        (x["attempt"], x["role"]) for x in lines
    ]
    assert collections.Counter({"k1": 2}) == server.seen_keys
    assert {"tailkit-serve"} == {x["provider"] for x in lines}
    assert first.deadline_at is not None
    assert abs((first.deadline_at - first.started_at) - timedelta(seconds=30)) < timedelta(
        milliseconds=5
    )
    assert [None, None] == [x["deadline_at"] for x in lines[1:]]
    assert first.attrs["remaining_s_at_receive"] == pytest.approx(30.0, abs=0.005)
    assert {"fault": None, "client_gone": False} == {
        k: first.attrs[k] for k in ("fault", "client_gone")
    }


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_work_past_the_deadline_stops_at_the_deadline(stream: bool) -> None:
    """
    A 1 s answer with 0.15 s left: 504 at the deadline (a stream closes without [DONE]).
    """

    async def main() -> tuple[Reply, float, AttemptRecord, float]:
        async with serving(config(fixed(2.0), time_scale=0.5)) as server:
            async with timer_slack() as slack:
                # the absolute deadline is taken once the server is up, just before sending
                headers = (
                    {"x-tailkit-deadline": f"{time.time() + 0.15}"}
                    if stream
                    else {"x-tailkit-remaining-s": "0.15"}
                )
                start = time.perf_counter()
                reply = await chat(server.port, stream=stream, headers=headers)
                elapsed = time.perf_counter() - start
            return reply, elapsed, only(server), slack()

    reply, elapsed, record, slack_s = asyncio.run(main())

    assert ("timeout", "deadline_exceeded", None) == (
        record.status,
        record.error_type,
        record.total_s,
    )
    # It stops at the deadline it was given (what was left when the request arrived, less
    # the way there: the absolute one is read later), late by at most the loop's lag.
    left = record.attrs["remaining_s_at_receive"]
    assert (0.15 - elapsed if stream else 0.15) - 1e-6 <= left <= 0.15 + 1e-6
    assert record.censored_at_s is not None
    assert left - 1e-3 <= record.censored_at_s <= left + slack_s
    assert record.censored_at_s <= elapsed
    if stream:
        assert (200, 200) == (reply.status, record.http_status)
        assert "[DONE]" not in reply.events()
    else:
        assert (504, 504) == (reply.status, record.http_status)
        assert "deadline_exceeded" == reply.json()["error"]["code"]


def test_a_client_that_leaves_cancels_the_work_and_is_logged() -> None:
    """
    The client closing its socket mid-request stops the work at once: timeout, client_gone.
    """

    async def main() -> tuple[float, AttemptRecord, float]:
        async with serving(config(fixed(20.0), time_scale=0.5)) as server:  # a 10 s answer
            async with timer_slack() as slack:
                _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(
                    request_bytes(
                        "POST", "/v1/chat/completions", {"model": "m", "messages": PROMPT}
                    )
                )
                await asyncio.sleep(0.1)
                left = time.time()
                writer.close()
                await writer.wait_closed()
                await until(lambda: server.records)
            return left, only(server), slack()

    left, record, slack_s = asyncio.run(main())

    assert ("timeout", True, None) == (record.status, record.attrs["client_gone"], record.total_s)
    assert record.censored_at_s is not None
    # cut when the client left (its close reaches the loop at once), not after the answer's 10 s
    cut = record.started_at.timestamp() + record.censored_at_s
    assert left - 1e-3 <= cut <= left + slack_s


def test_stop_closes_open_connections_and_leaves_no_task() -> None:
    """
    stop() closes idle, waiting and streaming connections; requests in flight are cancelled.
    """

    async def main(loop: WaitLog) -> tuple[list[bytes | None], list[str], float]:
        server = Server(config(fixed(2.0, tokens_per_s=1.0), time_scale=0.5))
        await server.start()
        idle = await asyncio.open_connection("127.0.0.1", server.port)
        idle[1].write(request_bytes("GET", "/v1/models"))
        await read_reply(idle[0])
        pending = await asyncio.open_connection("127.0.0.1", server.port)
        pending[1].write(
            request_bytes("POST", "/v1/chat/completions", {"model": "m", "messages": PROMPT})
        )
        streaming = await asyncio.open_connection("127.0.0.1", server.port)
        body = {"model": "m", "messages": PROMPT, "stream": True}
        streaming[1].write(request_bytes("POST", "/v1/chat/completions", body))
        await streaming[0].readuntil(b"\n\n")  # the head and the role chunk
        await until(lambda: server.open_connections == 3)
        start = loop.time()
        await server.stop()
        waited = loop.waited(start, loop.time())
        assert 0 == server.open_connections
        assert {asyncio.current_task()} == asyncio.all_tasks()
        ends: list[bytes | None] = []
        for reader, writer in (idle, pending, streaming):
            try:
                ends.append(await asyncio.wait_for(reader.read(), 1.0))
            except ConnectionResetError:
                ends.append(None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.stop()  # again: nothing to do
        return ends, [r.status for r in server.records], waited

    ends, statuses, waited = run_logged(main)

    # stop() waits for nothing (not the 1 s answer in flight): it only cancels and closes
    assert waited == 0.0
    assert all(end is None or b"[DONE]" not in end for end in ends)
    assert ["cancelled", "cancelled"] == statuses


# --- bad requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"HELLO\r\n\r\n", 400),
        (b"GET /v1/models HTTP/2.0\r\n\r\n", 505),
        (b"GET /v1/models HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
        (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (request_bytes("POST", CHAT, b"{not json", CLOSE), 400),
        (request_bytes("POST", CHAT, {"model": "m", "messages": "hi"}, CLOSE), 400),
        (request_bytes("POST", CHAT, {"model": "nope", "messages": []}, CLOSE), 404),
        (request_bytes("GET", CHAT, None, CLOSE), 405),
        (request_bytes("GET", "/v2/anything", None, CLOSE), 404),
    ],
    ids=["request-line", "version", "header", "length", "too-large", "coding", "chunk", "431",
         "json", "messages", "model", "method", "path"],
)  # fmt: skip
def test_bad_requests_get_an_error_and_the_server_goes_on(data: bytes, status: int) -> None:
    """
    Malformed HTTP or bodies answer 4xx/5xx with an OpenAI error body; the next request works.
    """

    async def main() -> tuple[Reply, Reply]:
        async with serving(config()) as server:
            bad = await send(server.port, data)
            good = await chat(server.port)
        return bad, good

    bad, good = asyncio.run(main())

    assert status == bad.status
    assert "message" in bad.json()["error"]
    assert 200 == good.status


def test_chunked_bodies_and_expect_continue_are_read() -> None:
    """
    A chunked request body is decoded; ``Expect: 100-continue`` gets its interim answer.
    """
    body = json.dumps({"model": "m", "messages": PROMPT}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:10], body[10:])) + b"0\r\n\r\n"
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
    )

    async def main() -> tuple[bytes, Reply]:
        async with serving(config()) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head)
            interim = await reader.readuntil(b"\r\n\r\n")
            writer.write(chunked)
            reply = parse(await reader.read())
            writer.close()
            await writer.wait_closed()
        return interim, reply

    interim, reply = asyncio.run(main())

    assert interim.startswith(b"HTTP/1.1 100 Continue")
    assert reply.json()["choices"][0]["message"]["content"].startswith(WORDS)


# --- profiles -------------------------------------------------------------------------------


def test_the_sample_profile_loads() -> None:
    """
    data_samples/serve_profile.yaml: two models, 3 % stalls on the slow one, the other clean.
    """
    cfg = load_profile(ROOT / "data_samples" / "serve_profile.yaml")

    assert ["openai/gpt-4.1", "openai/gpt-4.1-mini"] == list(cfg.models)
    assert 0.03 == cfg.models["openai/gpt-4.1"].stall_share
    assert ModelProfile().faults == cfg.models["openai/gpt-4.1-mini"].faults
    assert 0.0 == cfg.models["openai/gpt-4.1-mini"].stall_share


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("m: {ttft_sigma: -1}", "models.m.ttft_sigma must be a number >= 0, got -1"),
        ("m: {tokens_per_s: 0}", "models.m.tokens_per_s must be a number > 0, got 0"),
        ("m: {output_tokens: 2.5}", "models.m.output_tokens must be a whole number >= 1, got 2.5"),
        ("m: {stall_factor: 0.5}", "models.m.stall_factor must be a number >= 1, got 0.5"),
        ("m: {faults: {hang: 1.5}}",
         "models.m.faults.hang is a share of requests between 0 and 1, got 1.5"),
        ("m: {faults: {tpm_limit: 0}}",
         "models.m.faults.tpm_limit must be a whole number >= 1, got 0"),
        ("m: {faults: {slow: 0.1}}", "models.m.faults.slow is not a field"),
        ("m: {ttft_median: 1}", "models.m.ttft_median is not a field"),
        ("m: {ttft_median_s: fast}", "models.m.ttft_median_s must be a number >= 0, got 'fast'"),
        ("m: [1]", "models.m must be a mapping of fields"),
        ("speed: 2\nmodels: {m: {}}", "speed is not a field"),
        ("time_scale: 0\nmodels: {m: {}}", "time_scale must be a number > 0, got 0"),
        ("seed: -1\nmodels: {m: {}}", "seed must be a whole number >= 0, got -1"),
        ("models: {}", "models must map model ids to profiles"),
        ("time_scale: 1", "models is missing"),
        ("models: [", "not valid YAML"),
    ],
)  # fmt: skip
def test_load_profile_names_the_bad_field(tmp_path: Path, text: str, message: str) -> None:
    """
    A bad profile raises ConfigError naming the file, the field and the value.
    """
    path = tmp_path / "profile.yaml"
    path.write_text(f"models:\n  {text}" if text.startswith("m: ") else text)

    with pytest.raises(ConfigError) as info:
        load_profile(path)

    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_load_profile_reads_every_field(tmp_path: Path) -> None:
    """
    Every field round-trips from YAML, exponent floats (1e-2) included; missing ones default.
    """
    path = tmp_path / "p.yaml"
    path.write_text(
        "time_scale: 1e-2\nseed: 4\nmodels:\n  a:\n    ttft_median_s: 2\n    ttft_sigma: 0.1\n"
        "    tokens_per_s: 40\n    gen_sigma: 0\n    output_tokens: 900\n    stall_share: 0.05\n"
        "    stall_factor: 3\n    faults: {hang: 0.01, stall_mid: 0.02, error_5xx: 0.03,"
        " reset: 0.04, garbage: 0.05, schema_invalid: 0.06, cut_stream: 0.07, tpm_limit: 2e5}\n"
        "  b:\n"
    )

    cfg = load_profile(path)

    assert ServeConfig(
        models={
            "a": ModelProfile(2.0, 0.1, 40.0, 0.0, 900, 0.05, 3.0,
                              Faults(0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 200_000)),
            "b": ModelProfile(),
        },
        time_scale=0.01,
        seed=4,
    ) == cfg  # fmt: skip


def test_profiles_refuse_bad_values_when_built_in_python() -> None:
    """
    The dataclasses check themselves: the field and the value are in the message.
    """
    with pytest.raises(ConfigError, match=r"^stall_share is a share of requests .* got 3"):
        ModelProfile(stall_share=3)
    with pytest.raises(ConfigError, match=r"^faults.reset must be a number >= 0, got -0.1"):
        Faults(reset=-0.1)
    with pytest.raises(ConfigError, match=r"^time_scale must be a number > 0, got nan"):
        ServeConfig(models={"m": ModelProfile()}, time_scale=math.nan)


_STATS_ROWS = [
    {
        "provider": "openai", "model": "gpt-4.1", "n": 1000, "p50_s": 10.0, "p99_s": 40.0,
        "sigma": 0.35, "ttft_p50_s": 0.8, "ttft_p99_s": 3.0, "gen_p50_s": 9.0,
        "tokens_per_s_p50": 80.0, "tokens_per_s_p10": 60.0, "transient": True,
        "transient_share": 0.03, "transient_scale": 4.0,
    },
    {  # not streamed: no TTFT, no speed; a transient share that is not a verdict
        "provider": "azure", "model": "gpt-4.1", "n": 500, "p50_s": 5.0, "p99_s": "inf",
        "sigma": 0.5, "ttft_p50_s": None, "ttft_p99_s": None, "gen_p50_s": None,
        "tokens_per_s_p50": None, "tokens_per_s_p10": None, "transient": False,
        "transient_share": 0.2, "transient_scale": 2.0,
    },
    {"provider": "x", "model": "failing", "n": 3, "p50_s": None, "ttft_p50_s": None},
]  # fmt: skip


def test_profile_from_stats_maps_each_row(tmp_path: Path) -> None:
    """
    Stats rows become quantile-grid tables keyed provider/model; rows without latency are left out.
    """
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({"table": _STATS_ROWS, "verdicts": []}))

    cfg = profile_from_stats(path, time_scale=0.1)

    assert ["openai/gpt-4.1", "azure/gpt-4.1"] == list(cfg.models)
    assert 0.1 == cfg.time_scale
    streamed, whole = (cfg.models[name].outcomes for name in cfg.models)
    assert streamed is not None
    assert whole is not None
    assert 720 == streamed.output_tokens  # 9 s of generation at 80 tokens/s
    assert 200 == whole.output_tokens  # unknown speed: the default length
    # entry i sits at probability (i + 0.5) / 1000: the measured p50 and p99 lie between
    assert streamed.total_s[499] <= 10.0 <= streamed.total_s[500]
    assert streamed.total_s[989] <= 40.0 <= streamed.total_s[990]
    assert streamed.ttft_s[499] <= 0.8 <= streamed.ttft_s[500]
    assert streamed.ttft_s[989] <= 3.0 <= streamed.ttft_s[990]
    assert whole.total_s[499] <= 5.0 <= whole.total_s[500]
    assert [0.1 * t for t in whole.total_s] == list(whole.ttft_s)  # 10 % of the total
    assert {"o"} == set(streamed.kinds) == set(whole.kinds)  # failures are not replayed
    again = profile_from_stats(_STATS_ROWS, time_scale=0.1)  # the parsed rows, alike
    tables = [again.models[name].outcomes for name in again.models]
    assert [streamed.total_s, whole.total_s] == [t.total_s for t in tables if t is not None]


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        ([{"provider": "p", "p50_s": 1.0}], "a stats row has no model"),
        ([_STATS_ROWS[2]], "no stats row has latency to replay"),
        ({"rows": []}, "stats JSON must hold a 'table' list of rows"),
    ],
)  # fmt: skip
def test_profile_from_stats_refuses_what_it_cannot_replay(stats: Any, message: str) -> None:
    """
    Rows without a model and tables without latency name the fix.
    """
    with pytest.raises(ConfigError, match=r"bucket=\(\)\)\.to_dicts\(\)") as info:
        profile_from_stats(stats)

    assert message in str(info.value)


# --- bare models ---------------------------------------------------------------------------


ROUTES = ("openai/gpt-4.1", "azure/gpt-4.1", "openai/gpt-4.1-mini", "local")


def routed(**kw: Any) -> ServeConfig:
    return ServeConfig(models=dict.fromkeys(ROUTES, fixed()), time_scale=0.01, **kw)


@pytest.mark.parametrize(
    ("asked", "headers", "served"),
    [
        ("openai/gpt-4.1-mini", {}, "openai/gpt-4.1-mini"),
        ("gpt-4.1-mini", {}, "openai/gpt-4.1-mini"),
        ("local", {}, "local"),
        ("gpt-4.1", {"x-tailkit-route": "azure/gpt-4.1"}, "azure/gpt-4.1"),
    ],
    ids=["route", "bare", "no-provider", "route-header"],
)
def test_a_bare_model_is_served_by_its_one_route(
    asked: str, headers: dict[str, str], served: str
) -> None:
    """
    A model id, or a bare model only one id ends in, is answered and logged as that id.
    """

    async def main() -> tuple[Reply, Reply, Server]:
        async with serving(routed()) as server:
            whole = await chat(server.port, model=asked, headers=headers)
            streamed = await chat(server.port, model=asked, headers=headers, stream=True)
        return whole, streamed, server

    whole, streamed, server = asyncio.run(main())

    assert (200, served) == (whole.status, whole.json()["model"])
    assert 200 == streamed.status
    assert {served} == {json.loads(e)["model"] for e in streamed.events() if e != "[DONE]"}
    assert [served, served] == [r.model for r in server.records]
    asked_attr = None if asked == served else asked
    assert [asked_attr] * 2 == [r.attrs.get("model_asked") for r in server.records]


@pytest.mark.parametrize(
    ("asked", "headers", "status", "message"),
    [
        ("gpt-4.1", {}, 400,
         "The model 'gpt-4.1' is served by 2 routes: openai/gpt-4.1, azure/gpt-4.1; "
         "send one of them as the model"),
        ("gpt-4.1", {"x-tailkit-route": "openai/gpt-4.1-mini"}, 400,
         "The model 'gpt-4.1' is served by 2 routes: openai/gpt-4.1, azure/gpt-4.1; "
         "send one of them as the model"),
        ("gpt-4", {}, 404,
         "The model 'gpt-4' does not exist; this server has: openai/gpt-4.1, azure/gpt-4.1, "
         "openai/gpt-4.1-mini, local"),
    ],
    ids=["ambiguous", "header-of-another-model", "unknown"],
)  # fmt: skip
def test_an_ambiguous_or_unknown_model_lists_the_routes(
    asked: str, headers: dict[str, str], status: int, message: str
) -> None:
    """
    A bare model two ids end in answers 400 naming both; one none ends in, 404 naming all.
    """

    async def main() -> tuple[Reply, Server]:
        async with serving(routed()) as server:
            return await chat(server.port, model=asked, headers=headers), server

    reply, server = asyncio.run(main())

    assert status == reply.status
    assert message == reply.json()["error"]["message"]
    assert "model" == reply.json()["error"]["param"]
    record = only(server)
    assert ("error", asked) == (record.status, record.model)
    assert {400: "model_ambiguous", 404: "model_not_found"}[status] == record.error_type


def test_the_readme_adapter_snippet_runs_against_serve_from_stats(tmp_path: Path) -> None:
    """
    The README's chat_attempt snippet, its URL changed to serve --from-stats, gets its answer.
    """
    from tailkit.adapters.openai import chat_attempt
    from tailkit.config import load_plan
    from tailkit.executor import Executor, JsonlSink, Ledger, deadline_after

    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "tailkit_plan: 1\nworkflow: t\ndeadline_s: 60\nhedge_budget: 0.05\nroutes:\n"
        "  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}\n"
        "steps:\n  summarize:\n    route: openai/gpt-4.1-mini\n"
    )
    ledger = tmp_path / "ledger.jsonl"
    stats = [dict(row, p99_s=12.0) for row in _STATS_ROWS[:2]]
    stats.append({"provider": "openai", "model": "gpt-4.1-mini", "p50_s": 2.0, "sigma": 0.3})

    async def main() -> tuple[Any, Server]:
        messages = [{"role": "user", "content": "Summarise this account in five bullets."}]
        server = Server(profile_from_stats(stats, time_scale=0.001))
        async with (
            server,
            Executor(load_plan(plan), ledger=Ledger(JsonlSink(ledger))) as executor,
            chat_attempt(server.url, messages, api_key="sk-test") as call,
        ):
            with deadline_after(60):
                answer = await executor.run_step("summarize", call)
        return answer, server

    answer, server = asyncio.run(main())

    assert answer.text.startswith(WORDS)
    assert answer.output_tokens == len(answer.text.split())
    record = only(server)
    assert ("ok", "openai/gpt-4.1-mini", "gpt-4.1-mini") == (
        record.status, record.model, record.attrs["model_asked"]
    )  # fmt: skip
    assert "ok" == json.loads(ledger.read_text().splitlines()[-1])["status"]


# --- the command ----------------------------------------------------------------------------


def test_serve_needs_exactly_one_source() -> None:
    """
    Without --profile, --from-stats or --outcomes (or with two) the command says what to give.
    """
    runner = CliRunner()

    result = runner.invoke(app, ["serve"])

    assert 1 == result.exit_code
    assert (
        "Error: give one of --profile FILE.yaml, --from-stats STATS.json or --outcomes "
        "FILE.json (exactly one)\n" == result.stderr
    )


@pytest.mark.skipif(sys.platform == "win32", reason="Ctrl-C is SIGINT on POSIX only")
def test_serve_command_serves_until_ctrl_c(tmp_path: Path) -> None:
    """
    `tailkit serve` prints its URL, answers, logs, and stops cleanly on SIGINT.
    """
    log = tmp_path / "access.jsonl"
    profile = ROOT / "data_samples" / "serve_profile.yaml"
    command = [sys.executable, "-m", "tailkit", "serve", "--profile", str(profile), "--port", "0",
               "--time-scale", "0.001", "--log", str(log), "--idle-timeout", "5",
               "--max-connections", "8", "--max-body-mib", "1"]  # fmt: skip
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            url = first.split(" at ", 1)[1].split(" ", 1)[0]
            with urllib.request.urlopen(f"{url}/models", timeout=10) as reply:  # noqa: S310 - loopback
                models = [m["id"] for m in json.load(reply)["data"]]
            body = json.dumps({"model": "openai/gpt-4.1-mini", "messages": PROMPT}).encode()
            post = urllib.request.Request(f"{url}/chat/completions", data=body, method="POST")  # noqa: S310 - loopback
            with urllib.request.urlopen(post, timeout=10) as reply:  # noqa: S310 - loopback
                answer = json.load(reply)
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=10)

    assert 0 == proc.returncode, err
    assert first.startswith("tailkit serve: 2 model(s) at http://127.0.0.1:")
    assert "(time scale 0.001, seed 7); Ctrl-C stops" in first
    assert ["openai/gpt-4.1", "openai/gpt-4.1-mini"] == models
    assert "stop" == answer["choices"][0]["finish_reason"]
    assert answer["choices"][0]["message"]["content"].startswith(WORDS)
    assert out.endswith("stopped after 1 chat request(s)\n")
    assert ["ok"] == [json.loads(line)["status"] for line in log.read_text().splitlines()]


def test_workers_queue_requests_and_start_their_clock_when_taken() -> None:
    """
    One worker: the second request waits; its log starts when it is taken, its total excludes it.
    """

    async def main() -> tuple[list[AttemptRecord], float]:
        cfg = dataclasses.replace(config(fixed(2.0), time_scale=0.05), workers=1)
        async with serving(cfg) as server:
            async with timer_slack() as slack:
                await asyncio.gather(chat(server.port), chat(server.port))
            return sorted(server.records, key=lambda r: r.started_at), slack()

    (first, second), slack_s = asyncio.run(main())
    assert first.status == second.status == "ok"
    assert first.total_s is not None
    assert second.total_s is not None
    waited = (second.started_at - first.started_at).total_seconds()
    # taken when the first one's 0.1 s of work is done; its own 0.1 s counts from then
    assert 0.1 - 1e-3 <= first.total_s
    assert 0.08 <= waited <= first.total_s + slack_s
    assert 0.1 - 1e-3 <= second.total_s <= 0.1 + slack_s


@pytest.mark.parametrize(("own_budget_s", "status"), [(1000.0, "ok"), (1.0, "timeout")])
def test_own_budget_ignores_the_propagated_deadline(own_budget_s: float, status: str) -> None:
    """
    Two clocks: the server keeps its own budget, whatever deadline the request carries.
    """
    headers = {"x-tailkit-remaining-s": "0.01"}  # the caller is almost out of time

    async def main() -> AttemptRecord:
        cfg = dataclasses.replace(config(fixed(2.0), time_scale=0.05), own_budget_s=own_budget_s)
        async with serving(cfg) as server:
            await chat(server.port, headers=headers)
            return only(server)

    record = asyncio.run(main())
    assert record.status == status


def test_deadline_margin_stops_early_enough_to_answer_in_time() -> None:
    """
    With deadline_margin_s, the server stops that much before the propagated deadline.
    """
    headers = {"x-tailkit-remaining-s": "0.3"}

    async def main() -> tuple[AttemptRecord, float]:
        cfg = dataclasses.replace(
            config(fixed(2.0), time_scale=0.5), deadline_margin_s=0.4
        )  # 0.2 s real before the caller's deadline
        async with serving(cfg) as server:
            async with timer_slack() as slack:
                await chat(server.port, headers=headers)
            return only(server), slack()

    record, slack_s = asyncio.run(main())
    assert record.status == "timeout"
    assert record.censored_at_s is not None
    # 0.3 s left, less the 0.2 s margin: it stops at 0.1 s (late by the loop's lag at most)
    assert 0.1 - 1e-3 <= record.censored_at_s <= 0.1 + slack_s


def test_an_own_clock_tool_finishes_work_its_caller_left() -> None:
    """
    Two clocks: the caller leaves, the tool works on and logs an ok (an orphaned success).
    """

    async def main() -> AttemptRecord:
        cfg = dataclasses.replace(config(fixed(2.0), time_scale=0.05), own_budget_s=10.0)
        async with serving(cfg) as server:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(chat(server.port), 0.02)  # the caller gives up first
            await until(lambda: server.records)
            return only(server)

    record = asyncio.run(main())
    assert record.status == "ok"
    assert record.total_s is not None
    assert record.total_s >= 0.08  # all 0.1 s of work, though the caller left after 0.02 s
