"""
Load one file into the store in one pass, then settle its rows.

The file is read once, straight into ``calls``: good rows as they will stay, bad rows marked
with `REJECT_STATUS` (their reason, detail and raw text in ``attrs``). Everything after that
touches only this ingest's rows, inside the same transaction: number them in file order,
derive missing call ids from their content, move bad rows aside, delete duplicates and move
conflicting ids aside (`tailkit.ingest._identity`), store the rejects, and write the
``ingests`` row. Reading the file once is what keeps ingest close to DuckDB's bare reader
speed; the settling steps are cheap because they touch one column or a few rows at a time.

Every row read ends up in exactly one of three counts, ``rows_in == stored + rejected +
duplicates``:

- ``stored``: a new call, now in ``calls``;
- ``rejected``: a bad row, or a row whose scoped id is taken by a call with other values
  (``call_id_conflict``). A bad row of the same file content (same content hash) that an
  earlier ingest already rejected at the same row for the same reason is counted again but not
  written to ``rejects`` a second time (``already_rejected``), so ``rejects`` may hold fewer
  rows for an ingest than its ``rejected`` count;
- ``duplicates``: a row equal to a stored call, or to an earlier row of the same file, in every
  call-record column.
"""

from __future__ import annotations

import functools
import time

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tailkit.errors import InputFileError, QueryError, StrictModeError, UnitError
from tailkit.formats import ScanOptions
from tailkit.formats.lowlevel import (
    REJECT_STATUS,
    Scan,
    literal,
    scrub_values,
    scrub_values_json,
)
from tailkit.ingest._identity import CONFLICT, derive_ids, settle_identity, source_identity
from tailkit.ingest._long_lines import TOO_LONG, too_long_detail
from tailkit.record import SOURCE_COLUMNS
from tailkit.store import Store
from tailkit.store.lowlevel import IngestRecord


_READER_REJECTS = "_tailkit_reader_rejects"
_BAD_ROWS = "_tailkit_bad_rows"
_MS_LOOKING_MEDIAN_S = 1000.0  # a median call of 17 minutes is a millisecond column
_REJECT = "'" + REJECT_STATUS + "'"


class FastReaderRefusedError(Exception):
    """
    The fast reader refused the file; the forgiving reader should try.
    """


class AlreadyIngestedError(Exception):
    """
    The same content was ingested before with the same options.

    Args:
        previous: That earlier ingest.
        rows_in: The rows read this time.
        rejected: Of those, the rows the earlier ingest rejected (the same rows again).
        reasons: ``rejected`` by reason.
    """

    def __init__(
        self, previous: IngestRecord, rows_in: int, rejected: int, reasons: dict[str, int]
    ) -> None:
        super().__init__(previous.ingest_id)
        self.previous = previous
        self.rows_in = rows_in
        self.rejected = rejected
        self.reasons = reasons


@dataclass(frozen=True, slots=True)
class Counts:
    """
    Where the rows of one file ended up; ``rows_in == stored + rejected + duplicates``.

    Args:
        ingest_id: The ingest.
        rows_in: Rows read (records the reader refused included).
        stored: New calls stored.
        rejected: Rows rejected, by this ingest or (``already_rejected`` of them) before.
        duplicates: Rows equal to a stored call or to an earlier row of the file.
        reasons: ``rejected`` by reason.
        already_rejected: Rejected rows already in ``rejects`` from an earlier ingest of the
            same content, not written again.
        inferred_provider: Stored calls whose provider was inferred from the model name.
    """

    ingest_id: int
    rows_in: int
    stored: int
    rejected: int
    duplicates: int
    reasons: dict[str, int]
    already_rejected: int = 0
    inferred_provider: int = 0


