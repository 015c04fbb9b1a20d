"""
`tailkit serve` under clients that send what no real client would.

Every chat request is answered and logged, and memory, connections and time stay bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import math
import socket
import tracemalloc

from pathlib import Path
from typing import Any

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.cli._serve import _stopped
from tailkit.errors import ConfigError
from tailkit.serve import Faults, Limits, Server, _requests
from tailkit.serve import _openai as wire
from tailkit.serve._http import MAX_HEAD_BYTES, Connection
from tailkit.serve._limits import MAX_NAME_CHARS, MAX_REMAINING_S
from tests._fakeloop import run

from .conftest import ROOT
from .test_serve import (
    CHAT,
    CLOSE,
    PROMPT,
    Reply,
    chat,
    config,
    fixed,
    parse,
    read_reply,
    request_bytes,
    send,
    serving,
    until,
)


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- every request answered and logged ----------------------------------------------------


@pytest.mark.parametrize("header", ["x-tailkit-remaining-s", "x-tailkit-deadline"])
def test_an_absurd_deadline_is_clamped_answered_and_logged(tmp_path: Path, header: str) -> None:
    """
    A deadline of 1e300 (seconds left, or an epoch instant) is clamped; the request is logged.
    """
    log = tmp_path / "access.jsonl"

    async def main() -> Reply:
        async with serving(config(), access_log=log) as server:
            return await chat(server.port, headers={header: "1e300"})

    reply = asyncio.run(main())
    (line,) = log_lines(log)

    assert (200, "ok") == (reply.status, line["status"])
    # deadline - received on the loop clock: exact up to the rounding of a large clock value
    assert pytest.approx(MAX_REMAINING_S, rel=1e-12) == line["attrs"]["remaining_s_at_receive"]
    assert line["attrs"]["remaining_s_asked"] > 1e299
    assert line["deadline_at"] is not None


def _nested(depth: int) -> bytes:
    return b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_nested(100_000), "nests arrays or objects too deep"),
        (b'{"model": "m", "messages": [], "max_tokens": ' + b"7" * 5000 + b"}", "4300 digits"),
        (b'{"model": "m", "messages": [], "x": ' + b"9" * 5000 + b".5}", None),  # a float: fine
        (b'{"model": "\xff"}', "not valid JSON"),
    ],
    ids=["deep", "huge-int", "long-float", "latin-1"],
)
def test_a_body_python_cannot_read_answers_400_and_is_logged(
    tmp_path: Path, body: bytes, says: str | None
) -> None:
    """
    Deep nesting, 5,000-digit integers, bad UTF-8: a 400 with a JSON error, a log line, and on.
    """
    log = tmp_path / "access.jsonl"

    async def main() -> tuple[Reply, Reply]:
        async with serving(config(), access_log=log) as server:
            bad = await send(server.port, request_bytes("POST", CHAT, body, CLOSE))
            good = await chat(server.port)
        return bad, good

    bad, good = asyncio.run(main())
    lines = log_lines(log)

    if says is None:  # a float of 5,000 digits is read (as a float): a good request
        assert 200 == bad.status
    else:
        assert 400 == bad.status
        assert says in bad.json()["error"]["message"]
        assert "invalid_request" == bad.json()["error"]["code"]
        assert ("error", "invalid_request", 400) == (
            lines[0]["status"], lines[0]["error_type"], lines[0]["http_status"]
        )  # fmt: skip
    assert 2 == len(lines)
    assert 200 == good.status


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_failure_of_the_server_answers_500_and_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """
    A bug while answering: 500 if nothing was sent (a stream is cut), a log line, and on.
    """
    log = tmp_path / "access.jsonl"

    def broken(index: int) -> str:
        msg = f"no word {index}"
        raise RuntimeError(msg)

    async def main() -> tuple[bytes, Reply]:
        async with serving(config(), access_log=log) as server:
            monkeypatch.setattr(wire, "word", broken)
            body = {"model": "m", "messages": PROMPT, "stream": stream}
            raw = await asyncio.wait_for(_exchange(server.port, body), 10.0)
            monkeypatch.undo()
            return raw, await chat(server.port)

    raw, good = asyncio.run(main())
    (line, _) = log_lines(log)

    assert ("error", "internal_error") == (line["status"], line["error_type"])
    assert "RuntimeError: no word 0" == line["attrs"]["error"]
    if stream:  # the head went out before the failure: the stream just ends
        assert (200, 200) == (parse(raw).status, line["http_status"])
        assert b"[DONE]" not in raw
    else:
        assert (500, 500) == (parse(raw).status, line["http_status"])
        assert "server_error" == parse(raw).json()["error"]["type"]
    assert 200 == good.status


async def _exchange(port: int, body: dict[str, Any]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes("POST", CHAT, body))  # keep-alive: the server must close it
    data = await reader.read()
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return data


def test_a_failure_before_the_exchange_answers_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    A bug in drawing the answer: 500 and a record, not a dropped connection.
    """

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError

    monkeypatch.setattr(_requests, "draw", broken)

    async def main() -> tuple[Reply, list[tuple[str, str | None, int | None]]]:
        async with serving(config()) as server:
            reply = await chat(server.port)
        return reply, [(r.status, r.error_type, r.http_status) for r in server.records]

    reply, records = asyncio.run(main())

    assert 500 == reply.status
    assert [("error", "internal_error", 500)] == records


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"Content-Length: 99999999999\r\n", 413),
        (b"Content-Length: " + b"9" * 5000 + b"\r\n", 413),
        (b"Transfer-Encoding: chunked\r\n\r\n" + b"zz", 400),
    ],
    ids=["too-large", "5000-digits", "bad-chunk"],
)
def test_an_unreadable_chat_request_is_answered_and_logged(
    tmp_path: Path, head: bytes, status: int
) -> None:
    """
    HTTP the server cannot read, on the chat route: its 4xx, and a record with its key.
    """
    log = tmp_path / "access.jsonl"
    data = b"POST /v1/chat/completions HTTP/1.1\r\nIdempotency-Key: k9\r\n" + head + b"\r\n"

    async def main() -> Reply:
        async with serving(config(), access_log=log) as server:
            return await send(server.port, data)

    reply = asyncio.run(main())
    (line,) = log_lines(log)

    assert status == reply.status
    assert "bad_http_request" == reply.json()["error"]["code"]
    assert ("error", "bad_http_request", status, "k9") == (
        line["status"], line["error_type"], line["http_status"], line["idempotency_key"]
    )  # fmt: skip


