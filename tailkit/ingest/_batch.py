"""
Many small files read together: one scan per format over the file list, settled as a set.

A benchmark tree holds hundreds of files of a hundred rows each. Read one at a time, each file
costs some thirty statements (sniff, read, number, check, derive ids, settle, count, record),
70 ms of fixed work for a few milliseconds of reading: 700 files took 40 times as long as the
same rows in one file. Here the files of one format that sniff alike are read by one scan
(DuckDB's readers take a list of files and say which file each row came from), and every step
after the read is the per-file step grouped by ingest: each file still gets its own ingest id,
row numbers, derived ids, rejects, duplicates and counts, exactly as if it had been read alone,
in order, after the files before it.

Only what is common runs here: JSON lines and Parquet files (the readers that number their rows
or keep file order and need no rejects table of their own), small enough that the fixed work
dominates (`MAX_FILE_BYTES`), whose names need no escaping. A file with anything unusual is read
alone afterwards, by the per-file path, which reports it as it always has: a file whose content
was ingested before (or is a copy of an earlier file of the batch), whose durations look like
milliseconds, or that has bad rows under ``strict``. When the batch itself fails (a value the
fast reader refuses, a line too long, a mapping that does not fit), nothing of it is kept and
each of its files is read alone, so one bad file still fails alone, by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailkit.errors import IngestError, QueryError
from tailkit.formats import FORMATS, ScanOptions
from tailkit.formats.lowlevel import REJECT_STATUS, Scan, literal, scrub_values
from tailkit.ingest._identity import (
    CONFLICT,
    SCOPE,
    content_text_sql,
    differences_sql,
    equal_sql,
    same_scope_sql,
)
from tailkit.ingest._load import STORED_ATTRS, Counts, check_median, stored_columns, version
from tailkit.ingest._template import PathTemplate
from tailkit.record import SOURCE_COLUMNS
from tailkit.store import Store
from tailkit.store.lowlevel import IngestRecord


FORMATS_READ_TOGETHER = ("jsonl", "parquet")
"""Formats whose files are read in one scan (the rest are read one file at a time)."""

MAX_FILE_BYTES = 4 << 20
"""Files larger than this are read alone: their read outweighs the fixed per-file work."""

_MARKER_PATH = "\x02tailkit-batch-file\x03"
_FILE = "_tk_file"
_FILES = "_tailkit_batch_files"
_BAD = "_tailkit_batch_bad_rows"
_MATCHES = "_tailkit_batch_matches"
_REJECT = literal(REJECT_STATUS)
_READERS = {"jsonl": "read_json", "parquet": "read_parquet"}


@dataclass(slots=True)
class Member:
    """
    One file of a batch.

    Args:
        index: Its position among the files of the ingest.
        path: The file.
        format: Its format.
        why: Why that format.
        options: Its options (with the values its path gives, under a path template).
        options_json: ``options`` as stored in ``ingests``.
        content: Its content hash.
        size: Its size in bytes.
    """

    index: int
    path: Path
    format: str
    why: str
    options: ScanOptions
    options_json: str
    content: str
    size: int
    previous: IngestRecord | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """
    What a batched file came to, in the per-file path's `Counts`.

    ``already_ingested``: the earlier ingest of the same content, when this one stored nothing.
    """

    member: Member
    counts: Counts
    notes: tuple[str, ...]
    already_ingested: int | None = None


class _BatchRefusedError(Exception):
    """
    The batch cannot be read together; its files are read alone.
    """


def can_batch(path: Path, fmt: str, size: int, sql_name: str) -> bool:
    """
    Whether a file may be read in a batch (see the module docstring).
    """
    return fmt in FORMATS_READ_TOGETHER and size <= MAX_FILE_BYTES and sql_name == str(path)


def read_together(
    store: Store,
    members: Sequence[Member],
    *,
    template: PathTemplate | None,
    base_options: ScanOptions,
    strict: bool,
    early_sniff: Future[Sniffs] | None = None,
) -> tuple[list[Outcome], list[Member]]:
    """
    Read ``members`` in as few scans as their formats and columns allow.

    ``early_sniff``: the JSON-lines files' sniffs, started before their formats were known.

    Returns:
        The outcomes of the files read, and the files to read alone (in their order).
    """
    alone: list[Member] = []
    outcomes: list[Outcome] = []
    fresh = _not_seen_before(store, members, alone)
    by_format: dict[str, list[Member]] = {}
    for member in fresh:
        by_format.setdefault(member.format, []).append(member)
    for fmt, group in by_format.items():
        try:
            sniffed = _sniff(store, fmt, group, early_sniff)
        except QueryError:
            alone.extend(group)
            continue
        by_index = {m.index: m for m in group}
        alike = (
            _alike(sniffed)
            if fmt == "jsonl"
            else [([i], list(cols)) for i, cols in sniffed.items()]
        )
        if fmt == "parquet":
            merged: dict[tuple[Any, ...], list[int]] = {}
            for i, cols in sniffed.items():
                merged.setdefault(cols, []).append(i)
            alike = [(ids, list(cols)) for cols, ids in merged.items()]
        for indexes, columns in alike:
            same = [by_index[i] for i in indexes]
            if len(same) < 2:
                alone.extend(same)
                continue
            try:
                done, later = _read_batch(
                    store, fmt, same, columns, template=template,
                    base_options=base_options, strict=strict,
                )  # fmt: skip
            except (_BatchRefusedError, IngestError, QueryError):
                alone.extend(same)
                continue
            outcomes.extend(done)
            alone.extend(later)
    order = {m.index: i for i, m in enumerate(members)}
    alone.sort(key=lambda m: order[m.index])
    return outcomes, alone


def _not_seen_before(store: Store, members: Sequence[Member], alone: list[Member]) -> list[Member]:
    """
    The members to read: each with the earlier ingest of its content and options, if any.

    A file ingested before is read with the others and stores nothing (`_again`). A copy of an
    earlier file of the batch goes to ``alone``: read after the batch, it finds that file's
    ingest, as it would have had the files been read in order.
    """
    hashes = sorted({m.content for m in members})
    earlier: dict[tuple[str, str], IngestRecord] = {}
    for start in range(0, len(hashes), 500):
        chunk = ", ".join(literal(h) for h in hashes[start : start + 500])
        for row in store.fetchall(
            "SELECT ingest_id, source_file, content_hash, format, rows_in, stored, rejected, "
            f"duplicates, options::VARCHAR FROM ingests WHERE content_hash IN ({chunk}) "
            "QUALIFY row_number() OVER (PARTITION BY content_hash, options::VARCHAR "
            "ORDER BY ingest_id) = 1"
        ):
            earlier[str(row[2]), str(row[8])] = IngestRecord(*row[:8])
    fresh = []
    taken: set[tuple[str, str]] = set()
    for member in members:
        key = (member.content, member.options_json)
        if key in taken:
            alone.append(member)
            continue
        taken.add(key)
        member.previous = earlier.get(key)
        fresh.append(member)
    return fresh


def _again(
    store: Store,
    again: Sequence[Member],
    ids: dict[int, int],
    read: dict[int, tuple[int, ...]],
    notes: tuple[str, ...],
) -> list[Outcome]:
    """
    The outcomes of files ingested before with the same options; their rows are deleted.

    As `tailkit.ingest._load.FileLoad` says it: the rows read now are the rows read then, so
    the bad ones are rejected again (counted, not stored again) and the rest are duplicates;
    the earlier ``call_id_conflict`` rejects are the rest of its ``rejected``.
    """
    if not again:
        return []
    listed = ", ".join(str(ids[m.index]) for m in again)
    bad: dict[int, dict[str, int]] = {}
    for iid, reason, n in store.fetchall(
        f"SELECT ingest_id, attrs->>'reason', count(*) FROM calls WHERE ingest_id IN ({listed}) "
        f"AND status = {_REJECT} GROUP BY 1, 2"
    ):
        bad.setdefault(int(iid), {})[str(reason)] = int(n)
    store.execute(f"DELETE FROM calls WHERE ingest_id IN ({listed})")
    outcomes = []
    for member in again:
        assert member.previous is not None  # noqa: S101 - only files ingested before
        iid = ids[member.index]
        rows_in = read.get(iid, (0, 0))[0]
        reasons = bad.get(iid, {})
        rejected = max(member.previous.rejected, sum(reasons.values()))
        if rejected > sum(reasons.values()):
            reasons[CONFLICT] = rejected - sum(reasons.values())
        rejected = min(rejected, rows_in)
        ordered = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        counts = Counts(iid, rows_in, 0, rejected, rows_in - rejected, ordered, rejected)
        outcomes.append(Outcome(member, counts, notes, member.previous.ingest_id))
    return outcomes


def _sniff(
    store: Store, fmt: str, group: Sequence[Member], early: Future[Sniffs] | None
) -> dict[int, tuple[tuple[Any, ...], ...]]:
    """
    Each file's sniffed columns, from one query over the group.

    JSON lines: the merged keys of each file's first `SAMPLE` objects, as its own sniff reads
    them (a file with more objects is sniffed alone), from ``early`` when it covers the group.
    Parquet: each file's schema.
    """
    out: dict[int, tuple[tuple[Any, ...], ...]] = {}
    if fmt == "parquet":
        for member in group:
            rows = store.fetchall(
                f"DESCRIBE SELECT * FROM read_parquet({literal(str(member.path))})"
            )
            out[member.index] = tuple(tuple(r) for r in rows)
        return out
    names = {str(m.path) for m in group}
    sniffs = None
    if early is not None:
        with contextlib.suppress(QueryError):
            sniffs = early.result()
    if sniffs is None or not names <= sniffs.files:
        sniffs = sniff_json_lines(store, [m.path for m in group])
    by_file, too_many = sniffs.columns, sniffs.too_many
    fmt_adapter = FORMATS[fmt]
    for member in group:
        name = str(member.path)
        if name in too_many:
            sniff = fmt_adapter.sniff_sql(name)
            found = store.fetchall(sniff) if sniff else []
        else:
            found = by_file.get(name, [])
        out[member.index] = tuple((str(key), str(kind)) for key, kind in found)
    return out


@dataclass(frozen=True, slots=True)
class Sniffs:
    """
    The sniffs of many JSON-lines files, from one query.

    Args:
        files: The files asked about.
        columns: File name → its ``(key, type)`` rows, as `tailkit.formats._lines.sniff_sql`
            gives them (a file without objects has none).
        too_many: Files with more objects than the sniff's sample: to be sniffed alone.
    """

    files: frozenset[str]
    columns: dict[str, list[tuple[Any, ...]]]
    too_many: frozenset[str]


def sniff_json_lines(store: Store, paths: Sequence[Path]) -> Sniffs:
    """
    Sniff many JSON-lines files in one query, each as its own sniff would.

    Safe to run in another thread while the caller does no other work on ``store`` (ingest
    runs it while Python detects the files' formats, which DuckDB does not need).

    Raises:
        QueryError: A file cannot be read this way (then each is sniffed as its group needs).
    """
    from tailkit.formats._lines import SAMPLE, objects

    files = "[" + ", ".join(literal(str(p)) for p in paths) + "]"
    reader = objects(_MARKER_PATH).replace(
        literal(_MARKER_PATH), f"{files}, filename={literal(_FILE)}"
    )
    rows = store.fetchall(
        f"SELECT {_FILE}, n, e.key, CASE WHEN json_type(e.value) = 'VARCHAR' THEN "
        "e.value->>'$' ELSE 'JSON' END FROM (SELECT {f}, n, unnest(map_entries(CAST(s AS "
        "MAP(VARCHAR, JSON)))) AS e FROM (SELECT {f}, count(*) AS n, json_group_structure("
        "CASE WHEN json_type(json) = 'OBJECT' THEN json END) AS s FROM {r} GROUP BY {f}))".format(
            f=_FILE, r=reader
        )
    )
    columns: dict[str, list[tuple[Any, ...]]] = {}
    too_many: set[str] = set()
    for name, n, key, kind in rows:
        columns.setdefault(str(name), []).append((key, kind))
        if int(n) > SAMPLE:
            too_many.add(str(name))
    return Sniffs(frozenset(str(p) for p in paths), columns, frozenset(too_many))


def _alike(sniffed: dict[int, tuple[tuple[Any, ...], ...]]) -> list[tuple[list[int], list[Any]]]:
    """
    The files that can share one scan, each group with the columns to read them with.

    Files read alike when they have the same keys in the same order and the same read type
    for each key (`sniffed_types`), except where one file saw only nulls: a key no row of a
    file fills reads as nothing in any type, so it takes the other files' type.
    """
    from tailkit.formats._lines import sniffed_types

    exact: dict[tuple[tuple[Any, ...], ...], list[int]] = {}
    for index, found in sniffed.items():
        exact.setdefault(found, []).append(index)
    groups: list[tuple[list[int], list[tuple[str, str]]]] = []
    for found, indexes in exact.items():
        for members, columns in groups:
            if [k for k, _ in columns] == [k for k, _ in found] and all(
                _fits(a, b) for (_, a), (_, b) in zip(columns, found, strict=True)
            ):
                members.extend(indexes)
                columns[:] = [
                    (k, b if a == "NULL" else a)
                    for (k, a), (_, b) in zip(columns, found, strict=True)
                ]
                break
        else:
            groups.append((list(indexes), list(found)))
    return [(sorted(members), sniffed_types(columns)) for members, columns in groups]


def _fits(a: str, b: str) -> bool:
    from tailkit.formats._lines import sniffed_types

    if "NULL" in (a, b):
        return True
    return sniffed_types([("k", a)]) == sniffed_types([("k", b)])


def _file_list(group: Sequence[Member]) -> str:
    return "[" + ", ".join(literal(str(m.path)) for m in group) + "]"


def _batch_scan(
    fmt: str,
    group: Sequence[Member],
    sniffed: list[tuple[Any, ...]],
    template: PathTemplate | None,
    base_options: ScanOptions,
) -> Scan:
    """
    The group's scan: the format's own, over the file list, carrying each row's file name.

    The format builds its scan for a stand-in file whose path-template values are stand-ins
    too; the reader call is then given the list, and each stand-in value becomes the
    template's expression over the file name.

    Raises:
        _BatchRefusedError: The scan is not one this module can rewrite.
    """
    sets = dict(base_options.sets)
    markers: dict[str, str] = {}
    for name in template.fields if template else ():
        markers[name] = sets[name] = f"\x02tailkit-path-{name}\x03"
    options = dataclasses.replace(base_options, sets=sets)
    scan = FORMATS[fmt].scan(_MARKER_PATH, sniffed, options)
    reader = f"{_READERS[fmt]}({literal(_MARKER_PATH)}, "
    sql = scan.select_sql
    if (
        scan.setup
        or scan.reader_rejects_sql
        or sql.count(reader) != 1
        or not sql.startswith("SELECT\n")
    ):
        raise _BatchRefusedError
    sql = sql.replace(reader, f"{_READERS[fmt]}({_file_list(group)}, filename={literal(_FILE)}, ")
    for name, marker in markers.items():
        assert template is not None  # noqa: S101 - markers come from the template
        sql = sql.replace(literal(marker), template.value_sql(_FILE, name))
    if _MARKER_PATH in sql or "\x02" in sql:
        raise _BatchRefusedError
    sql = "SELECT\n  " + _FILE + ", " + sql.removeprefix("SELECT\n")
    return dataclasses.replace(scan, select_sql=sql, fallback_sql=None)


def _read_batch(
    store: Store,
    fmt: str,
    group: Sequence[Member],
    sniffed: list[tuple[Any, ...]],
    *,
    template: PathTemplate | None,
    base_options: ScanOptions,
    strict: bool,
) -> tuple[list[Outcome], list[Member]]:
    """
    Read one group in one transaction; return its outcomes and the files to read alone.

    Raises:
        _BatchRefusedError, IngestError, QueryError: The batch failed; nothing was kept.
    """
    scan = _batch_scan(fmt, group, sniffed, template, base_options)
    started = time.time()
    with store.transaction():
        first = int(
            store.fetchall(f"SELECT min(nextval('ingest_id_seq')) FROM range({len(group)})")[0][0]
        )
        ids = {m.index: first + i for i, m in enumerate(group)}
        last = first + len(group) - 1
        batch = f"ingest_id BETWEEN {first} AND {last}"
        _files_table(store, group, ids)
        had_calls = bool(store.fetchall(f"SELECT 1 FROM calls WHERE NOT ({batch}) LIMIT 1"))
        columns = ", ".join(c.name for c in SOURCE_COLUMNS)
        store.execute(
            f"INSERT INTO calls ({columns}, source, source_file, source_row, ingest_id, attrs) "
            f"SELECT {stored_columns()}, {literal(fmt)}, {_FILE}, source_row, {first}, "
            f"{STORED_ATTRS} FROM ({scan.select_sql})"
        )
        _number(store, first)
        read = _per_ingest(
            store,
            f"SELECT ingest_id, count(*), count(*) FILTER (status = {_REJECT}) FROM calls "
            f"WHERE {batch} GROUP BY 1",
        )
        later = _misfits(store, group, ids, read, batch, scan=scan, strict=strict)
        if later:
            gone = ", ".join(str(ids[m.index]) for m in later)
            store.execute(f"DELETE FROM calls WHERE ingest_id IN ({gone})")
            store.execute(f"DELETE FROM {_FILES} WHERE _tk_id IN ({gone})")
        kept = [m for m in group if m not in later and m.previous is None]
        again = _again(
            store, [m for m in group if m not in later and m.previous], ids, read, scan.notes
        )
        _derive_ids(store, batch)
        store.execute(f"DROP TABLE IF EXISTS {_BAD}")
        store.execute(
            f"CREATE TEMP TABLE {_BAD} AS SELECT ingest_id, source_file, source_row, "
            "attrs->>'reason' AS reason, attrs->>'detail' AS detail, attrs->>'raw' AS raw "
            f"FROM calls WHERE {batch} AND status = {_REJECT}"
        )
        store.execute(f"DELETE FROM calls WHERE {batch} AND status = {_REJECT}")
        matched, conflicts = _settle_identity(
            store, batch, first=first, last=last, had_calls=had_calls
        )
        moved = _store_rejects(store, fmt, kept, ids, sniffed, scan)
        reasons: dict[int, dict[str, int]] = {}
        for iid, reason, n in store.fetchall(
            f"SELECT ingest_id, reason, count(*) FROM {_BAD} GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2"
        ):
            reasons.setdefault(int(iid), {})[str(reason)] = int(n)
        stored = _per_ingest(
            store, f"SELECT ingest_id, count(*) FROM calls WHERE {batch} GROUP BY 1"
        )
        inferred = _per_ingest(
            store,
            f"SELECT ingest_id, count(*) FROM calls WHERE {batch} AND contains(attrs::VARCHAR, "
            "'provider_inferred') AND attrs->>'provider_inferred' = 'true' GROUP BY 1",
        )
        store.execute(f"DROP TABLE {_BAD}")
        tally = _Tally(read, stored, inferred, matched, conflicts, moved, reasons)
        outcomes = [_outcome(m, ids[m.index], tally, scan.notes) for m in kept]
        outcomes = sorted([*outcomes, *again], key=lambda o: o.counts.ingest_id)
        _record(store, fmt, outcomes, started)
        store.execute(f"DROP TABLE {_FILES}")
    return outcomes, list(later)


@dataclass(frozen=True, slots=True)
class _Tally:
    """
    The batch's counts, per ingest id.

    ``read`` holds ``(rows read, rows marked bad)``, ``stored`` and ``inferred`` one count
    each; then rows matched to another, conflicts, rejects written, and reasons.
    """

    read: dict[int, tuple[int, ...]]
    stored: dict[int, tuple[int, ...]]
    inferred: dict[int, tuple[int, ...]]
    matched: dict[int, int]
    conflicts: dict[int, int]
    moved: dict[int, int]
    reasons: dict[int, dict[str, int]]


def _outcome(member: Member, iid: int, tally: _Tally, notes: tuple[str, ...]) -> Outcome:
    """
    One file's counts, which add up as the per-file path's do.

    Raises:
        _BatchRefusedError: They do not add up (an invariant).
    """
    rows_in, marked = tally.read.get(iid, (0, 0))
    conflict = tally.conflicts.get(iid, 0)
    rejected = marked + conflict
    duplicates = tally.matched.get(iid, 0) - conflict
    stored = tally.stored.get(iid, (0,))[0]
    if stored + rejected + duplicates != rows_in:  # pragma: no cover - an invariant
        raise _BatchRefusedError
    counts = Counts(
        iid, rows_in, stored, rejected, duplicates, tally.reasons.get(iid, {}),
        already_rejected=rejected - tally.moved.get(iid, 0),
        inferred_provider=tally.inferred.get(iid, (0,))[0],
    )  # fmt: skip
    return Outcome(member, counts, notes)


def _record(store: Store, fmt: str, outcomes: Sequence[Outcome], started: float) -> None:
    """
    Write the files' rows of ``ingests``, in one statement (its columns as list parameters).
    """
    if not outcomes:
        return
    columns = list(
        zip(
            *(
                (o.counts.ingest_id, str(o.member.path), o.member.content,
                 o.member.options_json, o.counts.rows_in, o.counts.stored, o.counts.rejected,
                 o.counts.duplicates)
                for o in outcomes
            ),
            strict=True,
        )
    )  # fmt: skip
    store.execute(
        "INSERT INTO ingests SELECT unnest($1), unnest($2), unnest($3), $9, unnest($4)::JSON, "
        "unnest($5), unnest($6), unnest($7), unnest($8), to_timestamp($10), "
        "to_timestamp($11), $12",
        [*(list(c) for c in columns), fmt, started, time.time(), version()],
    )


def _per_ingest(store: Store, sql: str) -> dict[int, tuple[int, ...]]:
    return {int(row[0]): tuple(int(v) for v in row[1:]) for row in store.fetchall(sql)}


def _files_table(store: Store, group: Sequence[Member], ids: dict[int, int]) -> None:
    """
    ``_tk_id, _tk_file, _tk_source, _tk_content``: the batch's files, for joins.
    """
    from tailkit.ingest._identity import source_identity

    store.execute(f"DROP TABLE IF EXISTS {_FILES}")
    store.execute(
        f"CREATE TEMP TABLE {_FILES} (_tk_id BIGINT, _tk_file VARCHAR, _tk_source VARCHAR, "
        "_tk_content VARCHAR)"
    )
    store.execute(
        f"INSERT INTO {_FILES} SELECT unnest($1), unnest($2), unnest($3), unnest($4)",
        [
            [ids[m.index] for m in group],
            [str(m.path) for m in group],
            [source_identity(m.path) for m in group],
            [m.content for m in group],
        ],
    )


def _number(store: Store, first: int) -> None:
    """
    Give each row its file's ingest id and, where the reader did not, its record number.

    The rows went in file after file, each in file order, so a file's row ids run on from its
    first one; the batch is refused if a file's rows are not one run.
    """
    runs = f"SELECT source_file, min(rowid) AS lo, max(rowid) AS hi, count(*) AS n FROM calls WHERE ingest_id = {first} GROUP BY 1"  # noqa: E501
    if store.fetchall(f"SELECT 1 FROM ({runs}) WHERE hi - lo + 1 <> n LIMIT 1"):
        raise _BatchRefusedError
    store.execute(
        "UPDATE calls SET ingest_id = b._tk_id, source_row = coalesce(calls.source_row, "
        f"calls.rowid - r.lo + 1) FROM ({runs}) r JOIN {_FILES} b ON b._tk_file = r.source_file "
        f"WHERE calls.ingest_id = {first} AND calls.source_file = r.source_file"
    )


def _misfits(
    store: Store,
    group: Sequence[Member],
    ids: dict[int, int],
    read: dict[int, tuple[int, ...]],
    batch: str,
    *,
    scan: Scan,
    strict: bool,
) -> list[Member]:
    """
    The files the per-file path must read: bad rows under ``strict``, or millisecond durations.
    """
    later: list[Member] = []
    medians: dict[int, float | None] = {}
    if group[0].options.unit is None and not scan.units_known:
        medians = {
            int(iid): median
            for iid, median in store.fetchall(
                f"SELECT ingest_id, median(total_s) FROM (SELECT ingest_id, total_s FROM calls "
                f"WHERE {batch} AND status <> {_REJECT} QUALIFY row_number() OVER (PARTITION BY "
                "ingest_id ORDER BY source_row) <= 100000) GROUP BY 1"
            )
        }
    for member in group:
        iid = ids[member.index]
        if strict and read.get(iid, (0, 0))[1]:
            later.append(member)
            continue
        try:
            check_median(member.path, medians.get(iid))
        except IngestError:
            later.append(member)
    return later


def _derive_ids(store: Store, batch: str) -> None:
    """
    `tailkit.ingest._identity.derive_ids`, per file of the batch.
    """
    scope = "CASE WHEN started_at IS NULL THEN b._tk_source || chr(30) ELSE '' END"
    store.execute(
        "UPDATE calls SET call_id = CASE WHEN d.k > 1 THEN d.h || '-' || d.k ELSE d.h END "
        "FROM (SELECT rid, h, row_number() OVER (PARTITION BY ingest_id, h ORDER BY source_row) "
        f"AS k FROM (SELECT c.rowid AS rid, c.ingest_id, c.source_row, md5({scope} || "
        f"{content_text_sql()}) AS h FROM calls c JOIN {_FILES} b ON b._tk_id = c.ingest_id "
        f"WHERE c.{batch} AND c.call_id IS NULL AND c.status <> {_REJECT})) d "
        "WHERE calls.rowid = d.rid"
    )


def _settle_identity(
    store: Store, batch: str, *, first: int, last: int, had_calls: bool
) -> tuple[dict[int, int], dict[int, int]]:
    """
    `tailkit.ingest._identity.settle_identity` over the batch, files taken in order.

    A row is compared with the calls stored before the batch when its scoped id is among
    them; otherwise with the first row of the batch that has its id (by file, then row), which
    is the call that reading the files in order would have stored.

    Returns:
        Rows matched and conflicts, per ingest id.
    """
    matched: dict[int, int] = {}
    conflicts: dict[int, int] = {}

    def add(found: tuple[dict[int, int], dict[int, int]]) -> None:
        for total, part in zip((matched, conflicts), found, strict=True):
            for iid, n in part.items():
                total[iid] = total.get(iid, 0) + n

    if had_calls:
        _collect(
            store,
            f"SELECT n.rowid AS rid, n.ingest_id AS iid, o.rowid AS other, {equal_sql('n', 'o')} "
            f"AS same FROM calls n JOIN calls o ON {same_scope_sql('n', 'o')} WHERE n.{batch} "
            f"AND NOT (o.ingest_id BETWEEN {first} AND {last})",
        )
        add(_settle(store))
    scope = ", ".join(SCOPE)
    repeats = store.fetchone(
        f"SELECT count(*) FROM (SELECT h = lag(h) OVER (ORDER BY h) AS same FROM "
        f"(SELECT hash({scope}) AS h FROM calls WHERE {batch})) WHERE same"
    )
    if repeats and repeats[0]:
        _collect(
            store,
            f"SELECT p.rid, p.iid, p.other, {equal_sql('n', 'o')} AS same FROM (SELECT rid, iid, "
            f"other FROM (SELECT rowid AS rid, ingest_id AS iid, first_value(rowid) OVER "
            f"(PARTITION BY {scope} ORDER BY ingest_id, source_row) AS other FROM calls WHERE "
            f"{batch}) WHERE rid <> other) p JOIN calls n ON n.rowid = p.rid "
            "JOIN calls o ON o.rowid = p.other",
        )
        add(_settle(store))
    store.execute(f"DROP TABLE IF EXISTS {_MATCHES}")
    return matched, conflicts


def _collect(store: Store, matches_sql: str) -> None:
    store.execute(f"DROP TABLE IF EXISTS {_MATCHES}")
    store.execute(f"CREATE TEMP TABLE {_MATCHES} AS {matches_sql}")


def _settle(store: Store) -> tuple[dict[int, int], dict[int, int]]:
    """
    `tailkit.ingest._identity`'s settling step, counted per ingest.

    A row that matched a row of its own file "came earlier in" it; any other was "already
    stored from" the other row's file, as reading the files in order would have said.
    """
    fields = ", ".join(f"'{c.name}', n.{c.name}" for c in SOURCE_COLUMNS)
    conflicting = (
        f"SELECT rid, min(other) AS other FROM {_MATCHES} WHERE NOT same AND rid NOT IN "
        f"(SELECT rid FROM {_MATCHES} WHERE same) GROUP BY rid"
    )
    where = "CASE WHEN n.ingest_id = o.ingest_id THEN ' came earlier in ' ELSE ' already stored from ' END"  # noqa: E501
    conflicts: dict[int, int] = {}
    for (iid,) in store.fetchall(
        f"INSERT INTO {_BAD} SELECT n.ingest_id, n.source_file, n.source_row, "
        f"'{CONFLICT}', 'call_id ' || to_json(n.call_id)::VARCHAR || ' of ' || "
        "coalesce(n.provider, 'null') || '/' || coalesce(n.model, 'null') || "
        f"{where} || o.source_file || ' row ' || coalesce(o.source_row::VARCHAR, '?') || "
        f"' with other values: ' || {differences_sql('n', 'o')}, "
        f"json_object({fields})::VARCHAR FROM ({conflicting}) m "
        "JOIN calls n ON n.rowid = m.rid JOIN calls o ON o.rowid = m.other RETURNING ingest_id"
    ):
        conflicts[int(iid)] = conflicts.get(int(iid), 0) + 1
    matched = {
        int(iid): int(n)
        for iid, n in store.fetchall(f"SELECT iid, count(DISTINCT rid) FROM {_MATCHES} GROUP BY 1")
    }
    store.execute(f"DELETE FROM calls WHERE rowid IN (SELECT rid FROM {_MATCHES})")
    return matched, conflicts


def _store_rejects(  # noqa: PLR0917 - the batch's parts the raw lines need
    store: Store,
    fmt: str,
    kept: Sequence[Member],
    ids: dict[int, int],
    sniffed: list[tuple[Any, ...]],
    scan: Scan,
) -> dict[int, int]:
    """
    Write the bad rows to ``rejects`` (not those already there for the same content).

    Returns:
        Rows written, per ingest id.
    """
    had_rejects = bool(store.fetchall("SELECT 1 FROM rejects LIMIT 1"))
    old = (
        "NOT EXISTS (SELECT 1 FROM rejects r JOIN ingests i ON i.ingest_id = r.ingest_id "
        "WHERE i.content_hash = f._tk_content AND r.source_row IS NOT DISTINCT FROM "
        "b.source_row AND r.reason = b.reason)"
        if had_rejects
        else "true"
    )
    # Two files of the batch with the same content (read with other options): the second
    # finds the first's rejects, as it would have read in order.
    fresh = (
        f"SELECT b.* FROM {_BAD} b JOIN {_FILES} f ON f._tk_id = b.ingest_id WHERE {old} "
        "QUALIFY row_number() OVER (PARTITION BY f._tk_content, b.source_row, b.reason "
        "ORDER BY b.ingest_id) = 1"
    )
    moved: dict[int, int] = {}
    if store.fetchall(f"SELECT 1 FROM {_BAD} LIMIT 1"):
        for (iid,) in store.fetchall(f"INSERT INTO rejects {fresh} RETURNING ingest_id"):
            moved[int(iid)] = moved.get(int(iid), 0) + 1
    if moved and scan.raw_lines_sql:
        from tailkit.formats.lowlevel import sql_path

        by_id = {ids[m.index]: m for m in kept}
        for iid in moved:
            member = by_id[iid]
            lines = FORMATS[fmt].scan(sql_path(str(member.path)), sniffed, member.options)
            # Show each rejected row as its line in the file, not as the values read from it.
            store.execute(
                f"UPDATE rejects SET raw = {scrub_values('l.line')} FROM "
                f"({lines.raw_lines_sql}) l WHERE rejects.ingest_id = {iid} "
                "AND rejects.source_row = l.record"
            )
    return moved
