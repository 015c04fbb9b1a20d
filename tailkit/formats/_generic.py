"""
Generic tabular logs: JSON lines, JSON arrays, CSV and Parquet, with ``--map`` / ``--set``.

A generic file names its columns after the call record, or the user maps them. Every column is
read with an explicit type: text formats as VARCHAR (so a bad value becomes a reject, not a
failed read), Parquet with its own types. Columns that map to nothing are kept in ``attrs``.
"""

from __future__ import annotations

import difflib

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailkit.errors import MappingError
from tailkit.formats._sql import RawColumn, ident, literal, normalize_sql
from tailkit.record import SOURCE_COLUMNS


_MAPPABLE = tuple(c.name for c in SOURCE_COLUMNS)
_MAX_LINE = 64 * 1024 * 1024
# json_type() raises on invalid JSON, and SQL's AND/OR do not short-circuit: guard with CASE.
_IS_OBJECT = "CASE WHEN json_valid(line) THEN json_type(line) = 'OBJECT' ELSE false END"


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """
    How to read a file's columns into the call record.

    Args:
        mapping: Call-record column → source column (``--map total_s=latency``).
        sets: Call-record column → one value for every row (``--set provider=openai``).
        unit: Unit of the duration columns: ``"s"``, ``"ms"``, or ``None`` (seconds, checked).
    """

    mapping: Mapping[str, str] = field(default_factory=dict)
    sets: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None

    @property
    def duration_scale(self) -> float:
        """
        Divide durations by this to get seconds.
        """
        return 1000.0 if self.unit == "ms" else 1.0


@dataclass(frozen=True, slots=True)
class Scan:
    """
    The SQL that reads one file, ready for the store to run.

    Args:
        format: The format name.
        select_sql: Validated call-record columns plus ``reason``, ``detail``, ``raw``, in file
            order (``source_row`` is the 1-based position of each row in that order).
        fallback_sql: The same, reading line by line, for when the fast reader refuses the file
            (malformed JSON lines); ``None`` when there is no such mode.
        reader_rejects_sql: Rows the reader itself refused, as ``(line, reason, detail, raw)``.
        raw_lines_sql: ``(record, line)`` for every record, to show a rejected row exactly as
            it was written; ``None`` when rows are not lines.
        setup: Statements to run before ``select_sql``.
        has_call_id: Whether the source provides ``call_id``.
        notes: Phrases for the user about how columns were mapped.
    """

    format: str
    select_sql: str
    fallback_sql: str | None = None
    reader_rejects_sql: str | None = None
    raw_lines_sql: str | None = None
    setup: tuple[str, ...] = ()
    has_call_id: bool = False
    notes: tuple[str, ...] = ()


