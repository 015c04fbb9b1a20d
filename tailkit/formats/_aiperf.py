"""
NVIDIA AIPerf per-request records (``artifacts/<run>/profile_export.jsonl``), one per line.

Each line is a ``MetricRecordInfo``: ``metadata`` (``x_request_id``,
``request_start_ns``, ``request_end_ns``, ``was_cancelled``, ``cancellation_time_ns``, … in epoch
nanoseconds), ``metrics`` (each ``{value, unit}``, durations in ``ms``) and ``error``
(``{code, type, message}`` or null). Every metric duration is converted to seconds by its own
``unit`` (``ms``, ``s``/``sec``, ``us``, ``ns``; none given means ``ms``), once, in SQL; an
unknown unit is rejected naming it.

``started_at`` = ``request_start_ns``; ``total_s`` = ``request_latency`` (else
``request_end_ns - request_start_ns``); ``ttft_s`` = ``time_to_first_token`` (AIPerf has none
for a request that was not streamed: NULL). A record with ``error`` is a failure with no
latency: ``rate_limited`` for code 429, ``timeout`` when the error says so (censored at its
age), else ``error``; ``error.type`` is the error type and ``error.code`` the HTTP status. A
cancelled record (``was_cancelled``) is ``cancelled``, censored at ``cancellation_time_ns -
request_start_ns``. ``input_tokens`` = ``input_sequence_length`` (``error_isl`` for failures),
``output_tokens`` = ``output_sequence_length``. The records name no model or provider: a
``model_name`` field is used when present, otherwise ``--set model=…``; the provider is the one
the model name implies (``unknown`` when it implies none), or ``--set provider=…``.
The other metrics (``inter_chunk_latency``, ``inter_token_latency``, …) and the metadata are
kept in ``attrs`` as written.
"""

from __future__ import annotations

import json

from collections.abc import Callable, Sequence
from typing import Any

from tailkit.formats import _lines as lines
from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions
from tailkit.formats._scrub import scrub
from tailkit.formats._sql import RawColumn, ident, literal, normalize_sql
from tailkit.formats._vllm_bench import error_columns, fixed_layout


NAME = "aiperf"
_MAX_LINE = lines.MAX_LINE
_FIELDS = ("metadata", "metrics", "error", "model_name")
_MAPPED_METRICS = (
    "time_to_first_token", "request_latency", "input_sequence_length", "output_sequence_length",
    "error_isl",
)  # fmt: skip
_WHY = "AIPerf per-request records (metadata.request_start_ns and metrics)"

Ref = Callable[[str], str]


def detect(text: str, first: object | None) -> str | None:
    """
    ``"AIPerf per-request records (…)"`` when ``text`` is a ``profile_export.jsonl``.

    The first object has ``metadata.request_start_ns`` and a ``metrics`` or ``error`` key; when
    the first line does not parse (longer than the head), its text holds both names.

    Args:
        text: The file's first 64 KiB, decoded (may end mid-JSON).
        first: The first line parsed as JSON, or ``None``.
    """
    if isinstance(first, dict):
        meta = first.get("metadata")
        if isinstance(meta, dict) and "request_start_ns" in meta:
            return _WHY if "metrics" in first or "error" in first else None
        return None
    head = text.lstrip("\ufeff \t\r\n")
    line = head.split("\n", 1)[0]
    if head.startswith("{") and '"request_start_ns"' in line and '"metrics"' in line:
        return _WHY
    return None


