"""
SQL that turns raw source columns into validated call-record columns.

Every adapter describes where each call-record column comes from (`RawColumn`); `normalize_sql`
wraps that in one SELECT that casts, converts units, and names the first problem of each row in
``reason`` / ``detail``. Everything runs inside DuckDB; nothing loops over rows in Python.

The order of the checks is the order a person would fix a row in: unreadable row, missing
model, values that are not numbers or timestamps, values out of range, values that contradict
each other. A value is never changed to make it fit: a number beyond its column's type, a time
before 1970 or after 2200, a UTC offset beyond 14 hours or a duration above a week rejects the
row with a reason. A row without a provider is kept, with the provider its model name implies
(see `tailkit.formats._providers`) and ``"provider_inferred": true`` in ``attrs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tailkit.formats._providers import infer_provider_sql
from tailkit.formats._secrets import scrub_values
from tailkit.record import ROLES, SOURCE_COLUMNS, STATUSES, Column


INTEGER_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
     "UBIGINT"}
)  # fmt: skip
NUMERIC_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
     "UBIGINT", "FLOAT", "DOUBLE", "REAL"}
)  # fmt: skip

_STATUS_SYNONYMS: Mapping[str, str] = {
    "success": "ok", "succeeded": "ok", "completed": "ok", "200": "ok",
    "failure": "error", "failed": "error", "fail": "error",
    "timed_out": "timeout", "timedout": "timeout",
    "canceled": "cancelled",
    "rate_limit": "rate_limited", "ratelimited": "rate_limited", "429": "rate_limited",
    # A boolean success column (true/false, 1/0, yes/no; BOOLEAN sources read as true/false).
    "true": "ok", "false": "error", "1": "ok", "0": "error", "yes": "ok", "no": "error",
}  # fmt: skip

MODEL_HINT = "--map model=COLUMN or --set model=VALUE"
"""How a generic format's user fills a missing model (`normalize_sql`'s default hint)."""

STATUS_HINT = "--status-map VALUE=STATUS"
"""How a generic format's user names a status vocabulary (`normalize_sql`'s default hint)."""

MAX_DURATION_S = 7 * 24 * 3600.0
"""A duration above a week is not a call's latency: rejected as out of range."""

_TIME_RANGE = ("1970-01-01 00:00:00+00", "2200-01-01 00:00:00+00")
"""Times outside [1970, 2200) are rejected as out of range (epoch 0 is still allowed)."""

_FITS_INT32 = frozenset({"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT"})
_FITS_INT64 = _FITS_INT32 | {"BIGINT", "UINTEGER"}
_INT_RANGES: Mapping[str, tuple[str, str, str, frozenset[str]]] = {
    "attempt": ("{v} >= 2147483648.0", "at most 2147483647", "", _FITS_INT32),
    "input_tokens": ("{v} >= 9223372036854775808.0", "at most 2^63-1", "", _FITS_INT64),
    "output_tokens": ("{v} >= 9223372036854775808.0", "at most 2^63-1", "", _FITS_INT64),
    "http_status": (
        "{v} < 100 OR {v} > 599", "an HTTP status is 100 to 599",
        "; leave it empty when there was no response", frozenset(),
    ),
}  # fmt: skip
"""Per integer column: the out-of-range condition over its value (a DOUBLE, so the bounds are
exclusive powers of two), the range in words, a fix, and source types that always fit."""

# A UTC offset beyond 14 hours (or with 60+ minutes) after a time of day: DuckDB accepts
# +99:00 and shifts the instant by four days; no place on Earth is that far from UTC.
_BAD_OFFSET = (
    r"\d:\d\d(:\d\d([.,]\d+)?)? ?[+-]((1[5-9]|[2-9]\d)(:?\d\d)?|14:?(0[1-9]|[1-5]\d)"
    r"|\d\d:?[6-9]\d)$"
)


