"""
The top-level column names of a Parquet file, read from its footer without pyarrow.

Detection only needs the names (to tell a Langfuse export from a plain log), and importing
pyarrow to get them costs every ``tailkit ingest`` of a Parquet file a quarter of a second. The
footer is a Thrift compact-protocol ``FileMetaData`` whose second field is the schema: a
depth-first list of elements, the first being the root, each naming its number of children.
Only that list is decoded; everything else is skipped by type.
"""

from __future__ import annotations

import struct

from pathlib import Path


_MAGIC = b"PAR1"
_MAX_FOOTER_BYTES = 64 * 1024 * 1024  # beyond this the file is not one detection should read

# Thrift compact-protocol type codes.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12


class _Reader:
    """
    A cursor over a Thrift compact-protocol buffer.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        out = self.data[self.pos : self.pos + n]
        if len(out) != n:
            raise IndexError(n)
        self.pos += n
        return out

    def field(self, last_id: int) -> tuple[int, int]:
        """
        The next field's ``(id, type)``; type 0 is the end of the struct.
        """
        head = self.byte()
        kind = head & 0x0F
        if kind == 0:
            return 0, 0
        delta = head >> 4
        return (last_id + delta if delta else self.zigzag()), kind

    def list_header(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        return self._count(self.varint() if size == 15 else size), head & 0x0F

    def _count(self, n: int) -> int:
        # Every element takes a byte at least: a larger count is garbage, not a long loop.
        if n > len(self.data) - self.pos:
            raise ValueError(n)
        return n

    def advance(self, n: int) -> None:
        self.pos += n
        if self.pos > len(self.data):
            raise IndexError(self.pos)

    def skip(self, kind: int) -> None:
        if kind in (_LIST, _SET):
            size, elem = self.list_header()
            for _ in range(size):
                self._skip_element(elem)
        elif kind == _MAP:
            size = self._count(self.varint())
            types = self.byte() if size else 0
            for _ in range(size):
                self._skip_element(types >> 4)
                self._skip_element(types & 0x0F)
        elif kind == _STRUCT:
            last = 0
            while True:
                last, sub = self.field(last)
                if sub == 0:
                    return
                self.skip(sub)
        else:
            self._skip_scalar(kind)

    def _skip_scalar(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return  # a struct field's boolean lives in its type code
        if kind == _BYTE:
            self.advance(1)
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.advance(8)
        elif kind == _BINARY:
            self.binary()
        else:
            raise ValueError(kind)

    def _skip_element(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            self.advance(1)  # in a collection a boolean takes a byte
        else:
            self.skip(kind)


def _schema_element(r: _Reader) -> tuple[str, int]:
    """
    One ``SchemaElement``'s name (field 4) and number of children (field 5, 0 when absent).
    """
    name, children, last = "", 0, 0
    while True:
        last, kind = r.field(last)
        if kind == 0:
            return name, children
        if last == 4 and kind == _BINARY:
            name = r.binary().decode("utf-8", errors="replace")
        elif last == 5 and kind == _I32:
            children = r.zigzag()
        else:
            r.skip(kind)


def _top_level(elements: list[tuple[str, int]]) -> list[str]:
    """
    The names of the root's children in a depth-first schema list.
    """
    names: list[str] = []
    pos = 1

    def past(i: int) -> int:
        # The index after element i and all its descendants.
        n = elements[i][1]
        i += 1
        for _ in range(n):
            i = past(i)
        return i

    for _ in range(elements[0][1]):
        names.append(elements[pos][0])
        pos = past(pos)
    return names


def parquet_columns(path: Path) -> list[str]:
    """
    The top-level column names of a Parquet file, as pyarrow's ``read_schema(path).names``.

    Returns:
        The names; empty when the footer cannot be read (encrypted, truncated, not Parquet),
        which leaves it to the Parquet reader to say what is wrong.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            if size < 12:
                return []
            fh.seek(size - 8)
            tail = fh.read(8)
            length = struct.unpack("<I", tail[:4])[0]
            if tail[4:] != _MAGIC or not 0 < length <= min(size - 12, _MAX_FOOTER_BYTES):
                return []
            fh.seek(size - 8 - length)
            footer = fh.read(length)
        r, last = _Reader(footer), 0
        while True:
            last, kind = r.field(last)
            if kind == 0:
                return []
            if last == 2 and kind == _LIST:
                count, _ = r.list_header()
                elements = [_schema_element(r) for _ in range(count)]
                return _top_level(elements) if elements else []
            r.skip(kind)
    except (OSError, IndexError, ValueError, RecursionError, struct.error):
        return []
