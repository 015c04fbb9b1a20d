"""
Where a request ends, read strictly: its request line, its fields, its body's length.

A server and a proxy in front of it must agree on where one request ends and the next begins,
or a client can hide a request inside another's body (request smuggling). So every rule is the
letter of RFC 9112, never what Python's ``int`` happens to accept: a chunk size is hex digits
only (``0x3f``, ``+3f``, ``3_f``, ``-0``, `` 3f`` are refused), a ``Content-Length`` ASCII
digits only (not ``²`` or an Arabic-Indic digit), one of each at most, never both
``Transfer-Encoding`` and ``Content-Length``, and no control character in a line. What breaks
a rule is an `HttpError` (400, or 501 for a transfer coding this server lacks), never a
guess.
"""

from __future__ import annotations

import re

from dataclasses import dataclass


__all__ = [
    "Framing",
    "HttpError",
    "check_field_value",
    "check_target",
    "chunk_size",
    "framing",
    "http_version",
]

_HEX = re.compile(rb"([0-9A-Fa-f]+)([ \t]*;[^\x00-\x08\x0a-\x1f\x7f]*)?")
_DIGITS = re.compile(r"[0-9]+")
_VERSION = re.compile(r"HTTP/([0-9])\.([0-9])")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CTL, except HTAB
_TARGET = re.compile(r"[\x21-\x7e]+")  # visible ASCII: no space, control or 8-bit byte
_MAX_LENGTH_DIGITS = 20
_TOO_LARGE = 1 << 80  # what a length of more digits than that stands for: over any limit


class HttpError(Exception):
    """
    The request cannot be read; answer ``status`` with ``message`` and close the connection.

    Args:
        status: The HTTP status to answer.
        message: What was wrong, for the client and the log.
        error_type: The access log's ``error_type`` for a chat request.
        retry_after_s: Whole seconds for a ``Retry-After`` header (``None``: none).
        cut: The client closed its connection inside the request: it never arrived whole.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "bad_http_request",
        retry_after_s: int | None = None,
        cut: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.retry_after_s = retry_after_s
        self.cut = cut


def http_version(text: str) -> str:
    """
    ``text`` as an HTTP version this server speaks (``HTTP/1.1`` or ``HTTP/1.0``).

    Raises:
        HttpError: 400 if it is no HTTP version, 505 if one this server does not speak.
    """
    if not _VERSION.fullmatch(text):
        raise HttpError(400, f"malformed HTTP version {text[:20]!r}")
    if text not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"HTTP version {text!r} is not supported")
    return text


def check_target(text: str) -> None:
    """
    Refuse a request target with a control character, a space or a byte beyond ASCII.
    """
    if not _TARGET.fullmatch(text):
        raise HttpError(400, f"malformed request target {text[:80]!r}")


def check_field_value(name: str, value: str) -> None:
    """
    Refuse a field value holding a control character (a bare CR or LF, NUL, ESC …).
    """
    if _CONTROL.search(value):
        raise HttpError(400, f"the {name} header holds a control character")


@dataclass(frozen=True, slots=True)
class Framing:
    """
    How a request's body is delimited.

    Args:
        chunked: Chunked transfer coding (``length`` is ``None``).
        length: The ``Content-Length`` (0 without a body).
    """

    chunked: bool
    length: int | None


def framing(headers: dict[str, str], repeated: set[str], version: str) -> Framing:
    """
    How the body of a request with these ``headers`` ends.

    Args:
        headers: The fields, names lower-cased, repeated ones joined with ``", "``.
        repeated: The names that came more than once.
        version: ``HTTP/1.1`` or ``HTTP/1.0``.

    Raises:
        HttpError: 400 for any framing two readers could read differently (two lengths,
            a length and a coding, a length that is not ASCII digits, a coding list that does
            not end in ``chunked``, a coding in HTTP/1.0); 501 for a coding other than
            ``chunked`` before it.
    """
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if coding is not None and length is not None:
        raise HttpError(400, "both Transfer-Encoding and Content-Length")
    if coding is not None:
        if version == "HTTP/1.0":
            raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")
        codings = [c.strip(" \t").lower() for c in coding.split(",")]
        if codings[-1] != "chunked" or "" in codings or codings.count("chunked") > 1:
            raise HttpError(400, f"Transfer-Encoding {coding[:40]!r} does not end in chunked")
        if len(codings) > 1:
            raise HttpError(501, f"Transfer-Encoding {coding[:40]!r} is not supported")
        return Framing(chunked=True, length=None)
    if length is None:
        return Framing(chunked=False, length=0)
    if "content-length" in repeated:
        raise HttpError(400, "more than one Content-Length")
    if not _DIGITS.fullmatch(length):
        raise HttpError(400, f"Content-Length {length[:40]!r} is not a number")
    if len(length.lstrip("0")) > _MAX_LENGTH_DIGITS:
        return Framing(chunked=False, length=_TOO_LARGE)
    return Framing(chunked=False, length=int(length))


def chunk_size(line: bytes) -> int:
    """
    The size on a chunk's size line: hex digits, then perhaps ``;`` and extensions.

    Raises:
        HttpError: 400 for anything else (a sign, ``0x``, ``_``, a space before the digits).
    """
    match = _HEX.fullmatch(line)
    if match is None:
        shown = line[:20].decode("latin-1")
        raise HttpError(400, f"malformed chunk size {shown!r}")
    digits = match.group(1).lstrip(b"0") or b"0"
    if len(digits) > _MAX_LENGTH_DIGITS:
        return _TOO_LARGE
    return int(digits, 16)
