"""
Query call logs in place: a store whose ``calls`` is a view over the files themselves.

``tailkit stats --source 'logs/*.parquet'`` reads logs that already live in a data lake without
copying them into a store. Each file is detected, mapped and validated exactly as ingest would
(the same scan SQL, the same ``--map`` / ``--set`` / ``--unit``), and an in-memory store gets a
``calls`` VIEW that is the union of the files' good rows. Every query on it reads the files
again, out of core: DuckDB streams Parquet by row group and spills what does not fit in its
``memory_limit``.

One counting pass per file, before the view exists, does what ingest does while it stores:
it finds the rows that would be rejected (by reason), refuses a file whose durations look
like milliseconds, and makes sure the fast reader reads the whole file (else the view uses the
forgiving reader, as ingest falls back to it). What the view does not do is ingest's identity
work: rows are taken as they are, so a call logged twice counts twice (``tailkit ingest``
keeps one). A row without an id gets the id ingest would derive for it from its values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tailkit.errors import IngestError, InputFileError, QueryError
from tailkit.formats import ScanOptions
from tailkit.formats.lowlevel import REJECT_STATUS, Scan, literal, sql_path
from tailkit.ingest._identity import content_id_sql, source_identity
from tailkit.ingest._ingest import (
    Progress,
    _real_name,
    checked_inputs,
    choose_format,
    sniffed_scan,
)
from tailkit.ingest._load import check_median
from tailkit.ingest._long_lines import TOO_LONG, is_too_long_error
from tailkit.ingest._streams import is_stream
from tailkit.record import CALL_COLUMNS
from tailkit.store import Store


_REJECT = literal(REJECT_STATUS)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """
    One file read in place: how, and how many of its rows the view leaves out.

    Args:
        path: The file.
        format: The format it is read as (``skip`` when it is not a call log).
        why: Why that format.
        rows_in: Rows read.
        rejected: Rows left out, as ingest would reject them.
        reasons: ``rejected`` by reason.
        notes: Phrases about how columns were mapped.
    """

    path: Path
    format: str
    why: str
    rows_in: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InPlace:
    """
    The files behind an in-place store's ``calls`` view.
    """

    files: list[SourceFile]

    @property
    def rows_in(self) -> int:
        """
        Rows read over all files.
        """
        return sum(f.rows_in for f in self.files)

    @property
    def rejected(self) -> int:
        """
        Rows left out over all files.
        """
        return sum(f.rejected for f in self.files)

    def reasons(self) -> dict[str, int]:
        """
        Rows left out by reason over all files, most common first.
        """
        out: dict[str, int] = {}
        for f in self.files:
            for reason, n in f.reasons.items():
                out[reason] = out.get(reason, 0) + n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def open_in_place(
    paths: Iterable[str | Path],
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    memory_limit: str | None = None,
) -> tuple[Store, InPlace]:
    """
    Open an in-memory store whose ``calls`` is a view over the good rows of files.

    Args:
        paths: Files, folders (searched recursively) and glob patterns, as for ingest.
        format: ``auto`` (detect per file) or a format name.
        options: How to map, set and convert the files' columns.
        memory_limit: DuckDB's memory limit (see `Store.open`).

    Returns:
        The store (close it) and, per file, how many rows the view leaves out and why.

    Raises:
        IngestError: As `read_in_place`; nothing is left open.
    """
    store = Store.open(":memory:", memory_limit=memory_limit)
    try:
        files = read_in_place(store, paths, format=format, options=options)
    except BaseException:
        store.close()
        raise
    return store, files


def read_in_place(
    store: Store,
    paths: Iterable[str | Path],
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    progress: Progress | None = None,
) -> InPlace:
    """
    Replace the ``calls`` table of a fresh in-memory store by a view over files' good rows.

    Args:
        store: A store opened on ``":memory:"``, nothing ingested.
        paths: Files, folders (searched recursively) and glob patterns, as for ingest.
        format: ``auto`` (detect per file) or a format name.
        options: How to map, set and convert the files' columns.
        progress: Receives the bytes to read, then a start and a finish event per file's
            counting pass.

    Returns:
        Per file, how many rows the view leaves out and why.

    Raises:
        IngestError: An option is invalid, a path or pattern matches nothing, or a file cannot
            be read (the message names the file and the fix).
    """
    options, files, missing = checked_inputs(paths, format, options)
    if missing:
        raise IngestError("; ".join(str(e) for e in missing))
    # A view reads its files at every query; a stream can be read once.
    streams = [path for path in files if is_stream(path)]
    if streams:
        msg = (
            f"{streams[0]}: a pipe or standard input cannot be read in place (it can be read "
            "only once); ingest it into a store with: tailkit ingest"
        )
        raise InputFileError(msg)
    if progress:
        progress.begin(store, sum(path.stat().st_size for path in files))
    results, parts = [], []
    try:
        for index, path in enumerate(files, start=1):
            if progress:
                progress.start(path, path.stat().st_size)
            result, part = _source(store, path, format, options, index)
            if progress:
                progress.finish(None, None)
            results.append(result)
            if part:
                parts.append(part)
        if parts:
            store.execute("DROP TABLE calls")
            store.execute("CREATE VIEW calls AS " + " UNION ALL ".join(parts))
    except QueryError as exc:
        msg = f"DuckDB refused to read the files ({exc})"
        raise IngestError(msg) from None
    return InPlace(results)


def _source(
    store: Store, path: Path, format_name: str, options: ScanOptions, index: int
) -> tuple[SourceFile, str | None]:
    """
    Detect, sniff and count one file; return it and its part of the view (``None``: skipped).
    """
    _, detected = choose_format(path, format_name)
    if detected.format == "skip":
        return SourceFile(path, "skip", detected.why), None
    literal_path = sql_path(str(path))
    with _real_name(path, literal_path):
        scan = sniffed_scan(store, path, literal_path, detected.format, options)
        for statement in scan.setup:
            store.execute(statement)
        sql, counts = _count(store, path, scan)
        if options.unit is None and not scan.units_known:
            median = store.fetchone(
                f"SELECT median(total_s) FROM (SELECT total_s FROM ({sql}) "
                f"WHERE status <> {_REJECT} LIMIT 100000)"
            )
            check_median(path, median[0] if median else None)
        if scan.reader_rejects_sql:
            for reason, n in store.fetchall(
                f"SELECT reason, count(*) FROM ({scan.reader_rejects_sql}) GROUP BY 1"
            ):
                counts[str(reason)] = counts.get(str(reason), 0) + int(n)
    good = counts.pop("", 0)
    rejected = sum(counts.values())
    reasons = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    result = SourceFile(
        path, detected.format, detected.why, rows_in=good + rejected, rejected=rejected,
        reasons=reasons, notes=scan.notes,
    )  # fmt: skip
    return result, _view_part(sql, scan.format, path, index)


def _count(store: Store, path: Path, scan: Scan) -> tuple[str, dict[str, int]]:
    """
    Read the file once, counting rows by reject reason (``""``: good rows).

    Returns:
        The SQL that read the whole file (the fast reader, else the forgiving one) and the
        counts.

    Raises:
        InputFileError: No reader could read the file.
    """
    tried = [scan.select_sql] + ([scan.fallback_sql] if scan.fallback_sql else [])
    for sql in tried:
        try:
            # Count good and bad rows first: naming the reasons costs a JSON value per row,
            # so only the bad rows, if any, are read again for them.
            rows = store.fetchall(f"SELECT status = {_REJECT}, count(*) FROM ({sql}) GROUP BY 1")
        except QueryError as exc:
            if sql != tried[-1]:
                continue  # the fast reader refused a value: read it the forgiving way
            if is_too_long_error(str(exc)):
                msg = (
                    f"{path}: has a line too long to read in place ({TOO_LONG}); "
                    "`tailkit ingest` reads it, rejecting such lines one by one"
                )
                raise InputFileError(msg) from None
            msg = f"{path}: not readable as {scan.format} ({exc})"
            raise InputFileError(msg) from None
        counts = {"": sum(int(n) for bad, n in rows if not bad)}
        if any(bad for bad, _ in rows):
            counts.update(
                (str(reason), int(n))
                for reason, n in store.fetchall(
                    f"SELECT attrs->>'reason', count(*) FROM ({sql}) WHERE status = {_REJECT} "
                    "GROUP BY 1"
                )
            )
        return sql, counts
    raise AssertionError  # pragma: no cover - the loop returns or raises


def _view_part(sql: str, format_name: str, path: Path, index: int) -> str:
    """
    The file's good rows with every column of table ``calls``, typed as the table types it.
    """
    provenance = {
        # A row without an id gets the one ingest would derive (for rows unlike any other of
        # the file), so that seeded samples, which hash the id, draw the same calls.
        "call_id": f"coalesce(call_id, {content_id_sql(source_identity(path))})",
        "source": literal(format_name),
        "source_file": literal(str(path)),
        "source_row": "source_row",
        "ingest_id": str(index),
        "attrs": "attrs",
    }
    columns = ", ".join(
        f"CAST({provenance.get(c.name, c.name)} AS {c.sql_type}) AS {c.name}" for c in CALL_COLUMNS
    )
    return f"SELECT {columns} FROM ({sql}) WHERE status <> {_REJECT}"
