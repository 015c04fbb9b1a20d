"""
Generic tabular logs: JSON lines, JSON documents, CSV and Parquet, with ``--map`` / ``--set``.

A generic file names its columns after the call record, or the user maps them. Every column is
read with an explicit type. JSON is read fast with the types a sample suggests; if a later value
does not fit, the file is read again through a forgiving path (text columns, line by line for
JSON lines) where each bad value becomes a reject instead of a failed read. CSV is read as text
with the reader's own rejects kept; Parquet with its own types. Columns that map to nothing are
kept in ``attrs``, except those named like credentials or message content (``api_key``,
``authorization``, ``messages``, ``prompt``, …: `tailkit.formats._scrub`), which are not read.
"""

from __future__ import annotations

import json

from collections.abc import Mapping, Sequence
from typing import Any

from tailkit.formats import _lines as lines
from tailkit.formats._mapping import (
    Scan,
    ScanOptions,
    assign_columns,
    read_type,
    resolve_columns,
)
from tailkit.formats._scrub import CONTENT_KEYS, is_private, scrub, scrub_json
from tailkit.formats._sql import ident, literal, normalize_sql


_MAX_LINE = lines.MAX_LINE


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
    extras = [(k, _without_secrets(e, typed.get(k, "VARCHAR"))) for k, e in extras]
    sql = normalize_sql(source, raw, extras=extras, duration_scale=options.duration_scale, **kw)
    return sql, "call_id" in raw, tuple(notes)


def _without_secrets(expr: str, sql_type: str) -> str:
    """
    A nested value kept in attrs without the credentials inside it (``meta.api_key``).

    Scalars pass as they are (a credential-named column is not read at all); objects, lists,
    structs and maps are scrubbed at any depth, as JSON.
    """
    kind = sql_type.upper()
    if kind == "JSON":
        return scrub_json(expr)
    if kind.startswith(("STRUCT", "MAP")) or kind.endswith("]"):
        return scrub_json(f"to_json({expr})")
    return expr


class JsonLines:
    """
    One JSON object per line (``.jsonl``, ``.ndjson``, gzip or not).
    """

    name = "jsonl"

    def sniff_sql(self, path: str) -> str:
        """
        SQL for the top-level keys and types of the first 10,000 objects (bad lines skipped).
        """
        return lines.sniff_sql(path)

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Fast path through ``read_json`` with sniffed types; a line-by-line path for the rest.

        Columns named like credentials or message content that map to nothing are not read
        (`tailkit.formats._scrub`), and are cut from a rejected line's text too.
        """
        keys, private = _public(path, lines.sniffed_types(sniffed), options)
        typed = _typed(path, keys, options, text=False)
        fast = (
            f"read_json({literal(path)}, format='newline_delimited', columns={_struct(typed)}, "
            f"maximum_object_size={_MAX_LINE})"
        )
        select, has_id, notes = _scan(path, fast, typed, options)
        text = _typed(path, keys, options, text=True)
        fallback, _, _ = _scan(
            path, lines.forgiving_source(path, text), text, options,
            ref=lambda k: f"_j.{ident(k)}",
            raw_text=scrub("_line", private),
            row_problem=lines.row_problem(private),
            row_number="_tk_rec",
        )  # fmt: skip
        return Scan(
            format=self.name,
            select_sql=select,
            fallback_sql=fallback,
            raw_lines_sql=lines.raw_lines_sql(path, private),
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
        SQL for the top-level keys and types of the document's objects (other items skipped).
        """
        return (
            "SELECT e.key, CASE WHEN json_type(e.value) = 'VARCHAR' THEN e.value->>'$' "
            "ELSE 'JSON' END FROM (SELECT unnest(map_entries(CAST(s AS MAP(VARCHAR, JSON)))) "
            f"AS e FROM (SELECT json_group_structure(_item) AS s FROM (SELECT _item FROM "
            f"{_items(path)} LIMIT {lines.SAMPLE}) WHERE json_type(_item) = 'OBJECT'))"
        )

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Read the document with sniffed types; item by item if a value or an item does not fit.
        """
        keys, private = _public(path, lines.sniffed_types(sniffed), options)
        typed = _typed(path, keys, options, text=False)
        fast = (
            f"read_json({literal(path)}, columns={_struct(typed)}, maximum_object_size={_MAX_LINE})"
        )
        select, has_id, notes = _scan(path, fast, typed, options)
        text = _typed(path, keys, options, text=True)
        shape = literal(json.dumps(text))
        source = (
            "(SELECT _tk_rec, _item::VARCHAR AS _line, _item AS _parsed, "
            "coalesce(json_type(_item) = 'OBJECT', false) AS _obj, "
            f"json_transform(CASE WHEN json_type(_item) = 'OBJECT' THEN _item END, {shape}) AS _j "
            f"FROM {_items(path)})"
        )
        fallback, _, _ = _scan(
            path, source, text, options,
            ref=lambda k: f"_j.{ident(k)}",
            raw_text=scrub("_line", private),
            row_problem=(
                "not_an_object", "NOT _obj",
                "'item ' || _tk_rec || ' is not a JSON object: ' || left(_line, 60)",
            ),
            row_number="_tk_rec",
        )  # fmt: skip
        return Scan(self.name, select, fallback_sql=fallback, has_call_id=has_id, notes=notes)


def _items(path: str) -> str:
    """
    ``(_tk_rec, _item)``: each element of each top-level array, or each top-level value.
    """
    docs = (
        f"(SELECT row_number() OVER () AS _tk_doc, json FROM read_json({literal(path)}, "
        f"format='auto', records=false, columns={{'json': 'JSON'}}, "
        f"maximum_object_size={_MAX_LINE}))"
    )
    return (
        "(SELECT row_number() OVER (ORDER BY _tk_doc, _e.i) AS _tk_rec, _e.x AS _item FROM "
        "(SELECT _tk_doc, unnest(list_transform(CASE WHEN json_type(json) = 'ARRAY' THEN "
        "CAST(json AS JSON[]) ELSE [json] END, lambda x, i: {'i': i, 'x': x})) AS _e "
        f"FROM {docs}))"
    )


def _public(
    path: str, keys: Sequence[tuple[str, str]], options: ScanOptions
) -> tuple[list[tuple[str, str]], set[str]]:
    """
    The columns to read, and the private ones not to (credentials, message content).

    A private-looking column that ``--map`` or its name assigns to the call record is read.
    """
    assigned = set(assign_columns(path, [k for k, _ in keys], options).values())
    private = {k for k, _ in keys if k not in assigned and is_private(k)}
    private |= {k for k in CONTENT_KEYS if k not in assigned}
    return [(k, t) for k, t in keys if k not in private], private


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
        public, private = _public(path, list(typed.items()), options)
        select, has_id, notes = _scan(path, source, dict(public), options)
        # A malformed line cannot be split into columns, so one with a credential or content
        # column in the header is not kept as text at all.
        raw = "NULL::VARCHAR" if private else "arg_min(csv_line, column_idx)"
        # The reader may log several errors for one line: keep the first, one reject per row.
        rejects = (
            "SELECT line - 1 AS record, 'malformed_row' AS reason, "
            "arg_min(error_type || ': ' || error_message, column_idx) AS detail, "
            f"{raw} AS raw FROM {self.rejects_table} GROUP BY line ORDER BY line"
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
        public, _ = _public(path, list(typed.items()), options)
        select, has_id, notes = _scan(
            path, source, dict(public), options, row_number="file_row_number + 1"
        )
        return Scan(self.name, select, has_call_id=has_id, notes=notes)
