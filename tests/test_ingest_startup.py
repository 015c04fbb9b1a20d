"""
Ingest start-up: no pyarrow import, and Parquet column names read from the footer.

Names come out exactly as pyarrow reads them; a broken footer gives none, never an error.
"""

from __future__ import annotations

import subprocess
import sys

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailkit.formats import detect_format
from tailkit.formats._parquet_footer import parquet_columns
from tailkit.formats.lowlevel import read_head


_TABLES = {
    "flat": pa.table({"call_id": ["a"], "total_s": [1.5]}),
    "nested": pa.table({
        "s": [{"x": 1, "y": {"z": [1, 2]}}],
        "l": [[{"q": 1}]],
        "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        "after": [True],
    }),
    "wide": pa.table({f"c{i}": [i] for i in range(40)}),
    "typed": pa.table({
        "é名": [1.5],
        "ts": pa.array([1], pa.timestamp("us", tz="UTC")),
        "dec": pa.array([1], pa.decimal128(10, 2)),
    }),
    "empty": pa.table({"a": pa.array([], pa.int64())}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_TABLES))
def test_footer_names_are_pyarrows(tmp_path: Path, name: str) -> None:
    """The footer reader gives pyarrow's top-level names: nested, wide, unicode, empty."""
    path = tmp_path / f"{name}.parquet"
    pq.write_table(_TABLES[name], path, row_group_size=1)

    assert parquet_columns(path) == pq.read_schema(path).names


def test_footer_names_of_a_duckdb_file(tmp_path: Path) -> None:
    """A file DuckDB wrote (another writer, other optional fields) reads the same."""
    import duckdb

    path = tmp_path / "duck.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS a, {{'b': [1, 2]}} AS s, 'x' AS c) TO '{path}' (FORMAT parquet)")

    assert parquet_columns(path) == ["a", "s", "c"] == pq.read_schema(path).names


@pytest.mark.parametrize(
    "tail",
    [b"", b"\x00\x00\x00\x00PAR1", b"\xff\xff\xff\x7fPAR1", b"\x20\x00\x00\x00PARE"],
)
def test_unreadable_footer_gives_no_names(tmp_path: Path, tail: bytes) -> None:
    """A truncated, oversized, zero-length or encrypted footer gives no names, never an error."""
    path = tmp_path / "broken.parquet"
    good = tmp_path / "good.parquet"
    pq.write_table(_TABLES["flat"], good)
    path.write_bytes(good.read_bytes()[:40] + tail)

    assert parquet_columns(path) == []


def test_garbage_footer_gives_no_names(tmp_path: Path) -> None:
    """A footer of bytes that are not Thrift gives no names (seeded garbage)."""
    import random

    rng = random.Random(7)  # noqa: S311 - seeded test data, not secrets
    for _ in range(50):
        body = bytes(rng.randrange(256) for _ in range(200))
        path = tmp_path / "junk.parquet"
        path.write_bytes(b"PAR1" + body + len(body).to_bytes(4, "little") + b"PAR1")

        assert isinstance(parquet_columns(path), list)


def test_langfuse_parquet_still_detected(tmp_path: Path) -> None:
    """Detection by Parquet column names still tells a Langfuse export from a plain log."""
    plain = tmp_path / "calls.parquet"
    pq.write_table(_TABLES["flat"], plain)
    langfuse = tmp_path / "observations.parquet"
    pq.write_table(
        pa.table({
            "id": ["o1"], "trace_id": ["t1"], "type": ["GENERATION"],
            "start_time": ["2026-01-01T00:00:00Z"], "end_time": ["2026-01-01T00:00:01Z"],
            "model": ["gpt-4o"], "usage_details": ['{"input": 1}'],
        }),
        langfuse,
    )  # fmt: skip

    assert detect_format(plain, read_head(plain)).format == "parquet"
    assert detect_format(langfuse, read_head(langfuse)).format == "langfuse"


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_ingest_does_not_import_pyarrow(tmp_path: Path, suffix: str) -> None:
    """Ingesting a Parquet or JSONL log through the library never imports pyarrow."""
    import duckdb

    path = tmp_path / f"calls.{suffix}"
    fmt = "(FORMAT parquet)" if suffix == "parquet" else "(FORMAT json)"
    duckdb.sql(
        "COPY (SELECT 'c' || i AS call_id, 'openai' AS provider, 'gpt-4o' AS model, "
        f"1.5 AS total_s FROM range(3) t(i)) TO '{path}' {fmt}"
    )
    code = (
        "import sys\n"
        "from tailkit.store import Store\n"
        "from tailkit.ingest import ingest_paths\n"
        "with Store.open(':memory:') as s:\n"
        f"    r = ingest_paths(s, [{str(path)!r}])\n"
        "assert r.ok and r.totals()['stored'] == 3, r\n"
        "print('pyarrow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert out == "False\n"
