"""
The DuckDB file that holds calls, rejects and the history of ingests.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tailkit.errors import (
    OutOfMemoryError,
    QueryError,
    StoreError,
    StoreFileError,
    StoreVersionError,
)
from tailkit.record import CALL_COLUMNS, Buckets, bucket_label
from tailkit.store import _schema
from tailkit.store._where import checked_where
from tailkit.text import printable


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
        where: An optional SQL filter on the call-record columns, pasted in as it is: from a
            user, check it with `checked_where` first (`tailkit.tails.TableQuery` does).
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


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
"""What a path that is not a regular file is, in words."""

_FATAL = (duckdb.FatalException, duckdb.InternalException)
"""DuckDB gave up on the database (a previous fatal error invalidated it)."""


def _about_the_file(path: Path, exc: duckdb.Error) -> bool:
    """
    Whether DuckDB's ``exc`` is about the store file itself, not about a query or an input.

    DuckDB raises a plain ``Error`` for a damaged block, and an ``IOException`` for a full
    disk as for an unreadable input file (ingest reads its inputs on the store's connection):
    an I/O error is the store's when it names the store's file (or its ``.wal`` or ``.tmp``),
    or says the disk is full.
    """
    if str(path) == ":memory:":
        return False
    text = str(exc).lower()
    if isinstance(exc, _FATAL) or "corrupt database file" in text or "checksum" in text:
        return True
    if "no space left" in text:
        return True
    # a commit that could not write the file or its log is a TransactionException
    file_kinds = (duckdb.IOException, duckdb.PermissionException, duckdb.TransactionException)
    return isinstance(exc, file_kinds) and path.name.lower() in text


def _check_store_path(path: Path, *, read_only: bool) -> None:
    """
    Refuse a store path that is not a regular file (or absent, to be created), before DuckDB.

    DuckDB opens whatever it is given: a named pipe blocks it forever, ``/dev/zero`` reads as
    an endless file. So a store, and its write-ahead log beside it, must each be a regular
    file, after following symbolic links.
    """
    for each in (path, path.with_name(path.name + ".wal")):
        try:
            mode = os.stat(each).st_mode
        except FileNotFoundError:
            continue  # absent (or a dangling link): created, or refused below when read-only
        except OSError as exc:
            msg = (
                f"cannot use {printable(str(each))} as a store: {exc.strerror or exc}; check the "
                "path and its folder"
            )
            raise StoreFileError(msg, field="db", value=str(path)) from None
        if stat.S_ISREG(mode):
            continue
        kind = next((word for test, word in _KINDS if test(mode)), "not a regular file")
        whose = "the store's write-ahead log " if each != path else ""
        msg = (
            f"{whose}{printable(str(each))} is {kind}, not a store file: give {{field}} the "
            "path of a DuckDB file (a new path creates one)"
        )
        raise StoreFileError(msg, field="db", value=str(path))
    if read_only and not path.exists():
        shown = printable(str(path))
        msg = f"no store at {shown}: run `tailkit ingest` first or pass {{field}} PATH"
        raise StoreError(msg, field="db", value=str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return printable(text.splitlines()[0]) if text else type(exc).__name__


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    """
    The error for a file DuckDB would not open: locked, not DuckDB's, damaged, unreadable.
    """
    first = _first_line(exc)
    lowered = first.lower()
    if re.search(r"\block\b|\blocked\b", lowered):
        fix = "another process has it open for writing: wait for it to finish, or stop it"
    elif "not a valid duckdb database file" in lowered:
        fix = "it is not a DuckDB file: give {field} a tailkit store, or a new path to create one"
    elif "corrupt" in lowered or "checksum" in lowered:
        fix = _DAMAGED
    elif "version" in lowered:
        fix = "it was written by another DuckDB version: open it with the tailkit that wrote it"
    elif "permission" in lowered or "read-only" in lowered or "read only" in lowered:
        fix = "check the permissions of the file and its folder (or open it read-only)"
    else:
        fix = "check that it is a tailkit store and that its folder is readable"
    msg = f"cannot open {printable(str(path))} as a DuckDB store: {first}; {fix}"
    return StoreFileError(msg, field="db", value=str(path))


_DAMAGED = (
    "the store file is damaged: ingest the logs again into a new store (give {field} a new path)"
)


def _file_error(path: Path, exc: duckdb.Error) -> StoreFileError:
    """
    The error for DuckDB's failure to read or write the store file itself.
    """
    first = _first_line(exc)
    lowered = first.lower()
    if "corrupt" in lowered or "checksum" in lowered:
        fix = _DAMAGED
    elif isinstance(exc, _FATAL):
        fix = (
            "DuckDB stopped using the file after an earlier failure (often a full disk): free "
            "space and run the command again; what was committed before is kept"
        )
    elif "permission" in lowered or isinstance(exc, duckdb.PermissionException):
        fix = "check the permissions of the file and its folder"
    else:
        fix = (
            "free disk space (and check that the file and its folder are writable), then run "
            "the command again: nothing from the failed step was stored"
        )
    msg = f"store {printable(str(path))}: {first}; {fix}"
    return StoreFileError(msg, field="db", value=str(path))


def _schema_version(path: Path, value: object) -> int:
    """
    The schema version in table ``meta``, or an error saying the store was edited.
    """
    try:
        return int(str(value).strip())
    except ValueError:
        msg = (
            f"{path} has store schema version {printable(repr(value))} in its meta table, not a "
            "number: it was edited or written by something else than tailkit; ingest the logs "
            "into a new store (give {field} a new path)"
        )
        raise StoreVersionError(msg, field="db", value=str(path)) from None


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
        if str(path) != ":memory:":
            _check_store_path(path, read_only=read_only)
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            raise _open_error(path, exc) from None
        try:
            con.execute("SET TimeZone = 'UTC'")
        except duckdb.Error as exc:
            con.close()
            raise _open_error(path, exc) from None
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
        except duckdb.Error as exc:
            con.close()
            raise store.error(exc) from None
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
        version = _schema_version(self.path, row[0]) if row else 0
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
        try:
            self._con.close()  # writes the last checkpoint: a full disk can fail it
        except duckdb.Error as exc:
            msg = (
                f"store {printable(str(self.path))}: could not write its checkpoint on closing "
                f"({_first_line(exc)}); free disk space: what was committed is kept in its "
                "write-ahead log and applied the next time the store opens"
            )
            raise StoreFileError(msg, field="db", value=str(self.path)) from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.close()
            return
        with contextlib.suppress(StoreError):  # the error on its way out says more
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

    def error(self, exc: duckdb.Error) -> StoreError:
        """
        The error to raise for DuckDB's ``exc``.

        `OutOfMemoryError` (naming --memory-limit) for memory; `StoreFileError` naming the
        file and the fix when the file could not be read or written (a full disk, a damaged
        block, a lock); else `QueryError` with DuckDB's first line.
        """
        if _about_the_file(self.path, exc):
            return _file_error(self.path, exc)
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

        Raises:
            StoreError: DuckDB could not begin or commit (a full disk, a file that became
                read-only): nothing inside was stored, and the message names the file.
        """
        self._statement("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed commit has rolled back already
                self._con.execute("ROLLBACK")
            raise
        try:
            self._statement("COMMIT")
        except StoreError:
            with contextlib.suppress(duckdb.Error):
                self._con.execute("ROLLBACK")
            raise

    def _statement(self, sql: str) -> None:
        try:
            self._con.execute(sql)
        except duckdb.Error as exc:
            raise self.error(exc) from None

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
            where: An optional SQL filter on the call-record columns (`checked_where`: the
                columns, constants, operators and pure scalar functions only).

        Returns:
            A lazy relation over ``calls`` plus the derived columns.

        Raises:
            FilterError: ``where`` reaches beyond the call columns (a subquery, a table
                function, ...) or is not an SQL expression.
        """
        if where:
            checked_where(where)
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
