"""
GuideLLM reports (``guidellm benchmark --output kind=json``): ``benchmarks[].requests``.

Each benchmark keeps its requests in three groups: ``successful`` (status
ok), ``errored`` (status error, or timeout / rate_limited when the error says so) and
``incomplete`` (still running when the benchmark ended: status cancelled, right-censored at the
age it had reached, ``censored_at_s``). The groups are expanded in SQL, one row per request,
numbered through the file (benchmark by benchmark; successful, then incomplete, then errored).

Times come from the raw epoch-second timings, not GuideLLM's derived numbers:
``started_at`` = ``info.timings.request_start``, ``total_s`` = ``request_end - request_start``,
``ttft_s`` = ``first_token_iteration - request_start`` (NULL when there is no first token, as in
non-streamed runs, where GuideLLM's own aggregates write 0). Older reports (``start_time``,
``end_time``, ``first_token_time`` at the top of a request) are read the same way; when no
timing is there, ``request_latency`` (s) and ``time_to_first_token_ms`` (ms) are used. The
model is ``args.model`` (older: the benchmark's ``worker.backend_model``), the provider
``args.backend`` (older: ``worker.backend_type``); ``--set`` overrides both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions
from tailkit.formats._scrub import CONTENT_KEYS, scrub
from tailkit.formats._sql import RawColumn, literal, normalize_sql
from tailkit.formats._vllm_bench import error_columns, fixed_layout, json_struct


NAME = "guidellm"
_MAX_OBJECT = 1024 * 1024 * 1024
_GROUPS = ("successful", "incomplete", "errored")
_STATUS = {"successful": "ok", "incomplete": "cancelled", "errored": "error"}


def detect(text: str, first: object | None) -> str | None:
    """
    ``"a GuideLLM report (benchmarks with requests)"`` when ``text`` is one.

    Args:
        text: The file's first 64 KiB, decoded (may end mid-JSON).
        first: The first line parsed as JSON, or ``None``.
    """
    if (
        isinstance(first, dict)
        and isinstance(first.get("benchmarks"), list)
        and ("guidellm" in text or "generative_benchmark" in text)
    ):
        return "a GuideLLM report (benchmarks with requests)"
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("{") and '"benchmarks"' in head and (
        '"guidellm_version"' in head or '"generative_request_stats"' in head
        or '"time_to_first_token_ms"' in head
    ):  # fmt: skip
        return "a GuideLLM report (benchmarks with requests)"
    return None


def _requests(path: str) -> str:
    """
    One row per request, numbered through the file.

    Columns: ``_tk_r`` (the request's JSON), ``_tk_group``, ``_tk_bench`` (1-based), ``_tk_i``
    (0-based in its group), the run's ``_tk_model`` / ``_tk_backend``, ``_tk_row``.
    """
    source = (
        f"read_json({literal(path)}, format='auto', "
        f"columns={json_struct(('metadata', 'args', 'benchmarks'))}, "
        f"maximum_object_size={_MAX_OBJECT})"
    )
    benches = (
        "SELECT row_number() OVER () AS _tk_doc, args, benchmarks, "
        "unnest(range(coalesce(json_array_length(benchmarks), 0)::BIGINT)) AS _tk_b "
        f"FROM {source}"
    )
    per_group = " UNION ALL ".join(
        f"SELECT _tk_doc, _tk_b, {k} AS _tk_k, {literal(g)} AS _tk_group, args, _tk_bj, "
        f"json_extract(_tk_bj, '$.requests.{g}') AS _tk_list FROM _tk_b"
        for k, g in enumerate(_GROUPS)
    )
    rows = (
        "SELECT *, unnest(range(coalesce(json_array_length(_tk_list), 0)::BIGINT)) AS _tk_i "
        "FROM _tk_g"
    )
    return (
        f"(WITH _tk_b AS (SELECT *, json_extract(benchmarks, _tk_b) AS _tk_bj FROM ({benches})), "
        f"_tk_g AS ({per_group}), _tk_rows AS ({rows}) "
        "SELECT _tk_doc, _tk_b + 1 AS _tk_bench, _tk_group, _tk_i, "
        "json_extract(_tk_list, _tk_i) AS _tk_r, "
        "coalesce(NULLIF(args->>'model', ''), NULLIF(_tk_bj->>'$.worker.backend_model', '')) "
        "AS _tk_model, "
        "coalesce(NULLIF(args->>'backend', ''), NULLIF(_tk_bj->>'$.worker.backend_type', '')) "
        "AS _tk_backend, "
        "row_number() OVER (ORDER BY _tk_doc, _tk_b, _tk_k, _tk_i) AS _tk_row FROM _tk_rows)"
    )


def _num(path: str) -> str:
    return f"TRY_CAST(_tk_r->>'{path}' AS DOUBLE)"


_START = f"coalesce({_num('$.info.timings.request_start')}, {_num('$.start_time')})"
_END = (
    f"coalesce({_num('$.info.timings.request_end')}, {_num('$.info.timings.resolve_end')}, "
    f"{_num('$.end_time')})"
)
_FIRST = f"coalesce({_num('$.info.timings.first_token_iteration')}, {_num('$.first_token_time')})"
_ERR_TEXT = "coalesce(_tk_r->>'$.info.error', _tk_r->>'$.error')"
# Raw timings when the request has them; else GuideLLM's derived fields, as written (text, so
# that a bad value is rejected by name rather than read as NULL).
_TOTAL = f"coalesce(({_END} - {_START})::VARCHAR, _tk_r->>'$.request_latency')"
_TTFT = (
    f"CASE WHEN {_START} IS NOT NULL THEN ({_FIRST} - {_START})::VARCHAR "
    "ELSE (TRY_CAST(_tk_r->>'$.time_to_first_token_ms' AS DOUBLE) / 1000)::VARCHAR END"
)


def _columns() -> dict[str, RawColumn]:
    ok, cut, bad = (f"_tk_group = {literal(g)}" for g in _GROUPS)
    err_status, err_type, http = error_columns(f"NULLIF({_ERR_TEXT}, '')")
    return {
        "call_id": RawColumn("_tk_r->>'$.request_id'", "VARCHAR", "request_id"),
        "provider": RawColumn("_tk_backend", "VARCHAR", "args.backend"),
        "model": RawColumn("_tk_model", "VARCHAR", "args.model"),
        "started_at": RawColumn(_START, "DOUBLE", "info.timings.request_start"),
        "ttft_s": RawColumn(f"CASE WHEN {ok} THEN {_TTFT} END", "VARCHAR", "first_token"),
        "total_s": RawColumn(f"CASE WHEN {ok} THEN {_TOTAL} END", "VARCHAR", "request_end"),
        "censored_at_s": RawColumn(
            f"CASE WHEN {cut} OR ({bad} AND {err_status} = 'timeout') THEN ({_END} - {_START}) END",
            "DOUBLE",
            "request_end",
        ),
        "input_tokens": RawColumn(
            "coalesce(_tk_r->>'$.prompt_tokens', _tk_r->>'$.input_metrics.total_tokens')",
            "VARCHAR",
            "prompt_tokens",
        ),
        "output_tokens": RawColumn(
            f"CASE WHEN NOT {bad} THEN coalesce(_tk_r->>'$.output_tokens', "
            "_tk_r->>'$.output_metrics.total_tokens') END",
            "VARCHAR",
            "output_tokens",
        ),
        "status": RawColumn(
            f"CASE WHEN {ok} THEN 'ok' WHEN {cut} THEN 'cancelled' "
            f"ELSE coalesce({err_status}, 'error') END",
            "VARCHAR",
            "requests group",
        ),
        "error_type": RawColumn(
            f"CASE WHEN {bad} THEN coalesce({err_type}, 'guidellm_error') END",
            "VARCHAR",
            "info.error",
        ),
        "http_status": RawColumn(f"CASE WHEN {bad} THEN {http} END", "INTEGER", "info.error"),
    }


class Guidellm:
    """
    The JSON report of ``guidellm benchmark``.
    """

    name = NAME

    def sniff_sql(self, path: str) -> None:
        """
        The layout is fixed; nothing to sniff.
        """
        return

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Expand every benchmark's request groups into call records.

        Raises:
            MappingError: See `fixed_layout` (``--map``, ``--unit ms``, ``--status-map``).
        """
        del sniffed
        raw = fixed_layout(
            options, _columns(), self.name, path=path, status="the request groups and errors"
        )
        extras = [
            ("benchmark", "_tk_bench"),
            ("group", "_tk_group"),
            ("request_index", "_tk_i"),
            ("response_id", "_tk_r->>'$.response_id'"),
            ("error", f"NULLIF({_ERR_TEXT}, '')"),
            ("guidellm_status", "_tk_r->>'$.info.status'"),
            ("time_to_first_token_ms", _num("$.time_to_first_token_ms")),
            ("inter_token_latency_ms", _num("$.inter_token_latency_ms")),
            ("time_per_output_token_ms", _num("$.time_per_output_token_ms")),
            ("request_latency", _num("$.request_latency")),
        ]
        request = f"TRY_CAST({scrub('_tk_r::VARCHAR', CONTENT_KEYS)} AS JSON)"
        raw_text = f"json_object('benchmark', _tk_bench, 'group', _tk_group, 'request', {request})"
        not_object = (
            "not_an_object",
            "coalesce(json_type(_tk_r), 'NULL') <> 'OBJECT'",
            "'benchmarks[' || (_tk_bench - 1) || '].requests.' || _tk_group || '[' || _tk_i || "
            "'] is not an object: ' || left(coalesce(_tk_r::VARCHAR, 'null'), 60)",
        )
        select = normalize_sql(
            _requests(path), raw, extras=extras, raw_text=f"{raw_text}::VARCHAR",
            row_problem=not_object, row_number="_tk_row",
            model_hint=SET_MODEL, status_hint="",
        )  # fmt: skip
        return Scan(
            units_known=True,
            format=self.name,
            select_sql=select,
            has_call_id=True,
            notes=("incomplete requests are cancelled, censored at the age they reached",),
        )
