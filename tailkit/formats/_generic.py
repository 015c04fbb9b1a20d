"""
Generic tabular logs: JSON lines, JSON documents, CSV and Parquet, with ``--map`` / ``--set``.

A generic file names its columns after the call record, or the user maps them. Every column is
read with an explicit type. JSON is read fast with the types a sample suggests; if a later value
does not fit, the file is read again through a forgiving path (text columns, line by line for
JSON lines) where each bad value becomes a reject instead of a failed read. CSV is read as text
with the reader's own rejects kept; Parquet with its own types. Columns that map to nothing are
kept in ``attrs``.
"""

from __future__ import annotations

import json

from collections.abc import Mapping, Sequence
from typing import Any

from tailkit.formats._mapping import (
    Scan,
    ScanOptions,
    assign_columns,
    read_type,
    resolve_columns,
)
from tailkit.formats._sql import ident, literal, normalize_sql


_MAX_LINE = 64 * 1024 * 1024
_SNIFF_LINE = 2 * 1024 * 1024  # a bigger buffer makes the sniff read far more than its sample
_SAMPLE = 10_000
# json_type() raises on invalid JSON, and SQL's AND/OR do not short-circuit: guard with CASE.
_IS_OBJECT = "CASE WHEN json_valid(line) THEN json_type(line) = 'OBJECT' ELSE false END"
_JSON_TYPES = {"UBIGINT": "BIGINT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN"}


def _struct(columns: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in columns.items()) + "}"


def _typed(
    path: str, sniffed: Sequence[tuple[str, str]], options: ScanOptions, *, text: bool
) -> dict[str, str]:
    """
    Read type per source column: sniffed (``text=False``) or forgiving text (``text=True``).
    """
    target_of = {s: t for t, s in assign_columns(path, [n for n, _ in sniffed], options).items()}
    return {
        name: ("VARCHAR" if target_of.get(name) else "JSON")
        if text
        else read_type(target_of.get(name), kind)
        for name, kind in sniffed
    }


def _scan(
    path: str, source: str, typed: Mapping[str, str], options: ScanOptions, **kw: Any
) -> tuple[str, bool, tuple[str, ...]]:
    """
    The validating SELECT over ``source``, whether it has call ids, and mapping notes.
    """
    raw, extras, notes = resolve_columns(path, list(typed.items()), options, kw.pop("ref", ident))
    sql = normalize_sql(source, raw, extras=extras, duration_scale=options.duration_scale, **kw)
    return sql, "call_id" in raw, tuple(notes)


class JsonLines:
    """
    One JSON object per line (``.jsonl``, ``.ndjson``, gzip or not).
    """

    name = "jsonl"

    def _lines(self, path: str, max_line: int = _MAX_LINE) -> str:
        return (
            f"read_csv({literal(path)}, columns={{'line': 'VARCHAR'}}, delim='\x01', quote='', "
            f"escape='', header=false, auto_detect=false, max_line_size={max_line})"
        )

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the merged JSON structure of the first 10,000 objects (bad lines skipped).
        """
        return (
            f"SELECT json_group_structure(line::JSON) FROM (SELECT line FROM "
            f"{self._lines(path, _SNIFF_LINE)} LIMIT {_SAMPLE}) WHERE {_IS_OBJECT}"
        )

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Fast path through ``read_json`` with sniffed types; a line-by-line path for the rest.
        """
        structure = json.loads(sniffed[0][0]) if sniffed and sniffed[0][0] else {}
        keys = [
            (k, _JSON_TYPES.get(v, "VARCHAR") if isinstance(v, str) else "JSON")
            for k, v in structure.items()
        ]
        typed = _typed(path, keys, options, text=False)
        fast = (
            f"read_json({literal(path)}, format='newline_delimited', columns={_struct(typed)}, "
            f"maximum_object_size={_MAX_LINE})"
        )
        select, has_id, notes = _scan(path, fast, typed, options)
        text = _typed(path, keys, options, text=True)
        shape = "{" + ", ".join(f'"{k}": "{v}"' for k, v in text.items()) + "}"
        lines = (
            f"(SELECT _line, _obj, json_transform(CASE WHEN _obj THEN _line END, "
            f"{literal(shape)}) AS _j FROM (SELECT line AS _line, {_IS_OBJECT} "
            f"AS _obj FROM {self._lines(path)} WHERE trim(line) <> ''))"
        )
        fallback, _, _ = _scan(
            path, lines, text, options,
            ref=lambda k: f"_j.{ident(k)}",
            raw_text="_line",
            row_problem=(
                "malformed_json", "NOT _obj", "'line is not a JSON object: ' || left(_line, 60)"
            ),
        )  # fmt: skip
        return Scan(
            format=self.name,
            select_sql=select,
            fallback_sql=fallback,
            raw_lines_sql=(
                f"SELECT row_number() OVER () AS record, line FROM {self._lines(path)} "
                "WHERE trim(line) <> ''"
            ),
            has_call_id=has_id,
            notes=notes,
        )


class JsonDocument:
    """
    A JSON array of objects, or objects spread over several lines.
    """

    name = "json"

    def sniff_sql(self, path: str) -> str:
        """
        SQL describing the columns and types DuckDB's JSON reader finds.
        """
        return f"DESCRIBE SELECT * FROM read_json({literal(path)}, maximum_object_size={_MAX_LINE})"

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read the document with sniffed types; as text if a value does not fit them.
        """
        columns = [(str(r[0]), str(r[1])) for r in sniffed]
        scans = []
        for text in (False, True):
            typed = _typed(path, columns, options, text=text)
            source = (
                f"read_json({literal(path)}, columns={_struct(typed)}, "
                f"maximum_object_size={_MAX_LINE})"
            )
            scans.append(_scan(path, source, typed, options))
        (select, has_id, notes), (fallback, _, _) = scans
        return Scan(self.name, select, fallback_sql=fallback, has_call_id=has_id, notes=notes)


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

        def opt(value: str) -> str:
            return literal("" if value == "(empty)" else value)

        typed = {str(c["name"]): "VARCHAR" for c in cols}
        source = (
            f"read_csv({literal(path)}, auto_detect=false, header=true, delim={opt(delim)}, "
            f"quote={opt(quote)}, escape={opt(escape)}, columns={_struct(typed)}, "
            f"store_rejects=true, rejects_table={literal(self.rejects_table)}, "
            f"rejects_scan={literal(self.rejects_scan)}, rejects_limit=0, "
            f"max_line_size={_MAX_LINE})"
        )
        select, has_id, notes = _scan(path, source, typed, options)
        # The reader may log several errors for one line: keep the first, one reject per row.
        rejects = (
            "SELECT line - 1 AS record, 'malformed_row' AS reason, "
            "arg_min(error_type || ': ' || error_message, column_idx) AS detail, "
            f"arg_min(csv_line, column_idx) AS raw FROM {self.rejects_table} "
            "GROUP BY line ORDER BY line"
        )
        return Scan(
            format=self.name,
            select_sql=select,
            reader_rejects_sql=rejects,
            setup=(
                f"DROP TABLE IF EXISTS {self.rejects_table}",
                f"DROP TABLE IF EXISTS {self.rejects_scan}",
            ),
            has_call_id=has_id,
            notes=notes,
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
        typed = {str(r[0]): str(r[1]) for r in sniffed}
        source = f"read_parquet({literal(path)}, file_row_number=true)"
        select, has_id, notes = _scan(
            path, source, typed, options, row_number="file_row_number + 1"
        )
        return Scan(self.name, select, has_call_id=has_id, notes=notes)