class FileFormat(Protocol):
    """
    What every format adapter provides.
    """

    name: str

    def sniff_sql(self, path: str) -> str | None:
        """
        SQL whose rows describe the file's columns, or ``None`` for a fixed layout.
        """

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        The SQL that reads the file, given the sniffed rows.
        """


def _suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_options(options: ScanOptions) -> None:
    """
    Refuse ``--map`` / ``--set`` / ``--unit`` values that name no call-record column.

    Raises:
        MappingError: With the bad name and the valid ones.
    """
    for flag, names in (("--map", options.mapping), ("--set", options.sets)):
        for target in names:
            if target not in _MAPPABLE:
                msg = (
                    f"{flag} {target}=…: {target!r} is not a call-record column"
                    f"{_suggest(target, _MAPPABLE)}; valid: {', '.join(_MAPPABLE)}"
                )
                raise MappingError(msg)
    if options.unit not in (None, "s", "ms"):
        msg = f"--unit must be s or ms, got {options.unit!r}"
        raise MappingError(msg)


def resolve_columns(
    path: str,
    columns: Sequence[tuple[str, str]],
    options: ScanOptions,
    ref: Callable[[str], str],
) -> tuple[dict[str, RawColumn], list[tuple[str, str]], list[str]]:
    """
    Decide which source column (or ``--set`` value) fills each call-record column.

    Args:
        path: The file, for messages.
        columns: ``(name, sql_type)`` of the source columns, in file order.
        options: ``--map`` / ``--set`` / ``--unit``.
        ref: Turns a source column name into SQL over the scan.

    Returns:
        The raw columns, the leftover ``(key, expr)`` pairs for ``attrs``, and notes.

    Raises:
        MappingError: A mapped source column does not exist, or a required column has no source.
    """
    check_options(options)
    types = dict(columns)
    by_lower = {name.lower(): name for name in types}
    raw: dict[str, RawColumn] = {}
    used: set[str] = set()
    notes: list[str] = []
    for target, source in options.mapping.items():
        if source not in types:
            msg = (
                f"{path}: --map {target}={source}: no column {source!r}"
                f"{_suggest(source, list(types))}; columns: {', '.join(types)}"
            )
            raise MappingError(msg)
        raw[target] = RawColumn(ref(source), types[source], f"column {source!r}")
        used.add(source)
        notes.append(f"{target} ← {source}")
    for target, value in options.sets.items():
        raw[target] = RawColumn(literal(value), "VARCHAR", f"--set {target}")
    for target in _MAPPABLE:
        same = by_lower.get(target)
        if target not in raw and same is not None and same not in used:
            raw[target] = RawColumn(ref(same), types[same], f"column {same!r}")
            used.add(same)
    for required, hint in (("model", "NAME"), ("provider", "NAME"), ("total_s", "COLUMN")):
        if required not in raw:
            flag = f"--map {required}=COLUMN" if hint == "COLUMN" else f"--set {required}={hint}"
            msg = (
                f"{path}: no column for {required!r} (columns: {', '.join(types) or 'none'}); "
                f"map one with --map {required}=COLUMN"
                + ("" if hint == "COLUMN" else f" or give one value with {flag}")
            )
            raise MappingError(msg)
    extras = [(name, ref(name)) for name in types if name not in used]
    return raw, extras, notes


def _struct(columns: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in columns.items()) + "}"


def _json_types(keys: Sequence[str], options: ScanOptions) -> dict[str, str]:
    # Call-record columns are read as text (a bad value becomes a reject); the rest keep
    # their JSON shape for attrs.
    mapped = set(options.mapping.values())
    return {k: "VARCHAR" if k in mapped or k.lower() in _MAPPABLE else "JSON" for k in keys}


class JsonLines:
    """
    One JSON object per line (``.jsonl``, ``.ndjson``, gzip or not).
    """

    name = "jsonl"

    def _lines(self, path: str) -> str:
        return (
            f"read_csv({literal(path)}, columns={{'line': 'VARCHAR'}}, delim='\x01', quote='', "
            f"escape='', header=false, auto_detect=false, max_line_size={_MAX_LINE})"
        )

    def sniff_sql(self, path: str) -> str:
        """
        SQL listing the keys of the first 10,000 objects as ``(name, type)``.
        """
        return (
            "SELECT k, 'JSON' FROM (SELECT k, min(n) AS first FROM (SELECT unnest(json_keys(line))"
            f" AS k, n FROM (SELECT line, row_number() OVER () AS n FROM {self._lines(path)} "
            f"LIMIT 10000) WHERE {_IS_OBJECT}) GROUP BY k) "
            "ORDER BY first, k"
        )

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Fast path through ``read_json``; a line-by-line path when a line is not JSON.
        """
        keys = [str(row[0]) for row in sniffed]
        typed = _json_types(keys, options)
        raw, extras, notes = resolve_columns(path, [(k, typed[k]) for k in keys], options, ident)
        fast = (
            f"read_json({literal(path)}, format='newline_delimited', columns={_struct(typed)}, "
            f"maximum_object_size={_MAX_LINE})"
        )
        lines = (
            f"(SELECT _line, _obj, json_transform(CASE WHEN _obj THEN _line END, "
            f"{literal(_json_struct(typed))}) AS _j FROM (SELECT line AS _line, {_IS_OBJECT} "
            f"AS _obj FROM {self._lines(path)} WHERE trim(line) <> ''))"
        )
        raw_l, extras_l, _ = resolve_columns(
            path, [(k, typed[k]) for k in keys], options, lambda k: f"_j.{ident(k)}"
        )
        problem = (
            "malformed_json",
            "NOT _obj",
            "'line is not a JSON object: ' || left(_line, 60)",
        )
        return Scan(
            format=self.name,
            select_sql=normalize_sql(
                fast, raw, extras=extras, duration_scale=options.duration_scale
            ),
            raw_lines_sql=(
                f"SELECT row_number() OVER () AS record, line FROM {self._lines(path)} "
                "WHERE trim(line) <> ''"
            ),
            fallback_sql=normalize_sql(
                lines,
                raw_l,
                extras=extras_l,
                duration_scale=options.duration_scale,
                raw_text="_line",
                row_problem=problem,
            ),
            has_call_id="call_id" in raw,
            notes=tuple(notes),
        )