def ident(name: str) -> str:
    """
    Quote an SQL identifier.
    """
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """
    Quote an SQL string literal.
    """
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class RawColumn:
    """
    Where one call-record column comes from: an SQL expression and its source type.

    Args:
        expr: SQL over the scan (a quoted column, a constant, or a computation).
        sql_type: The DuckDB type of ``expr`` (``VARCHAR`` when parsed from text).
        label: How to name the source in messages, e.g. ``column 'latency'``.
    """

    expr: str
    sql_type: str
    label: str


def _is_numeric(sql_type: str) -> bool:
    return sql_type.upper().split("(")[0] in NUMERIC_TYPES or sql_type.upper().startswith("DECIMAL")


def _number(raw: RawColumn) -> str:
    if _is_numeric(raw.sql_type):
        return f"CAST({raw.expr} AS DOUBLE)"
    return f"TRY_CAST({raw.expr} AS DOUBLE)"


def _epoch(x: str) -> str:
    # Epoch seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude:
    # 1e11 s is the year 5138, 1e11 ms is 1973, so the ranges cannot be confused for real logs.
    # try(): a number beyond any date becomes NULL (a reject), not a failed read.
    return (
        f"try(CASE WHEN abs({x}) < 1e11 THEN to_timestamp({x}) "
        f"WHEN abs({x}) < 1e14 THEN to_timestamp({x} / 1e3) "
        f"WHEN abs({x}) < 1e17 THEN to_timestamp({x} / 1e6) "
        f"ELSE to_timestamp({x} / 1e9) END)"
    )


def _is_time(sql_type: str) -> bool:
    kind = sql_type.upper()
    return kind.startswith("TIMESTAMP") or kind == "DATE"


def _timestamp(raw: RawColumn) -> str:
    if _is_time(raw.sql_type):
        return f"CAST({raw.expr} AS TIMESTAMPTZ)"
    if _is_numeric(raw.sql_type):
        return _epoch(f"CAST({raw.expr} AS DOUBLE)")
    text = f"CAST({raw.expr} AS VARCHAR)"
    # ISO-8601 first: it is the common case, and no epoch number parses as a timestamp.
    return f"coalesce(TRY_CAST({text} AS TIMESTAMPTZ), {_epoch(f'TRY_CAST({text} AS DOUBLE)')})"


def _status(text: str) -> str:
    whens = " ".join(f"WHEN {literal(k)} THEN {literal(v)}" for k, v in _STATUS_SYNONYMS.items())
    known = ", ".join(literal(s) for s in STATUSES)
    folded = f"lower(trim({text}))"
    # Exact names first: folding case and spaces costs a string copy per row.
    return (
        f"CASE WHEN {text} IN ({known}) THEN {text} WHEN {folded} IN ({known}) THEN {folded} "
        f"ELSE CASE {folded} {whens} END END"
    )


def _shown(expr: str) -> str:
    # Secrets go before the cut: a cut secret would no longer be found, and leak in part.
    text = scrub_values(f"CAST({expr} AS VARCHAR)")
    return f"'''' || left({text}, 60) || ''''"


@dataclass(frozen=True, slots=True)
class _Check:
    reason: str
    condition: str
    detail: str


