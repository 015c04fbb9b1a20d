"""
OpenTelemetry GenAI spans in OTLP/JSON files (--format otel): LLM spans become calls.
"""

from __future__ import annotations

import json
import tempfile

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.formats import ScanOptions
from tailkit.formats._otel import detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


OTEL = CORPUS / "otel"
_T0 = 1767225600.0  # 2026-01-01T00:00:00Z, the fixtures' first span

_COLUMNS = (
    "call_id, run_id, provider, model, epoch(started_at) - 1767225600, ttft_s, total_s, "
    "input_tokens, output_tokens, status, error_type, http_status, censored_at_s, abandoned"
)
_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_EXPECTED = [
    # Current names, streamed.
    ("00f067aa0ba902b7", _TRACE, "openai", "gpt-4o-mini", 0.0, 0.61, 3.412, 1204, 312,
     "ok", None, None, None, False),
    # Older names, numbers for nanoseconds and ints, not streamed: no TTFT.
    ("00f067aa0ba902b8", _TRACE, "azure.ai.openai", "gpt-4o", 5.0, None, 1.25, 88, 0,
     "ok", None, None, None, False),
    # A timeout is cut at its age: censored, no total, no output tokens.
    ("3333333333333333", _TRACE, "openai", "gpt-4o-mini", 10.0, None, None, 5000, None,
     "timeout", "timeout", None, 30.0, False),
    ("4444444444444444", _TRACE, "openai", "gpt-4o-mini", 11.0, None, 0.125, None, None,
     "rate_limited", "429", 429, None, False),
    # Status code as its enum name; the error type from the exception event.
    ("5555555555555555", _TRACE, "openai", "gpt-4o-mini", 12.0, None, 2.0, None, None,
     "error", "openai.InternalServerError", None, None, False),
    # OpenInference, base64 ids: llm.provider is the serving path.
    ("a1a2a3a4a5a6a7a8", "0af7651916cd43dd8448eb211c80319c", "azure", "gpt-4o-2024-08-06",
     20.0, None, 2.5, 640, 128, "ok", None, None, None, False),
    # OpenLLMetry: gen_ai.system, prompt/completion tokens, no operation name.
    ("c1c2c3c4c5c6c7c8", _TRACE, "Anthropic", "claude-3-5-haiku-20241022", 30.0, None, 1.75,
     200, 50, "ok", None, None, None, False),
    # One nanosecond long, a TTFT of 0 (unknown, not instantaneous).
    ("e2e2e3e4e5e6e7e8", _TRACE, "openai", "gpt-4o-mini", 0.0, None, 1e-9, None, None,
     "ok", None, None, None, False),
]  # fmt: skip


def test_every_column_of_every_llm_span(store: Store) -> None:
    """
    Each LLM span of the JSON-lines export comes back with every call-record column.
    """
    report = ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    assert report.ok, report.errors
    assert _EXPECTED == store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    assert [("otel",)] == store.fetchall("SELECT DISTINCT source FROM calls")


