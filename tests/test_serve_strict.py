"""
`tailkit serve` reads HTTP to the letter and answers only the names it is reached by.

Framing a proxy could read differently (a chunk size Python's ``int`` accepts, a second
``Content-Length``) is a 400 with one access-log line; a ``Host`` or ``Origin`` that is not a
loopback name, the bound address or an allowed name (DNS rebinding) is a 403.
"""

from __future__ import annotations

import asyncio
import json
import logging

from pathlib import Path
from typing import Any

import pytest

from tailkit.serve import Limits, _server
from tailkit.serve._hosts import is_loopback

from .test_serve import CHAT, PROMPT, Reply, config, send, serving, until


BODY = json.dumps({"model": "m", "messages": PROMPT, "max_tokens": 2}).encode()


def _head(*fields: str, version: str = "HTTP/1.1", target: str = CHAT) -> bytes:
    lines = [f"POST {target} {version}", *fields, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _chunked(size: bytes, *, end: bytes = b"0") -> bytes:
    """
    A chunked chat request whose one chunk has the size line ``size`` (its data is BODY).
    """
    head = _head("Host: 127.0.0.1", "Transfer-Encoding: chunked")
    return head + size + b"\r\n" + BODY + b"\r\n" + end + b"\r\n\r\n"


def _length(value: bytes, *more: bytes) -> bytes:
    head = _head("Host: 127.0.0.1").removesuffix(b"\r\n")
    fields = b"".join(b"Content-Length: " + v + b"\r\n" for v in (value, *more))
    return head + fields + b"\r\n" + BODY


SIZE = b"%x" % len(BODY)
assert len(SIZE) == 2  # the cases below spell a two-digit size
MALFORMED = {
    # chunk sizes Python's int(x, 16) reads, a proxy not
    "0x-prefix": _chunked(b"0x" + SIZE),
    "plus-sign": _chunked(b"+" + SIZE),
    "underscore": _chunked(SIZE[:1] + b"_" + SIZE[1:]),
    "leading-space": _chunked(b" " + SIZE),
    "trailing-space": _chunked(SIZE + b" "),
    "minus-zero-end": _chunked(SIZE, end=b"-0"),
    "nul-in-size": _chunked(SIZE + b"\x00"),
    "empty-size": _chunked(b""),
    # lengths
    "superscript-digit": _length(b"\xb2"),
    "arabic-indic-digit": _length("\u0661".encode()),
    "plus-length": _length(b"+%d" % len(BODY)),
    "hex-length": _length(b"0x%x" % len(BODY)),
    "underscore-length": _length(b"%d" % len(BODY) + b"_0"),
    "two-equal-lengths": _length(b"%d" % len(BODY), b"%d" % len(BODY)),
    "two-lengths": _length(b"%d" % len(BODY), b"1"),
    "length-list": _length(b"%d, %d" % (len(BODY), len(BODY))),
    # codings
    "coding-and-length": _head(
        "Host: 127.0.0.1", "Transfer-Encoding: chunked", f"Content-Length: {len(BODY)}"
    )
    + BODY,
    "chunked-twice": _head("Host: 127.0.0.1", "Transfer-Encoding: chunked, chunked")
    + SIZE + b"\r\n" + BODY + b"\r\n0\r\n\r\n",
    "coding-not-last": _head("Host: 127.0.0.1", "Transfer-Encoding: chunked, gzip")
    + SIZE + b"\r\n" + BODY + b"\r\n0\r\n\r\n",
    "coding-in-http-1.0": _head(
        "Host: 127.0.0.1", "Transfer-Encoding: chunked", version="HTTP/1.0"
    )
    + SIZE + b"\r\n" + BODY + b"\r\n0\r\n\r\n",
    "bad-trailer": _chunked(SIZE, end=b"0\r\nno colon"),
    # the head
    "no-host": _head(f"Content-Length: {len(BODY)}") + BODY,
    "two-hosts": _head("Host: 127.0.0.1", "Host: localhost", f"Content-Length: {len(BODY)}")
    + BODY,
    "nul-in-header": _head("Host: 127.0.0.1", "X-A: a\x00b", f"Content-Length: {len(BODY)}")
    + BODY,
    "bare-cr-in-header": _head(
        "Host: 127.0.0.1", "X-A: a\rb", f"Content-Length: {len(BODY)}"
    )
    + BODY,
    "not-a-version": _head("Host: 127.0.0.1", f"Content-Length: {len(BODY)}", version="HTXP/1.1")
    + BODY,
    "escape-in-target": _head(
        "Host: 127.0.0.1", f"Content-Length: {len(BODY)}", target=CHAT + "?a=\x1b"
    )
    + BODY,
}  # fmt: skip


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_framing_answers_400_with_one_log_line(tmp_path: Path, data: bytes) -> None:
    """
    Framing read loosely before (or a 500): 400, a bad_http_request body and one log line.
    """
    log = tmp_path / "access.jsonl"

    async def main() -> Reply:
        async with serving(config(), access_log=log) as server:
            return await send(server.port, data)

    reply = asyncio.run(main())
    lines = log_lines(log)

    assert 400 == reply.status
    assert "bad_http_request" == reply.json()["error"]["code"]
    assert [("error", "bad_http_request", 400)] == [
        (line["status"], line["error_type"], line["http_status"]) for line in lines
    ]


WELL_FORMED = {
    "upper-case": _chunked(SIZE.upper()),
    "leading-zeros": _chunked(b"000" + SIZE),
    "extension": _chunked(SIZE + b";name=value"),
    "extension-after-space": _chunked(SIZE + b" ;name"),
    "trailer": _chunked(SIZE, end=b"0\r\nX-Checksum: 1"),
    "http-1.0-without-host": _head(f"Content-Length: {len(BODY)}", version="HTTP/1.0") + BODY,
    "leading-zeros-length": _length(b"000%d" % len(BODY)),
}


@pytest.mark.parametrize("data", list(WELL_FORMED.values()), ids=list(WELL_FORMED))
def test_well_formed_requests_the_rules_allow_are_answered(data: bytes) -> None:
    """
    What RFC 9112 allows (extensions, trailers, upper-case hex, leading zeros) is read.
    """

    async def main() -> Reply:
        async with serving(config()) as server:
            return await send(server.port, data)

    reply = asyncio.run(main())

    assert 200 == reply.status, reply.body


# --- Host and Origin ------------------------------------------------------------------------


def _with(*fields: str) -> bytes:
    return _head(*fields, f"Content-Length: {len(BODY)}") + BODY


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        (["Host: 127.0.0.1:8000"], 200),
        (["Host: localhost"], 200),
        (["Host: LOCALHOST.:1"], 200),
        (["Host: app.localhost"], 200),
        (["Host: [::1]:8000"], 200),
        (["Host: 127.0.0.1", "Origin: http://localhost:3000"], 200),
        (["Host: evil.example"], 403),
        (["Host: evil.example:8000"], 403),
        (["Host: 127.0.0.1.evil.example"], 403),
        (["Host: localhost.evil.example"], 403),
        (["Host: 10.1.2.3"], 403),
        (["Host: 127.0.0.1", "Origin: http://evil.example"], 403),
        (["Host: 127.0.0.1", "Origin: https://evil.example:443"], 403),
        (["Host: 127.0.0.1", "Origin: null"], 403),
        (["Host: 127.0.0.1", "Origin: file://"], 403),
        (["Host: a b"], 400),
        (["Host: user@127.0.0.1"], 400),
    ],
)
def test_host_and_origin_must_name_the_server(
    tmp_path: Path, fields: list[str], status: int
) -> None:
    """
    DNS rebinding: a Host or Origin that is no loopback name nor the bound address is 403.
    """
    log = tmp_path / "access.jsonl"

    async def main() -> Reply:
        async with serving(config(), access_log=log) as server:
            return await send(server.port, _with(*fields))

    reply = asyncio.run(main())
    (line,) = log_lines(log)

    assert status == reply.status, reply.body
    assert status == line["http_status"]
    if status == 403:
        assert ("host_not_allowed", "host_not_allowed") == (
            reply.json()["error"]["code"], line["error_type"]
        )  # fmt: skip
        assert "--allow-host" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("allowed", "fields"),
    [
        (["evil.example"], ["Host: EVIL.example:8000", "Origin: http://evil.example"]),
        (["*"], ["Host: anything.example", "Origin: https://other.example"]),
    ],
)
def test_allowed_hosts_are_answered(allowed: list[str], fields: list[str]) -> None:
    """
    ``allowed_hosts`` names more hosts; ``"*"`` answers any.
    """

    async def main() -> Reply:
        async with serving(config(), allowed_hosts=allowed) as server:
            return await send(server.port, _with(*fields))

    assert 200 == asyncio.run(main()).status


