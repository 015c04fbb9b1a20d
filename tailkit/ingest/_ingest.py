"""
Ingest: detect each file's format, read it inside DuckDB, validate, and store it.

Each file is one transaction (see `tailkit.ingest._load` for the one pass that reads it).
Good rows that are new go to ``calls``, bad ones (and rows whose call id is taken by a call with
other values) to ``rejects``, and the rest are counted as duplicates, so the three counts always
add up to the rows read. A file that fails as a whole (unreadable, unmapped, wrong unit,
``--strict``) leaves nothing behind.

File names are literal: DuckDB's readers expand ``*``, ``?`` and ``[`` in a path, so the SQL
is given the name with each of them in a character class of its own (`sql_path`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import tempfile
import time

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import xxhash

from tailkit.errors import IngestError, InputFileError, MappingError, QueryError
from tailkit.formats import FORMATS, ScanOptions, detect_format
from tailkit.formats.lowlevel import (
    GENERIC,
    SUFFIXES,
    Detected,
    Scan,
    check_options,
    read_head_whole,
    sql_path,
    suffix_of,
)
from tailkit.ingest._batch import (
    Member,
    Outcome,
    Sniffs,
    can_batch,
    read_together,
    sniff_json_lines,
)
from tailkit.ingest._identity import options_json
from tailkit.ingest._load import AlreadyIngestedError, Counts, FastReaderRefusedError, FileLoad
from tailkit.ingest._long_lines import copy_without_long_lines, is_too_long_error
from tailkit.ingest._paths import expand_paths
from tailkit.ingest._streams import Spools, is_nameless, is_stream, spools
from tailkit.ingest._template import PathTemplate
from tailkit.store import Store
from tailkit.text import Advice


@dataclass(frozen=True, slots=True)
class FileResult:
    """
    What happened to one input file.

    ``rows_in == stored + rejected + duplicates`` always holds.

    Args:
        path: The file.
        format: The format it was read as (``skip`` when it was not read).
        why: Why that format (what was detected, or `FORMAT_GIVEN`).
        rows_in: Rows read.
        stored: New calls stored.
        rejected: Rows rejected: bad rows, and rows whose scoped call id is taken by a call with
            other values (``call_id_conflict``). Includes ``already_rejected``.
        duplicates: Rows equal, in every call-record column, to a stored call or to an earlier
            row of the file; never a rejected row.
        reasons: ``rejected`` by reason.
        ingest_id: The ingest's id in table ``ingests``.
        skipped: The file was not read (not a call log).
        already_ingested: The earlier ingest of the same content with the same options, when
            this one was skipped because of it: its good rows count as duplicates, its bad
            rows as rejected (again), and nothing is stored.
        already_rejected: Rejected rows already in ``rejects`` from an earlier ingest of the same
            content (same row, same reason), not written again.
        inferred_provider: Stored calls whose provider was inferred from the model name.
        notes: Phrases for the user about how columns were mapped and what was skipped.
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
    already_rejected: int = 0
    inferred_provider: int = 0
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

    @property
    def nothing_stored_all_rejected(self) -> bool:
        """
        True when rows were read, and every one of them was rejected.
        """
        totals = self.totals()
        return totals["rows_in"] > 0 and totals["rejected"] == totals["rows_in"]

    def totals(self) -> dict[str, int]:
        """
        Rows in, stored, rejected and duplicates over all files, and provider inferences.

        ``inferred_provider`` counts the stored calls whose provider was inferred from the
        model name.
        """
        keys = ("rows_in", "stored", "rejected", "duplicates", "inferred_provider")
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

    def advice(self) -> NothingStored | None:
        """
        Why this ingest stored nothing, when every row it read was rejected (else ``None``).

        Duplicates do not count as rejected: a re-run that stores nothing new is no failure.
        The advice names the commonest reason and, for the reasons one option usually fixes,
        that option.
        """
        totals = self.totals()
        if totals["stored"] or totals["duplicates"] or not totals["rejected"]:
            return None
        reason, n = next(iter(self.reasons().items()))
        fix = _FIXES.get(reason)
        return NothingStored(totals["rejected"], reason, n, None if fix is None else Advice(fix))


_FIXES = {
    "bad_status": "map the file's status values with {status_map} VALUE=STATUS",
    "missing_model": "name the model with {mapping} model=COLUMN or {sets} model=VALUE",
    "ok_without_total": "map the latency with {mapping} total_s=COLUMN",
}
"""What usually fixes a file whose every row was rejected for one reason."""


