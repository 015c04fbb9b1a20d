"""
OpenTelemetry GenAI spans in OTLP/JSON files (``--format otel``).

Reads ``ExportTraceServiceRequest`` objects, one per line (the collector's file exporter) or as
one JSON document, and maps each inference span onto the call record. Attribute names are
coalesced across the versions of the GenAI conventions and the OpenLLMetry / OpenInference
variants, newest first. Only LLM spans become rows: a span is one when its
``gen_ai.operation.name`` is chat, text_completion or generate_content, or, without an
operation name, when OpenInference calls it an LLM span or it names a model. Other spans (HTTP,
tools, agents, embeddings) are counted by the sniff and skipped, and the count is in the notes.

Times are nanosecond epochs as strings or numbers; they are read as HUGEINT, never as DOUBLE
(1.7e18 is beyond a double's exact range), so ``total_s`` is exact to the nanosecond. A span
with status ERROR (code 2) or an ``error.type`` is a failed call: ``timeout`` and
``cancelled`` ones were cut, so their duration is ``censored_at_s`` and ``total_s`` is NULL;
other failures keep their duration. TTFT is ``gen_ai.response.time_to_first_chunk``, ignored
when ``gen_ai.request.stream`` is false (the value is kept in ``attrs.reported_ttft_s``).
"""

from __future__ import annotations

import gzip
import json
import zlib

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailkit.formats._mapping import SET_MODEL, Scan, ScanOptions, refuse_fixed
from tailkit.formats._otel_sql import (
    attr,
    attr_json,
    attribute_list,
    counts_sql,
    first_of,
    spans_sql,
)
from tailkit.formats._paths import real_path
from tailkit.formats._scrub import scrub
from tailkit.formats._sql import REJECT_STATUS, RawColumn, literal, normalize_sql


NAME = "otel"

PROVIDER_KEYS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name",
              "llm.request.model")  # fmt: skip
INPUT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
              "llm.token_count.prompt", "llm.usage.prompt_tokens")  # fmt: skip
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
               "llm.token_count.completion", "llm.usage.completion_tokens")  # fmt: skip
HTTP_KEYS = ("http.response.status_code", "http.status_code")

_HEAD = 64 * 1024
_ERROR_CODES = "('2', 'STATUS_CODE_ERROR')"


def detect(text: str, first: object | None) -> str | None:
    """
    A reason when the content is OTLP/JSON traces: a ``resourceSpans`` request object.

    Args:
        text: The first 64 KiB, decoded (may end mid-JSON).
        first: The first line parsed as JSON, or ``None``.
    """
    if isinstance(first, dict):
        return (
            "OTLP/JSON traces (resourceSpans), one request per line"
            if ("resourceSpans" in first)
            else None
        )
    head = text.lstrip("\ufeff \t\r\n")
    if head[:1] in ("{", "[") and '"resourceSpans"' in head[:4096]:
        return "an OTLP/JSON trace document (resourceSpans)"
    return None


def one_per_line(path: str) -> bool:
    """
    Whether the file holds one request per line, judged by its first non-blank line.

    A line that parses, or does not parse but ends like an object (a broken record), means
    JSON lines; a first line such as ``{`` means a pretty-printed document. A first line longer
    than the sample is a long record: JSON lines.
    """
    path = real_path(path)
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(_HEAD)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                head = fh.read(_HEAD)
    except (OSError, EOFError, zlib.error):
        return True  # the reader will say what is wrong with the file
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if "\n" not in text:
        return True
    line = text.split("\n", 1)[0].strip()
    try:
        json.loads(line)
    except RecursionError:  # nested deeper than Python parses, but a whole line
        return True
    except ValueError:
        return line.endswith("}")
    return True


def _nanos(field: str) -> tuple[str, str]:
    text = f"NULLIF(_span->>'{field}', '')"
    return text, f"TRY_CAST({text} AS HUGEINT)"