@dataclass(frozen=True, slots=True)
class FileLoad:
    """
    One file's load: what to read, how, and the values its rows carry.

    Args:
        store: The open store; the caller holds the transaction.
        path: The file.
        scan: Its SQL.
        options: ``--map`` / ``--set`` / ``--unit``, recorded with the ingest.
        options_json: ``options`` (and the format) as stored in ``ingests``.
        content_hash: Returns the file's content hash, computed alongside the read.
        long_lines: Record → length of each line too long to read; the scan reads a copy in
            which each is a placeholder, and those rows are rejected as `TOO_LONG`.
        nameless: ``path`` names no place (``-``, ``/dev/stdin``, ``/dev/fd/63``): the same
            name stands for every stream read that way, so the content scopes the derived ids.
    """

    store: Store
    path: Path
    scan: Scan
    options: ScanOptions
    options_json: str
    content_hash: Callable[[], str]
    long_lines: Mapping[int, int] = field(default_factory=dict)
    nameless: bool = False

    def run(self, sql: str, *, strict: bool, started: float) -> Counts:
        """
        Read with ``sql`` and settle every row; raise to have the caller roll back.

        Raises:
            FastReaderRefusedError: The fast reader failed and a fallback exists.
            InputFileError: The reader failed and there is no fallback.
            UnitError: Durations look like milliseconds and no unit was given.
            StrictModeError: ``strict`` and some row is bad.
            AlreadyIngestedError: The same content and options were ingested before.
        """
        store = self.store
        ingest_id = store.next_ingest_id()
        had_calls = bool(store.fetchall("SELECT 1 FROM calls LIMIT 1"))
        read = self._read(sql, ingest_id)
        reader_rejects = self._reader_rejects()
        self._number_rows(ingest_id, reader_rejects)
        this = f"ingest_id = {ingest_id}"
        self._name_long_lines(this)
        marked = _one(store, f"SELECT count(*) FROM calls WHERE {this} AND status = {_REJECT}")
        rows_in = read + reader_rejects
        if self.options.unit is None and not self.scan.units_known:
            self._check_unit(this)
        if strict and marked + reader_rejects:
            self._refuse_strict(self._bad_rows_sql(ingest_id), marked + reader_rejects)
        content = self.content_hash()
        previous = store.find_ingest(content, self.options_json)
        if previous is not None:
            raise self._again(previous, ingest_id, rows_in)
        # Derived ids never repeat within a file: then there is no repeat to look for.
        ids_derived = not store.fetchall(
            f"SELECT 1 FROM calls WHERE {this} AND call_id IS NOT NULL LIMIT 1"
        )
        scope = f"stream {content}" if self.nameless else source_identity(self.path)
        derive_ids(store, ingest_id, source=scope, good=f"status <> {_REJECT}")
        self._set_aside_bad_rows(ingest_id)
        duplicates, conflicts = settle_identity(
            store, ingest_id, had_calls=had_calls, bad_rows=_BAD_ROWS,
            ids_derived=ids_derived,
        )  # fmt: skip
        if strict and conflicts:
            self._refuse_strict(f"SELECT * FROM {_BAD_ROWS} WHERE reason = '{CONFLICT}'", conflicts)
        rejected = marked + reader_rejects + conflicts
        already = rejected - self._store_rejects(
            ingest_id, content, exact_lines=sql != self.scan.fallback_sql
        )
        stored = _one(store, f"SELECT count(*) FROM calls WHERE {this}")
        if stored + rejected + duplicates != rows_in:  # pragma: no cover - an invariant
            msg = f"{self.path}: {rows_in} rows in but {stored}+{rejected}+{duplicates} settled"
            raise InputFileError(msg)
        reasons = dict(
            store.fetchall(
                f"SELECT reason, count(*) FROM {_BAD_ROWS} GROUP BY 1 ORDER BY 2 DESC, 1"
            )
        )
        store.execute(f"DROP TABLE {_BAD_ROWS}")
        inferred = _one(
            store,
            f"SELECT count(*) FROM calls WHERE {this} AND contains(attrs::VARCHAR, "
            "'provider_inferred') AND attrs->>'provider_inferred' = 'true'",
        )
        self.record(ingest_id, content, rows_in, stored, rejected, duplicates, started)
        return Counts(
            ingest_id, rows_in, stored, rejected, duplicates, reasons,
            already_rejected=already, inferred_provider=inferred,
        )  # fmt: skip

    def _again(self, previous: IngestRecord, ingest_id: int, rows_in: int) -> AlreadyIngestedError:
        """
        The same content and options were ingested before: its rejects are rejected again.

        The rows read now are the rows read then, so the bad ones are the same; only the
        ``call_id_conflict`` rejects, found after this point, are not seen again: they are the
        rest of the earlier ingest's ``rejected``.
        """
        reasons = dict(
            self.store.fetchall(
                f"SELECT reason, count(*) FROM ({self._bad_rows_sql(ingest_id)}) GROUP BY 1"
            )
        )
        rejected = max(previous.rejected, sum(reasons.values()))
        if rejected > sum(reasons.values()):
            reasons[CONFLICT] = rejected - sum(reasons.values())
        ordered = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return AlreadyIngestedError(previous, rows_in, min(rejected, rows_in), ordered)

    def record(  # noqa: PLR0917 - one row of table ingests
        self,
        ingest_id: int,
        content: str,
        rows_in: int,
        stored: int,
        rejected: int,
        duplicates: int,
        started: float,
    ) -> None:
        """
        Write this file's row of ``ingests``.
        """
        self.store.execute(
            "INSERT INTO ingests VALUES (?, ?, ?, ?, ?::JSON, ?, ?, ?, ?, to_timestamp(?), "
            "to_timestamp(?), ?)",
            [ingest_id, str(self.path), content, self.scan.format, self.options_json, rows_in,
             stored, rejected, duplicates, started, time.time(), version()],
        )  # fmt: skip

    def _read(self, sql: str, ingest_id: int) -> int:
        columns = ", ".join(c.name for c in SOURCE_COLUMNS)
        for statement in self.scan.setup:
            self.store.execute(statement)
        try:
            return _one(
                self.store,
                f"INSERT INTO calls ({columns}, source, source_file, source_row, ingest_id, "
                f"attrs) SELECT {stored_columns()}, {literal(self.scan.format)}, "
                f"{literal(str(self.path))}, source_row, {ingest_id}, {STORED_ATTRS} "
                f"FROM ({sql})",
            )
        except QueryError as exc:
            if self.scan.fallback_sql is not None and sql != self.scan.fallback_sql:
                raise FastReaderRefusedError from exc
            msg = f"{self.path}: not readable as {self.scan.format} ({exc})"
            raise InputFileError(msg) from None

    def _reader_rejects(self) -> int:
        self.store.execute(f"DROP TABLE IF EXISTS {_READER_REJECTS}")
        if self.scan.reader_rejects_sql:
            self.store.execute(
                f"CREATE TEMP TABLE {_READER_REJECTS} AS SELECT record, reason, "
                f"{scrub_values('detail')} AS detail, {scrub_values('raw')} AS raw "
                f"FROM ({self.scan.reader_rejects_sql})"
            )
        else:
            self.store.execute(
                f"CREATE TEMP TABLE {_READER_REJECTS} "
                "(record BIGINT, reason VARCHAR, detail VARCHAR, raw VARCHAR)"
            )
        return _one(self.store, f"SELECT count(*) FROM {_READER_REJECTS}")

    def _number_rows(self, ingest_id: int, reader_rejects: int) -> None:
        """
        Give each row its 1-based record number in the file.

        The rows went in in file order, so their row ids run on from the first one. Records the
        reader refused are not among them: shift every row past each refused record that came
        before it (an ASOF join on how many good rows preceded each refused one).
        """
        this = f"ingest_id = {ingest_id}"
        if not self.store.fetchall(
            f"SELECT 1 FROM calls WHERE {this} AND source_row IS NULL LIMIT 1"
        ):
            return  # the reader numbered them
        self.store.execute(
            f"UPDATE calls SET source_row = rowid - (SELECT min(rowid) FROM calls WHERE {this}) "
            f"+ 1 WHERE {this}"
        )
        if not reader_rejects:
            return
        self.store.execute(
            f"UPDATE calls SET source_row = calls.source_row + a.n FROM (SELECT c.rowid AS rid, "
            f"rr.n FROM calls c ASOF JOIN (SELECT good_before, max(n) AS n FROM (SELECT record "
            f"- row_number() OVER (ORDER BY record) AS good_before, row_number() OVER (ORDER BY "
            f"record) AS n FROM {_READER_REJECTS}) GROUP BY good_before) rr ON c.source_row > "
            f"rr.good_before WHERE c.{this}) a WHERE calls.rowid = a.rid"
        )

    def _name_long_lines(self, this: str) -> None:
        """
        Reject the placeholders of lines too long to read as such, with their true length.
        """
        for record, length in self.long_lines.items():
            self.store.execute(
                f"UPDATE calls SET status = {_REJECT}, attrs = json_object('reason', "
                f"{literal(TOO_LONG)}, 'detail', {literal(too_long_detail(length))}, 'raw', "
                f"NULL) WHERE {this} AND source_row = {int(record)}"
            )
            self.store.execute(
                f"UPDATE {_READER_REJECTS} SET reason = {literal(TOO_LONG)}, detail = "
                f"{literal(too_long_detail(length))}, raw = NULL WHERE record = {int(record)}"
            )

    def _check_unit(self, this: str) -> None:
        # The first 100,000 rows tell milliseconds from seconds as well as all of them.
        median = self.store.fetchone(
            f"SELECT median(total_s) FROM (SELECT total_s FROM calls WHERE {this} "
            f"AND status <> {_REJECT} LIMIT 100000)"
        )
        check_median(self.path, median[0] if median else None)

    def _bad_rows_sql(self, ingest_id: int) -> str:
        return (
            f"SELECT {ingest_id} AS ingest_id, {literal(str(self.path))} AS source_file, "
            "source_row, attrs->>'reason' AS reason, attrs->>'detail' AS detail, "
            f"attrs->>'raw' AS raw FROM calls WHERE ingest_id = {ingest_id} AND status = "
            f"{_REJECT} UNION ALL SELECT {ingest_id}, {literal(str(self.path))}, record, "
            f"reason, detail, raw FROM {_READER_REJECTS}"
        )

    def _refuse_strict(self, bad_rows_sql: str, rejected: int) -> None:
        rows = self.store.fetchall(
            f"SELECT source_row, detail FROM ({bad_rows_sql}) ORDER BY source_row LIMIT 5"
        )
        shown = "; ".join(f"row {row}: {detail}" for row, detail in rows)
        msg = f"{self.path}: {rejected:,} bad row(s), nothing stored ({{field}}); first: {shown}"
        raise StrictModeError(msg, field="strict", value=True)

    def _set_aside_bad_rows(self, ingest_id: int) -> None:
        """
        Move the marked rows and the reader's rejects into a temporary table of bad rows.
        """
        store = self.store
        store.execute(f"DROP TABLE IF EXISTS {_BAD_ROWS}")
        store.execute(f"CREATE TEMP TABLE {_BAD_ROWS} AS {self._bad_rows_sql(ingest_id)}")
        store.execute(f"DELETE FROM calls WHERE ingest_id = {ingest_id} AND status = {_REJECT}")
        store.execute(f"DROP TABLE {_READER_REJECTS}")

    def _store_rejects(self, ingest_id: int, content: str, *, exact_lines: bool) -> int:
        """
        Write the bad rows to ``rejects``, except those already there for the same content.

        A row of the same file content rejected at the same row for the same reason by an
        earlier ingest (with other options, say) is the same reject: it is counted by this
        ingest but not stored twice.

        Returns:
            The number of rows written.
        """
        store, this = self.store, f"ingest_id = {ingest_id}"
        fresh = (
            f"SELECT * FROM {_BAD_ROWS} b WHERE NOT EXISTS (SELECT 1 FROM rejects r "
            "JOIN ingests i ON i.ingest_id = r.ingest_id WHERE i.content_hash = "
            f"{literal(content)} AND r.source_row IS NOT DISTINCT FROM b.source_row "
            "AND r.reason = b.reason)"
        )
        had_rejects = bool(store.fetchall("SELECT 1 FROM rejects LIMIT 1"))
        moved = _one(
            store, f"INSERT INTO rejects {fresh if had_rejects else f'SELECT * FROM {_BAD_ROWS}'}"
        )
        if moved and exact_lines and self.scan.raw_lines_sql:
            # Show each rejected row as its line in the file, not as the values read from it.
            # This reads the file again, so it runs only when some row was rejected.
            store.execute(
                f"UPDATE rejects SET raw = {scrub_values('l.line')} FROM "
                f"({self.scan.raw_lines_sql}) l WHERE rejects.{this} "
                "AND rejects.source_row = l.record"
            )
        return moved