@dataclass(frozen=True, slots=True)
class NothingStored:
    """
    Why an ingest stored nothing: every row read was rejected, most often for ``reason``.

    Args:
        rejected: Rows rejected (all rows read).
        reason: The commonest reason (``rejected_rows(store, reason=...)`` lists them).
        count: Rows rejected for it.
        fix: What usually fixes it, naming `ScanOptions` fields as ``{parameter}`` tokens
            (``None``: no usual fix).
    """

    rejected: int
    reason: str
    count: int
    fix: Advice | None = None

    def render(self, name: Callable[[str], str] | None = None) -> str:
        """
        The advice in one line, each option spelt by ``name`` (default: its field's name).
        """
        fix = f"; {self.fix.render(name)}" if self.fix else ""
        return (
            f"nothing stored: all {self.rejected:,} row(s) read were rejected, most often "
            f"{self.reason} ({self.count:,}){fix}"
        )

    def __str__(self) -> str:
        return self.render()


class Progress(Protocol):
    """
    Receives progress events as files are read; the CLI draws a bar from them.

    ``begin`` comes once, before the first file; then a ``start`` and a ``finish`` per file.
    Inside a file, ``store.query_progress()`` tells how far DuckDB's statement is. Before
    ``begin``, each stream (a pipe, ``-``) is copied to a temporary file; a progress object
    that also has a ``spooling(path, copied_bytes)`` method is told how that goes (every
    64 MiB, and at the end; `tailkit.ingest._streams`).
    """

    def begin(self, store: Store, total_bytes: int) -> None:
        """
        The files to read, ``total_bytes`` in all, are about to be read into ``store``.
        """

    def start(self, path: Path, size_bytes: int) -> None:
        """
        A file is about to be read.
        """

    def finish(self, result: FileResult | None, error: IngestError | None) -> None:
        """
        A file is done: ``result`` on success, ``error`` on failure.
        """


def content_hash(path: Path) -> str:
    """
    The identity of a file's bytes: ``xxh3_128:`` and 32 hex digits.

    XXH3 reads at memory speed; a cryptographic hash would cost a core for as long as DuckDB
    reads the file, and this hash only has to tell files apart, not resist an attacker.
    """
    digest = xxhash.xxh3_128()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return f"xxh3_128:{digest.hexdigest()}"


def ingest_paths(
    store: Store,
    paths: Iterable[str | Path],
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    strict: bool = False,
    progress: Progress | None = None,
    path_template: str | None = None,
) -> IngestReport:
    """
    Ingest files, folders and globs into the store.

    Small JSON-lines and Parquet files that read alike are read together, in one scan per
    format (`tailkit.ingest._batch`), with the same per-file results as one at a time; they are
    settled first, as if read in order, and then every other file, in order.

    Args:
        store: An open store.
        paths: Files, folders (searched recursively) and glob patterns; a pipe
            (``/dev/fd/63`` from ``<(zcat …)``, ``/dev/stdin``) or ``-`` (standard input) is
            copied to a temporary file first and read under its own name.
        format: ``auto`` (detect per file by content) or a format name (`FORMATS`; ``tailkit
            ingest --list-formats``).
        options: How to map, set and convert the files' columns.
        strict: Store nothing from a file that has any bad row.
        progress: Receives the bytes to read, then a start and a finish event per file.
        path_template: Where the files' paths carry column values, e.g. ``{model}/*.jsonl``:
            matched against the end of each path, each ``{column}`` gives every row of the
            file that value (`tailkit.ingest._template`).

    Returns:
        Per-file results and errors; a failed file does not stop the others.

    Raises:
        IngestError: ``format``, ``options`` or ``path_template`` are invalid (before any file
            is read).
    """
    options, files, missing = checked_inputs(paths, format, options)
    template = (
        None if path_template is None else PathTemplate.parse(path_template, taken=_taken(options))
    )
    tell = getattr(progress, "spooling", None)
    with spools(tell if callable(tell) else None) as streams:
        return _ingest_files(
            store, files, missing, streams, format=format, options=options, strict=strict,
            progress=progress, template=template,
        )  # fmt: skip


