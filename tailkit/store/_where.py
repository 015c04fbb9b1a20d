"""
A user's ``where`` filter, confined to expressions over the columns of table ``calls``.

A filter is SQL pasted into the store's queries, and DuckDB's SQL reaches far beyond one
table: ``read_text('/etc/passwd')``, ``glob('/')`` or ``(SELECT ... FROM read_csv(...))`` read
any local file, and the content came back in the error message. So a filter is parsed, never
run, by DuckDB's own parser (``json_serialize_sql``), and its syntax tree walked: column
references to the call record, constants, operators, comparisons, ``AND`` / ``OR`` / ``NOT``,
``BETWEEN``, ``IN`` lists, ``LIKE``, ``CASE``, casts to plain types and a list of pure scalar
functions pass; anything else (a subquery, a table function, a second statement, a window or
an aggregate, a setting, a parameter) is refused before any query runs.

The filter is checked as the queries embed it, ``WHERE (filter)``, followed by a marker that
must come out of the parse as the last term: a comment that swallows the rest of the query, or a
parenthesis that closes the filter early, loses the marker and is refused.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import threading

from typing import Any, NoReturn

from tailkit.errors import FilterError
from tailkit.record import CALL_COLUMNS
from tailkit.text import printable


__all__ = ["WHERE_COLUMNS", "checked_where"]

WHERE_COLUMNS = tuple(c.name for c in CALL_COLUMNS)
"""The columns a filter may name: the call record's."""

_OPERATOR_TYPES = frozenset({
    "OPERATOR_NOT", "OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL", "COMPARE_IN", "COMPARE_NOT_IN",
    "OPERATOR_COALESCE", "OPERATOR_NULLIF", "ARRAY_EXTRACT", "ARRAY_SLICE", "STRUCT_EXTRACT",
})  # fmt: skip
"""Operators (class ``OPERATOR``) a filter may use."""

_FUNCTIONS = frozenset({
    # arithmetic, text and pattern operators
    "+", "-", "*", "/", "//", "%", "^", "**", "@", "||", "~~", "!~~", "~~*", "!~~*", "~~~",
    "!~~~", "->", "->>", "like_escape", "not_like_escape", "ilike_escape", "not_ilike_escape",
    # text
    "lower", "upper", "lcase", "ucase", "length", "strlen", "char_length", "len", "trim",
    "ltrim", "rtrim", "substr", "substring", "left", "right", "starts_with", "ends_with",
    "prefix", "suffix", "contains", "instr", "strpos", "position", "replace", "concat",
    "concat_ws", "reverse", "split_part", "regexp_matches",
    "regexp_full_match", "regexp_extract", "regexp_replace", "md5", "hash",
    # numbers
    "abs", "round", "floor", "ceil", "ceiling", "sign", "sqrt", "ln", "log", "log10", "log2",
    "exp", "pow", "power", "isnan", "isinf", "isfinite", "trunc", "greatest", "least",
    "nullif", "ifnull", "if", "iff",
    # time
    "now", "current_timestamp", "get_current_timestamp", "today", "current_date",
    "date_part", "datepart", "date_trunc", "datetrunc", "date_diff", "datediff", "date_sub",
    "datesub", "age", "epoch", "epoch_ms", "epoch_us", "year", "month", "day", "hour",
    "minute", "second", "dayofweek", "dayofyear", "week", "to_timestamp", "make_timestamp",
    "make_date", "strftime", "strptime", "to_days", "to_hours", "to_minutes", "to_seconds",
    "to_milliseconds", "to_microseconds",
    # the attrs column (JSON)
    "json_extract", "json_extract_string", "json_extract_path", "json_extract_path_text",
    "json_exists", "json_value", "json_type", "json_contains",
    # literal lists and structs (IN lists, [1, 2])
    "list_value", "row", "struct_pack", "list_contains", "list_has", "array_contains",
})  # fmt: skip
"""Scalar functions (by their parsed name) a filter may call: pure, reading nothing else."""

