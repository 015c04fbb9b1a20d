"""
Server-sent events, decoded from a body that arrives in arbitrary pieces (standard library).

Linear in the body: each piece is decoded and searched for line ends once, and the pieces of a
line that spans many network reads are kept in a list and joined once, at its end (re-joining
the unfinished line at every read made one 20 MB event cost seconds of CPU on the event loop).
A byte budget bounds the whole body, so also any one line or event.
"""

from __future__ import annotations

import codecs
import json
import re
import sys

from tailkit.executor import StreamTooLarge


DONE = "[DONE]"  # OpenAI's terminal data line
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # SSE line ends; not str.splitlines (splits on U+2028)


class SSEDecoder:
    r"""
    Server-sent events from network pieces: ``(event, data)`` for each event dispatched.

    Lines (and UTF-8 characters) may be split anywhere across pieces, and a CR LF line end
    between two of them. ``:`` comments (keep-alives) and ``id:`` / ``retry:`` fields are
    dropped: they are not chunks, so they cannot reset the executor's stall cutoff. An event
    is dispatched at a blank line, at the end of the stream if its data is whole, and when a
    new ``data:`` line follows a first data line that is already a whole JSON value (servers
    that omit the blank lines send one data line per event).

    Args:
        max_bytes: The body's byte budget: `feed` raises `StreamTooLarge` once more bytes
            than this have come (``None``: no budget). It bounds every line and event too.
        max_event_bytes: The most one line, or the data of one event, may hold (``None``:
            ``max_bytes``): a single event is parsed whole, and a JSON value weighs several
            times its text.
        where: The route and endpoint, for that error's message.

    Example::

        sse = SSEDecoder()
        sse.feed(b'data: {"a"') + sse.feed(b": 1}\n\n")  # [("", '{"a": 1}')]
    """

    __slots__ = ("_cr", "_data", "_data_chars", "_decoder", "_event", "_largest", "_left",
                 "_limit", "_rest", "_rest_chars", "_where")  # fmt: skip

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        max_event_bytes: int | None = None,
        where: str = "the stream",
    ) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest: list[str] = []  # the pieces of the line not yet ended
        self._cr = False  # the last piece ended in "\r": a "\n" starting the next is its pair
        self._data: list[str] = []
        self._rest_chars = self._data_chars = 0  # characters held in _rest, in _data
        self._event = ""
        self._limit = max_bytes
        self._left = sys.maxsize if max_bytes is None else max_bytes
        self._largest = max_event_bytes if max_event_bytes is not None else self._left
        self._where = where

    def feed(self, raw: bytes) -> list[tuple[str, str]]:
        """
        Events completed by this piece of the body.

        Raises:
            StreamTooLarge: The body has passed ``max_bytes``.
        """
        self._left -= len(raw)
        if self._left < 0:
            raise StreamTooLarge(self._where, limit=self._limit or 0, unit="bytes")
        text = self._decoder.decode(raw)
        if self._cr and text:
            self._cr = False
            if text[0] == "\n":
                text = text[1:]  # the second half of a "\r\n" split between two pieces
        if not text:
            return []
        self._cr = text.endswith("\r")  # a line end now; a "\n" next is not another one
        lines = _LINE_BREAK.split(text)  # only the new text is searched
        rest = lines.pop()
        if not lines:  # still inside one line
            self._rest.append(rest)
            self._rest_chars += len(rest)
            self._check()
            return []
        if self._rest:
            self._rest.append(lines[0])
            lines[0] = "".join(self._rest)  # the long line, joined once
        self._rest, self._rest_chars = [], 0
        events = self._lines(lines)
        if rest:
            self._rest, self._rest_chars = [rest], len(rest)
            self._check()
        return events

    def close(self) -> list[tuple[str, str]]:
        """
        Events left at the end of the body.

        A last event without its blank line counts when its data is whole (``data: [DONE]``
        and a close); data cut off mid-value is dropped, so a cut stream reads as cut (no
        ``[DONE]``), not as garbage.
        """
        text = self._decoder.decode(b"", final=True)
        if self._cr and text.startswith("\n"):
            text = text[1:]
        text, self._rest, self._rest_chars = "".join(self._rest) + text, [], 0
        events = self._lines(_LINE_BREAK.split(text) if text else [])
        if self._data and self._whole():
            events.extend(self._dispatch())
        return events

    def _lines(self, lines: list[str]) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        for line in lines:
            if not line:
                events.extend(self._dispatch())
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                # only a first data line is tried as a whole event: trying the data so far at
                # every new line would parse an event of many lines again and again
                if len(self._data) == 1 and self._whole():
                    events.extend(self._dispatch())
                self._data.append(value)
                self._data_chars += len(value)
                self._check()
            elif name == "event":
                self._event = value
        return events

    def _check(self) -> None:
        """
        Raise `StreamTooLarge` when the line not yet ended and the event's data hold too much.
        """
        if self._rest_chars + self._data_chars > self._largest:
            unit = "bytes in one event"
            raise StreamTooLarge(self._where, limit=self._largest, unit=unit)

    def _whole(self) -> bool:
        data = "\n".join(self._data)
        if data.strip() == DONE:
            return True
        try:
            json.loads(data)
        except ValueError:
            return False
        return True

    def _dispatch(self) -> list[tuple[str, str]]:
        event, data = self._event, self._data
        self._event, self._data, self._data_chars = "", [], 0
        return [(event, "\n".join(data))] if data else []