def _ingest_files(
    store: Store,
    files: list[Path],
    missing: list[IngestError],
    streams: Spools,
    *,
    format: str,
    options: ScanOptions,
    strict: bool,
    progress: Progress | None,
    template: PathTemplate | None,
) -> IngestReport:
    """
    `ingest_paths` over ``files``, each stream among them first copied into ``streams``.
    """
    reads: dict[int, Path] = {}  # a stream's spool, by position: what is read under its name
    refused: dict[int, IngestError] = {}
    for index, path in enumerate(files):
        if is_stream(path):
            try:
                reads[index] = streams.spool(path)
            except InputFileError as exc:
                refused[index] = exc
    sizes = [
        0 if index in refused else reads.get(index, path).stat().st_size
        for index, path in enumerate(files)
    ]
    run = _Run(store, files, sizes, progress)
    if progress:
        progress.begin(store, sum(run.sizes))
    planned: dict[int, tuple[Detected, Detected, ScanOptions]] = {}
    hashes: dict[int, str] = {}  # of the small files, from the bytes detection read
    with ThreadPoolExecutor(max_workers=1) as early:
        # DuckDB sniffs the JSON-lines files while Python detects every file's format.
        plain = [i for i in range(len(files)) if i not in reads and i not in refused]
        sniffs = _early_sniff(store, [files[i] for i in plain], [sizes[i] for i in plain], early)
        for index, path in enumerate(files):
            if index in refused:
                run.done(index, None, refused[index])
                continue
            try:
                with _real_name(path, str(reads.get(index, path))):
                    detected, chosen, digest = _choose_format(reads.get(index, path), format)
                if digest is not None:
                    hashes[index] = digest
                # A file not read (an llmperf summary) takes no values from the template.
                skipped = chosen.format == "skip"
                planned[index] = (
                    detected, chosen, options if skipped else _file_options(path, options, template)
                )  # fmt: skip
            except IngestError as exc:
                run.done(index, None, exc)
        # A stream is read alone: a batch reads files by their own names.
        members = _batch_members(
            files, run.sizes, {i: p for i, p in planned.items() if i not in reads}, hashes
        )
        if sniffs is not None:
            sniffs.exception()  # the store is free again
    batched = {m.index for m in members}
    alone = [i for i in planned if i not in batched]
    if members:
        outcomes, later = read_together(
            store, members, template=template, base_options=options, strict=strict,
            early_sniff=sniffs,
        )  # fmt: skip
        for outcome in outcomes:
            run.done(outcome.member.index, _batched_result(outcome), None)
        alone.extend(m.index for m in later)
    with ThreadPoolExecutor(max_workers=1) as hasher:
        for index in sorted(alone):
            detected, chosen, file_options = planned[index]
            run.alone(
                index,
                functools.partial(
                    _ingest_file, store, files[index], (detected, chosen), file_options,
                    strict=strict, hasher=hasher, path_fields=_path_fields(template, file_options),
                    spool=reads.get(index),
                ),
            )  # fmt: skip
    errors: list[IngestError] = [*missing, *(run.failures[i] for i in sorted(run.failures))]
    return IngestReport([run.results[i] for i in sorted(run.results)], errors)


@dataclass(slots=True)
class _Run:
    """
    The files of one ingest, what became of each (by position), and the progress told.
    """

    store: Store
    files: list[Path]
    sizes: list[int]
    progress: Progress | None
    results: dict[int, FileResult] = field(default_factory=dict)
    failures: dict[int, IngestError] = field(default_factory=dict)

    def done(self, index: int, result: FileResult | None, error: IngestError | None) -> None:
        """
        Record a file read in a batch, or refused before reading; tell the progress.
        """
        if result is not None:
            self.results[index] = result
        if error is not None:
            self.failures[index] = error
        if self.progress:
            self.progress.start(self.files[index], self.sizes[index])
            self.progress.finish(result, error)

    def alone(self, index: int, ingest: Callable[[], FileResult]) -> None:
        """
        Read one file by itself, telling the progress as it starts and ends.
        """
        path = self.files[index]
        if self.progress:
            self.progress.start(path, self.sizes[index])
        try:
            result = ingest()
        except QueryError as exc:
            # A statement DuckDB refused midway (disk full, a reader bug): the file's
            # transaction was rolled back, so report it like any failed file.
            failed = IngestError(f"{path}: nothing stored, DuckDB refused a step ({exc})")
            self.failures[index] = failed
            if self.progress:
                self.progress.finish(None, failed)
            return
        except IngestError as exc:
            self.failures[index] = exc
            if self.progress:
                self.progress.finish(None, exc)
            return
        self.results[index] = result
        if self.progress:
            self.progress.finish(result, None)


