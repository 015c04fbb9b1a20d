"""
AIPerf per-request records: metric units converted, errors and cancellations kept as such.
"""

from __future__ import annotations

import json
import tempfile

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.formats import ScanOptions
from tailkit.formats._aiperf import detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


RECORDS = CORPUS / "aiperf" / "profile_export.jsonl"
_SETS = ScanOptions(sets={"provider": "vllm", "model": "llama-3-8b"})
_COLUMNS = (
    "source_row, call_id, epoch(started_at), ttft_s, total_s, input_tokens, output_tokens, "
    "status, error_type, http_status, censored_at_s, provider, model, source"
)
_T0 = 1767225600.0
_M = ("vllm", "llama-3-8b", "aiperf")


def test_every_mapped_column(store: Store) -> None:
    """
    Metrics in ms (and s, us) become seconds; errors, 429, cancel and timeout keep their status.
    """
    report = ingest_paths(store, [RECORDS], format="aiperf", options=_SETS)

    assert report.ok, report.errors
    assert {
        "rows_in": 11,
        "stored": 8,
        "rejected": 3,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    assert [
        (1, "r-1", _T0, 0.25, 3.0, 550, 128, "ok", None, None, None, *_M),
        (2, "r-2", _T0 + 4, None, 1.5, 100, 50, "ok", None, None, None, *_M),
        (3, "r-3", _T0 + 6, None, None, 550, None, "error", "InternalServerError", 500, None,
         *_M),
        (4, "r-4", _T0 + 7, None, None, None, None, "rate_limited", "HTTPStatusError", 429,
         None, *_M),
        (5, "r-5", _T0 + 8, None, None, 300, None, "cancelled", "RequestCancellationError", 499,
         0.5, *_M),
        (6, "r-6", _T0 + 10, None, None, 256, None, "timeout", "ReadTimeout", None, 30.0, *_M),
        (7, "r-7", _T0 + 50, 0.25, 2.5, 1, 1200, "ok", None, None, None, *_M),
        (10, "r-10", _T0 + 70, None, pytest.approx(1e-9), None, None, "ok", None, None, None,
         *_M),
    ] == rows  # fmt: skip


def test_the_conversation_and_turn_are_the_job(store: Store) -> None:
    """
    AIPerf's conversation and turn fill job_key: the same dataset on two models pairs by job.
    """
    ingest_paths(store, [RECORDS], format="aiperf", options=_SETS)

    keys = store.fetchall("SELECT job_key FROM calls WHERE call_id = 'r-1'")

    assert [("conv-1#0",)] == keys


def test_model_name_is_used_when_present(store: Store) -> None:
    """
    Without --set model, only a record with model_name has a model; the rest are rejected.
    """
    options = ScanOptions(sets={"provider": "vllm"})
    report = ingest_paths(store, [RECORDS], format="aiperf", options=options)

    assert [("r-10", "llama-3-8b")] == store.fetchall("SELECT call_id, model FROM calls")
    assert report.totals()["rejected"] == 10
    assert (9,) == store.fetchone("SELECT count(*) FROM rejects WHERE reason = 'missing_model'")


def test_not_streamed_has_null_ttft(store: Store) -> None:
    """
    A record without time_to_first_token (not streamed) has TTFT NULL, never 0.
    """
    ingest_paths(store, [RECORDS], format="aiperf", options=_SETS)

    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0")
    assert (None, 1.5) == store.fetchone("SELECT ttft_s, total_s FROM calls WHERE call_id = 'r-2'")


def test_attrs_keep_metadata_and_other_metrics(store: Store) -> None:
    """
    Metadata and the unmapped metrics (per-chunk gaps, ITL) stay in attrs as written.
    """
    ingest_paths(store, [RECORDS], format="aiperf", options=_SETS)

    row = store.fetchone("SELECT attrs FROM calls WHERE call_id = 'r-1'")
    assert row is not None
    attrs = json.loads(row[0])
    assert attrs["metadata"]["x_correlation_id"] == "c-1"
    assert attrs["metadata"]["benchmark_phase"] == "profiling"
    assert {
        "inter_token_latency": {"value": 21.65, "unit": "ms"},
        "inter_chunk_latency": {"value": [20.0, 22.5, 21.0], "unit": "ms"},
        "output_token_throughput_per_user": {"value": 42.7, "unit": "tokens/sec/user"},
    } == attrs["metrics"]


def test_bad_records_are_rejected_with_their_line(store: Store) -> None:
    """
    An unknown unit, a malformed line and a negative latency are rejected at their line.
    """
    ingest_paths(store, [RECORDS], format="aiperf", options=_SETS)

    assert [
        (8, "total_s_not_a_number",
         "total_s is not a finite number: '1.0 in unknown unit minutes' "
         "(from metrics.request_latency)"),
        (9, "malformed_json", "line is not a JSON object: {not json"),
        (11, "total_s_negative", "total_s is negative: -0.005"),
    ] == store.fetchall("SELECT source_row, reason, detail FROM rejects ORDER BY 1")  # fmt: skip


def test_detect_by_content() -> None:
    """
    A first line with metadata.request_start_ns and metrics is AIPerf; other JSON is not.
    """
    text = RECORDS.read_text()
    first = json.loads(text.split("\n", 1)[0])
    assert "AIPerf" in (detect(text, first) or "")
    assert "AIPerf" in (detect(text.split("\n", 1)[0][:-20], None) or "")
    assert detect('{"metadata": {}}', {"metadata": {}}) is None
    assert detect('{"request_created_at": 1}', {"request_created_at": 1}) is None


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2 * 10**18), st.floats(allow_nan=False),
    st.sampled_from(["", "x", "1.5", "1767225600000000000"]),
)  # fmt: skip
_METRIC = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {}, optional={"value": _VALUE, "unit": st.sampled_from(["ms", "s", "ns", "tokens", ""])}
    ),
)
_META_KEYS = (
    "x_request_id", "request_start_ns", "request_end_ns", "was_cancelled", "cancellation_time_ns",
)  # fmt: skip
_METRIC_KEYS = (
    "time_to_first_token", "request_latency", "input_sequence_length", "output_sequence_length",
    "error_isl",
)  # fmt: skip
_ERROR = st.fixed_dictionaries({}, optional={"code": _VALUE, "type": _VALUE, "message": _VALUE})
_RECORD = st.one_of(
    _VALUE,
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.one_of(
                _VALUE, st.fixed_dictionaries({}, optional=dict.fromkeys(_META_KEYS, _VALUE))
            ),
            "metrics": st.one_of(
                _VALUE, st.fixed_dictionaries({}, optional=dict.fromkeys(_METRIC_KEYS, _METRIC))
            ),
            "error": st.one_of(_VALUE, _ERROR),
            "model_name": _VALUE,
        },
    ),
)


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_RECORD, min_size=1, max_size=5), sets=st.booleans())
def test_arbitrary_records_are_accounted_for(records: list[object], sets: bool) -> None:
    """
    Any record-shaped lines: no crash, and every line is stored or rejected with a reason.
    """
    options = _SETS if sets else ScanOptions()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        with Store.open(Path(tmp) / "t.duckdb") as store:
            report = ingest_paths(store, [path], format="aiperf", options=options)
            assert report.ok, report.errors
            totals = report.totals()
            stored = store.fetchone("SELECT count(*) FROM calls")
            unexplained = store.fetchone(
                "SELECT count(*) FROM rejects WHERE reason IS NULL OR detail IS NULL"
            )
    assert totals["rows_in"] == len(records)
    assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
    assert (totals["stored"],) == stored
    assert (0,) == unexplained