def test_rows_reconcile_and_other_spans_are_counted(store: Store) -> None:
    """
    Rows in = stored + rejected; non-LLM spans and empty requests are noted, not rows.
    """
    report = ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    assert {
        "rows_in": 13,
        "stored": 8,
        "rejected": 5,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert (
        "4 non-LLM span(s) skipped (not chat/text_completion/generate_content, no model attribute)",
        "1 request(s) without spans",
    ) == report.files[0].notes
    again = ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")
    assert {
        "rows_in": 13,
        "stored": 0,
        "rejected": 5,
        "duplicates": 8,
        "inferred_provider": 0,
    } == again.totals()


def test_bad_records_are_rejected_with_their_location(store: Store) -> None:
    """
    A broken line, a span that is no object, a missing model, a missing end, a late TTFT.
    """
    ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    rows = store.fetchall("SELECT source_row, reason, detail, raw FROM rejects ORDER BY 1")
    assert [(r[0], r[1]) for r in rows] == [
        (8, "malformed_record"),
        (9, "missing_model"),
        (11, "ok_without_total"),
        (12, "malformed_record"),
        (13, "ttft_after_total"),
    ]
    assert rows[0][2].endswith("(line 5)")
    assert rows[0][3] == '{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"chat x"}]}]}]'
    assert rows[3][2] == (
        'span is not a JSON object: "oops" (line 6, resourceSpans[0].scopeSpans[0].spans[3])'
    )
    assert rows[4][2] == (
        "ttft_s 2.5 is larger than total_s 2.0 (line 6, resourceSpans[0].scopeSpans[0].spans[4])"
    )
    assert json.loads(rows[1][3])["spanId"] == "e1e2e3e4e5e6e7e8"


def test_ttft_null_rules(store: Store) -> None:
    """
    stream=false drops a reported TTFT (kept in attrs); a TTFT of 0 or none is NULL.
    """
    ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    rows = store.fetchall(
        "SELECT call_id, ttft_s, CAST(attrs->'stream' AS BOOLEAN), "
        "CAST(attrs->'reported_ttft_s' AS DOUBLE) FROM calls "
        "WHERE call_id IN ('00f067aa0ba902b7', '00f067aa0ba902b8', 'e2e2e3e4e5e6e7e8', "
        "'c1c2c3c4c5c6c7c8') ORDER BY source_row"
    )
    assert [
        ("00f067aa0ba902b7", 0.61, True, None),
        ("00f067aa0ba902b8", None, False, 1.0),
        ("c1c2c3c4c5c6c7c8", None, None, None),
        ("e2e2e3e4e5e6e7e8", None, True, None),
    ] == rows


def test_attrs_keep_what_maps_to_no_column(store: Store) -> None:
    """
    Span name, resource, scope, response model, finish reasons and cache tokens are in attrs.
    """
    ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    row = store.fetchone("SELECT attrs FROM calls WHERE call_id = '00f067aa0ba902b7'")
    assert row is not None
    attrs = json.loads(row[0])
    assert {
        "span_name": "chat gpt-4o-mini",
        "span_kind": 3,
        "location": "line 1, resourceSpans[0].scopeSpans[0].spans[0]",
        "service_name": "chat-api",
        "scope_name": "opentelemetry.instrumentation.openai_v2",
        "operation": "chat",
        "response_model": "gpt-4o-mini-2024-07-18",
        "finish_reasons": ["stop"],
        "stream": True,
        "server_address": "api.openai.com",
        "cache_read_input_tokens": 1024,
    }.items() <= attrs.items()
    total = store.fetchone("SELECT attrs->>'total_tokens' FROM calls WHERE provider = 'azure'")
    assert ("768",) == total
    status = store.fetchone(
        "SELECT attrs->>'status_message' FROM calls WHERE call_id = '3333333333333333'"
    )
    assert ("Request timed out",) == status


def test_started_at_is_exact_to_the_microsecond(store: Store) -> None:
    """
    Nanosecond epochs are read as integers: a 1 ns span is 1e-9 s, the start keeps its µs.
    """
    path = OTEL / "document.json"
    ingest_paths(store, [path], format="otel")
    ingest_paths(store, [OTEL / "genai.jsonl"], format="otel")

    row = store.fetchone(
        "SELECT epoch_us(started_at), total_s FROM calls WHERE call_id = 'e2e2e3e4e5e6e7e8'"
    )
    assert (1767225600000000, 1e-9) == row


def test_a_pretty_printed_document(store: Store) -> None:
    """
    One indented OTLP document: its LLM spans are read, the agent span is skipped.
    """
    report = ingest_paths(store, [OTEL / "document.json"], format="otel")

    assert {
        "rows_in": 2,
        "stored": 2,
        "rejected": 0,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert report.files[0].notes[0].startswith("1 non-LLM span(s) skipped")
    assert [
        ("f1f2f3f4f5f6f7f8", "gcp.vertex_ai", "gemini-2.0-flash", 0.25, 2.0, 1000, 100, "ok"),
        ("f2f2f3f4f5f6f7f8", "openai", "meta-llama/Llama-3.1-8B-Instruct", None, 1.5, None,
         None, "ok"),
    ] == store.fetchall(
        "SELECT call_id, provider, model, ttft_s, total_s, input_tokens, output_tokens, status "
        "FROM calls ORDER BY source_row"
    )  # fmt: skip


def test_set_fills_a_column_and_map_is_refused(store: Store) -> None:
    """
    --set provider=… names the provider of every span; --map has no columns to map.
    """
    report = ingest_paths(
        store, [OTEL / "document.json"], format="otel",
        options=ScanOptions(sets={"provider": "vertex"}),
    )  # fmt: skip
    refused = ingest_paths(
        store, [OTEL / "genai.jsonl"], format="otel",
        options=ScanOptions(mapping={"model": "x"}),
    )  # fmt: skip

    assert report.ok
    assert [("vertex",)] == store.fetchall("SELECT DISTINCT provider FROM calls")
    assert "mapping does not apply to format otel" in str(refused.errors[0])


def test_detect() -> None:
    """
    OTLP trace requests are recognized per line or as a document; other JSON is not.
    """
    line = (OTEL / "genai.jsonl").read_text().split("\n", 1)[0]
    doc = (OTEL / "document.json").read_text()

    assert "one request per line" in str(detect(line, json.loads(line)))
    assert "document" in str(detect(doc, None))
    assert detect('{"resourceMetrics": []}', {"resourceMetrics": []}) is None
    assert detect('{"model": "x", "total_s": 1}', {"model": "x", "total_s": 1}) is None
    assert detect("request_id,latency\n", None) is None


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=6),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
_ATTR_VALUE = st.one_of(
    st.builds(lambda v: {"stringValue": v}, st.sampled_from(["chat", "openai", "gpt-4o", "", "x"])),
    st.builds(lambda v: {"intValue": v}, st.one_of(st.integers(-5, 10**6), st.text(max_size=4))),
    st.builds(lambda v: {"doubleValue": v}, st.one_of(st.floats(), st.text(max_size=3))),
    st.builds(lambda v: {"boolValue": v}, st.booleans()),
    _VALUE,
)  # fmt: skip
_KEYS = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.system", "gen_ai.request.model",
    "llm.model_name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.response.time_to_first_chunk", "gen_ai.request.stream", "error.type",
    "http.response.status_code", "openinference.span.kind",
])  # fmt: skip
_NANOS = st.one_of(
    st.integers(0, 2**64), st.integers(0, 2**64).map(str), st.text(max_size=4), st.none()
)
_SPAN = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {"spanId": st.one_of(st.text(max_size=16), st.just("00f067aa0ba902b7")),
         "startTimeUnixNano": _NANOS, "endTimeUnixNano": _NANOS,
         "attributes": st.one_of(
             _VALUE,
             st.lists(st.one_of(_VALUE, st.fixed_dictionaries(
                 {"key": _KEYS, "value": _ATTR_VALUE})), max_size=6)),
         "status": st.one_of(_VALUE, st.fixed_dictionaries(
             {"code": st.one_of(st.integers(0, 3), st.text(max_size=3))}))},
    ),
)  # fmt: skip
_REQUEST = st.one_of(
    _VALUE,
    st.fixed_dictionaries({"resourceSpans": st.one_of(_VALUE, st.lists(
        st.fixed_dictionaries({"scopeSpans": st.one_of(_VALUE, st.lists(
            st.fixed_dictionaries({"spans": st.one_of(_VALUE, st.lists(_SPAN, max_size=3))}),
            max_size=2))}),
        max_size=2))}),
)  # fmt: skip