def _seconds(value: str, unit: str) -> str:
    """
    A duration ``value`` (text) in ``unit`` as seconds (text); a bad value or unit is shown.
    """
    u = f"lower(coalesce({unit}, 'ms'))"
    num = f"TRY_CAST({value} AS DOUBLE)"
    return (
        f"CASE WHEN {value} IS NULL THEN NULL "
        f"WHEN {num} IS NULL THEN {value} "
        f"WHEN {u} = 'ms' THEN ({num} / 1e3)::VARCHAR "
        f"WHEN {u} IN ('s', 'sec', 'second', 'seconds') THEN {value} "
        f"WHEN {u} IN ('us', 'µs') THEN ({num} / 1e6)::VARCHAR "
        f"WHEN {u} = 'ns' THEN ({num} / 1e9)::VARCHAR "
        f"ELSE {value} || ' in unknown unit ' || {unit} END"
    )


class _Sql:
    """
    SQL over one record, given how to reach its top-level fields.
    """

    def __init__(self, ref: Ref) -> None:
        self.ref = ref

    def meta(self, key: str) -> str:
        return f"json_extract_string({self.ref('metadata')}, {literal('$.' + key)})"

    def value(self, metric: str) -> str:
        return f"json_extract_string({self.ref('metrics')}, {literal(f'$.{metric}.value')})"

    def duration(self, metric: str) -> str:
        unit = f"json_extract_string({self.ref('metrics')}, {literal(f'$.{metric}.unit')})"
        return _seconds(self.value(metric), unit)

    def since_start(self, key: str) -> str:
        start = f"TRY_CAST({self.meta('request_start_ns')} AS HUGEINT)"
        return f"((TRY_CAST({self.meta(key)} AS HUGEINT) - {start}) / 1e9)::VARCHAR"

    def err(self, key: str) -> str:
        return f"NULLIF(json_extract_string({self.ref('error')}, {literal('$.' + key)}), '')"

    def failed(self) -> str:
        return f"coalesce(json_type({self.ref('error')}), 'NULL') <> 'NULL'"

    def cancelled(self) -> str:
        return f"coalesce(TRY_CAST({self.meta('was_cancelled')} AS BOOLEAN), false)"


def _columns(ref: Ref) -> dict[str, RawColumn]:
    q = _Sql(ref)
    message = f"coalesce({q.err('message')}, {q.err('type')})"
    err_status, err_type, _ = error_columns(message)
    code = f"TRY_CAST(TRY_CAST({q.err('code')} AS DOUBLE) AS INTEGER)"
    failed, cut = q.failed(), q.cancelled()
    status = (
        f"CASE WHEN {cut} THEN 'cancelled' WHEN NOT {failed} THEN 'ok' "
        f"WHEN {code} = 429 THEN 'rate_limited' WHEN {code} IN (408, 504) THEN 'timeout' "
        f"ELSE coalesce({err_status}, 'error') END"
    )
    ok = f"(NOT {cut} AND NOT {failed})"
    timed_out = f"(NOT {cut} AND ({status}) = 'timeout')"
    return {
        "call_id": RawColumn(q.meta("x_request_id"), "VARCHAR", "metadata.x_request_id"),
        # The dataset's conversation and turn: the same job when one dataset runs on several
        # models or endpoints (paired evidence of what a repeat attempt shares).
        "job_key": RawColumn(
            f"CASE WHEN {q.meta('conversation_id')} <> '' THEN {q.meta('conversation_id')} "
            f"|| '#' || coalesce({q.meta('turn_index')}, '0') END",
            "VARCHAR",
            "metadata.conversation_id",
        ),
        "model": RawColumn(
            f"coalesce(NULLIF(json_extract_string({ref('model_name')}, '$'), ''), "
            f"NULLIF({q.meta('model_name')}, ''))",
            "VARCHAR",
            "model_name",
        ),
        "started_at": RawColumn(q.meta("request_start_ns"), "VARCHAR", "metadata.request_start_ns"),
        "ttft_s": RawColumn(
            f"CASE WHEN {ok} THEN {q.duration('time_to_first_token')} END",
            "VARCHAR",
            "metrics.time_to_first_token",
        ),
        "total_s": RawColumn(
            f"CASE WHEN {ok} THEN coalesce({q.duration('request_latency')}, "
            f"{q.since_start('request_end_ns')}) END",
            "VARCHAR",
            "metrics.request_latency",
        ),
        "censored_at_s": RawColumn(
            f"CASE WHEN {cut} THEN coalesce({q.since_start('cancellation_time_ns')}, "
            f"{q.since_start('request_end_ns')}) "
            f"WHEN {timed_out} THEN {q.since_start('request_end_ns')} END",
            "VARCHAR",
            "metadata.cancellation_time_ns",
        ),
        "input_tokens": RawColumn(
            f"coalesce({q.value('input_sequence_length')}, {q.value('error_isl')})",
            "VARCHAR",
            "metrics.input_sequence_length",
        ),
        "output_tokens": RawColumn(
            f"CASE WHEN {ok} THEN {q.value('output_sequence_length')} END",
            "VARCHAR",
            "metrics.output_sequence_length",
        ),
        "status": RawColumn(status, "VARCHAR", "error / metadata.was_cancelled"),
        "error_type": RawColumn(
            f"CASE WHEN {failed} THEN coalesce({q.err('type')}, {err_type}, 'aiperf_error') "
            f"WHEN {cut} THEN 'cancelled' END",
            "VARCHAR",
            "error.type",
        ),
        "http_status": RawColumn(
            f"CASE WHEN {code} BETWEEN 100 AND 599 THEN {code} END", "INTEGER", "error.code"
        ),
    }