FREE_TEXT = frozenset({"error_type"})
"""Call-record columns that hold free text (an error's words), scrubbed of secrets as read.

``attrs`` is scrubbed too (`STORED_ATTRS`); identifiers (``call_id``, ``model``, …) are names,
kept as they are."""

STORED_ATTRS = scrub_values_json("attrs")
"""A read row's ``attrs`` as stored: secrets inside its text replaced (a bad row's reason,
detail and raw text included)."""


@functools.cache
def stored_columns() -> str:
    """
    The SELECT list of the call-record columns as stored: `FREE_TEXT` scrubbed of secrets.
    """
    return ", ".join(
        f"{scrub_values(c.name)} AS {c.name}" if c.name in FREE_TEXT else c.name
        for c in SOURCE_COLUMNS
    )


def check_median(path: Path, median: float | None) -> None:
    """
    Refuse a file whose median ``total_s`` (of its first good rows) looks like milliseconds.

    Raises:
        UnitError: The median is above 1,000 seconds.
    """
    if median is not None and median > _MS_LOOKING_MEDIAN_S:
        msg = (
            f"{path}: total_s values look like milliseconds (median {median:,.0f}); "
            "pass {field} ms, or {field} s if they really are seconds"
        )
        raise UnitError(msg, field="unit", value=None)


def _one(store: Store, sql: str) -> int:
    row = store.fetchone(sql)
    return int(row[0]) if row and row[0] is not None else 0


@functools.cache
def version() -> str:
    """
    The tailkit version an ingest records (read once: the package metadata costs 10 ms).
    """
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("tailkit")
    except PackageNotFoundError:  # running from a source tree
        return "0+unknown"
