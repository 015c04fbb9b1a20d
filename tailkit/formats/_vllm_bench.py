"""
vLLM ``vllm bench serve`` results (``--save-result``): one JSON object per run, per-request arrays.

A result holds run fields (``model_id``, ``backend`` / ``endpoint_type``, ``date``, …) and, per
request, the i-th element of ``input_lens``, ``output_lens``, ``ttfts``, ``itls`` (gaps between
streamed chunks), ``latencies``, ``start_times`` and ``errors``. The arrays are
expanded in SQL, one row per request (``unnest(range(n))`` and ``json_extract(array, i)``);
``--append-result`` files (several results, one per line) number their requests on across
results. SGLang's ``bench_serving`` writes the same arrays.

Failed requests stay in the arrays with ``ttft = 0``, ``latency = 0``, ``itl = []`` and
``output_len = 0``: those are failures, never zero latencies. A request is failed when its
``errors[i]`` is not empty, its ``output_lens[i]`` is 0, or its ``latencies[i]`` is 0; it is
stored with its status and no latency (the reported values stay in ``attrs``). ``total_s`` is
``latencies[i]`` when the file has it, else ``ttfts[i] + sum(itls[i])`` (the same instant: the
last chunk). ``start_times`` are ``perf_counter`` values, not epoch times: ``started_at`` stays
NULL and the relative start is kept in ``attrs.start_time_s``. A request missing from one of the
arrays (arrays of different lengths) is rejected, since its values cannot be lined up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions, refuse_fixed
from tailkit.formats._sql import RawColumn, literal, normalize_sql


NAME = "vllm-bench"
_MAX_OBJECT = 1024 * 1024 * 1024
_RUN_FIELDS = (
    "date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
)  # fmt: skip
_ARRAYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")
DETECT_KEYS = ('"ttfts"', '"itls"')
"""A JSON object holding both keys (in its first 64 KiB) is a vLLM bench result."""


def detect(text: str, first: object | None) -> str | None:
    """
    ``"a vLLM bench serve result (ttfts and itls arrays)"`` when ``text`` is one.

    Args:
        text: The file's first 64 KiB, decoded (may end mid-JSON).
        first: The first line parsed as JSON, or ``None``.
    """
    if isinstance(first, dict) and all(k in first for k in ("ttfts", "itls")):
        return "a vLLM bench serve result (ttfts and itls arrays)"
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("{") and all(k in head for k in DETECT_KEYS):
        return "a vLLM bench serve result (ttfts and itls arrays)"
    return None


def fixed_layout(
    options: ScanOptions,
    raw: dict[str, RawColumn],
    fmt: str,
    *,
    path: str,
    unit: str | None = "s",
    status: str = "its errors",
) -> dict[str, RawColumn]:
    """
    ``raw`` with ``--set`` values applied (they replace the format's own values).

    ``--set-over`` is the same as ``--set`` here: the layout is the format's, not the file's
    columns, so a ``--set`` is an explicit value for a column the format would fill itself.

    Args:
        options: The options given.
        raw: The format's own column sources.
        fmt: The format name, for messages.
        path: The file, for messages.
        unit: The unit of the format's durations, or ``None`` when each value carries its
            own (see `refuse_fixed`).
        status: Where the status comes from, for the message refusing ``--status-map``.

    Raises:
        MappingError: ``--map``, another ``--unit``, or ``--status-map`` was given (the layout
            is fixed and its statuses are always call-record statuses), or an option names no
            call-record column.
    """
    refuse_fixed(path, fmt, options, unit=unit, status=status)
    out = dict(raw)
    for target, value in options.sets.items():
        out[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
    return out


def json_struct(names: Sequence[str]) -> str:
    """
    A ``columns=`` struct reading every name as JSON (any value fits; SQL checks it later).
    """
    return "{" + ", ".join(f"{literal(n)}: 'JSON'" for n in names) + "}"


def _at(array: str) -> str:
    # The i-th element as text (JSON strings unquoted), NULL when absent or JSON null.
    return f"json_extract_string({array}, _tk_i)"


def _expanded(path: str) -> str:
    """
    One row per request, numbered through the file.

    Columns: the run's fields, ``_tk_i`` (0-based index), ``_tk_row`` (1-based over the file).
    """
    lengths = ", ".join(f"coalesce(json_array_length({a}), 0)" for a in _ARRAYS)
    source = (
        f"read_json({literal(path)}, format='auto', columns={json_struct(_RUN_FIELDS + _ARRAYS)}, "
        f"maximum_object_size={_MAX_OBJECT})"
    )
    return (
        f"(SELECT *, _tk_before + _tk_i + 1 AS _tk_row FROM (SELECT *, "
        f"sum(_tk_n) OVER (ORDER BY _tk_doc ROWS UNBOUNDED PRECEDING) - _tk_n AS _tk_before, "
        f"unnest(range(_tk_n)) AS _tk_i FROM (SELECT *, greatest({lengths})::BIGINT AS _tk_n "
        f"FROM (SELECT row_number() OVER () AS _tk_doc, * FROM {source}))))"
    )


def _text(field: str) -> str:
    return f"NULLIF(json_extract_string({field}, '$'), '')"


# Per request (over _expanded): the error text, and whether the request failed.
_BLANK = "' ' || chr(9) || chr(10) || chr(13)"
_ERR = f"NULLIF(trim({_at('errors')}, {_BLANK}), '')"
_FAILED = (
    f"({_ERR} IS NOT NULL OR coalesce(TRY_CAST({_at('output_lens')} AS DOUBLE) = 0, false) "
    f"OR coalesce(TRY_CAST({_at('latencies')} AS DOUBLE) = 0, false))"
)
_ITLS = "json_transform(json_extract(itls, _tk_i), '[\"DOUBLE\"]')"
_ITLS_OK = (
    f"(json_type(json_extract(itls, _tk_i)) = 'ARRAY' AND "
    f"len(list_filter({_ITLS}, lambda x: x IS NULL)) = 0)"
)
# ttft + sum of the gaps is the time of the last chunk, which is what `latencies` holds.
_SUMMED = (
    f"CASE WHEN {_ITLS_OK} THEN (TRY_CAST({_at('ttfts')} AS DOUBLE) + "
    f"coalesce(list_sum({_ITLS}), 0))::VARCHAR "
    f"ELSE 'itls[' || _tk_i || '] = ' || coalesce(json_extract(itls, _tk_i)::VARCHAR, 'missing') "
    "END"
)
_TOTAL = f"CASE WHEN latencies IS NOT NULL THEN {_at('latencies')} ELSE {_SUMMED} END"


def _missing() -> tuple[str, str, str]:
    """
    The row problem of a request that some present array does not reach.
    """
    short = " OR ".join(
        f"({a} IS NOT NULL AND json_type({a}) <> 'NULL' AND _tk_i >= json_array_length({a}))"
        for a in _ARRAYS
    )
    names = ", ".join(
        f"CASE WHEN {a} IS NOT NULL AND json_type({a}) <> 'NULL' AND "
        f"_tk_i >= json_array_length({a}) THEN '{a} (' || json_array_length({a}) || ')' END"
        for a in _ARRAYS
    )
    detail = (
        f"'request ' || (_tk_i + 1) || ' of ' || _tk_n || ' in result ' || _tk_doc || "
        f"' is missing from ' || concat_ws(', ', {names}) || "
        "': the per-request arrays have different lengths'"
    )
    return ("arrays_differ_in_length", f"({short})", detail)


class VllmBench:
    """
    The result JSON of ``vllm bench serve --save-result`` (and ``benchmark_serving.py``).
    """

    name = NAME

    def sniff_sql(self, path: str) -> str:
        """
        SQL counting the results in the file and those without per-request arrays.
        """
        lengths = ", ".join(f"coalesce(json_array_length({a}), 0)" for a in _ARRAYS)
        return (
            f"SELECT count(*), count(*) FILTER (WHERE greatest({lengths}) = 0) FROM "
            f"read_json({literal(path)}, format='auto', "
            f"columns={json_struct(_ARRAYS)}, maximum_object_size={_MAX_OBJECT})"
        )

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Expand the per-request arrays into call records.

        Raises:
            MappingError: See `fixed_layout`.
        """
        ok = f"NOT {_FAILED}"
        raw = fixed_layout(
            options, _columns(ok), self.name, path=path, status="errors / output_lens"
        )
        extras = [
            ("result", "_tk_doc"),
            ("request_index", "_tk_i"),
            *((f, _text(f)) for f in ("date", "backend", "endpoint_type", "label")),
            *((f, f"{f}") for f in ("request_rate", "burstiness", "max_concurrency")),
            ("start_time_s", f"TRY_CAST({_at('start_times')} AS DOUBLE)"),
            ("chunks", f"CASE WHEN {ok} AND {_ITLS_OK} THEN len({_ITLS}) + 1 END"),
            ("max_itl_s", f"CASE WHEN {ok} AND {_ITLS_OK} THEN list_max({_ITLS}) END"),
            ("error", _ERR),
            ("reported_ttft_s", f"CASE WHEN {_FAILED} THEN TRY_CAST({_at('ttfts')} AS DOUBLE) END"),
            ("reported_latency_s",
             f"CASE WHEN {_FAILED} THEN TRY_CAST({_at('latencies')} AS DOUBLE) END"),
        ]  # fmt: skip
        raw_text = (
            "json_object('result', _tk_doc, 'request', _tk_i, "
            + ", ".join(f"{literal(a)}, json_extract({a}, _tk_i)" for a in _ARRAYS)
            + ")::VARCHAR"
        )
        select = normalize_sql(
            _expanded(path), raw, extras=extras, raw_text=raw_text,
            row_problem=_missing(), row_number="_tk_row", model_hint=SET_MODEL, status_hint="",
        )  # fmt: skip
        return Scan(format=self.name, select_sql=select, notes=_notes(sniffed), units_known=True)


def error_columns(err: str) -> tuple[str, str, str]:
    """
    ``status``, ``error_type`` and ``http_status`` SQL for an error message (NULL: no error).

    A timeout is ``timeout``; "Too Many Requests" or a 429 is ``rate_limited`` (HTTP 429);
    anything else is ``error``. The type is the exception name on the message's last line
    (a traceback ends with it), else that line's first 60 characters.
    """
    last = f"regexp_extract(trim({err}, {_BLANK}), '([^\\n]*)$', 1)"
    exc = f"NULLIF(regexp_extract({last}, '^([A-Za-z_][A-Za-z0-9_.]*)(:|$)', 1), '')"
    limited = (
        f"({err} ILIKE '%too many requests%' OR regexp_matches({err}, '(^|[^0-9.:])429([^0-9]|$)'))"
    )
    status = (
        f"CASE WHEN {err} ILIKE '%timeout%' OR {err} ILIKE '%timed out%' THEN 'timeout' "
        f"WHEN {limited} THEN 'rate_limited' WHEN {err} IS NOT NULL THEN 'error' END"
    )
    return status, f"coalesce({exc}, left({last}, 60))", f"CASE WHEN {limited} THEN 429 END"


def _columns(ok: str) -> dict[str, RawColumn]:
    err_status, err_type, http = error_columns(_ERR)
    status = f"coalesce({err_status}, CASE WHEN {_FAILED} THEN 'error' ELSE 'ok' END)"
    error_type = (
        f"CASE WHEN {_ERR} IS NOT NULL THEN {err_type} "
        f"WHEN TRY_CAST({_at('output_lens')} AS DOUBLE) = 0 THEN 'no_output' "
        f"WHEN {_FAILED} THEN 'no_latency' END"
    )
    return {
        "provider": RawColumn(
            "coalesce(" + _text("backend") + ", " + _text("endpoint_type") + ")",
            "VARCHAR",
            "backend",
        ),
        "model": RawColumn(_text("model_id"), "VARCHAR", "model_id"),
        "ttft_s": RawColumn(f"CASE WHEN {ok} THEN {_at('ttfts')} END", "VARCHAR", "ttfts"),
        "total_s": RawColumn(f"CASE WHEN {ok} THEN {_TOTAL} END", "VARCHAR", "latencies/itls"),
        "input_tokens": RawColumn(_at("input_lens"), "VARCHAR", "input_lens"),
        "output_tokens": RawColumn(
            f"CASE WHEN {ok} THEN {_at('output_lens')} END", "VARCHAR", "output_lens"
        ),
        "status": RawColumn(status, "VARCHAR", "errors"),
        "error_type": RawColumn(error_type, "VARCHAR", "errors"),
        "http_status": RawColumn(http, "INTEGER", "errors"),
    }


def _notes(sniffed: Sequence[tuple[Any, ...]]) -> tuple[str, ...]:
    results, empty = (sniffed[0] if sniffed else (0, 0))[:2]
    notes = ["started_at unknown: start_times are perf_counter values, kept as attrs.start_time_s"]
    if empty:
        notes.append(
            f"{empty} of {results} result(s) hold no per-request arrays (saved without "
            "--save-detailed?): no calls from them"
        )
    return tuple(notes)
