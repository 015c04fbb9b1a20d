"""
The store file: created on first use, versioned, refused with a fix when it cannot be used.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tailkit.errors import StoreError, StoreVersionError
from tailkit.record import CALL_COLUMNS
from tailkit.store import SCHEMA_VERSION, Store
from tailkit.store import summarize_store as summarize


def test_new_store_has_the_call_record_and_its_version(tmp_path: Path) -> None:
    """
    A new file gets calls (the columns of docs/call-record.md), rejects, ingests and its version.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        columns = store.fetchall(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'calls' ORDER BY ordinal_position"
        )
        version = store.fetchone("SELECT value FROM meta WHERE key = 'schema_version'")

    assert [(c.name, c.sql_type.replace("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"))
            for c in CALL_COLUMNS] == columns  # fmt: skip
    assert (str(SCHEMA_VERSION),) == version


def test_a_newer_store_is_refused_with_the_fix(tmp_path: Path) -> None:
    """
    A file from a newer tailkit is not touched; the message says to upgrade.
    """
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()

    with pytest.raises(StoreVersionError, match=r"schema 99 but this tailkit knows 2: upgrade"):
        Store.open(path)


def test_an_older_store_is_migrated(tmp_path: Path) -> None:
    """
    Migrations run in order from the file's version and record the new one.
    """
    with Store.open(tmp_path / "s.duckdb") as store:
        store.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
        # 1 -> 2 is the real migration's step, empty here: the file already has job_key
        store.migrate(0, {0: ("ALTER TABLE calls ADD COLUMN migrated BOOLEAN",), 1: ()})
        version = store.fetchone("SELECT value FROM meta WHERE key = 'schema_version'")
        column = store.fetchone(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'migrated'"
        )

    assert ("2",) == version
    assert (1,) == column


def test_a_version_1_store_gains_job_key(tmp_path: Path) -> None:
    """
    A version-1 file (no job_key) opens as version 2, its calls kept, job_key NULL.
    """
    path = tmp_path / "v1.duckdb"
    with Store.open(path) as store:
        store.execute("ALTER TABLE calls DROP COLUMN job_key")
        store.execute(
            "INSERT INTO calls (call_id, provider, model, status) VALUES ('c', 'p', 'm', 'ok')"
        )
        store.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with Store.open(path) as store:
        version = store.fetchone("SELECT value FROM meta WHERE key = 'schema_version'")
        row = store.fetchone("SELECT call_id, job_key FROM calls")

    assert (str(SCHEMA_VERSION),) == version
    assert ("c", None) == row


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a database at all" * 100, "cannot open .* as a DuckDB store"),
        (None, "not a tailkit store"),
    ],
)
def test_other_files_are_refused(tmp_path: Path, content: bytes | None, message: str) -> None:
    """
    A non-DuckDB file, or a DuckDB file of something else, is named and left alone.
    """
    path = tmp_path / "other.duckdb"
    if content is None:
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE x (a INT)")
        con.close()
    else:
        path.write_bytes(content)

    with pytest.raises(StoreError, match=message):
        Store.open(path)


def test_read_only_needs_an_existing_store(tmp_path: Path) -> None:
    """
    Commands that only read say to ingest first instead of creating an empty file.
    """
    with pytest.raises(StoreError, match="run `tailkit ingest` first"):
        Store.open(tmp_path / "none.duckdb", read_only=True)

    assert not (tmp_path / "none.duckdb").exists()


def test_summary_quantiles_are_exact_and_empty_without_ok_calls(store: Store) -> None:
    """A route's p50/p99 are the exact quantiles of its ok calls; none when it has no ok call."""
    latencies = [0.5 + i * 0.01 for i in range(301)]
    values = [("a", "m", "ok", t) for t in latencies] + [("b", "m", "error", 1.0)] * 3
    store.execute(
        "INSERT INTO calls (provider, model, status, total_s) SELECT * FROM (VALUES "
        + ", ".join(f"('{p}', '{m}', '{s}', {t})" for p, m, s, t in values)
        + ")"
    )
    routes = {r.provider: r for r in summarize(store).routes}
    assert routes["a"].p50_s == pytest.approx(latencies[150])
    assert routes["a"].p99_s == pytest.approx(latencies[297])
    assert (routes["b"].calls, routes["b"].ok, routes["b"].p50_s, routes["b"].p99_s) == (
        3, 0, None, None,
    )  # fmt: skip
