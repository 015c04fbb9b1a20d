"""
The DuckDB file that holds calls, rejects and the history of ingests.
"""

from __future__ import annotations

import contextlib

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tailkit.errors import OutOfMemoryError, QueryError, StoreError, StoreVersionError
from tailkit.record import CALL_COLUMNS, Buckets, bucket_label
from tailkit.store import _schema


if TYPE_CHECKING:
    import pyarrow as pa  # only for annotations: importing it costs a CLI run ~0.3 s


DEFAULT_DB = Path("tailkit.duckdb")


@dataclass(frozen=True, slots=True)
class IngestRecord:
    """
    One row of table ``ingests``: what happened to one input file.
    """

    ingest_id: int
    source_file: str
    content_hash: str
    format: str
    rows_in: int
    stored: int
    rejected: int
    duplicates: int


def _edges_case(column: str, edges: tuple[int, ...]) -> str:
    whens = " ".join(
        f"WHEN {column} >= {edge} THEN '{bucket_label(edges, edge)}'" for edge in reversed(edges)
    )
    return f"CASE {whens} ELSE '?' END"


def bucket_columns_sql(buckets: Buckets) -> str:
    """
    SQL select-list items ``input_bucket, output_bucket`` for table ``calls``.

    The labels are the ones `Buckets.input_label` / `Buckets.output_label` return, so Python
    and SQL agree on every call's bucket.
    """
    return (
        f"{_edges_case('input_tokens', buckets.input_edges)} AS input_bucket, "
        f"{_edges_case('output_tokens', buckets.output_edges)} AS output_bucket"
    )


def calls_with_buckets_sql(buckets: Buckets | None = None, *, where: str | None = None) -> str:
    """
    SQL for every call with ``gen_s`` and its ``input_bucket`` / ``output_bucket`` labels.

    Args:
        buckets: Bucket edges; the defaults of `tailkit.record.Buckets` when ``None``.
        where: An optional SQL filter on the call-record columns.
    """
    names = ", ".join(c.name for c in CALL_COLUMNS)
    filt = f" WHERE ({where})" if where else ""
    return (
        f"SELECT {names}, total_s - ttft_s AS gen_s, "
        f"{bucket_columns_sql(buckets or Buckets())} FROM calls{filt}"
    )


def _set_memory_limit(con: duckdb.DuckDBPyConnection, memory_limit: str) -> None:
    """
    Set DuckDB's memory limit, or close the connection and say what a size looks like.
    """
    try:
        con.execute(f"SET memory_limit = '{memory_limit.strip().replace(chr(39), '')}'")
    except duckdb.Error as exc:
        con.close()
        first = str(exc).strip().splitlines()[0]
        msg = (
            f"memory limit {memory_limit!r} is not a size DuckDB understands ({first}); "
            "give {field} a number and a unit, e.g. 2GB or 512MB"
        )
        raise StoreError(msg, field="memory_limit", value=memory_limit) from None


def _query_error(con: duckdb.DuckDBPyConnection, exc: duckdb.Error) -> QueryError:
    """
    The error to raise for DuckDB's ``exc``: its first line, and for memory the fix.
    """
    first = str(exc).strip().splitlines()[0]
    if not isinstance(exc, duckdb.OutOfMemoryException):
        return QueryError(first)
    try:
        # fetchall, not fetchone: DuckDB 2 keeps a result it was not fetched to its end open,
        # and the next query on the connection (a fallback after this error) would be refused
        rows = con.execute("SELECT current_setting('memory_limit')").fetchall()
        limit = f" (memory limit {rows[0][0]})" if rows else ""
    except duckdb.Error:
        limit = ""
    msg = (
        f"DuckDB ran out of memory{limit}: {first}; raise {{field}} (e.g. 4GB) or free memory "
        "on this machine"
    )
    return OutOfMemoryError(msg, field="memory_limit")