def test_a_request_its_client_abandons_while_sending_is_not_recorded() -> None:
    """
    Half a body, then the client closes: no call arrived, so no record (no false orphan).
    """
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n"
        + b"{" * 10
    )

    async def main() -> tuple[int, Reply]:
        async with serving(config()) as server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.open_connections == 0)
            good = await chat(server.port)
            return server.counts.total(), good

    count, good = asyncio.run(main())

    assert (1, 200) == (count, good.status)


def test_expect_continue_with_an_oversized_body_gets_413_at_once() -> None:
    """
    ``Expect: 100-continue`` with a length over the limit: 413 first, never 100 Continue.
    """
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n"
        b"Expect: 100-continue\r\n\r\n"
    )

    async def main() -> bytes:
        async with serving(config()) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head)
            data = await asyncio.wait_for(reader.read(), 10.0)
            writer.close()
            await writer.wait_closed()
        return data

    data = asyncio.run(main())

    assert data.startswith(b"HTTP/1.1 413 ")
    assert b"100 Continue" not in data


# --- memory ---------------------------------------------------------------------------------


async def _many(port: int, n: int, start: int) -> collections.Counter[int]:
    """
    ``n`` requests on one keep-alive connection, each with a long key of its own.

    Half are answered, half name a long model the server does not have.
    """
    statuses: collections.Counter[int] = collections.Counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(start, start + n):
        model = "m" if i % 2 else f"unknown-{i}-" + "x" * 2000
        body = {"model": model, "messages": PROMPT, "max_tokens": 2}
        key = f"key-{i}-" + "k" * 500
        writer.write(request_bytes("POST", CHAT, body, {"Idempotency-Key": key}))
        statuses[(await read_reply(reader)).status] += 1
    writer.close()
    await writer.wait_closed()
    return statuses


