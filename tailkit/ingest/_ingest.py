"""
Ingest: detect each file's format, read it inside DuckDB, validate, and store it.

Each file is one transaction. Its rows are read once into a temporary table of validated,
typed columns (``reason`` is NULL for a good row); from there good rows that are new go to
``calls``, bad ones to ``rejects``, and the rest are counted as duplicates, so the three counts
always add up to the rows read. A file that fails as a whole (unreadable, unmapped, wrong unit,
``--strict``) leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import time

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tailkit.errors import IngestError, InputFileError, QueryError, StrictModeError, UnitError
from tailkit.formats import FORMATS, Scan, ScanOptions, check_options, detect_format, read_head
from tailkit.ingest._paths import expand_paths
from tailkit.record import CALL_COLUMNS
from tailkit.store import Store


_STAGE = "_tailkit_stage"
_READER_REJECTS = "_tailkit_reader_rejects"
_ROWS = "_tailkit_rows"
_MS_LOOKING_MEDIAN_S = 1000.0  # a median call of 17 minutes is a millisecond column


@dataclass(frozen=True, slots=True)
class FileResult:
    """
    What happened to one input file.

    ``rows_in == stored + rejected + duplicates`` always holds.
    """

    path: Path
    format: str
    why: str
    rows_in: int = 0
    stored: int = 0
    rejected: int = 0
    duplicates: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    ingest_id: int | None = None
    skipped: bool = False
    already_ingested: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IngestReport:
    """
    The outcome of one ``tailkit ingest``: per-file results and per-file errors.
    """

    files: list[FileResult]
    errors: list[IngestError]

    @property
    def ok(self) -> bool:
        """
        True when no file failed.
        """
        return not self.errors

    def totals(self) -> dict[str, int]:
        """
        Rows in, stored, rejected and duplicates over all files.
        """
        keys = ("rows_in", "stored", "rejected", "duplicates")
        return {k: sum(int(getattr(f, k)) for f in self.files) for k in keys}

    def reasons(self) -> dict[str, int]:
        """
        Rejected rows by reason over all files, most common first.
        """
        out: dict[str, int] = {}
        for f in self.files:
            for reason, n in f.reasons.items():
                out[reason] = out.get(reason, 0) + n
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


class Progress(Protocol):
    """
    Receives progress events; the CLI draws a bar from them.
    """

    def start(self, path: Path, size_bytes: int) -> None:
        """
        A file is about to be read.
        """

    def finish(self, result: FileResult | None, error: IngestError | None) -> None:
        """
        A file is done: ``result`` on success, ``error`` on failure.
        """


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _options_json(fmt: str, options: ScanOptions) -> str:
    return json.dumps(
        {"format": fmt, "map": dict(options.mapping), "set": dict(options.sets),
         "unit": options.unit},
        sort_keys=True,
    )  # fmt: skip


def ingest_paths(
    store: Store,
    paths: Iterable[str | Path],
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    strict: bool = False,
    progress: Progress | None = None,
) -> IngestReport:
    """
    Ingest files, folders and globs into the store.

    Args:
        store: An open store.
        paths: Files, folders (searched recursively) and glob patterns.
        format: ``auto`` (detect per file) or one of ``jsonl``, ``json``, ``csv``, ``parquet``,
            ``llmperf``.
        options: ``--map`` / ``--set`` / ``--unit``.
        strict: Store nothing from a file that has any bad row.
        progress: Receives a start and a finish event per file.

    Returns:
        Per-file results and errors; a failed file does not stop the others.

    Raises:
        IngestError: ``format`` or ``options`` are invalid (before any file is read).
    """
    options = options or ScanOptions()
    check_options(options)
    if format != "auto" and format not in FORMATS:
        msg = f"--format must be auto or one of {', '.join(FORMATS)}, got {format!r}"
        raise IngestError(msg)
    files, missing = expand_paths(paths)
    errors: list[IngestError] = list(missing)
    results: list[FileResult] = []
    with ThreadPoolExecutor(max_workers=1) as hasher:
        for path in files:
            size = path.stat().st_size
            if progress:
                progress.start(path, size)
            try:
                result = _ingest_file(store, path, format, options, strict, hasher)
            except QueryError as exc:
                # A statement DuckDB refused midway (disk full, a reader bug): the file's
                # transaction was rolled back, so report it like any failed file.
                failed = IngestError(f"{path}: nothing stored, DuckDB refused a step ({exc})")
                errors.append(failed)
                if progress:
                    progress.finish(None, failed)
                continue
            except IngestError as exc:
                errors.append(exc)
                if progress:
                    progress.finish(None, exc)
                continue
            results.append(result)
            if progress:
                progress.finish(result, None)
    return IngestReport(results, errors)


def _ingest_file(  # noqa: PLR0917 - private, called once
    store: Store,
    path: Path,
    format_name: str,
    options: ScanOptions,
    strict: bool,
    hasher: ThreadPoolExecutor,
) -> FileResult:
    head = read_head(path)
    detected = detect_format(path, head)
    fmt_name, why = detected.format, detected.why
    if format_name != "auto":
        fmt_name, why = format_name, "--format"
    if fmt_name == "skip":
        return FileResult(path, "skip", why, skipped=True)
    fmt = FORMATS[fmt_name]
    sha: Future[str] = hasher.submit(_sha256, path)
    sniff = fmt.sniff_sql(str(path))
    try:
        sniffed = store.fetchall(sniff) if sniff else []
    except QueryError as exc:
        msg = f"{path}: not readable as {fmt_name} ({exc})"
        raise InputFileError(msg) from None
    scan = fmt.scan(str(path), sniffed, options)
    try:
        return _load(store, path, scan, scan.select_sql, (fmt_name, why), options, strict, sha)
    except _FastReaderRefusedError:
        # The fast reader refuses a whole file for one bad line; read it line by line instead
        # so that only that line is rejected.
        assert scan.fallback_sql is not None  # noqa: S101 - raised only when there is one
        return _load(store, path, scan, scan.fallback_sql, (fmt_name, why), options, strict, sha)


class _FastReaderRefusedError(Exception):
    """
    The fast reader refused the file; the line-by-line reader should try.
    """


def _load(  # noqa: PLR0917 - private, called twice with the same shape
    store: Store,
    path: Path,
    scan: Scan,
    sql: str,
    detected: tuple[str, str],
    options: ScanOptions,
    strict: bool,
    sha: Future[str],
) -> FileResult:
    fmt_name, why = detected
    started = time.time()
    with store.transaction():
        _stage(store, path, scan, sql)
        counts = _count(store)
        _check_unit(store, path, options)
        if strict and counts["rejected"]:
            _refuse_strict(store, path, counts["rejected"])
        content = sha.result()
        opts = _options_json(fmt_name, options)
        previous = store.find_ingest(content, opts)
        ingest_id = store.next_ingest_id()
        stored = rejected = 0
        if previous is None:
            stored = _insert_calls(store, scan, path, ingest_id, content)
            rejected = _insert_rejects(store, path, ingest_id)
        rows_in = counts["rows_in"]
        result = FileResult(
            path, fmt_name, why, rows_in=rows_in, stored=stored, rejected=rejected,
            duplicates=rows_in - stored - rejected,
            reasons=_reasons(store) if previous is None else {},
            ingest_id=ingest_id,
            already_ingested=previous.ingest_id if previous else None,
            notes=scan.notes,
        )  # fmt: skip
        store.execute(
            "INSERT INTO ingests VALUES (?, ?, ?, ?, ?::JSON, ?, ?, ?, ?, to_timestamp(?), "
            "to_timestamp(?), ?)",
            [ingest_id, str(path), content, fmt_name, opts, rows_in, stored, rejected,
             result.duplicates, started, time.time(), _version()],
        )  # fmt: skip
        store.execute(f"DROP VIEW {_ROWS}")
        store.execute(f"DROP TABLE {_STAGE}")
        store.execute(f"DROP TABLE {_READER_REJECTS}")
    return result


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tailkit")
    except PackageNotFoundError:  # running from a source tree
        return "0+unknown"


def _stage(store: Store, path: Path, scan: Scan, sql: str) -> None:
    store.execute(f"DROP TABLE IF EXISTS {_STAGE}")
    for statement in scan.setup:
        store.execute(statement)
    try:
        store.execute(f"CREATE TEMP TABLE {_STAGE} AS {sql}")
    except QueryError as exc:
        if scan.fallback_sql is not None and sql != scan.fallback_sql:
            raise _FastReaderRefusedError from exc
        msg = f"{path}: not readable as {scan.format} ({exc})"
        raise InputFileError(msg) from None
    store.execute(f"DROP TABLE IF EXISTS {_READER_REJECTS}")
    if scan.reader_rejects_sql:
        store.execute(f"CREATE TEMP TABLE {_READER_REJECTS} AS {scan.reader_rejects_sql}")
    else:
        store.execute(
            f"CREATE TEMP TABLE {_READER_REJECTS} "
            "(record BIGINT, reason VARCHAR, detail VARCHAR, raw VARCHAR)"
        )
    # Rows of an uncommitted table carry rowids from a large offset: count from the first.
    base = store.fetchone(f"SELECT coalesce(min(rowid), 0) FROM {_STAGE}")
    frm, row = _row_number_sql(scan, int(base[0]) if base else 0)
    store.execute(
        f"CREATE OR REPLACE TEMP VIEW {_ROWS} AS SELECT s.*, s.rowid AS stage_rowid, "
        f"{row} AS source_row FROM {frm}"
    )
    if scan.raw_lines_sql and sql != scan.fallback_sql:
        _exact_raw_lines(store, scan.raw_lines_sql)


def _exact_raw_lines(store: Store, raw_lines_sql: str) -> None:
    """
    Show each rejected row as its line in the file, not as the values read from it.

    This reads the file a second time, so it runs only when some row was rejected.
    """
    bad = f"SELECT source_row FROM {_ROWS} WHERE reason IS NOT NULL"
    if not store.fetchall(f"{bad} LIMIT 1"):
        return
    store.execute(
        f"CREATE OR REPLACE TEMP TABLE _tailkit_lines AS SELECT record, line "
        f"FROM ({raw_lines_sql}) WHERE record IN ({bad})"
    )
    store.execute(
        f"UPDATE {_STAGE} SET raw = l.line FROM (SELECT r.stage_rowid AS rid, l.line "
        f"FROM {_ROWS} r JOIN _tailkit_lines l ON l.record = r.source_row) l "
        f"WHERE {_STAGE}.rowid = l.rid"
    )
    store.execute("DROP TABLE _tailkit_lines")


def _row_number_sql(scan: Scan, base: int) -> tuple[str, str]:
    """
    The FROM clause and the expression for each staged row's 1-based source row.

    Rows the reader refused are not in the stage, so the stage's own order skips them: shift
    each staged row past every refused row that came before it (an ASOF join on the count of
    good rows preceding each refused row).
    """
    if not scan.reader_rejects_sql:
        return f"{_STAGE} s", f"s.rowid - {base} + 1"
    return (
        f"{_STAGE} s ASOF LEFT JOIN (SELECT good_before, max(n) AS n FROM (SELECT record - "
        "row_number() OVER (ORDER BY record) AS good_before, row_number() OVER (ORDER BY "
        f"record) AS n FROM {_READER_REJECTS}) GROUP BY good_before) rr "
        f"ON s.rowid - {base} + 1 > rr.good_before",
        f"s.rowid - {base} + 1 + coalesce(rr.n, 0)",
    )


def _count(store: Store) -> dict[str, int]:
    row = store.fetchone(
        f"SELECT count(*), count(reason), (SELECT count(*) FROM {_READER_REJECTS}) FROM {_STAGE}"
    )
    assert row is not None  # noqa: S101 - aggregates always return a row
    return {"rows_in": int(row[0]) + int(row[2]), "rejected": int(row[1]) + int(row[2])}


def _check_unit(store: Store, path: Path, options: ScanOptions) -> None:
    if options.unit is not None:
        return
    row = store.fetchone(f"SELECT median(total_s) FROM {_STAGE} WHERE reason IS NULL")
    median = row[0] if row else None
    if median is not None and median > _MS_LOOKING_MEDIAN_S:
        msg = (
            f"{path}: total_s values look like milliseconds (median {median:,.0f}); "
            "pass --unit ms, or --unit s if they really are seconds"
        )
        raise UnitError(msg)


def _refuse_strict(store: Store, path: Path, rejected: int) -> None:
    rows = store.fetchall(_rejects_select(path, 0) + " ORDER BY source_row LIMIT 5")
    shown = "; ".join(f"row {r[2]}: {r[4]}" for r in rows)
    msg = f"{path}: {rejected:,} bad row(s), nothing stored (--strict); first: {shown}"
    raise StrictModeError(msg)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _rejects_select(path: Path, ingest_id: int) -> str:
    src = _literal(str(path))
    return (
        f"SELECT * FROM (SELECT {ingest_id} AS ingest_id, {src} AS source_file, source_row, "
        f"reason, detail, raw FROM {_ROWS} WHERE reason IS NOT NULL "
        f"UNION ALL SELECT {ingest_id}, {src}, record, reason, detail, raw "
        f"FROM {_READER_REJECTS})"
    )


def _insert_rejects(store: Store, path: Path, ingest_id: int) -> int:
    row = store.fetchone(f"INSERT INTO rejects {_rejects_select(path, ingest_id)}")
    return int(row[0]) if row else 0


def _insert_calls(store: Store, scan: Scan, path: Path, ingest_id: int, content: str) -> int:
    """
    Insert the good rows whose call_id is new, the first of each id within the file.
    """
    names = [c.name for c in CALL_COLUMNS]
    provenance = {
        "call_id": f"coalesce(call_id, md5({_literal(content + ':')} || source_row))",
        "source": _literal(scan.format),
        "source_file": _literal(str(path)),
        "ingest_id": str(ingest_id),
    }
    select = ", ".join(f"{provenance.get(n, n)} AS {n}" for n in names)
    # Ids this tool derives (content hash, row) are unique within a file by construction;
    # only ids that came from the source need the within-file check.
    first = (
        " QUALIFY row_number() OVER (PARTITION BY call_id ORDER BY source_row) = 1"
        if scan.has_call_id
        else ""
    )
    row = store.fetchone(
        f"INSERT INTO calls SELECT {', '.join(names)} FROM (SELECT {select} FROM {_ROWS} "
        f"WHERE reason IS NULL) n WHERE NOT EXISTS (SELECT 1 FROM calls c "
        f"WHERE c.call_id = n.call_id){first}"
    )
    return int(row[0]) if row else 0


def _reasons(store: Store) -> dict[str, int]:
    rows = store.fetchall(
        f"SELECT reason, count(*) FROM (SELECT reason FROM {_STAGE} WHERE reason IS NOT NULL "
        f"UNION ALL SELECT reason FROM {_READER_REJECTS}) GROUP BY reason ORDER BY 2 DESC, 1"
    )
    return {str(r): int(n) for r, n in rows}
