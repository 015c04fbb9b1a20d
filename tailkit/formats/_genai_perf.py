"""
NVIDIA GenAI-Perf raw exports (``artifacts/<run>/profile_export.json``): ``experiments[].requests``.

perf_analyzer writes one JSON document: ``service_kind``, ``endpoint`` and ``experiments``, each
with its load (``experiment.mode`` / ``value``) and its ``requests``. A request
holds ``timestamp`` (when it was sent) and ``response_timestamps`` (one per response: streamed
chunks, the last often ``data: [DONE]``), both in epoch nanoseconds, and
``request_inputs.payload``, the request body as a JSON string. The requests are expanded in SQL,
one row per request, numbered through the file (experiment by experiment).

Times come from the raw timestamps, differences taken on integers before converting to seconds:
``started_at`` = ``timestamp``, ``ttft_s`` = first response - ``timestamp``, ``total_s`` = last
response - ``timestamp``. A request that was not streamed (``"stream": false`` in the payload,
or a single response) has TTFT NULL. A request with no response at all is an ``error`` of type
``no_response``, without a latency. The model is the payload's ``model`` and the provider the
``service_kind`` (``openai``, ``triton``, …); ``--set`` overrides both. GenAI-Perf counts tokens
by re-tokenising the text, which tailkit does not do: token counts stay NULL unless a request
carries ``input_tokens`` / ``output_tokens``. Response texts are content and are not kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions
from tailkit.formats._sql import RawColumn, literal, normalize_sql
from tailkit.formats._vllm_bench import fixed_layout, json_struct


NAME = "genai-perf"
_MAX_OBJECT = 1024 * 1024 * 1024
_WHY = "a GenAI-Perf profile export (experiments with requests)"
_MARKERS = ('"service_kind"', '"request_inputs"', '"response_timestamps"')


def detect(text: str, first: object | None) -> str | None:
    """
    ``"a GenAI-Perf profile export (experiments with requests)"`` when ``text`` is one.

    The document is an object with ``experiments`` and one of ``service_kind``,
    ``request_inputs`` or ``response_timestamps``.

    Args:
        text: The file's first 64 KiB, decoded (may end mid-JSON).
        first: The first line parsed as JSON, or ``None``.
    """
    if (
        isinstance(first, dict)
        and isinstance(first.get("experiments"), list)
        and ("service_kind" in first or "endpoint" in first)
    ):
        return _WHY
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("{") and '"experiments"' in head and any(m in head for m in _MARKERS):
        return _WHY
    return None


def _requests(path: str) -> str:
    """
    One row per request, numbered through the file.

    Columns: ``_tk_r`` (the request's JSON), ``_tk_p`` (its payload as JSON, NULL when not
    JSON), ``_tk_ts`` (``response_timestamps``), ``_tk_n`` (how many), ``_tk_doc``, ``_tk_exp``
    (1-based), ``_tk_ej`` (the experiment), ``_tk_i`` (0-based in it), ``service_kind``,
    ``endpoint``, ``_tk_row``.
    """
    source = (
        f"read_json({literal(path)}, format='auto', "
        f"columns={json_struct(('service_kind', 'endpoint', 'experiments'))}, "
        f"maximum_object_size={_MAX_OBJECT})"
    )
    exps = (
        "SELECT row_number() OVER () AS _tk_doc, service_kind, endpoint, experiments, "
        "unnest(range(coalesce(json_array_length(experiments), 0)::BIGINT)) AS _tk_e "
        f"FROM {source}"
    )
    rows = (
        "SELECT *, unnest(range(coalesce(json_array_length(_tk_list), 0)::BIGINT)) AS _tk_i FROM "
        "(SELECT *, json_extract(_tk_ej, '$.requests') AS _tk_list FROM "
        "(SELECT *, json_extract(experiments, _tk_e) AS _tk_ej FROM _tk_x))"
    )
    payload = "json_extract(_tk_r, '$.request_inputs.payload')"
    text = "json_extract_string(_tk_r, '$.request_inputs.payload')"
    parsed = (
        f"CASE json_type({payload}) WHEN 'OBJECT' THEN {payload} "
        f"WHEN 'VARCHAR' THEN CASE WHEN json_valid({text}) THEN {text}::JSON END END"
    )
    req = (
        "SELECT _tk_doc, _tk_e + 1 AS _tk_exp, _tk_ej, _tk_i, service_kind, endpoint, "
        "json_extract(_tk_list, _tk_i) AS _tk_r, "
        "row_number() OVER (ORDER BY _tk_doc, _tk_e, _tk_i) AS _tk_row FROM _tk_rows"
    )
    return (
        f"(WITH _tk_x AS ({exps}), _tk_rows AS ({rows}) "
        f"SELECT *, coalesce(json_array_length(_tk_ts), 0) AS _tk_n FROM "
        f"(SELECT *, {parsed} AS _tk_p, json_extract(_tk_r, '$.response_timestamps') AS _tk_ts "
        f"FROM ({req})))"
    )


# Nanosecond instants as integers (exact differences); their text when they do not parse.
_T0_TEXT = "json_extract_string(_tk_r, '$.timestamp')"
_FIRST_TEXT = "json_extract_string(_tk_ts, 0)"
_LAST_TEXT = "json_extract_string(_tk_ts, '$[#-1]')"


def _ns(text: str) -> str:
    return f"TRY_CAST({text} AS HUGEINT)"


def _since_start(text: str, name: str) -> str:
    """
    Seconds from ``timestamp`` to the instant ``text``, as text (a bad value shown by name).
    """
    seconds = f"(({_ns(text)} - {_ns(_T0_TEXT)}) / 1e9)::VARCHAR"
    shown = (
        f"'timestamp ' || coalesce({_T0_TEXT}, 'missing') || ', {name} ' || "
        f"coalesce({text}, 'null')"
    )
    return f"coalesce({seconds}, {shown})"


_STREAMED = (
    "(_tk_n >= 2 AND coalesce(TRY_CAST(json_extract_string(_tk_p, '$.stream') AS BOOLEAN), true))"
)
_OK = "_tk_n > 0"


def _columns() -> dict[str, RawColumn]:
    return {
        "provider": RawColumn(
            "NULLIF(json_extract_string(service_kind, '$'), '')", "VARCHAR", "service_kind"
        ),
        "model": RawColumn(
            "coalesce(NULLIF(json_extract_string(_tk_p, '$.model'), ''), "
            "NULLIF(json_extract_string(_tk_r, '$.request_inputs.model'), ''))",
            "VARCHAR",
            "request_inputs.payload model",
        ),
        "started_at": RawColumn(_T0_TEXT, "VARCHAR", "timestamp"),
        "ttft_s": RawColumn(
            f"CASE WHEN {_STREAMED} THEN {_since_start(_FIRST_TEXT, 'first response')} END",
            "VARCHAR",
            "response_timestamps[0]",
        ),
        "total_s": RawColumn(
            f"CASE WHEN {_OK} THEN {_since_start(_LAST_TEXT, 'last response')} END",
            "VARCHAR",
            "response_timestamps[-1]",
        ),
        "input_tokens": RawColumn(
            "json_extract_string(_tk_r, '$.input_tokens')", "VARCHAR", "input_tokens"
        ),
        "output_tokens": RawColumn(
            f"CASE WHEN {_OK} THEN json_extract_string(_tk_r, '$.output_tokens') END",
            "VARCHAR",
            "output_tokens",
        ),
        "status": RawColumn(
            f"CASE WHEN {_OK} THEN 'ok' ELSE 'error' END", "VARCHAR", "response_timestamps"
        ),
        "error_type": RawColumn(
            f"CASE WHEN NOT {_OK} THEN 'no_response' END", "VARCHAR", "response_timestamps"
        ),
    }


_MALFORMED = (
    "malformed_request",
    "(coalesce(json_type(_tk_r), 'NULL') <> 'OBJECT' "
    "OR coalesce(json_type(_tk_ts), 'NULL') NOT IN ('ARRAY', 'NULL'))",
    "'experiments[' || (_tk_exp - 1) || '].requests[' || _tk_i || '] ' || "
    "CASE WHEN coalesce(json_type(_tk_r), 'NULL') <> 'OBJECT' "
    "THEN 'is not an object: ' || left(coalesce(_tk_r::VARCHAR, 'null'), 60) "
    "ELSE 'has response_timestamps that are not a list: ' || left(_tk_ts::VARCHAR, 60) END",
)


class GenaiPerf:
    """
    The raw per-request export of NVIDIA GenAI-Perf / perf_analyzer (``profile_export.json``).
    """

    name = NAME

    def sniff_sql(self, path: str) -> None:
        """
        The layout is fixed; nothing to sniff.
        """
        return

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Expand every experiment's requests into call records.

        Raises:
            MappingError: See `fixed_layout` (``--map``, ``--unit ms``, ``--status-map``).
        """
        del sniffed
        raw = fixed_layout(options, _columns(), self.name, path=path, status="response_timestamps")
        extras = [
            ("experiment", "_tk_exp"),
            ("mode", "json_extract_string(_tk_ej, '$.experiment.mode')"),
            ("load", "json_extract(_tk_ej, '$.experiment.value')"),
            ("request_index", "_tk_i"),
            ("endpoint", "json_extract_string(endpoint, '$')"),
            ("responses", "_tk_n"),
            ("stream", "TRY_CAST(json_extract_string(_tk_p, '$.stream') AS BOOLEAN)"),
        ]
        raw_text = (
            "json_object('experiment', _tk_exp - 1, 'request', _tk_i, "
            "'timestamp', json_extract(_tk_r, '$.timestamp'), 'response_timestamps', _tk_ts, "
            "'model', json_extract(_tk_p, '$.model'))::VARCHAR"
        )
        select = normalize_sql(
            _requests(path), raw, extras=extras, raw_text=raw_text,
            row_problem=_MALFORMED, row_number="_tk_row",
            model_hint=SET_MODEL, status_hint="",
        )  # fmt: skip
        return Scan(
            format=self.name,
            select_sql=select,
            units_known=True,
            notes=(
                "token counts unknown: GenAI-Perf re-tokenises the text, not kept in the export",
            ),
        )
