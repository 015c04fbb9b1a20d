"""
GuideLLM reports: successful, incomplete and errored requests of every benchmark become calls.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.formats._guidellm import detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tests._fuzz import assert_document_accounted

from .conftest import CORPUS


REPORT = CORPUS / "guidellm" / "report.json"
_COLUMNS = (
    "source_row, call_id, provider, model, epoch(started_at), ttft_s, total_s, input_tokens, "
    "output_tokens, status, error_type, http_status, censored_at_s, source"
)
_T0 = 1767225600.0
_Q = ("openai_http", "Qwen/Qwen3-8B")
_G = "guidellm"


def test_every_mapped_column(store: Store) -> None:
    """
    Raw timings give start, TTFT and total; groups give status; incomplete ones are censored.
    """
    report = ingest_paths(store, [REPORT], format="guidellm")

    assert report.ok, report.errors
    assert {
        "rows_in": 9,
        "stored": 7,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    approx = pytest.approx
    assert [
        (1, "s-1", *_Q, _T0 + 0.125, 0.25, 3.0, 256, 128, "ok", None, None, None, _G),
        (2, "s-2", *_Q, _T0 + 4, None, 2.5, 100, 50, "ok", None, None, None, _G),
        (3, "s-3", *_Q, _T0 + 7, approx(0.0005, abs=1e-6), approx(0.001, abs=1e-6), 1, 1, "ok",
         None, None, None, _G),
        (5, "i-1", *_Q, _T0 + 10, None, None, 300, 17, "cancelled", None, None, 20.0, _G),
        (6, "e-1", *_Q, _T0 + 11, None, None, 256, None, "rate_limited", "HTTPStatusError",
         429, None, _G),
        (7, "e-2", *_Q, _T0 + 12, None, None, 256, None, "timeout", "ReadTimeout", None, 30.0,
         _G),
        (8, "s-5", *_Q, _T0 + 100, 0.25, 10.0, 4096, 1200, "ok", None, None, None, _G),
    ] == rows  # fmt: skip


def test_no_first_token_is_null_not_zero(store: Store) -> None:
    """
    A request without a first-token time (not streamed) has TTFT NULL, never 0.
    """
    ingest_paths(store, [REPORT], format="guidellm")

    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0")
    assert (None, 2.5) == store.fetchone("SELECT ttft_s, total_s FROM calls WHERE call_id = 's-2'")


def test_attrs_keep_guidellm_numbers(store: Store) -> None:
    """
    GuideLLM's derived per-request numbers and the benchmark and group are in attrs.
    """
    ingest_paths(store, [REPORT], format="guidellm")

    row = store.fetchone("SELECT attrs FROM calls WHERE call_id = 's-1'")
    assert row is not None
    assert {
        "benchmark": 1, "group": "successful", "request_index": 0, "response_id": "chatcmpl-1",
        "error": None, "guidellm_status": "completed", "time_to_first_token_ms": 250.0,
        "inter_token_latency_ms": 20.67, "time_per_output_token_ms": 22.46,
        "request_latency": 3.0,
    } == json.loads(row[0])  # fmt: skip


def test_bad_requests_are_rejected_with_their_place(store: Store) -> None:
    """
    End before start and a request that is not an object are rejected at their row.
    """
    ingest_paths(store, [REPORT], format="guidellm")

    assert [
        (4, "total_s_negative", "total_s is negative: -0.5"),
        (9, "not_an_object", "benchmarks[1].requests.errored[0] is not an object: 7"),
    ] == store.fetchall("SELECT source_row, reason, detail FROM rejects ORDER BY 1")


def test_older_reports_use_derived_fields(store: Store, tmp_path: Path) -> None:
    """
    Without timings, request_latency (s) and time_to_first_token_ms (ms) are used.
    """
    path = tmp_path / "old.json"
    request = {"request_id": "o-1", "request_latency": 2.0, "time_to_first_token_ms": 500.0,
               "prompt_tokens": 9, "output_tokens": 3}  # fmt: skip
    bench = {"worker": {"backend_model": "m", "backend_type": "openai_http"},
             "requests": {"successful": [request], "errored": [], "incomplete": []}}  # fmt: skip
    path.write_text(json.dumps({"benchmarks": [bench]}))

    report = ingest_paths(store, [path], format="guidellm")

    assert report.ok, report.errors
    assert [("o-1", "openai_http", "m", None, 0.5, 2.0, 9, 3, "ok")] == store.fetchall(
        "SELECT call_id, provider, model, started_at, ttft_s, total_s, input_tokens, "
        "output_tokens, status FROM calls"
    )


def test_detect_by_content() -> None:
    """
    A JSON object with benchmarks and GuideLLM keys is a report; other JSON is not.
    """
    text = REPORT.read_text()
    assert "GuideLLM" in (detect(text, None) or "")
    assert detect('{"benchmarks": []}', {"benchmarks": []}) is None
    assert detect('{"ttfts": [], "itls": []}', None) is None


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2 * 10**9), st.floats(allow_nan=False),
    st.sampled_from(["", "x", "1.5", "ReadTimeout", "429 Too Many Requests"]),
)  # fmt: skip
_TIMINGS = st.dictionaries(
    st.sampled_from(["request_start", "first_token_iteration", "request_end"]), _VALUE
)
_REQUEST = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {},
        optional={
            "request_id": st.one_of(st.none(), st.text(max_size=3)),
            "info": st.fixed_dictionaries({"timings": _TIMINGS}, optional={"error": _VALUE}),
            "prompt_tokens": _VALUE, "output_tokens": _VALUE, "request_latency": _VALUE,
            "time_to_first_token_ms": _VALUE,
        },
    ),
)  # fmt: skip
_BENCH = st.fixed_dictionaries(
    {"requests": st.dictionaries(
        st.sampled_from(["successful", "incomplete", "errored"]),
        st.one_of(st.lists(_REQUEST, min_size=1, max_size=3), _VALUE),
        min_size=1,
    )}
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    benches=st.lists(st.one_of(_BENCH, _BENCH, _VALUE), min_size=1, max_size=3),
    args=st.one_of(st.none(), st.fixed_dictionaries({"model": _VALUE, "backend": _VALUE})),
)
def test_arbitrary_reports_are_accounted_for(benches: list[object], args: object) -> None:
    """
    Any report-shaped JSON: no crash, and every request is stored or rejected with a reason.
    """
    assert_document_accounted(json.dumps({"args": args, "benchmarks": benches}), format="guidellm")
