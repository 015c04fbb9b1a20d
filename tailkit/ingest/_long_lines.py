"""
Lines too long to read: found in bounded memory, so that each is one reject.

DuckDB's JSON readers refuse a whole file for one line longer than they can hold (lines up to
`MAX_LINE` always fit; somewhat longer ones may, depending on the reader's buffers). When that
happens, ingest copies the file with each line over `MAX_LINE` replaced by a short
placeholder (in streaming fashion, never holding more than one allowed line), reads the copy
instead, and then names the placeholder rows ``line_too_long`` with the line's true length.
Records are numbered as the readers number them: blank lines (spaces, tabs, carriage returns
only) are not records.
"""

from __future__ import annotations

import gzip

from pathlib import Path
from typing import Protocol

from tailkit.formats.lowlevel import MAX_LINE


TOO_LONG = "line_too_long"
"""The reason of a line longer than `MAX_LINE`."""

_CHUNK = 1 << 20
_BLANK = b" \t\r"


def is_too_long_error(message: str) -> bool:
    """
    Whether a reader's error says a line was longer than it may hold.
    """
    return "maximum_object_size" in message or "max_line_size" in message


def too_long_detail(length: int) -> str:
    """
    The reject detail of a line of ``length`` bytes.
    """
    return (
        f"the line is {length:,} bytes, too long to read (lines up to {MAX_LINE // (1 << 20)} "
        "MiB always are)"
    )


class _Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


class _Copier:
    """
    Writes lines to the copy, counting records and replacing the long ones.
    """

    def __init__(self, out: _Writer, limit: int) -> None:
        self.out, self.limit = out, limit
        self.record = 0
        self.long: dict[int, int] = {}

    def lines(self, lines: list[bytes]) -> None:
        """
        Complete lines (without their newline), none longer than the limit.
        """
        self.record += sum(1 for line in lines if line.strip(_BLANK))
        self.out.write(b"\n".join(lines))
        self.out.write(b"\n")

    def long_line(self, length: int, *, blank: bool) -> None:
        """
        A complete line longer than the limit, which is not written.
        """
        if blank:  # not a record: the readers skip it
            self.out.write(b"\n")
            return
        self.record += 1
        self.long[self.record] = length
        self.out.write(f'"tailkit: a line of {length} bytes, not read"\n'.encode())


def copy_without_long_lines(
    path: Path, out_dir: Path, limit: int = MAX_LINE
) -> tuple[Path, dict[int, int]]:
    """
    Copy ``path`` (gzip or not) into ``out_dir`` with every line over ``limit`` bytes replaced.

    Memory stays within about ``limit`` plus one read chunk, however long a line is.

    Returns:
        The copy (gzip when the file is, same name) and record number → length of each line
        replaced.

    Raises:
        OSError: The file cannot be read (or is not the gzip its name says).
        EOFError: A gzip file is cut short.
    """
    gz = path.name.lower().endswith(".gz")  # as DuckDB's readers decide
    copy = out_dir / path.name
    opener = gzip.open if gz else open
    with (
        opener(path, "rb") as src,
        gzip.open(copy, "wb", compresslevel=1) if gz else copy.open("wb") as out,
    ):
        copier = _Copier(out, limit)
        pending = b""
        long_length, long_blank = -1, True  # -1: not inside a long line
        while chunk := src.read(_CHUNK):
            if long_length >= 0:
                end = chunk.find(b"\n")
                part = chunk if end < 0 else chunk[:end]
                long_length += len(part)
                long_blank = long_blank and not part.strip(_BLANK)
                if end < 0:
                    continue
                copier.long_line(long_length, blank=long_blank)
                long_length, chunk = -1, chunk[end + 1 :]
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if any(len(line) > limit for line in lines):
                for line in lines:
                    if len(line) > limit:
                        copier.long_line(len(line), blank=not line.strip(_BLANK))
                    else:
                        copier.lines([line])
            elif lines:
                copier.lines(lines)
            if len(pending) > limit:
                long_length, long_blank = len(pending), not pending.strip(_BLANK)
                pending = b""
        if long_length >= 0:
            copier.long_line(long_length, blank=long_blank)
        elif pending:
            copier.lines([pending])
    return copy, copier.long