class Store:
    """
    A tailkit store: one DuckDB file (default ``./tailkit.duckdb``).

    Open it with `Store.open`; use it as a context manager so it is closed.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path) -> None:
        self._con = con
        self.path = path

    @classmethod
    def open(
        cls,
        path: str | Path = DEFAULT_DB,
        *,
        read_only: bool = False,
        memory_limit: str | None = None,
    ) -> Store:
        """
        Open a store, creating it (or migrating an older schema) as needed.

        Args:
            path: The DuckDB file; ``":memory:"`` for a throwaway store.
            read_only: Open without write access; the file must exist.
            memory_limit: DuckDB's ``memory_limit`` for this connection, e.g. ``"2GB"``; beyond
                it DuckDB spills to its temporary directory. ``None``: DuckDB's default (80%
                of the machine's memory).

        Raises:
            StoreError: The file is missing (read-only), not a DuckDB file, not a tailkit
                store, or ``memory_limit`` is not a size.
            StoreVersionError: The file was written by a newer tailkit.
        """
        path = Path(path)
        if read_only and str(path) != ":memory:" and not path.exists():
            msg = f"no store at {path}: run `tailkit ingest` first or pass {{field}} PATH"
            raise StoreError(msg, field="db", value=str(path))
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0]
            msg = f"cannot open {path} as a DuckDB store: {first}"
            raise StoreError(msg) from None
        con.execute("SET TimeZone = 'UTC'")
        if memory_limit is not None:
            _set_memory_limit(con, memory_limit)
        # Progress is tracked (for query_progress) but never printed over the caller's output.
        try:
            con.execute("SET enable_progress_bar = true")
            con.execute("SET enable_progress_bar_print = false")
        except duckdb.InvalidInputException:
            pass  # Jupyter without ipywidgets refuses it: no query progress, nothing else lost
        store = cls(con, path)
        try:
            store._prepare(read_only=read_only)
        except BaseException:
            con.close()
            raise
        return store

    def _prepare(self, *, read_only: bool) -> None:
        tables = {row[0] for row in self.fetchall("SELECT table_name FROM duckdb_tables()")}
        if not tables:
            if read_only:
                msg = f"{self.path} is empty: run `tailkit ingest` first"
                raise StoreError(msg)
            with self.transaction():
                _schema.create(self.execute)
            return
        if "meta" not in tables:
            msg = f"{self.path} is a DuckDB file but not a tailkit store (no table 'meta')"
            raise StoreError(msg)
        row = self.fetchone("SELECT value FROM meta WHERE key = 'schema_version'")
        version = int(row[0]) if row else 0
        self.migrate(version, _schema.MIGRATIONS, read_only=read_only)

    def migrate(
        self, version: int, migrations: Mapping[int, tuple[str, ...]], *, read_only: bool = False
    ) -> None:
        """
        Bring a store of schema ``version`` up to date, or refuse a newer one.

        Raises:
            StoreVersionError: The store is newer than this tailkit, or cannot be migrated.
        """
        current = _schema.SCHEMA_VERSION
        if version > current:
            msg = (
                f"{self.path} has store schema {version} but this tailkit knows {current}: "
                "upgrade tailkit (pip install -U tailkit)"
            )
            raise StoreVersionError(msg)
        if version == current:
            return
        if read_only:
            msg = (
                f"{self.path} has store schema {version}: open it once without read-only to migrate"
            )
            raise StoreVersionError(msg)
        with self.transaction():
            reached = _schema.migrate(self.execute, version, migrations)
        if reached != current:
            msg = f"{self.path}: no migration from store schema {reached} to {current}"
            raise StoreVersionError(msg)

    # -- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        """
        Close the connection; the file is consistent after every committed ingest.
        """
        self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """
        Run one statement and drain its result.

        Raises:
            QueryError: DuckDB refused it; the message is DuckDB's first line.
        """
        self.fetchall(sql, params)

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """
        Run a query and return all rows.

        Raises:
            QueryError: DuckDB refused it; the message is DuckDB's first line.
        """
        try:
            return self._con.execute(sql, params).fetchall()
        except duckdb.Error as exc:
            raise self.error(exc) from exc

    def error(self, exc: duckdb.Error) -> QueryError:
        """
        The error to raise for DuckDB's ``exc``.

        `OutOfMemoryError` (naming --memory-limit) for memory, else `QueryError` with DuckDB's
        first line.
        """
        return _query_error(self._con, exc)

    def fetchone(self, sql: str, params: Sequence[Any] | None = None) -> tuple[Any, ...] | None:
        """
        Run a query and return its first row, or ``None``.
        """
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def query_progress(self) -> float:
        """
        Percent done of the running query (-1 when unknown); safe from another thread.
        """
        return float(self._con.query_progress())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """
        Commit everything inside, or nothing if it raises.
        """
        self._con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def arrow(self, sql: str) -> pa.Table:
        """
        Run a query and return its result as an Arrow table.

        Raises:
            QueryError: DuckDB refused it; the message is DuckDB's first line.
        """
        try:
            return self._con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise self.error(exc) from exc

    def relation(self, sql: str) -> duckdb.DuckDBPyRelation:
        """
        A lazy DuckDB relation for ``sql`` (``.arrow()``, ``.pl()``, ``.fetchall()``).
        """
        return self._con.sql(sql)

    # -- queries --------------------------------------------------------------------------

    def calls_with_buckets(
        self, buckets: Buckets | None = None, *, where: str | None = None
    ) -> duckdb.DuckDBPyRelation:
        """
        Every call with its ``input_bucket`` and ``output_bucket`` labels and ``gen_s``.

        Args:
            buckets: Bucket edges; the defaults of `tailkit.record.Buckets` when ``None``.
            where: An optional SQL filter on the call-record columns.

        Returns:
            A lazy relation over ``calls`` plus the derived columns.
        """
        return self.relation(calls_with_buckets_sql(buckets, where=where))

    def find_ingest(self, content_hash: str, options_json: str) -> IngestRecord | None:
        """
        The earlier successful ingest of the same content with the same options, if any.
        """
        row = self.fetchone(
            "SELECT ingest_id, source_file, content_hash, format, rows_in, stored, rejected, "
            "duplicates FROM ingests WHERE content_hash = ? AND options::VARCHAR = ? "
            "ORDER BY ingest_id LIMIT 1",
            [content_hash, options_json],
        )
        return IngestRecord(*row) if row else None

    def next_ingest_id(self) -> int:
        """
        Draw a fresh ingest id.
        """
        row = self.fetchone("SELECT nextval('ingest_id_seq')")
        assert row is not None  # noqa: S101 - nextval always returns a row
        return int(row[0])

    def counts(self) -> dict[str, int]:
        """
        Rows in ``calls``, ``rejects`` and ``ingests``.
        """
        return {
            table: int(self.fetchall(f"SELECT count(*) FROM {table}")[0][0])
            for table in ("calls", "rejects", "ingests")
        }
