"""
Just enough HTTP/1.1 for an OpenAI-compatible server: requests in, JSON and SSE out.

One `Connection` per socket reads requests one after another (keep-alive), bodies by
``Content-Length`` or chunked transfer coding, with limits on every part. While the server
works on a request, `Connection.watch_eof` keeps reading so that a client that closes its
socket is noticed at once; bytes it reads (a pipelined next request) wait in the buffer.
Anything malformed raises `HttpError` with the status to answer (the rules are
`tailkit.serve._framing`'s): the server never crashes on what a client sends.

What one connection holds is bounded whatever the client does: the buffer holds at most one
request (a head of `MAX_HEAD_BYTES`, a body of ``max_body_bytes``) and one read more; while a
request is answered, at most one head's worth of what comes next (beyond it the connection is
*flooded*: the rest is read and dropped, so that the client leaving is still noticed, and the
connection closes after the answer). Bodies also draw on one budget shared by all
connections (`BodyBudget`): a body it cannot take now answers 503 before it is read. A whole
request must arrive within ``idle_timeout_s`` of the previous answer (or of connecting), and a
client must take what is written to it within as long: a connection cannot be held open by
sending nothing, or a byte at a time, or by reading nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import math
import re
import socket
import struct

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailkit.serve._framing import (
    HttpError,
    check_field_value,
    check_target,
    chunk_size,
    framing,
    http_version,
)


if TYPE_CHECKING:
    from tailkit.serve._limits import BodyBudget


__all__ = [
    "ClientGone",
    "Connection",
    "HttpError",
    "IdleTimeout",
    "Request",
    "json_response",
    "response_head",
]

MAX_HEAD_BYTES = 64 * 1024  # request line and headers
MAX_HEADERS = 100
MAX_BODY_BYTES = 8 * 1024 * 1024  # the default limit of a request body
_READ = 64 * 1024
_CHUNK_LINE = 1024  # a chunk's size line, extensions included
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: method and header names


class IdleTimeout(Exception):  # noqa: N818 - an event, not a failure of ours
    """
    No byte of a next request arrived within the idle timeout: close the connection quietly.
    """


class ClientGone(ConnectionError):  # noqa: N818 - an event, not a failure of ours
    """
    The client closed its connection (read EOF) or a write to it failed.
    """


@dataclass(slots=True)
class Request:
    """
    One HTTP request.

    Args:
        method: ``GET``, ``POST``, …
        path: The target without its query string.
        version: ``HTTP/1.1`` or ``HTTP/1.0``.
        headers: Names lower-cased; repeated headers joined with ``", "``.
        body: The decoded body (chunked transfer coding removed).
    """

    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        """
        Whether the client lets the connection stay open after the response.
        """
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


class Connection:
    """
    A client socket: read requests, write responses, notice the client leaving.

    Args:
        reader: The connection's stream reader.
        writer: The connection's stream writer.
        max_body_bytes: The largest request body read (a larger one answers 413).
        idle_timeout_s: Real seconds a whole request may take to arrive, counted from the
            previous answer or the connection (``math.inf``: no limit); also how long a write
            may wait for the client to read.
        budget: The bytes of bodies all connections may hold at once (``None``: no bound
            beyond ``max_body_bytes``); a body it cannot take now answers 503.
        check_head: Called with a request's headers once they are read, before its body
            (e.g. to refuse a Host): raises `HttpError` to refuse the request.

    Attributes:
        target: The method and path of the request being read, once its request line is.
        headers: Its headers, once read whole (``{}`` before).
        flooded: More than a head's worth arrived while a request was answered: the rest
            was dropped and the connection takes no further request.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        idle_timeout_s: float = math.inf,
        budget: BodyBudget | None = None,
        check_head: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.eof = False
        self.flooded = False
        self.target: tuple[str, str] | None = None
        self.headers: dict[str, str] = {}
        self.max_body_bytes = max_body_bytes
        self._idle_s = None if math.isinf(idle_timeout_s) else idle_timeout_s
        self._buffer = bytearray()
        self._began = False  # a byte of the request being read has arrived
        self._budget = budget
        self._check_head = check_head
        self._held = 0  # bytes of the budget the request being read or answered holds

    @property
    def buffered(self) -> int:
        """
        Bytes read from the client and not yet taken as part of a request.
        """
        return len(self._buffer)

    async def _fill(self) -> bool:
        """
        Read more bytes into the buffer; ``False`` at EOF.
        """
        if self.eof:
            return False
        try:
            data = await self.reader.read(_READ)
        except ConnectionError:
            data = b""
        if not data:
            self.eof = True
            return False
        if not self.flooded:  # a flooded connection only waits for EOF
            self._buffer += data
        return True

    async def _line(self, limit: int, what: str) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > limit:
                raise HttpError(431 if what == "header" else 400, f"{what} line is too long")
            if not await self._fill():
                raise HttpError(400, f"the connection closed inside the {what}", cut=True)
        if end > limit:
            raise HttpError(431 if what == "header" else 400, f"{what} line is too long")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    async def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not await self._fill():
                raise HttpError(400, "the connection closed inside the body", cut=True)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def read_request(self) -> Request | None:
        """
        The next request, or ``None`` when the client closed the connection between requests.

        Raises:
            HttpError: The request is malformed, too large, uses what this server lacks, or
                did not arrive whole within the idle timeout (408).
            IdleTimeout: No byte of it arrived within the idle timeout.
        """
        self.release()
        self.target, self.headers, self._began = None, {}, False
        if self.flooded:
            return None
        try:
            async with asyncio.timeout(self._idle_s):
                return await self._read_request()
        except TimeoutError:
            if not self._began:
                raise IdleTimeout from None
            msg = f"the request did not arrive whole within {self._idle_s:g} s"
            raise HttpError(408, msg) from None

    async def _read_request(self) -> Request | None:
        while not self._buffer:
            if not await self._fill():
                return None
        self._began = True
        line = (await self._line(MAX_HEAD_BYTES, "request")).decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
            raise HttpError(400, f"malformed request line {line[:80]!r}")
        method, target, version = parts
        path = target.split("?", 1)[0]
        self.target = (method, path)  # known from here: a refusal on a chat route is logged
        check_target(target)
        version = http_version(version)
        repeated: set[str] = set()
        headers = self.headers = await self._headers(repeated)
        body = await self._body(headers, repeated, version)
        return Request(method, path, version, headers, body)

    async def _headers(self, repeated: set[str]) -> dict[str, str]:
        headers: dict[str, str] = {}
        size = 0
        for _ in range(MAX_HEADERS + 1):
            raw = await self._line(MAX_HEAD_BYTES, "header")
            size += len(raw) + 2
            if not raw:
                return headers
            if size > MAX_HEAD_BYTES:
                raise HttpError(431, "request headers are too large")
            name, colon, value = raw.decode("latin-1").partition(":")
            if not colon or not _TOKEN.fullmatch(name):
                raise HttpError(400, f"malformed header line {raw[:80]!r}")
            key, text = name.lower(), value.strip(" \t")
            check_field_value(name, text)
            if key in headers:
                repeated.add(key)
                headers[key] = f"{headers[key]}, {text}"
            else:
                headers[key] = text
        raise HttpError(431, f"more than {MAX_HEADERS} headers")

    async def _body(self, headers: dict[str, str], repeated: set[str], version: str) -> bytes:
        frame = framing(headers, repeated, version)
        if frame.length is not None and frame.length > self.max_body_bytes:
            raise HttpError(413, f"the body is larger than {self.max_body_bytes} bytes")
        if version == "HTTP/1.1" and "host" not in headers:
            raise HttpError(400, "an HTTP/1.1 request without a Host header")
        if "host" in repeated:
            raise HttpError(400, "more than one Host header")
        if self._check_head is not None:
            self._check_head(headers)
        # The interim 100 Continue only once the body is known to be acceptable: a client
        # that waits for it must get the refusal instead, and need not send the body at all.
        go_on = headers.get("expect", "").lower() == "100-continue"
        if frame.chunked:
            if go_on:
                await self.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            return await self._chunked()
        size = frame.length or 0
        self._hold(size)
        if go_on and size > len(self._buffer):
            await self.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        return await self._exactly(size)

    async def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            size = chunk_size(await self._line(_CHUNK_LINE, "chunk size"))
            if len(body) + size > self.max_body_bytes:
                raise HttpError(413, f"the body is larger than {self.max_body_bytes} bytes")
            if size == 0:
                await self._trailers()
                return bytes(body)
            self._hold(size)
            body += await self._exactly(size)
            if await self._exactly(2) != b"\r\n":
                raise HttpError(400, "a chunk does not end with CRLF")

    async def _trailers(self) -> None:
        """
        Read the trailer fields after the last chunk (checked as headers are, then dropped).
        """
        size = 0
        while raw := await self._line(MAX_HEAD_BYTES, "trailer"):
            size += len(raw) + 2
            if size > MAX_HEAD_BYTES:
                raise HttpError(431, "request trailers are too large")
            name, colon, value = raw.decode("latin-1").partition(":")
            if not colon or not _TOKEN.fullmatch(name):
                raise HttpError(400, f"malformed trailer line {raw[:80]!r}")
            check_field_value(name, value.strip(" \t"))

    def _hold(self, size: int) -> None:
        """
        Take ``size`` more bytes of the shared body budget for this request, or refuse it.

        Raises:
            HttpError: 413 if the body can never fit the budget, 503 if it cannot now.
        """
        if self._budget is None or size == 0:
            return
        total = self._held + size
        if total > self._budget.total_bytes:
            budget = self._budget.total_bytes
            msg = f"the body is larger than the server's body budget ({budget} bytes)"
            raise HttpError(413, msg)
        if not self._budget.take(size):
            msg = (
                f"the server holds {self._budget.total_bytes} bytes of request bodies "
                "already; try again later"
            )
            raise HttpError(503, msg, error_type="body_budget_exceeded", retry_after_s=1)
        self._held = total

    def release(self) -> None:
        """
        Give back what the last request's body held of the shared budget.
        """
        if self._budget is not None and self._held:
            self._budget.give(self._held)
        self._held = 0

    async def watch_eof(self) -> None:
        """
        Return when the client closes the connection; keep what it sends meanwhile (one head).

        Beyond one head's worth the connection is flooded: what arrives is dropped, and the
        connection takes no further request, but the client closing it is still noticed.
        """
        while await self._fill():
            if len(self._buffer) > MAX_HEAD_BYTES and not self.flooded:
                self.flooded = True
                self._buffer.clear()

    async def send(self, data: bytes) -> None:
        """
        Write ``data`` and wait until the socket takes it.

        Raises:
            ClientGone: The connection is closed or the write failed.
        """
        if self.writer.transport.is_closing():
            msg = "the connection is closed"
            raise ClientGone(msg)
        try:
            self.writer.write(data)
            async with asyncio.timeout(self._idle_s):
                await self.writer.drain()
        except TimeoutError:
            msg = f"the client read nothing for {self._idle_s:g} s"
            raise ClientGone(msg) from None
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone(str(exc) or type(exc).__name__) from exc

    def reset(self) -> None:
        """
        Drop the connection with a TCP reset: no response, no orderly close.
        """
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # already gone: abort() closes what is left
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def close(self, *, abort: bool = False) -> None:
        """
        Close the connection: orderly (flush what is written), or at once with ``abort``.
        """
        if abort:
            self.writer.transport.abort()
        else:
            self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)
        except (TimeoutError, OSError):
            self.writer.transport.abort()  # a client that does not read: drop its buffer


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """
    The status line and headers of a response, ending with the blank line.
    """
    phrase = http.HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}", "Server: tailkit-serve"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_response(
    status: int,
    payload: Any,
    *,
    keep_alive: bool,
    headers: list[tuple[str, str]] | None = None,
    raw: bytes | None = None,
) -> bytes:
    """
    A whole JSON response with its ``Content-Length``.

    Args:
        status: The HTTP status.
        payload: What to encode as the body (ignored when ``raw`` is given).
        keep_alive: Whether the connection stays open afterwards.
        headers: More headers, e.g. ``Retry-After``.
        raw: A body to send as it is (garbage, for fault injection).
    """
    body = raw if raw is not None else json.dumps(payload, separators=(",", ":")).encode()
    head = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Connection", "keep-alive" if keep_alive else "close"),
        *(headers or []),
    ]
    return response_head(status, head) + body