def test_records_keys_and_names_kept_are_bounded_and_counts_stay_right(tmp_path: Path) -> None:
    """
    300 requests, keep 10 records and 20 keys: the log has all, counts add up, names clipped.
    """
    log = tmp_path / "access.jsonl"
    limits = Limits(keep_records=10, keep_keys=20)

    async def main() -> tuple[Server, collections.Counter[int]]:
        async with serving(config(fixed(0.0)), access_log=log, limits=limits) as server:
            statuses = await _many(server.port, 300, 0)
        return server, statuses

    server, statuses = asyncio.run(main())
    lines = log_lines(log)

    assert collections.Counter({200: 150, 404: 150}) == statuses
    assert collections.Counter({"ok": 150, "error": 150}) == server.counts
    assert 300 == server.counts.total() == len(lines)
    assert [x["call_id"] for x in lines[-10:]] == [r.call_id for r in server.records]
    assert 20 == len(server.seen_keys)
    assert all(len(key) <= MAX_NAME_CHARS for key in server.seen_keys)
    assert max(len(x["model"]) for x in lines) == MAX_NAME_CHARS
    assert len({x["idempotency_key"] for x in lines}) == 300  # clipped keys stay distinct


def test_memory_held_does_not_grow_with_requests() -> None:
    """
    tracemalloc: 300 more requests after a warm-up leave what the server holds about where it was.
    """

    async def main() -> tuple[int, int]:
        limits = Limits(keep_records=50, keep_keys=50)
        async with serving(config(fixed(0.0)), limits=limits) as server:
            await _many(server.port, 100, 0)  # the ring and the key table are full
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            await _many(server.port, 300, 100)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        assert 400 == server.counts.total()
        return before, after

    tracemalloc.start()
    try:
        before, after = asyncio.run(main())
    finally:
        tracemalloc.stop()

    # Kept forever, each request would hold its record (about 1 kB), its 2 kB model name or
    # its key: 300 of them about 650 kB. Bounded, the growth is noise (a few kB).
    assert after - before < 150_000


def test_a_flood_on_a_busy_connection_is_dropped_and_the_client_leaving_seen() -> None:
    """
    9 MiB pipelined while a hang is answered: dropped, and the client closing still cancels it.
    """

    async def main() -> tuple[int, str, str | None]:
        async with serving(config(fixed(faults=Faults(hang=1.0)))) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request_bytes("POST", CHAT, {"model": "m", "messages": PROMPT}))
            writer.write(b"x" * (9 * 1024 * 1024))  # more than a whole body
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.records)
            record = server.records[0]
        del reader
        return server.closed_early["flooded"], record.status, record.error_type

    flooded, status, error_type = asyncio.run(main())

    assert 1 == flooded
    assert ("timeout", "client_gone") == (status, error_type)


def test_watch_eof_keeps_at_most_a_head_and_one_read() -> None:
    """
    What a busy connection buffers of the client's next bytes stays under a head and a read.
    """

    async def main() -> tuple[int, bool]:
        reader = asyncio.StreamReader()
        for _ in range(64):
            reader.feed_data(b"y" * 64 * 1024)  # 4 MiB
        reader.feed_eof()
        conn = Connection(reader, None)  # type: ignore[arg-type] - only reads
        await conn.watch_eof()
        return conn.buffered, conn.flooded

    buffered, flooded = asyncio.run(main())

    assert flooded
    assert buffered <= MAX_HEAD_BYTES + 64 * 1024


# --- connections and time --------------------------------------------------------------------


def test_connections_over_the_cap_get_503_and_are_counted() -> None:
    """
    With max_connections 2, a third connection gets 503 at once; one closing makes room.
    """

    async def main() -> tuple[Reply, Reply, int]:
        async with serving(config(), limits=Limits(max_connections=2)) as server:
            held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
            await until(lambda: server.open_connections == 2)
            refused = await send(server.port, b"")
            _, writer = held.pop()
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.open_connections == 1)
            served = await chat(server.port)
            for _, writer in held:
                writer.close()
                await writer.wait_closed()
            return refused, served, server.closed_early["refused"]

    refused, served, count = asyncio.run(main())

    assert (503, "1") == (refused.status, refused.headers["retry-after"])
    assert "too_many_connections" == refused.json()["error"]["code"]
    assert 200 == served.status
    assert 1 == count