def test_a_refused_host_is_refused_before_its_body_is_read() -> None:
    """
    ``Expect: 100-continue`` from a refused Host gets 403, never 100 Continue.
    """
    head = _head("Host: evil.example", "Expect: 100-continue", "Content-Length: 1000000")

    async def main() -> bytes:
        async with serving(config()) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head)
            data = await asyncio.wait_for(reader.read(), 10.0)
            writer.close()
            await writer.wait_closed()
        return data

    data = asyncio.run(main())

    assert data.startswith(b"HTTP/1.1 403 ")
    assert b"100 Continue" not in data


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),  # noqa: S104 - a value checked, not a bind
        ("::", False),
        ("", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_which_binds_are_loopback(host: str, loopback: bool) -> None:
    """
    Every interface, a LAN address or a name is not loopback; 127/8, ::1, localhost are.
    """
    assert loopback == is_loopback(host)


def test_a_bind_beyond_loopback_is_warned_of(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """
    Listening on an address that is not loopback logs a warning naming it (127.0.0.1 does not).
    """

    async def start_stop() -> None:
        async with serving(config()):
            pass

    caplog.set_level(logging.WARNING, "tailkit.serve")
    asyncio.run(start_stop())
    quiet = [r.getMessage() for r in caplog.records]
    monkeypatch.setattr(_server, "is_loopback", lambda host: False)
    asyncio.run(start_stop())
    warned = [r.getMessage() for r in caplog.records]

    assert [] == [m for m in quiet if "not loopback" in m]
    assert 1 == len([m for m in warned if "listening on 127.0.0.1, not loopback" in m])


# --- the body budget ------------------------------------------------------------------------


def _filler(size: int) -> bytes:
    return _head("Host: 127.0.0.1", f"Content-Length: {size}") + b"x" * size


def test_bodies_beyond_the_shared_budget_answer_503_and_are_logged(tmp_path: Path) -> None:
    """
    One body holds most of the budget: another is 503 (Retry-After) and logged; after, 200.
    """
    log = tmp_path / "access.jsonl"
    limits = Limits(max_body_bytes=4000, body_budget_bytes=1500)
    big = _head("Host: 127.0.0.1", "Expect: 100-continue", "Content-Length: 1000")
    small = _with("Host: 127.0.0.1")

    async def main() -> tuple[Reply, Reply, Reply, Reply]:
        async with serving(config(), access_log=log, limits=limits) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(big)
            # 100 Continue comes once the 1,000 bytes are held
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            over = await send(server.port, _filler(600))
            fits = await send(server.port, small)
            writer.close()
            await writer.wait_closed()
            await until(lambda: server.open_connections == 0)
            never = await send(server.port, _filler(2000))
            after = await send(server.port, small)
        assert interim.startswith(b"HTTP/1.1 100 ")
        return over, fits, never, after

    over, fits, never, after = asyncio.run(main())
    lines = [(line["http_status"], line["error_type"]) for line in log_lines(log)]

    assert (503, "1") == (over.status, over.headers["retry-after"])
    assert "body_budget_exceeded" == over.json()["error"]["code"]
    assert 200 == fits.status  # a small body still fits what is left
    assert 413 == never.status  # larger than the whole budget: never fits
    assert 200 == after.status  # the first body's hold was given back
    assert [(503, "body_budget_exceeded"), (200, None), (413, "bad_http_request"),
            (200, None)] == lines  # fmt: skip


def test_a_chunked_body_draws_on_the_budget_and_gives_it_back() -> None:
    """
    Chunks count as they come; after many chunked requests the whole budget is free again.
    """
    limits = Limits(body_budget_bytes=len(BODY) + 10)
    half = len(BODY) // 2
    chunked = _head("Host: 127.0.0.1", "Transfer-Encoding: chunked") + b"".join(
        b"%x\r\n%s\r\n" % (len(part), part) for part in (BODY[:half], BODY[half:])
    ) + b"0\r\n\r\n"  # fmt: skip
    too_big = _head("Host: 127.0.0.1", "Transfer-Encoding: chunked") + b"".join(
        b"%x\r\n%s\r\n" % (len(part), part) for part in (BODY, b"0123456789ab")
    ) + b"0\r\n\r\n"  # fmt: skip

    async def main() -> list[int]:
        async with serving(config(), limits=limits) as server:
            statuses = [(await send(server.port, chunked)).status for _ in range(20)]
            statuses.append((await send(server.port, too_big)).status)
            statuses.append((await send(server.port, chunked)).status)
        return statuses

    assert [200] * 20 + [413, 200] == asyncio.run(main())