_TYPES = frozenset({
    "VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR", "BOOLEAN", "BOOL", "TINYINT", "SMALLINT",
    "INTEGER", "INT", "INT4", "INT8", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "FLOAT", "REAL", "DOUBLE", "DECIMAL", "NUMERIC", "DATE", "TIME", "TIMESTAMP",
    "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "INTERVAL", "JSON", "LIST",
})  # fmt: skip
"""Types a filter may cast to."""

_CLASSES = frozenset({
    "COLUMN_REF", "CONSTANT", "COMPARISON", "CONJUNCTION", "OPERATOR", "BETWEEN", "CAST",
    "FUNCTION", "CASE", "TYPE", "COLLATE",
})  # fmt: skip
"""Expression classes a filter may hold; each is checked further below."""

_REFUSED = {
    "SUBQUERY": "a subquery",
    "STAR": "* or COLUMNS(...)",
    "PARAMETER": "a parameter (? or $1)",
    "LAMBDA": "a lambda",
    "WINDOW": "a window function",
    "POSITIONAL_REFERENCE": "a positional reference (#1)",
}


class _Refused(Exception):  # noqa: N818 - internal: carries what was refused
    def __init__(self, what: str, *, parse: bool = False) -> None:
        super().__init__(what)
        self.parse = parse


def _refuse(what: str, *, parse: bool = False) -> NoReturn:
    raise _Refused(what, parse=parse)


def checked_where(where: str) -> str:
    """
    ``where`` if it is a filter over the call columns only; else an error naming what is not.

    Args:
        where: An SQL boolean expression on the call-record columns, e.g.
            ``"step = 'extract' AND total_s > 1"``.

    Returns:
        ``where`` itself, safe to embed as ``WHERE (where)`` in a query over ``calls``.

    Raises:
        FilterError: ``where`` is not SQL, or it uses anything besides the call columns,
            constants, operators and pure scalar functions (a subquery, a table function such
            as ``read_csv``, a second statement, an aggregate, ...). The message does not
            contain anything DuckDB read: nothing was run.
    """
    if not isinstance(where, str):
        raise _error(where, _Refused(f"a filter is SQL text, got {type(where).__name__}"))
    try:
        _check(where)
    except _Refused as exc:
        raise _error(where, exc) from None
    return where


def _error(where: object, refused: _Refused) -> FilterError:
    columns = ", ".join(WHERE_COLUMNS)
    shown = repr(where)
    if len(shown) > 120:
        shown = shown[:100] + "…" + shown[-12:]
    said = printable(str(refused))
    if refused.parse:
        why = f"Parser Error: {said}; write an SQL expression over the call columns ({columns})"
    else:
        why = f"only expressions over the call columns ({columns}) are allowed; {said}"
    msg = f"{{field}} {printable(shown)} is not a valid filter: {why}"
    return FilterError(msg, field="where", value=where)


@functools.lru_cache(maxsize=256)
def _check(where: str) -> None:
    try:
        _check_tree(where)
    except RecursionError:  # json.loads or the walk: a + a + ... a thousand times
        _refuse("it nests too deeply: write it with fewer nested functions or operators")


def _check_tree(where: str) -> None:
    if not where.strip():
        _refuse("it is empty (leave the filter out to take every call)")
    if "\x00" in where:
        _refuse("it holds a NUL character")
    marker = "tk_end_" + secrets.token_hex(8)
    tree = _parse(f"SELECT * FROM calls WHERE ({where}) AND '{marker}'")
    if tree.get("error"):
        # the parser's message quotes the filter's own text, never a file's (nothing ran)
        said = str(tree.get("error_message", "a syntax error")).replace(f") AND '{marker}'", "")
        _refuse(said, parse=True)
    statements = tree.get("statements") or []
    if len(statements) != 1:
        _refuse("it holds more than one statement")
    node = dict(statements[0].get("node") or {})
    clause = node.pop("where_clause", None)
    if _located(node) != _located(_reference()):
        _refuse("it reaches beyond the filter (a closing parenthesis, UNION, ORDER BY, ...)")
    terms = clause.get("children", []) if clause and clause.get("type") == "CONJUNCTION_AND" else []
    last = terms[-1] if terms else {}
    if last.get("class") != "CONSTANT" or (last.get("literal") or {}).get("text") != marker:
        _refuse("it ends in a comment or an unbalanced parenthesis")
    for term in terms[:-1]:
        _walk(term)