def _column_checks(col: Column, raw: RawColumn) -> list[_Check]:
    """
    The checks one column needs; none that its source type already guarantees.
    """
    name, v, r = col.name, f"_tk_v_{col.name}", f"_tk_r_{col.name}"
    typed = raw.sql_type.upper()
    whole = typed.split("(")[0] in INTEGER_TYPES
    checks: list[_Check] = []
    if col.kind in ("duration", "int") and not whole:
        parsed = "" if _is_numeric(typed) else f"{v} IS NULL OR "
        checks.append(
            _Check(
                f"{name}_not_a_number",
                f"{r} IS NOT NULL AND ({parsed}NOT isfinite({v}))",
                f"'{name} is not a finite number: ' || {_shown(r)} || "
                f"{literal(' (from ' + raw.label + ')')}",
            )
        )
    if col.kind in ("duration", "int") and not typed.startswith("U"):
        checks.append(
            _Check(f"{name}_negative", f"{v} < 0", f"'{name} is negative: ' || {v}::VARCHAR")
        )
    if col.kind == "int" and not whole:
        checks.append(
            _Check(
                f"{name}_not_whole",
                f"{v} <> floor({v})",
                f"'{name} is not a whole number: ' || {v}::VARCHAR",
            )
        )
    if col.kind == "int" and name in _INT_RANGES:
        condition, bound, fix, fits = _INT_RANGES[name]
        if typed.split("(")[0] not in fits:
            checks.append(
                _Check(
                    f"{name}_out_of_range",
                    condition.format(v=v),
                    f"'{name} ' || {_shown(r)} || ' is out of range ({bound}){fix}'",
                )
            )
    if col.kind == "duration":
        checks.append(
            _Check(
                f"{name}_out_of_range",
                f"{v} > {MAX_DURATION_S!r}",
                f"'{name} ' || {_shown(r)} || {literal(_DURATION_TOO_LONG)}",
            )
        )
    if col.kind == "timestamp":
        checks.extend(_time_checks(name, raw, v, r))
    if col.kind == "bool" and typed != "BOOLEAN":
        checks.append(
            _Check(
                f"{name}_not_boolean",
                f"{r} IS NOT NULL AND {v} IS NULL",
                f"'{name} is not true/false: ' || {_shown(r)}",
            )
        )
    return checks


_DURATION_TOO_LONG = (
    f" is out of range (more than a week, {MAX_DURATION_S:.0f} s, after unit conversion; "
    "check the column and --unit)"
)


def _time_checks(name: str, raw: RawColumn, v: str, r: str) -> list[_Check]:
    checks: list[_Check] = []
    if not _is_time(raw.sql_type):
        checks.append(
            _Check(
                f"{name}_bad_timestamp",
                f"{r} IS NOT NULL AND {v} IS NULL",
                f"'{name} is not an ISO-8601 time or epoch number: ' || {_shown(r)}",
            )
        )
    low, high = _TIME_RANGE
    checks.append(
        _Check(
            f"{name}_out_of_range",
            f"{v} < TIMESTAMPTZ {literal(low)} OR {v} >= TIMESTAMPTZ {literal(high)}",
            f"'{name} ' || {_shown(r)} || ' is out of range (before 1970 or after 2200)'",
        )
    )
    if not _is_time(raw.sql_type) and not _is_numeric(raw.sql_type):
        text = f"CAST({r} AS VARCHAR)"
        checks.append(
            _Check(
                f"{name}_bad_offset",
                # CASE, not AND: it spares the common UTC times the regular expression (4x).
                f"CASE WHEN {v} IS NULL OR suffix({text}, 'Z') OR suffix({text}, '+00:00') "
                f"THEN false ELSE regexp_matches({text}, {literal(_BAD_OFFSET)}) END",
                f"'{name} ' || {_shown(r)} || ' has a UTC offset beyond 14:00'",
            )
        )
    return checks


def _text(raw: RawColumn) -> str:
    # Empty strings mean "not given"; values are not trimmed (a copy of every string costs
    # more than the rare padded value is worth).
    if raw.sql_type.upper() == "VARCHAR":
        return f"NULLIF({raw.expr}, '')"
    return f"NULLIF(CAST({raw.expr} AS VARCHAR), '')"


def _value(col: Column, raw: RawColumn, duration_scale: float) -> tuple[str, str]:
    """
    The raw expression and the typed value expression of one column.
    """
    if col.kind in ("duration", "int"):
        scale = f" / {duration_scale!r}" if col.kind == "duration" and duration_scale != 1 else ""
        return raw.expr, f"({_number(raw)}){scale}"
    if col.kind == "timestamp":
        return raw.expr, _timestamp(raw)
    if col.kind == "bool":
        if raw.sql_type.upper() == "BOOLEAN":
            return raw.expr, raw.expr
        return raw.expr, f"TRY_CAST(CAST({raw.expr} AS VARCHAR) AS BOOLEAN)"
    text = _text(raw)
    if col.name == "status":
        return text, _status(text)
    if col.name == "role":
        roles = ", ".join(literal(r) for r in ROLES)
        return text, f"CASE WHEN {text} IN ({roles}) THEN {text} ELSE lower(trim({text})) END"
    return text, text