@pytest.mark.slow
@settings(
    max_examples=20,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(requests=st.lists(_REQUEST, min_size=1, max_size=4), broken=st.booleans())
def test_arbitrary_otlp_shaped_json_is_stored_or_rejected(
    requests: list[object], broken: bool
) -> None:
    """
    No crash on OTLP-shaped JSON; every LLM or bad row is stored or rejected with a reason.
    """
    lines = [json.dumps({"resourceSpans": []})] + [json.dumps(r) for r in requests]
    if broken:
        lines.append('{"resourceSpans": [')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.jsonl"
        path.write_text("\n".join(lines) + "\n")
        with Store.open(Path(tmp) / "t.duckdb") as store:
            # --unit s: random nanoseconds make "millisecond-looking" totals.
            report = ingest_paths(store, [path], format="otel", options=ScanOptions(unit="s"))

            assert report.ok, report.errors
            totals = report.totals()
            settled = totals["stored"] + totals["rejected"] + totals["duplicates"]
            assert totals["rows_in"] == settled
            assert totals["stored"] == store.fetchone("SELECT count(*) FROM calls")[0]  # type: ignore[index]
            unexplained = store.fetchone(
                "SELECT count(*) FROM rejects WHERE reason IS NULL OR detail IS NULL"
            )
            assert (0,) == unexplained
            assert totals["rejected"] >= broken
