"""
What makes a stored call the same call: scoped ids, ids derived from content, conflicts.

A call's identity is ``(provider, model, call_id)``: two systems that both number their calls
1..N, or one benchmark's per-model folders that reuse ``simple_0``, are different calls. A row
whose scoped id is already stored (or came earlier in the same file) is a duplicate when every
call-record column agrees, and a ``call_id_conflict`` reject naming the other row when one does
not: a silent duplicate would throw a real call away. Provenance (``source``, ``source_file``,
``source_row``, ``ingest_id``) and ``attrs`` are not compared: the same call read from a JSON
export and from its Parquet copy is one call.

A source without ids gets one derived from the row itself: an MD5 of the row's call-record
values, plus its occurrence number among identical rows of the file (``-2``, ``-3``, … from the
second on); a row with no start time is also scoped by its file (`source_identity`: the path
without a compression suffix), because rows without a time repeat across files without being
the same call. Appending rows to a file therefore derives the same ids for the old rows, a
gzipped copy derives the same ids as the plain file, the same file read again with an option
that changes no value (``--unit s`` on seconds) stores nothing new, and two identical rows in
one file stay two calls. Two routes of one wide CSV read with different ``--map`` differ in
their values (another model, another latency), so they stay apart. The file's hash, format and
options are deliberately not part of it. Values are written out as text in a
fixed form (timestamps as epoch microseconds) so that the ids do not depend on DuckDB's hash
function, which may change between versions.
"""

from __future__ import annotations

import dataclasses
import json

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailkit.formats import ScanOptions
from tailkit.formats.lowlevel import literal
from tailkit.record import SOURCE_COLUMNS
from tailkit.store import Store


CONFLICT = "call_id_conflict"
"""Reject reason of a row whose scoped id is taken by a call with other values."""

SCOPE = ("provider", "model", "call_id")
"""The columns of a call's identity."""

_VALUES = tuple(c for c in SOURCE_COLUMNS if c.name != "call_id")
_COMPARED = tuple(c for c in SOURCE_COLUMNS if c.name not in SCOPE)
_MATCHES = "_tailkit_identity_matches"


def _text(column: str, kind: str) -> str:
    value = f"epoch_us({column})" if kind == "timestamp" else column
    # '=' before a value and '-' for NULL keep NULL apart from any text, '' included.
    return f"coalesce('=' || {value}::VARCHAR, '-')"


def content_text_sql() -> str:
    """
    SQL text of a row's call-record values except ``call_id``, in one fixed form.
    """
    parts = ", ".join(_text(c.name, c.kind) for c in _VALUES)
    return f"concat_ws(chr(31), {parts})"


def differences_sql(new: str, old: str) -> str:
    """
    SQL text naming each compared column where row ``new`` differs from row ``old``.
    """
    parts = ", ".join(
        f"CASE WHEN {new}.{c.name} IS DISTINCT FROM {old}.{c.name} THEN '{c.name} ' || "
        f"coalesce({old}.{c.name}::VARCHAR, 'null') || ' there, ' || "
        f"coalesce({new}.{c.name}::VARCHAR, 'null') || ' here' END"
        for c in _COMPARED
    )
    return f"concat_ws('; ', {parts})"


def same_scope_sql(new: str, old: str) -> str:
    """
    SQL condition: rows ``new`` and ``old`` have the same scoped id.
    """
    return " AND ".join(f"{new}.{c} IS NOT DISTINCT FROM {old}.{c}" for c in SCOPE)