def _columns() -> dict[str, RawColumn]:
    start_text, start = _nanos("startTimeUnixNano")
    end_text, end = _nanos("endTimeUnixNano")
    # Exact: nanoseconds → microseconds as integers; the text of a TIMESTAMPTZ keeps its
    # offset, so normalize_sql parses it back to the same instant. try(): out of range → NULL.
    started = (
        f"CASE WHEN {start} > 0 THEN try(CAST(TIMESTAMPTZ '1970-01-01 00:00:00+00' + "
        f"to_microseconds(CAST({start} // 1000 AS BIGINT)) AS VARCHAR)) END"
    )
    duration = (
        f"CASE WHEN {start} > 0 AND {end} > 0 THEN CAST(({end} - {start}) / 1e9 AS VARCHAR) "
        f"WHEN {start_text} IS NOT NULL AND {start} IS NULL THEN "
        f"'startTimeUnixNano ' || {start_text} "
        f"WHEN {end_text} IS NOT NULL AND {end} IS NULL THEN 'endTimeUnixNano ' || {end_text} END"
    )
    error_type = attr("error.type")
    exception = (
        "list_filter(json_extract(_span, '$.events[*]'), lambda e: e->>'name' = 'exception')"
    )
    exception_type = attr("exception.type", attribute_list(f"({exception})[1]->'$.attributes'"))
    message = "NULLIF(_span->>'$.status.message', '')"
    failed = (
        f"(coalesce(_span->>'$.status.code' IN {_ERROR_CODES}, false) "
        f"OR coalesce(NULLIF({error_type}, ''), '') <> '')"
    )
    http = first_of(HTTP_KEYS)
    named = f"lower(coalesce({error_type}, '') || ' ' || coalesce({exception_type}, ''))"
    status = (
        f"CASE WHEN NOT {failed} THEN 'ok' "
        f"WHEN TRY_CAST({http} AS INTEGER) = 429 OR {named} LIKE '%429%' "
        f"OR {named} LIKE '%ratelimit%' OR {named} LIKE '%rate_limit%' THEN 'rate_limited' "
        f"WHEN {named} LIKE '%timeout%' OR {named} LIKE '%timedout%' "
        f"OR lower({message}) LIKE '%timed out%' THEN 'timeout' "
        f"WHEN {named} LIKE '%cancel%' THEN 'cancelled' ELSE 'error' END"
    )
    cut = f"({status}) IN ('timeout', 'cancelled')"
    stream = f"lower({attr('gen_ai.request.stream')})"
    return {
        "call_id": RawColumn(_span_id("spanId", 16), "VARCHAR", "spanId"),
        "run_id": RawColumn(_span_id("traceId", 32), "VARCHAR", "traceId"),
        "provider": RawColumn(first_of(PROVIDER_KEYS), "VARCHAR", "gen_ai.provider.name"),
        "model": RawColumn(first_of(MODEL_KEYS), "VARCHAR", "gen_ai.request.model"),
        "started_at": RawColumn(f"coalesce({started}, {start_text})", "VARCHAR",
                                "startTimeUnixNano"),
        "ttft_s": RawColumn(
            f"CASE WHEN {stream} = 'false' THEN NULL "
            f"ELSE {attr('gen_ai.response.time_to_first_chunk')} END",
            "VARCHAR",
            "gen_ai.response.time_to_first_chunk",
        ),
        "total_s": RawColumn(f"CASE WHEN NOT {cut} THEN {duration} END", "VARCHAR",
                             "endTimeUnixNano - startTimeUnixNano"),
        "censored_at_s": RawColumn(f"CASE WHEN {cut} THEN {duration} END", "VARCHAR",
                                   "endTimeUnixNano - startTimeUnixNano"),
        "input_tokens": RawColumn(first_of(INPUT_KEYS), "VARCHAR", "gen_ai.usage.input_tokens"),
        "output_tokens": RawColumn(first_of(OUTPUT_KEYS), "VARCHAR",
                                   "gen_ai.usage.output_tokens"),
        "status": RawColumn(status, "VARCHAR", "status.code"),
        "error_type": RawColumn(
            f"CASE WHEN {failed} THEN coalesce(NULLIF({error_type}, ''), {exception_type}, "
            f"{message}, 'error') END",
            "VARCHAR",
            "error.type",
        ),
        "http_status": RawColumn(
            f"coalesce({http}, CASE WHEN regexp_full_match({error_type}, '[1-5][0-9][0-9]') "
            f"THEN {error_type} END)",
            "VARCHAR",
            "http.response.status_code",
        ),
    }  # fmt: skip