def _early_sniff(
    store: Store, files: list[Path], sizes: list[int], pool: ThreadPoolExecutor
) -> Future[Sniffs] | None:
    """
    Start sniffing the files that will likely be read together as JSON lines, by their names.

    A guess from the suffix: the batch uses the result only for files detected as JSON lines,
    and sniffs again (after detection) when the guess fails or misses one.
    """
    likely = [
        path
        for path, size in zip(files, sizes, strict=True)
        if SUFFIXES.get(suffix_of(path)) == "jsonl"
        and can_batch(path, "jsonl", size, sql_path(str(path)))
    ]
    if len(likely) < 2:
        return None
    return pool.submit(sniff_json_lines, store, likely)


def _batched_result(outcome: Outcome) -> FileResult:
    m = outcome.member
    return _file_result(
        (m.path, m.format, m.why), outcome.counts, outcome.notes, outcome.already_ingested
    )


def _file_result(
    detected: tuple[Path, str, str],
    counts: Counts,
    notes: tuple[str, ...],
    already_ingested: int | None = None,
) -> FileResult:
    """
    One file's result from its counts, read alone or in a batch.

    Rows rejected before (by an earlier ingest of the same content) get the note that says so.
    """
    if already_ingested is not None and counts.rejected:
        notes += (f"{counts.rejected:,} row(s) already rejected in ingest #{already_ingested}",)
    elif already_ingested is None and counts.already_rejected:
        notes += (
            f"{counts.already_rejected:,} rejected row(s) already in rejects from an earlier "
            "ingest of the same content; not stored again",
        )
    return FileResult(
        *detected, rows_in=counts.rows_in, stored=counts.stored, rejected=counts.rejected,
        duplicates=counts.duplicates, reasons=counts.reasons, ingest_id=counts.ingest_id,
        already_ingested=already_ingested, already_rejected=counts.already_rejected,
        inferred_provider=counts.inferred_provider, notes=notes,
    )  # fmt: skip


def _taken(options: ScanOptions) -> dict[str, str]:
    """
    The columns ``--map`` and ``--set`` fill, to the option that fills them.
    """
    return {**dict.fromkeys(options.mapping, "mapping"), **dict.fromkeys(options.sets, "sets")}


def _file_options(path: Path, options: ScanOptions, template: PathTemplate | None) -> ScanOptions:
    """
    A file's options: ``options`` with the values its path gives under ``template`` set.

    Raises:
        InputFileError: The path does not match the template.
    """
    if template is None:
        return options
    return dataclasses.replace(options, sets={**options.sets, **template.values(path)})


def _path_fields(template: PathTemplate | None, options: ScanOptions) -> dict[str, str]:
    fields = template.fields if template else ()
    return {name: options.sets[name] for name in fields if name in options.sets}


def _batch_members(
    files: list[Path],
    sizes: list[int],
    planned: Mapping[int, tuple[Detected, Detected, ScanOptions]],
    hashes: Mapping[int, str],
) -> list[Member]:
    """
    The files to read together (`tailkit.ingest._batch`), with their content hashes.

    ``hashes`` holds those already known (of files detection read whole).
    """
    members = []
    recorded: dict[tuple[str, int], str] = {}  # one options text per format and options
    for index, (_, chosen, file_options) in planned.items():
        path = files[index]
        if chosen.format == "skip" or not can_batch(
            path, chosen.format, sizes[index], sql_path(str(path))
        ):
            continue
        key = (chosen.format, id(file_options))  # the options live in `planned`: ids stay theirs
        if key not in recorded:
            recorded[key] = options_json(chosen.format, file_options)
        members.append(
            Member(
                index,
                path,
                chosen.format,
                chosen.why,
                file_options,
                recorded[key],
                hashes.get(index) or content_hash(path),
                sizes[index],
            )
        )
    return members if len(members) >= 2 else []