def _json_struct(typed: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": "{v}"' for k, v in typed.items()) + "}"


class JsonDocument:
    """
    A JSON array of objects, or objects spread over several lines.
    """

    name = "json"

    def sniff_sql(self, path: str) -> str:
        """
        SQL describing the columns DuckDB's JSON reader finds.
        """
        return f"DESCRIBE SELECT * FROM read_json({literal(path)}, maximum_object_size={_MAX_LINE})"

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read the document with every column typed explicitly.
        """
        typed = _json_types([str(r[0]) for r in sniffed], options)
        raw, extras, notes = resolve_columns(path, list(typed.items()), options, ident)
        source = (
            f"read_json({literal(path)}, columns={_struct(typed)}, maximum_object_size={_MAX_LINE})"
        )
        return Scan(
            format=self.name,
            select_sql=normalize_sql(
                source, raw, extras=extras, duration_scale=options.duration_scale
            ),
            has_call_id="call_id" in raw,
            notes=tuple(notes),
        )


class Csv:
    """
    Comma- or tab-separated text with a header row; the reader's own rejects are kept.
    """

    name = "csv"
    rejects_table = "_tailkit_csv_rejects"
    rejects_scan = "_tailkit_csv_scans"

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the dialect and header of the file.
        """
        return (
            f"SELECT Delimiter, Quote, Escape, Columns FROM sniff_csv({literal(path)}, "
            "ignore_errors=true)"
        )

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read every column as VARCHAR with the sniffed dialect, keeping malformed rows.
        """
        delim, quote, escape, cols = sniffed[0]
        names = [str(c["name"]) for c in cols]
        raw, extras, notes = resolve_columns(path, [(n, "VARCHAR") for n in names], options, ident)

        def opt(value: str) -> str:
            return literal("" if value == "(empty)" else value)

        types = dict.fromkeys(names, "VARCHAR")
        source = (
            f"read_csv({literal(path)}, auto_detect=false, header=true, delim={opt(delim)}, "
            f"quote={opt(quote)}, escape={opt(escape)}, columns={_struct(types)}, "
            f"store_rejects=true, rejects_table={literal(self.rejects_table)}, "
            f"rejects_scan={literal(self.rejects_scan)}, rejects_limit=0, "
            f"max_line_size={_MAX_LINE})"
        )
        # The reader may log several errors for one line: keep the first, one reject per row.
        rejects = (
            "SELECT line - 1 AS record, 'malformed_row' AS reason, "
            "arg_min(error_type || ': ' || error_message, column_idx) AS detail, "
            f"arg_min(csv_line, column_idx) AS raw FROM {self.rejects_table} "
            "GROUP BY line ORDER BY line"
        )
        return Scan(
            format=self.name,
            select_sql=normalize_sql(
                source, raw, extras=extras, duration_scale=options.duration_scale
            ),
            reader_rejects_sql=rejects,
            setup=(
                f"DROP TABLE IF EXISTS {self.rejects_table}",
                f"DROP TABLE IF EXISTS {self.rejects_scan}",
            ),
            has_call_id="call_id" in raw,
            notes=tuple(notes),
        )


class Parquet:
    """
    Parquet files, read with their own column types.
    """

    name = "parquet"

    def sniff_sql(self, path: str) -> str:
        """
        SQL describing the Parquet schema.
        """
        return f"DESCRIBE SELECT * FROM read_parquet({literal(path)})"

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read the file natively; casts happen in the validating SELECT.
        """
        columns = [(str(r[0]), str(r[1])) for r in sniffed]
        raw, extras, notes = resolve_columns(path, columns, options, ident)
        return Scan(
            format=self.name,
            select_sql=normalize_sql(
                f"read_parquet({literal(path)})",
                raw,
                extras=extras,
                duration_scale=options.duration_scale,
            ),
            has_call_id="call_id" in raw,
            notes=tuple(notes),
        )