def _span_id(field: str, hex_digits: int) -> str:
    """
    A span or trace id as lowercase hex: OTLP/JSON says hex, some exporters send base64.
    """
    raw = f"NULLIF(_span->>'{field}', '')"
    blob = f"try(from_base64({raw}))"
    return (
        f"NULLIF(CASE WHEN regexp_full_match({raw}, '[0-9a-fA-F]{{{hex_digits}}}') "
        f"THEN lower({raw}) WHEN octet_length({blob}) = {hex_digits // 2} "
        f"THEN lower(hex({blob})) ELSE {raw} END, {literal('0' * hex_digits)})"
    )


def _extras() -> list[tuple[str, str]]:
    finish = (
        f"list_transform(json_extract({attr_json('gen_ai.response.finish_reasons')}, "
        "'$.arrayValue.values[*]'), lambda v: v->>'stringValue')"
    )
    stream = f"TRY_CAST({attr('gen_ai.request.stream')} AS BOOLEAN)"
    return [
        ("span_name", "_span->>'name'"),
        ("span_kind", "TRY_CAST(_span->>'kind' AS INTEGER)"),
        ("parent_span_id", "NULLIF(_span->>'parentSpanId', '')"),
        ("location", "_where"),
        ("service_name", attr("service.name", "_res")),
        ("scope_name", "_scope->>'name'"),
        ("operation", attr("gen_ai.operation.name")),
        ("response_model", first_of(("gen_ai.response.model", "llm.response.model"))),
        ("response_id", attr("gen_ai.response.id")),
        ("conversation_id", attr("gen_ai.conversation.id")),
        ("finish_reasons", finish),
        ("stream", stream),
        ("status_message", "NULLIF(_span->>'$.status.message', '')"),
        ("server_address", attr("server.address")),
        ("request_max_tokens", f"TRY_CAST({attr('gen_ai.request.max_tokens')} AS BIGINT)"),
        ("cache_read_input_tokens", f"TRY_CAST({first_of(('gen_ai.usage.cache_read.input_tokens', 'llm.token_count.prompt_details.cache_read'))} AS BIGINT)"),  # noqa: E501
        ("reasoning_output_tokens",
         f"TRY_CAST({attr('gen_ai.usage.reasoning.output_tokens')} AS BIGINT)"),
        ("total_tokens",
         f"TRY_CAST({first_of(('llm.usage.total_tokens', 'llm.token_count.total'))} AS BIGINT)"),
        ("reported_ttft_s",
         f"CASE WHEN {stream} = false THEN "
         f"TRY_CAST({attr('gen_ai.response.time_to_first_chunk')} AS DOUBLE) END"),
    ]  # fmt: skip


# A rejected row's raw is {"where", "text"} (see `raw_text` below): name the place in the
# detail and keep the span's own JSON as the raw text.
_RAW = "(attrs->>'raw')::JSON"
_LOCATED = (
    f"CASE WHEN status = {literal(REJECT_STATUS)} THEN json_object('reason', attrs->>'reason', "
    f"'detail', (attrs->>'detail') || ' (' || ({_RAW}->>'where') || ')', "
    f"'raw', {_RAW}->>'text') ELSE attrs END"
)


_PRIVATE_ATTRIBUTE = (
    r"(^|\.)(prompts?|completions?|input|output|messages|input_messages|output_messages"
    r"|system_instructions|content)(\.|$)|authorization|api[-_.]?key|cookie|secret|password"
    r"|(^|[._-])token$"
)
"""Attribute keys kept out of a rejected span's text: prompts, completions, credentials."""
_COUNTS = r"usage|token_count"