def test_idle_connections_close_at_the_idle_timeout() -> None:
    """
    Virtual time: silent, kept-alive and half-sent connections all end 30 s after they idle.
    """

    async def one(port: int, first: bytes, then: bytes) -> tuple[float, bytes]:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(first)
        start = loop.time()
        if first:
            await read_reply(reader)
            start = loop.time()
        writer.write(then)
        data = await reader.read()
        ended = loop.time() - start
        writer.close()
        await writer.wait_closed()
        return ended, data

    async def main() -> tuple[list[tuple[float, bytes]], collections.Counter[str], int]:
        body = {"model": "m", "messages": PROMPT}
        async with serving(config(fixed(0.0)), limits=Limits(idle_timeout_s=30.0)) as server:
            ends = [
                await one(server.port, b"", b""),
                await one(server.port, request_bytes("POST", CHAT, body), b""),
                await one(server.port, b"", b"POST /v1/chat/completions HTTP/1.1\r\n"),
            ]
            return ends, server.closed_early, len(server.records)

    ends, closed, records = run(main())

    assert [(30.0, b""), (30.0, b"")] == [(round(t, 6), d) for t, d in ends[:2]]
    assert 30.0 == round(ends[2][0], 6)
    assert 408 == parse(ends[2][1]).status
    assert collections.Counter({"idle": 2}) == closed
    assert 2 == records  # the answered one, and the half-sent chat request (408)


def test_a_client_that_reads_nothing_is_dropped_after_the_idle_timeout() -> None:
    """
    Virtual time: a stream to a client that never reads ends 30 s after the socket fills.
    """

    async def main() -> tuple[str, str | None, float]:
        cfg = config(fixed(0.0, output_tokens=50_000))
        async with serving(cfg, limits=Limits(idle_timeout_s=30.0)) as server:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
            _, writer = await asyncio.open_connection(sock=sock)
            body = {"model": "m", "messages": PROMPT, "stream": True, "max_tokens": 50_000}
            writer.write(request_bytes("POST", CHAT, body))
            await asyncio.sleep(120.0)  # reads nothing
            await until(lambda: server.records, timeout=math.inf)
            record = server.records[0]
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        assert record.censored_at_s is not None
        return record.status, record.error_type, record.censored_at_s

    status, error_type, cut_s = run(main())

    assert ("timeout", "client_gone") == (status, error_type)
    assert 30.0 <= cut_s < 31.0


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"idle_timeout_s": 0},
         "idle_timeout_s must be a number of seconds > 0 (inf: none), got 0"),
        ({"idle_timeout_s": math.nan}, "idle_timeout_s must be a number of seconds > 0"),
        ({"max_connections": 0}, "max_connections must be a whole number >= 1, got 0"),
        ({"keep_records": -1}, "keep_records must be a whole number >= 0, got -1"),
        ({"max_body_bytes": 1.5}, "max_body_bytes must be a whole number >= 1, got 1.5"),
    ],
)  # fmt: skip
def test_limits_refuse_bad_values(kwargs: dict[str, Any], message: str) -> None:
    """
    Each bound names itself and the value it got.
    """
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        Limits(**kwargs)


def test_serve_says_how_many_requests_and_early_closes_at_the_end() -> None:
    """
    The last line counts every request served (none kept) and the connections closed early.
    """
    server = Server(config(), limits=Limits(keep_records=0, max_connections=3))
    server.counts.update({"ok": 7, "error": 2})
    server.closed_early.update({"refused": 4, "idle": 1})

    assert (
        "stopped after 9 chat request(s); connections closed early: 4 over --max-connections 3, "
        "1 idle" == _stopped(server)
    )
    assert "stopped after 0 chat request(s)" == _stopped(Server(config()))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--idle-timeout", "0"], "Error: --idle-timeout must be a number of seconds > 0"),
        (["--max-connections", "0"], "Invalid value for '--max-connections'"),
        (["--max-body-mib", "0"], "Invalid value for '--max-body-mib'"),
    ],
)
def test_serve_refuses_bad_limits(option: list[str], message: str) -> None:
    """
    The connection limits are options of the command, checked before it listens.
    """
    profile = ROOT / "data_samples" / "serve_profile.yaml"

    result = CliRunner().invoke(app, ["serve", "--profile", str(profile), *option])

    assert result.exit_code != 0
    assert message in result.stderr


def test_a_profile_with_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """
    Merge-key aliases in a serve profile are bounded like a plan's: a clear error at once.
    """
    from tailkit.serve import load_profile

    lines = ["a: &a {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} {{<<: [" + ",".join([f"*{previous}"] * 9) + "]}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")

    with pytest.raises(ConfigError, match="aliases up to this"):
        load_profile(path)