def _ingest_file(
    store: Store,
    path: Path,
    formats: tuple[Detected, Detected],
    options: ScanOptions,
    *,
    strict: bool,
    hasher: ThreadPoolExecutor,
    path_fields: Mapping[str, str],
    spool: Path | None = None,
) -> FileResult:
    """
    Read the file ``path`` alone (``spool``: the copy of the stream of that name, to read).
    """
    detected, chosen = formats
    fmt_name, why = chosen.format, chosen.why
    if fmt_name == "skip":
        return FileResult(path, "skip", why, skipped=True)
    source = spool or path
    load_file = functools.partial(
        _load_file, store, path, detected=(fmt_name, why),
        looks_like=_looks_like(detected, fmt_name), options=options, strict=strict, hasher=hasher,
        path_fields=path_fields, source=source,
    )  # fmt: skip
    try:
        return load_file(source)
    except InputFileError as exc:
        if not is_too_long_error(str(exc)):
            raise
        # A line longer than the readers may hold refuses the whole file: read a copy in which
        # each such line is a placeholder, rejected with its true length.
        with tempfile.TemporaryDirectory(prefix="tailkit-long-lines-") as tmp:
            try:
                copy, long_lines = copy_without_long_lines(source, Path(tmp))
            except (OSError, EOFError):
                raise exc from None
            if not long_lines:
                raise
            return load_file(copy, long_lines=long_lines)


def _load_file(
    store: Store,
    path: Path,
    read_path: Path,
    *,
    detected: tuple[str, str],
    looks_like: str,
    options: ScanOptions,
    strict: bool,
    hasher: ThreadPoolExecutor,
    path_fields: Mapping[str, str],
    source: Path,
    long_lines: Mapping[int, int] | None = None,
) -> FileResult:
    """
    Sniff, scan and load ``read_path`` as the file ``path`` (the same file, or a copy).

    ``source``: the file whose bytes are the content (``path``, or a stream's spool).
    """
    fmt_name, why = detected
    literal_path = sql_path(str(read_path))
    with _real_name(path, literal_path), _from_template(path, path_fields):
        scan = sniffed_scan(store, path, literal_path, fmt_name, options, looks_like=looks_like)
    digest: Future[str] = hasher.submit(content_hash, source)
    load = FileLoad(
        store, path, scan, options, options_json(fmt_name, options), digest.result,
        long_lines=long_lines or {}, nameless=source != path and is_nameless(path),
    )  # fmt: skip
    started = time.time()
    try:
        with _real_name(path, literal_path):
            try:
                counts = _transaction(load, scan.select_sql, strict=strict, started=started)
            except FastReaderRefusedError:
                # The fast reader refuses a whole file for one value that does not fit; read
                # it the forgiving way so that only the bad rows are rejected.
                assert scan.fallback_sql is not None  # noqa: S101 - raised only when there is one
                counts = _transaction(load, scan.fallback_sql, strict=strict, started=started)
    except AlreadyIngestedError as again:
        return _already_ingested(load, again, detected=(fmt_name, why), started=started)
    return _file_result((path, fmt_name, why), counts, scan.notes)


def _already_ingested(
    load: FileLoad, again: AlreadyIngestedError, *, detected: tuple[str, str], started: float
) -> FileResult:
    """
    Record a file skipped because the same content was ingested with the same options.

    Its rows are the earlier ingest's rows: the bad ones are rejected again (counted, not
    stored again), the rest are duplicates.
    """
    n, rejected = again.rows_in, again.rejected
    with load.store.transaction():
        ingest_id = load.store.next_ingest_id()
        load.record(ingest_id, load.content_hash(), n, 0, rejected, n - rejected, started)
    counts = Counts(ingest_id, n, 0, rejected, n - rejected, again.reasons, rejected)
    return _file_result((load.path, *detected), counts, load.scan.notes, again.previous.ingest_id)


def checked_inputs(
    paths: Iterable[str | Path], format: str, options: ScanOptions | None
) -> tuple[ScanOptions, list[Path], list[IngestError]]:
    """
    The options (defaults for ``None``), the files ``paths`` name and the paths that match none.

    Raises:
        IngestError: ``format`` or ``options`` are invalid (before any file is read).
    """
    options = options or ScanOptions()
    check_options(options)
    if format != "auto" and format not in FORMATS:
        msg = f"{{field}} must be auto or one of {', '.join(FORMATS)}, got {format!r}"
        raise IngestError(msg, field="format", value=format)
    files, missing = expand_paths(paths)
    return options, files, list(missing)