REJECT_STATUS = "!reject"
"""``status`` of a row that failed validation; its ``attrs`` hold reason, detail and raw."""


def normalize_sql(
    scan: str,
    raw: Mapping[str, RawColumn],
    *,
    extras: Sequence[tuple[str, str]] = (),
    duration_scale: float = 1.0,
    raw_text: str | None = None,
    row_problem: tuple[str, str, str] | None = None,
    row_number: str = "NULL::BIGINT",
    model_hint: str = MODEL_HINT,
    status_hint: str = STATUS_HINT,
) -> str:
    """
    Build the SELECT that validates and types one scan, in one pass over the file.

    A good row comes out as call-record columns. A bad row comes out too, in the same place,
    with ``status`` = `REJECT_STATUS` and ``attrs`` = ``{"reason", "detail", "raw"}``, so that
    the file is read once and the store can move bad rows to ``rejects`` afterwards. ``detail``
    and ``raw`` are computed for bad rows only.

    Args:
        scan: A FROM-clause item that yields the source rows in file order.
        raw: Call-record column name → its source; columns not given are NULL.
        extras: ``(key, expr)`` pairs kept in ``attrs`` as a JSON object.
        duration_scale: Divide durations by this to get seconds (1000 for milliseconds).
        raw_text: SQL for the row as read, kept with rejects (a JSON object of the raw values
            when ``None``).
        row_problem: ``(reason, condition, detail)`` for a row that could not be read at all.
        row_number: SQL for the row's 1-based record number when the reader knows it; NULL
            leaves numbering to the store (rows arrive in file order).
        model_hint: The options that fill a missing model, as the ``missing_model`` detail
            names them (only options the format accepts; empty: name none).
        status_hint: The option that maps a status vocabulary, as the ``bad_status`` detail
            names it (empty: name none).

    Returns:
        SQL yielding the source columns of the call record (`SOURCE_COLUMNS`), ``attrs`` and
        ``source_row``.
    """
    # Working columns carry a _tk_ prefix so that no source column name can shadow them.
    inner: list[str] = []
    checks: list[_Check] = []
    if row_problem:
        checks.append(_Check(*row_problem))
    fill = f" (fill it with {model_hint})" if model_hint else ""
    checks.append(
        _Check("missing_model", "_tk_v_model IS NULL", literal(f"model is missing{fill}"))
    )
    for col in SOURCE_COLUMNS:
        source = raw.get(col.name)
        if source is None:
            inner.append(f"NULL::{col.sql_type} AS _tk_v_{col.name}, NULL AS _tk_r_{col.name}")
            continue
        r, v = _value(col, source, duration_scale)
        inner.append(f"{r} AS _tk_r_{col.name}, {v} AS _tk_v_{col.name}")
        checks.extend(_column_checks(col, source))
    checks.extend(_cross_checks(status_hint))
    if raw_text is None:
        pairs = ", ".join(f"{literal(k)}, _tk_r_{k}" for k in raw)
        raw_text = f"json_object({pairs})::VARCHAR" if pairs else "NULL"
    attrs = (
        "json_object(" + ", ".join(f"{literal(k)}, {e}" for k, e in extras) + ")"
        if extras
        else "NULL::JSON"
    )
    attrs = (
        f"CASE WHEN _tk_v_provider IS NULL THEN json_merge_patch(coalesce({attrs}, '{{}}'), "
        f"'{{\"provider_inferred\": true}}') ELSE {attrs} END"
    )
    reason = " ".join(f"WHEN {c.condition} THEN {literal(c.reason)}" for c in checks)
    detail = " ".join(f"WHEN {c.condition} THEN {c.detail}" for c in checks)
    out = ",\n  ".join(_stored(col) for col in SOURCE_COLUMNS if col.name != "status")
    bad = f"json_object('reason', _tk_reason, 'detail', CASE {detail} END, 'raw', {raw_text})"
    return (
        f"SELECT\n  {out},\n"
        f"  CASE WHEN _tk_reason IS NULL THEN {_STATUS} "
        f"ELSE {literal(REJECT_STATUS)} END AS status,\n"
        f"  CASE WHEN _tk_reason IS NULL THEN {attrs} ELSE {bad} END AS attrs,\n"
        f"  {row_number} AS source_row\n"
        f"FROM (SELECT *, CASE {reason} END AS _tk_reason "
        f"FROM (SELECT *, {', '.join(inner)} FROM {scan}) AS _src) AS _checked"
    )