_PARSER: dict[int, Any] = {}  # process id -> its parsing connection (a fork opens its own)
_PARSER_LOCK = threading.Lock()


def _parse(sql: str) -> dict[str, Any]:
    """
    DuckDB's syntax tree of ``sql`` as JSON (parsed only: nothing runs, nothing is read).
    """
    import duckdb  # the store's dependency; this module is imported with it

    with _PARSER_LOCK:
        con = _PARSER.get(os.getpid())
        if con is None:
            # a connection costs ~40 ms, a parse ~0.3 ms: one per process, used under the lock
            _PARSER.clear()
            con = _PARSER[os.getpid()] = duckdb.connect(
                ":memory:", config={"enable_external_access": False}
            )
        try:
            row = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
        except duckdb.Error as exc:
            _refuse(str(exc).splitlines()[0], parse=True)
    parsed: dict[str, Any] = json.loads(row[0]) if row else {"error": True}
    return parsed


@functools.cache
def _reference() -> dict[str, Any]:
    tree = _parse("SELECT * FROM calls WHERE TRUE")
    node = dict(tree["statements"][0]["node"])
    node.pop("where_clause", None)
    return node


def _located(value: Any) -> Any:
    """
    ``value`` without the source positions, which differ between texts of the same shape.
    """
    if isinstance(value, dict):
        return {k: _located(v) for k, v in value.items() if not k.startswith("query_location")}
    if isinstance(value, list):
        return [_located(v) for v in value]
    return value


def _walk(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("class")
    if kind is None:
        for value in node.values():
            _walk(value)
        return
    if kind in _REFUSED:
        _refuse(f"refused {_REFUSED[kind]}")
    if kind not in _CLASSES:
        _refuse(f"refused a {str(kind).lower().replace('_', ' ')} expression")
    getattr(_Checks, kind.lower(), _Checks.any)(node)
    for key, value in node.items():
        if key not in ("type_expr",):  # a cast's type is checked by its own rule
            _walk(value)


class _Checks:
    @staticmethod
    def any(node: dict[str, Any]) -> None:
        pass

    @staticmethod
    def column_ref(node: dict[str, Any]) -> None:
        names = node.get("column_names") or []
        if len(names) != 1 or names[0].lower() not in WHERE_COLUMNS:
            _refuse(f"refused column {'.'.join(map(str, names))!r}")

    @staticmethod
    def operator(node: dict[str, Any]) -> None:
        if node.get("type") not in _OPERATOR_TYPES:
            _refuse(f"refused operator {str(node.get('type')).lower()}")

    @staticmethod
    def function(node: dict[str, Any]) -> None:
        name = str(node.get("function_name", "")).lower()
        if name not in _FUNCTIONS:
            _refuse(f"refused function {name}()")
        if node.get("catalog") or node.get("schema"):
            _refuse(f"refused function {name}() of another schema")
        orders = (node.get("order_bys") or {}).get("orders") or []
        if node.get("filter") or orders or node.get("distinct") or node.get("export_state"):
            _refuse(f"refused {name}() as an aggregate")

    @staticmethod
    def cast(node: dict[str, Any]) -> None:
        _Checks.type(node.get("type_expr") or {})

    @staticmethod
    def type(node: dict[str, Any]) -> None:
        name = str(node.get("type_name", "")).upper()
        if name not in _TYPES or node.get("catalog") or node.get("schema"):
            _refuse(f"refused a cast to {name or 'an unknown type'}")
        for child in node.get("children") or []:
            _walk(child)