def sniffed_scan(
    store: Store,
    path: Path,
    literal_path: str,
    fmt_name: str,
    options: ScanOptions,
    *,
    looks_like: str = "",
) -> Scan:
    """
    Sniff the file with its format's query and build its scan (inside `_real_name`).

    Raises:
        InputFileError: The format's sniffing query cannot read the file (``looks_like``:
            what it looks like instead, appended to the message).
    """
    fmt = FORMATS[fmt_name]
    sniff = fmt.sniff_sql(literal_path)
    try:
        sniffed = store.fetchall(sniff) if sniff else []
    except QueryError as exc:
        msg = f"{path}: not readable as {fmt_name} ({exc}){looks_like}"
        raise InputFileError(msg, field="format" if looks_like else None) from None
    return fmt.scan(literal_path, sniffed, options)


@contextlib.contextmanager
def _real_name(path: Path, literal_path: str) -> Iterator[None]:
    """
    Show the file's real name in errors raised inside, not the one written for the readers.
    """
    try:
        yield
    except (IngestError, QueryError) as exc:
        if literal_path == str(path) or literal_path not in str(exc):
            raise
        template = getattr(exc, "template", str(exc)).replace(literal_path, str(path))
        raise type(exc)(template, field=exc.field, value=exc.value, fix=exc.fix) from exc
    except OSError as exc:
        # A format that opens the file itself, by the name written for the readers.
        msg = f"{path}: cannot read ({exc.strerror or exc})"
        raise InputFileError(msg) from exc


@contextlib.contextmanager
def _from_template(path: Path, path_fields: Mapping[str, str]) -> Iterator[None]:
    """
    Say that a value the path template gives would replace the file's own column.

    The template's values are set like ``sets`` values, whose refusal would advise
    ``overrides``; for a template the fix is the template.
    """
    try:
        yield
    except MappingError as exc:
        name = str(exc.value).partition("=")[0]
        if exc.field != "overrides" or name not in path_fields:
            raise
        msg = (
            f"{path}: {{field}} gives {name}={path_fields[name]} from the path, but the file has "
            f"its own {name} column; leave {name} out of the template to keep the file's values"
        )
        raise MappingError(
            msg, field="path_template", value=f"{name}={path_fields[name]}"
        ) from None


def _looks_like(detected: Detected, forced: str) -> str:
    if detected.format in (forced, "skip"):
        return ""
    return (
        f"; it looks like {detected.format} ({detected.why}): "
        f"use {{field}} {detected.format} or {{field}} auto"
    )


FORMAT_GIVEN = "format given"
"""The ``why`` of a file read in the format asked for, not the one detected."""


def choose_format(path: Path, format_name: str) -> tuple[Detected, Detected]:
    """
    What ``path`` looks like, and the format to read it as (``--format``, checked, wins).

    Raises:
        InputFileError: The file cannot be detected and no ``--format`` was given, or the
            given one does not fit what it is.
    """
    detected, chosen, _ = _choose_format(path, format_name)
    return detected, chosen


def _choose_format(path: Path, format_name: str) -> tuple[Detected, Detected, str | None]:
    """
    `choose_format`, and the file's content hash when its first bytes were all of it.

    A small file (most files of a many-file folder) is read whole by the detection: hashing
    those bytes spares opening and reading it a second time for the hash.
    """
    digest = None
    try:
        head, whole = read_head_whole(path)
        if whole:
            digest = f"xxh3_128:{xxhash.xxh3_128(head).hexdigest()}"
        detected = detect_format(path, head)
    except InputFileError:
        if format_name == "auto":
            raise
        detected = Detected(format_name, FORMAT_GIVEN)  # forced: the reader is the judge
    if format_name == "auto":
        return detected, detected, digest
    _check_forced(path, format_name, detected)
    return detected, Detected(format_name, FORMAT_GIVEN), digest


def _check_forced(path: Path, forced: str, detected: Detected) -> None:
    """
    Refuse a specific --format on a file another specific format recognises.

    A generic format (jsonl, json, csv, parquet) may read anything of its kind; but
    ``--format litellm`` on a Helicone export would only reject every row.
    """
    if forced in GENERIC or detected.format in (forced, "skip", *GENERIC):
        return
    msg = f"{path}: {{field}} {forced} does not fit this file{_looks_like(detected, forced)}"
    raise InputFileError(msg, field="format", value=forced)


def _transaction(load: FileLoad, sql: str, *, strict: bool, started: float) -> Counts:
    with load.store.transaction():
        return load.run(sql, strict=strict, started=started)