def derive_ids(store: Store, ingest_id: int, *, source: str, good: str) -> None:
    """
    Give every good row of this ingest without a ``call_id`` one derived from its content.

    The id is a hash of the row's call-record values plus the row's occurrence among identical
    rows of the file; a row without a start time is also scoped by ``source`` (see
    `source_identity`). So the same calls read again, from a grown or re-compressed file or
    with options that change no value, are duplicates, and two identical rows of one file stay
    two calls.

    Args:
        store: The store, inside the ingest's transaction.
        ingest_id: The ingest whose rows to number.
        source: The file's `source_identity`.
        good: SQL condition selecting the rows that are not rejected.
    """
    this = f"ingest_id = {ingest_id} AND call_id IS NULL AND {good}"
    digest = content_id_sql(source)
    store.execute(
        "UPDATE calls SET call_id = CASE WHEN d.k > 1 THEN d.h || '-' || d.k ELSE d.h END "
        "FROM (SELECT rid, h, row_number() OVER (PARTITION BY h ORDER BY source_row) AS k "
        f"FROM (SELECT rowid AS rid, source_row, {digest} AS h FROM calls WHERE {this})) d "
        "WHERE calls.rowid = d.rid"
    )


def content_id_sql(source: str) -> str:
    """
    SQL for the id `derive_ids` gives the first of identical rows: a hash of its values.

    Args:
        source: The file's `source_identity`, which scopes rows without a start time.
    """
    scope = f"CASE WHEN started_at IS NULL THEN {literal(source + chr(30))} ELSE '' END"
    return f"md5({scope} || {content_text_sql()})"


def source_identity(path: Path) -> str:
    """
    What scopes the derived ids of rows that carry no start time: the file, not its packing.

    The file's absolute path without a compression suffix, so that a log that grew, or its
    gzipped copy beside it, is the same source. Rows with a start time need no scope: their
    values tell calls apart. Rows without one often repeat across files (two runs of a
    benchmark that logs rounded latencies only), and taking those for one call would lose one.
    """
    name = str(path.resolve())
    return name[:-3] if name.lower().endswith(".gz") else name


def settle_identity(
    store: Store, ingest_id: int, *, had_calls: bool, bad_rows: str, ids_derived: bool = False
) -> tuple[int, int]:
    """
    Delete this ingest's duplicates and move its conflicting rows into ``bad_rows``.

    Rows are compared first with the calls stored before (only when there are any), then with
    the rows before them in the same file. Both steps are set-based: one join marks each
    matched row as equal or not (booleans, cheap for millions of duplicates), and only the
    conflicts, usually few, get their message. The second step runs only when some scoped id
    repeats within the file: never when every id was derived (`derive_ids` numbers equal rows
    apart), else when two neighbours are equal in the sorted 64-bit hashes of the scoped ids
    (a sort spills to disk and runs in parallel; a hash table of every id would not).

    Args:
        store: The store, inside the ingest's transaction; every row of this ingest in
            ``calls`` is a good row with its ``call_id``.
        ingest_id: This ingest.
        had_calls: Whether ``calls`` held any row before this ingest.
        ids_derived: Every row's ``call_id`` was derived from its content (the source has no
            ids), so none repeats within the file.
        bad_rows: A temporary table ``(ingest_id, source_file, source_row, reason, detail,
            raw)`` that receives the conflicting rows.

    Returns:
        The number of duplicates deleted and of conflicts moved.
    """
    duplicates = conflicts = 0
    this = f"ingest_id = {ingest_id}"
    if had_calls:
        _collect(
            store,
            f"SELECT n.rowid AS rid, o.rowid AS other, {equal_sql('n', 'o')} AS same FROM calls n "
            f"JOIN calls o ON {same_scope_sql('n', 'o')} "
            f"WHERE n.{this} AND o.ingest_id <> {ingest_id}",
        )
        d, c = _settle(store, bad_rows, ingest_id, "already stored from")
        duplicates, conflicts = duplicates + d, conflicts + c
    scope = ", ".join(SCOPE)
    repeats = (
        None
        if ids_derived
        else store.fetchone(
            f"SELECT count(*) FROM (SELECT h = lag(h) OVER (ORDER BY h) AS same FROM "
            f"(SELECT hash({scope}) AS h FROM calls WHERE {this})) WHERE same"
        )
    )
    if repeats and repeats[0]:
        _collect(
            store,
            f"SELECT p.rid, p.other, {equal_sql('n', 'o')} AS same FROM (SELECT rid, other FROM "
            "(SELECT rowid AS rid, first_value(rowid) OVER (PARTITION BY "
            f"{scope} ORDER BY source_row) AS other FROM calls WHERE {this}) WHERE rid <> other"
            ") p JOIN calls n ON n.rowid = p.rid JOIN calls o ON o.rowid = p.other",
        )
        d, c = _settle(store, bad_rows, ingest_id, "came earlier in")
        duplicates, conflicts = duplicates + d, conflicts + c
    store.execute(f"DROP TABLE IF EXISTS {_MATCHES}")
    return duplicates, conflicts