def _cross_checks(status_hint: str) -> list[_Check]:
    roles = ", ".join(literal(r) for r in ROLES)
    fix = f" (map other values with {status_hint})" if status_hint else ""
    not_one = f" is not one of {', '.join(STATUSES)}{fix}"
    return [
        _Check(
            "bad_status",
            "_tk_r_status IS NOT NULL AND _tk_v_status IS NULL",
            f"'status ' || {_shown('_tk_r_status')} || {literal(not_one)}",
        ),
        _Check(
            "bad_role",
            f"_tk_v_role IS NOT NULL AND _tk_v_role NOT IN ({roles})",
            f"'role ' || {_shown('_tk_v_role')} || ' is not one of {', '.join(ROLES)}'",
        ),
        _Check(
            "ttft_after_total",
            "_tk_v_ttft_s > _tk_v_total_s",
            "'ttft_s ' || _tk_v_ttft_s::VARCHAR || ' is larger than total_s ' "
            "|| _tk_v_total_s::VARCHAR",
        ),
        # A call is ok only with a positive latency: an ok without one is a contradiction.
        _Check(
            "ok_without_total",
            f"_tk_v_total_s IS NULL AND {_STATUS} = 'ok'",
            "'total_s is empty but the call is not marked failed "
            "(give its latency, or a status such as error or timeout)'",
        ),
        _Check(
            "ok_with_zero_total",
            "_tk_v_total_s = 0 AND _tk_v_status = 'ok'",
            "'status is ok but total_s is 0 (a finished call takes time: give its latency, "
            "or a status such as error)'",
        ),
    ]


_STATUS = (
    "coalesce(_tk_v_status, CASE WHEN _tk_v_http_status = 429 THEN 'rate_limited' "
    "WHEN _tk_v_http_status >= 400 THEN 'error' "
    "WHEN _tk_v_censored_at_s IS NOT NULL THEN 'timeout' "
    "WHEN _tk_v_total_s <= 0 THEN 'error' ELSE 'ok' END)"
)
"""A row without a status: a 429 is rate-limited, other HTTP errors are errors, a cut is a
timeout, a call that took no time failed (logs write 0 for a call that never ran), and
anything else finished."""


def _stored(col: Column) -> str:
    v = f"_tk_v_{col.name}"
    if col.name == "ttft_s":
        # docs/call-record.md: TTFT is NULL when unknown - never 0, never equal to the total.
        return f"CASE WHEN {v} = 0 OR {v} = _tk_v_total_s THEN NULL ELSE {v} END AS ttft_s"
    if col.name == "attempt":
        return "coalesce(TRY_CAST(_tk_v_attempt AS INTEGER), 0) AS attempt"
    if col.name == "provider":
        return f"coalesce({v}, {infer_provider_sql('_tk_v_model')}) AS provider"
    if col.name == "abandoned":
        return "coalesce(_tk_v_abandoned, false) AS abandoned"
    if col.kind == "int":
        return f"TRY_CAST({v} AS {col.sql_type}) AS {col.name}"
    return f"{v} AS {col.name}"