def _keep(attrs: str) -> str:
    key = "coalesce(a->>'key', '')"
    return (
        f"to_json(list_filter(json_extract({attrs}, '$[*]'), lambda a: "
        f"NOT regexp_matches({key}, {literal(_PRIVATE_ATTRIBUTE)}, 'i') "
        f"OR regexp_matches({key}, {literal(_COUNTS)}, 'i')))"
    )


def _private_free(text: str) -> str:
    """
    SQL for a span's JSON text without prompt, completion or credential attributes.

    Span and event attributes are OTLP lists of ``{key, value}``, so they are filtered by key;
    the text of a record that is not a span is scrubbed as text.
    """
    span = f"TRY_CAST({text} AS JSON)"
    event_attrs = _keep("e->'$.attributes'")
    span_attrs = _keep(f"{span}->'$.attributes'")
    events = (
        f"to_json(list_transform(json_extract({span}, '$.events[*]'), lambda e: "
        f"json_merge_patch(e, json_object('attributes', {event_attrs}))))"
    )
    kept = f"json_merge_patch({span}, json_object('attributes', {span_attrs}, 'events', {events}))"
    return (
        f"CASE WHEN json_type({span}) = 'OBJECT' THEN "
        f"json_merge_patch({kept}, '{{}}')::VARCHAR ELSE {scrub(text)} END"
    )


class Otel:
    """
    OpenTelemetry GenAI spans in OTLP/JSON: JSON lines or one document per file.
    """

    name = NAME

    def sniff_sql(self, path: str) -> str:
        """
        SQL counting LLM spans, other spans, bad records and requests without spans.
        """
        return counts_sql(path, lines=one_per_line(path))

    def scan(self, path: str, sniffed: Sequence[tuple[Any, ...]], options: ScanOptions) -> Scan:
        """
        Map every LLM span onto the call record; bad records and bad spans are rejects.

        Raises:
            MappingError: ``--map`` was given (the layout is fixed), ``--unit ms`` (OTLP times
                are nanoseconds, durations come out in seconds), or ``--status-map`` (the
                status is read from the span's status and error type).
        """
        refuse_fixed(path, NAME, options, unit="s", status="status.code and error.type")
        raw = _columns()
        for target, value in options.sets.items():
            raw[target] = RawColumn(literal(value), "VARCHAR", f"the value set for {target}")
        source = (
            f"(SELECT * FROM {spans_sql(path, lines=one_per_line(path))} "
            "WHERE _kind IN ('llm', 'bad'))"
        )
        select = normalize_sql(
            source,
            raw,
            extras=_extras(),
            raw_text=f"json_object('where', _where, 'text', {_private_free('_text')})::VARCHAR",
            row_problem=(
                "malformed_record",
                "_kind = 'bad'",
                "CASE WHEN _span IS NULL THEN 'not a JSON object: ' ELSE "
                "'span is not a JSON object: ' END || left(_text, 60)",
            ),
            row_number="_row",
            model_hint=SET_MODEL,
            status_hint="",
        )
        located = f"SELECT * REPLACE ({_LOCATED} AS attrs) FROM ({select}) AS _tk_otel"
        return Scan(
            format=NAME, select_sql=located, has_call_id=True, notes=_notes(sniffed),
            units_known=True,
        )  # fmt: skip


def _notes(sniffed: Sequence[tuple[Any, ...]]) -> tuple[str, ...]:
    if not sniffed:
        return ()
    _llm, other, _bad, empty = (int(n or 0) for n in sniffed[0])
    notes = []
    if other:
        notes.append(f"{other:,} non-LLM span(s) skipped (not chat/text_completion/"
                     "generate_content, no model attribute)")  # fmt: skip
    if empty:
        notes.append(f"{empty:,} request(s) without spans")
    return tuple(notes)