def equal_sql(new: str, old: str) -> str:
    """
    SQL condition: rows ``new`` and ``old`` agree in every compared call-record column.
    """
    return " AND ".join(f"{new}.{c.name} IS NOT DISTINCT FROM {old}.{c.name}" for c in _COMPARED)


def _collect(store: Store, matches_sql: str) -> None:
    """
    Keep ``(rid, other, same)`` for each row of this ingest whose scoped id is taken.
    """
    store.execute(f"DROP TABLE IF EXISTS {_MATCHES}")
    store.execute(f"CREATE TEMP TABLE {_MATCHES} AS {matches_sql}")


def _settle(store: Store, bad_rows: str, ingest_id: int, where: str) -> tuple[int, int]:
    """
    Move the matched rows that differ to ``bad_rows``; delete every matched row from ``calls``.

    A row that matched an equal call is a duplicate even if it also matched one that differs
    (possible only in a store written before ids were scoped).
    """
    fields = ", ".join(f"'{c.name}', n.{c.name}" for c in SOURCE_COLUMNS)
    conflicting = (
        f"SELECT rid, min(other) AS other FROM {_MATCHES} WHERE NOT same AND rid NOT IN "
        f"(SELECT rid FROM {_MATCHES} WHERE same) GROUP BY rid"
    )
    moved = store.fetchone(
        f"INSERT INTO {bad_rows} SELECT {ingest_id}, n.source_file, n.source_row, "
        f"'{CONFLICT}', 'call_id ' || to_json(n.call_id)::VARCHAR || ' of ' || "
        "coalesce(n.provider, 'null') || '/' || coalesce(n.model, 'null') || "
        f"' {where} ' || o.source_file || ' row ' || coalesce(o.source_row::VARCHAR, '?') || "
        f"' with other values: ' || {differences_sql('n', 'o')}, "
        f"json_object({fields})::VARCHAR FROM ({conflicting}) m "
        "JOIN calls n ON n.rowid = m.rid JOIN calls o ON o.rowid = m.other"
    )
    matched = store.fetchone(f"DELETE FROM calls WHERE rowid IN (SELECT rid FROM {_MATCHES})")
    conflicts = int(moved[0]) if moved else 0
    return (int(matched[0]) if matched else 0) - conflicts, conflicts


_LEGACY_KEYS = {"mapping": "map", "sets": "set", "unit": "unit"}
"""Options always written, under the names stores have held them since the first version."""


def options_json(fmt: str, options: ScanOptions) -> str:
    """
    The format and options as stored in ``ingests`` (and compared to find repeats).

    Every field of `ScanOptions` counts, whatever fields it has: ``--map``, ``--set`` and
    ``--unit`` always (as ``map``, ``set`` and ``unit``), any other field when it differs from
    its default. Leaving defaults out keeps the identity of earlier ingests, and of the call
    ids derived from it, when a new option is added.
    """
    doc: dict[str, Any] = {"format": fmt}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name not in _LEGACY_KEYS and _is_default(f, value):
            continue
        doc[_LEGACY_KEYS.get(f.name, f.name)] = _plain(value)
    return json.dumps(doc, sort_keys=True, default=str)


def _is_default(f: dataclasses.Field[Any], value: object) -> bool:
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    if f.default_factory is not dataclasses.MISSING:
        return bool(value == f.default_factory())
    return False


def _plain(value: object) -> object:
    """
    ``value`` as JSON data in a canonical order (mappings by key, sets sorted).
    """
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=lambda v: json.dumps(v, default=str))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value
