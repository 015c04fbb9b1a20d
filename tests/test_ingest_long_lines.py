"""
Lines too long to read are found in a streaming copy, numbered as the readers number records.
"""

from __future__ import annotations

import gzip

from pathlib import Path

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from tailkit.ingest import _long_lines
from tailkit.ingest._long_lines import copy_without_long_lines


def _expected(lines: list[bytes], limit: int) -> tuple[list[bytes], dict[int, int]]:
    """The copy's records and the long ones, computed the obvious way."""
    records, long, record = [], {}, 0
    for line in lines:
        if not line.strip(b" \t\r"):
            continue
        record += 1
        if len(line) > limit:
            long[record] = len(line)
        else:
            records.append(line)
    return records, long


_LINE = st.one_of(
    st.binary(max_size=12).filter(lambda b: b"\n" not in b),
    st.sampled_from([b"", b"  ", b"\r", b" " * 30, b"x" * 30, b"\t" * 9 + b"y"]),
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(_LINE, max_size=20), final_newline=st.booleans(), gz=st.booleans())
def test_the_copy_keeps_short_lines_and_numbers_long_ones(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], final_newline: bool, gz: bool
) -> None:
    """
    Short records are kept in order; long ones reported at their record, wherever chunks end.
    """
    tmp = tmp_path_factory.mktemp("long")
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    source = tmp / ("log.jsonl.gz" if gz else "log.jsonl")
    source.write_bytes(gzip.compress(data) if gz else data)
    out = tmp / "out"
    out.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_long_lines, "_CHUNK", 7)
        copy, long = copy_without_long_lines(source, out, limit=10)

    text = gzip.decompress(copy.read_bytes()) if gz else copy.read_bytes()
    records = [line for line in text.split(b"\n") if line.strip(b" \t\r")]
    want_records, want_long = _expected(lines, 10)
    assert want_long == long
    kept = [r for i, r in enumerate(records, 1) if i not in long]
    assert want_records == kept
    assert len(records) == len(want_records) + len(want_long)


def test_a_long_line_is_never_held_whole(tmp_path: Path) -> None:
    """
    A line many times the limit is measured while it streams past, not kept.
    """
    source = tmp_path / "log.jsonl"
    source.write_bytes(b'{"a": 1}\n' + b"z" * 5_000_000 + b"\n" + b'{"b": 2}\n')
    out = tmp_path / "out"
    out.mkdir()
    copy, long = copy_without_long_lines(source, out, limit=1000)
    assert {2: 5_000_000} == long
    assert copy.read_bytes().startswith(b'{"a": 1}\n"tailkit: a line of 5000000 bytes')