def _extras(ref: Ref) -> list[tuple[str, str]]:
    q = _Sql(ref)
    drop = json.dumps(dict.fromkeys(_MAPPED_METRICS))
    metrics = ref("metrics")
    return [
        ("metadata", ref("metadata")),
        ("error", q.err("message")),
        (
            "metrics",
            f"CASE WHEN json_type({metrics}) = 'OBJECT' "
            f"THEN json_merge_patch({metrics}, {literal(drop)}) END",
        ),
    ]


class Aiperf:
    """
    NVIDIA AIPerf per-request records (``profile_export.jsonl``).
    """

    name = NAME

    def sniff_sql(self, path: str) -> None:
        """
        The layout is fixed; nothing to sniff.
        """
        return

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map each record onto the call record; metric units converted to seconds.

        Raises:
            MappingError: ``--map``, ``--unit`` (each metric carries its unit) or
                ``--status-map`` was given (see `fixed_layout`).
        """
        del sniffed
        struct = "{" + ", ".join(f"{literal(k)}: 'JSON'" for k in _FIELDS) + "}"
        fast = (
            f"read_json({literal(path)}, format='newline_delimited', columns={struct}, "
            f"maximum_object_size={_MAX_LINE})"
        )

        def build(ref: Ref, source: str, **kw: Any) -> str:
            raw = fixed_layout(
                options, _columns(ref), self.name, path=path, unit=None,
                status="error / metadata.was_cancelled",
            )  # fmt: skip
            return normalize_sql(
                source, raw, extras=_extras(ref), model_hint=SET_MODEL, status_hint="", **kw
            )

        return Scan(
            format=self.name,
            select_sql=build(
                ident, fast, raw_text="json_object('metadata', metadata, 'error', error)::VARCHAR"
            ),
            fallback_sql=build(
                lambda k: f"_j.{ident(k)}",
                lines.forgiving_source(path, dict.fromkeys(_FIELDS, "JSON")),
                raw_text=scrub("_line"),
                row_problem=lines.row_problem(),
                row_number="_tk_rec",
            ),
            raw_lines_sql=lines.raw_lines_sql(path),
            has_call_id=True,
            units_known=True,
            notes=_notes(options),
        )


def _notes(options: ScanOptions) -> tuple[str, ...]:
    if "model" in options.sets:
        return ()
    # The provider is inferred from the model name, so only the model needs naming.
    return (f"AIPerf records name no model unless they carry model_name: give it with {SET_MODEL}",)
