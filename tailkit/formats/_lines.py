"""
JSON lines read one line at a time, so that one bad line is one reject and nothing more.

Every JSON-lines format (generic ``jsonl``, the executor's ledger, LiteLLM, Helicone, AIPerf)
has a fast path through ``read_json`` with typed columns, which refuses the whole file for one
line it cannot read. The forgiving path here is what runs then. It reads with DuckDB's own JSON
parser (``read_json_objects`` with ``ignore_errors``), which splits on newlines only and yields
NULL for a line it cannot parse (a syntax error, a raw control character, bytes that are not
UTF-8) instead of failing, and numbers lines the way the fast path does (blank lines are not
records). So a bare carriage return inside a line is whitespace, as JSON says, and a Latin-1
line after 12,000 good ones is one reject.

The text of a line that does not parse comes from a second, lenient read as text (a CSV reader
that splits on nothing but newlines), joined by line number only when both reads counted the
same lines: a raw carriage return or an unreadable byte can make the text reader see lines the
JSON reader does not, and then a reject shows no text rather than another line's.

Limits: a line longer than ``MAX_LINE`` makes DuckDB's JSON reader refuse the file, in bounded
memory; the file is then reported as one error naming the limit.
"""

from __future__ import annotations

import json

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tailkit.formats._scrub import scrub
from tailkit.formats._secrets import scrub_values
from tailkit.formats._sql import literal


MAX_LINE = 64 * 1024 * 1024
"""The longest line read, in bytes."""

SAMPLE = 10_000
"""Lines whose keys the sniff merges."""

_JSON_TYPES = {"UBIGINT": "BIGINT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN"}
_BLANK = "chr(32) || chr(9) || chr(13)"


def row_problem(keys: Iterable[str] = ()) -> tuple[str, str, str]:
    """
    The ``row_problem`` of `normalize_sql` over `forgiving_source`.

    The line's text shown in the detail lacks ``keys`` and credentials.
    """
    shown = f"left({scrub_values(scrub('_line', keys))}, 60)"  # secrets go before the cut
    return (
        "malformed_json",
        "NOT _obj",
        f"coalesce('line is not a JSON object: ' || {shown}, 'line is not valid JSON (a syntax "
        "error, a raw control character, or bytes that are not UTF-8)')",
    )


def objects(path: str) -> str:
    """
    SQL for ``json`` per non-blank line, NULL where the line does not parse, in file order.
    """
    return (
        f"read_json_objects({literal(path)}, format='newline_delimited', ignore_errors=true, "
        f"maximum_object_size={MAX_LINE})"
    )


def _text_lines(path: str) -> str:
    # Latin-1 decodes any byte, so no line is dropped for its encoding (its text may show
    # mojibake); strict_mode=false keeps a stray byte from failing the read.
    return (
        f"(SELECT row_number() OVER () AS record, line FROM read_csv({literal(path)}, "
        "columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='', header=false, "
        "auto_detect=false, strict_mode=false, ignore_errors=true, encoding='latin-1', "
        f"max_line_size={MAX_LINE}) WHERE trim(line, {_BLANK}) <> '')"
    )


def _aligned(path: str) -> str:
    return f"((SELECT count(*) FROM {_text_lines(path)}) = (SELECT count(*) FROM {objects(path)}))"


def sniff_sql(path: str) -> str:
    """
    SQL for ``(key, type)`` of the top-level keys of the first `SAMPLE` objects, merged.

    ``type`` is the merged scalar type (``VARCHAR``, ``DOUBLE``, ``UBIGINT``, …) or ``JSON``
    for nested values. The nesting is not looked into (a line nested 100,000 deep is fine).
    """
    structure = (
        f"SELECT json_group_structure(json) AS s FROM (SELECT json FROM {objects(path)} "
        f"LIMIT {SAMPLE}) WHERE json_type(json) = 'OBJECT'"
    )
    return (
        "SELECT e.key, CASE WHEN json_type(e.value) = 'VARCHAR' THEN e.value->>'$' "
        "ELSE 'JSON' END FROM (SELECT unnest(map_entries(CAST(s AS MAP(VARCHAR, JSON)))) AS e "
        f"FROM ({structure}))"
    )


def sniffed_types(sniffed: Sequence[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """
    ``(key, read type)`` from the rows of `sniff_sql`: BIGINT, DOUBLE, BOOLEAN, VARCHAR or JSON.
    """
    out = []
    for key, kind in sniffed:
        name = str(kind)
        out.append((str(key), "JSON" if name == "JSON" else _JSON_TYPES.get(name, "VARCHAR")))
    return out


def forgiving_source(path: str, shape: Mapping[str, str]) -> str:
    """
    SQL for one row per non-blank line: ``_tk_rec``, ``_line``, ``_parsed``, ``_obj``, ``_j``.

    ``_j`` is the line's object transformed to ``shape`` (key → ``VARCHAR`` / ``JSON``), NULL
    when the line is not an object; ``_line`` its text (from the text read when the line does
    not parse).
    """
    text = (
        # Only lines the JSON reader may have refused: not JSON, or not ASCII (a Latin-1 line
        # reads as JSON once decoded as Latin-1).
        f"(SELECT record, line FROM {_text_lines(path)} WHERE (NOT coalesce(json_valid(line), "
        f"false) OR regexp_matches(line, '[^\\x01-\\x7f]')) AND {_aligned(path)})"
    )
    parsed = (
        f"(SELECT row_number() OVER () AS _tk_rec, json AS _parsed, "
        f"coalesce(json_type(json) = 'OBJECT', false) AS _obj FROM {objects(path)})"
    )
    return (
        f"(SELECT _tk_rec, coalesce(_parsed::VARCHAR, _t.line) AS _line, _parsed, _obj, "
        f"json_transform(CASE WHEN _obj THEN _parsed END, {literal(json.dumps(shape))}) AS _j "
        f"FROM {parsed} LEFT JOIN {text} AS _t ON _t.record = _tk_rec AND _parsed IS NULL)"
    )


def raw_lines_sql(path: str, keys: Iterable[str] = ()) -> str:
    """
    SQL for ``(record, line)``: each line as written, minus ``keys`` and credentials.

    Empty when the text read and the JSON read do not count the same lines.
    """
    return (
        f"SELECT record, {scrub('line', keys)} AS line FROM {_text_lines(path)} "
        f"WHERE {_aligned(path)}"
    )
