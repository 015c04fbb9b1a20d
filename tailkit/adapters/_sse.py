"""
Server-sent events, decoded from a body that arrives in arbitrary pieces (standard library).
"""

from __future__ import annotations

import codecs
import json
import re


DONE = "[DONE]"  # OpenAI's terminal data line
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # SSE line ends; not str.splitlines (splits on U+2028)


class SSEDecoder:
    r"""
    Server-sent events from network pieces: ``(event, data)`` for each event dispatched.

    Lines (and UTF-8 characters) may be split anywhere across pieces, and a CR LF line end
    between two of them. ``:`` comments (keep-alives) and ``id:`` / ``retry:`` fields are
    dropped: they are not chunks, so they cannot reset the executor's stall cutoff. An event
    is dispatched at a blank line, at the end of the stream if its data is whole, and when a
    new ``data:`` line follows data that is already a whole JSON value (servers that omit the
    blank lines).

    Example::

        sse = SSEDecoder()
        sse.feed(b'data: {"a"') + sse.feed(b": 1}\n\n")  # [("", '{"a": 1}')]
    """

    __slots__ = ("_data", "_decoder", "_event", "_rest")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""
        self._data: list[str] = []
        self._event = ""

    def feed(self, raw: bytes) -> list[tuple[str, str]]:
        """
        Events completed by this piece of the body.
        """
        text = self._rest + self._decoder.decode(raw)
        held = "\r" if text.endswith("\r") else ""  # maybe the first half of "\r\n"
        lines = _LINE_BREAK.split(text[: len(text) - len(held)])
        self._rest = lines.pop() + held
        return self._lines(lines)

    def close(self) -> list[tuple[str, str]]:
        """
        Events left at the end of the body.

        A last event without its blank line counts when its data is whole (``data: [DONE]``
        and a close); data cut off mid-value is dropped, so a cut stream reads as cut (no
        ``[DONE]``), not as garbage.
        """
        text, self._rest = self._rest + self._decoder.decode(b"", final=True), ""
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
                if self._data and self._whole():
                    events.extend(self._dispatch())
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events

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
        self._event, self._data = "", []
        return [(event, "\n".join(data))] if data else []
