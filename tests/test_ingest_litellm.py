"""
LiteLLM logs: StandardLoggingPayload lines and spend-log rows, with LiteLLM's TTFT pitfall.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tailkit.formats

from tailkit.errors import MappingError
from tailkit.formats import ScanOptions
from tailkit.formats._litellm import Litellm, detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tests._fuzz import assert_every_line_accounted

from .conftest import CORPUS


PAYLOAD = CORPUS / "litellm" / "standard_logging_payload.jsonl"
SPEND = CORPUS / "litellm" / "spend_logs.jsonl"
_T0 = 1767225600.0  # 2026-01-01T00:00:00Z
_COLUMNS = (
    "call_id, provider, model, round(epoch(started_at) - 1767225600, 6), ttft_s, total_s, "
    "input_tokens, output_tokens, status, error_type, http_status, censored_at_s, abandoned"
)


def _ingest(store: Store, path: Path) -> tailkit.ingest.IngestReport:
    report = ingest_paths(store, [path], format="litellm")
    assert report.ok, report.errors
    return report


def test_payload_columns(store: Store) -> None:
    """
    Every mapped column of the StandardLoggingPayload fixture, row by row.
    """
    _ingest(store, PAYLOAD)

    assert [
        ("chatcmpl-9x2aQ", "openai", "gpt-4o-mini", 0.112, 0.622, 4.789, 1834, 412, "ok",
         None, None, None, False),
        ("chatcmpl-2", "anthropic", "claude-sonnet-4", 10.0, None, 2.5, 900, 64, "ok",
         None, None, None, False),
        ("chatcmpl-3", "openai", "gpt-4o", 20.0, None, 1.25, 12, 1, "ok",
         None, None, None, False),
        ("chatcmpl-4", "openai", "gpt-4o", 100.0, None, None, 5000, None, "timeout",
         "Timeout", 408, 90.0, False),
        ("chatcmpl-5", "azure", "gpt-4o", 200.0, None, 0.25, 300, None, "rate_limited",
         "RateLimitError", 429, None, False),
        ("chatcmpl-6", "bedrock", "anthropic.claude-3-haiku", 300.5, None, 2.5, 1000, None,
         "error", "APIError", 500, None, False),
        ("chatcmpl-7", "azure", "gpt-4.1", 400.0, 1e-06, 30.999999, None, None, "ok",
         None, None, None, False),
        ("chatcmpl-8", "openai", "gpt-4o-mini", 500.0, None, 0.000123, 10, 5, "ok",
         None, None, None, False),
    ] == store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")  # fmt: skip


def test_ttft_null_unless_streamed_and_before_the_end(store: Store) -> None:
    """
    A completionStartTime equal to endTime, or stream false/null, is NULL TTFT: never 0.
    """
    _ingest(store, PAYLOAD)

    rows = dict(store.fetchall("SELECT call_id, ttft_s FROM calls"))
    assert 0.622 == rows["chatcmpl-9x2aQ"]  # streamed, first chunk before the end
    assert rows["chatcmpl-2"] is None  # stream false, completionStartTime == endTime
    assert rows["chatcmpl-3"] is None  # stream true, but no chunk before the end
    assert rows["chatcmpl-6"] is None  # stream null
    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0 OR ttft_s = total_s")


def test_attrs_keep_the_rest_but_not_content(store: Store) -> None:
    """
    trace_id, call_type, cache_hit, hidden_params stay in attrs; messages and response do not.
    """
    _ingest(store, PAYLOAD)

    row = store.fetchone("SELECT attrs FROM calls WHERE call_id = 'chatcmpl-9x2aQ'")
    assert row is not None
    attrs = json.loads(row[0])
    assert "5e1c0d2e-7c41-4a3b-9f63-0a0f4a8e7d11" == attrs["trace_id"]
    assert "acompletion" == attrs["call_type"]
    assert attrs["cache_hit"] is False
    assert 2.4 == attrs["hidden_params"]["litellm_overhead_time_ms"]
    assert "team-a" == attrs["metadata"]["user_api_key_team_id"]
    assert not {"messages", "response", "startTime", "model"} & set(attrs)


def test_reconciliation_and_rejects_at_their_rows(store: Store) -> None:
    """
    10 records = 8 stored + 2 rejected (a bad startTime, no model), each at its line.
    """
    report = _ingest(store, PAYLOAD)

    assert {
        "rows_in": 10,
        "stored": 8,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert [
        (9, "started_at_bad_timestamp", "started_at is not an ISO-8601 time or epoch number: "
         "'yesterday'"),
        (10, "missing_model", "model is missing (fill it with --set model=VALUE)"),
    ] == store.fetchall("SELECT source_row, reason, detail FROM rejects ORDER BY 1")  # fmt: skip
    assert ("litellm", 8) == store.fetchone("SELECT any_value(source), count(*) FROM calls")


def test_torn_line_and_repeat_reconcile(store: Store, tmp_path: Path) -> None:
    """
    A torn line is rejected at its line number as written; a repeated id is a duplicate.
    """
    lines = PAYLOAD.read_text().splitlines()[:3]
    path = tmp_path / "torn.jsonl"
    path.write_text("\n".join([lines[0], lines[1][:50], lines[2], lines[0]]) + "\n")
    report = _ingest(store, path)

    assert {
        "rows_in": 4,
        "stored": 2,
        "rejected": 1,
        "duplicates": 1,
        "inferred_provider": 0,
    } == report.totals()
    assert [(2, "malformed_json", lines[1][:50])] == store.fetchall(
        "SELECT source_row, reason, raw FROM rejects"
    )


def test_spend_log_columns(store: Store) -> None:
    """
    Spend-log rows: ISO times, NULL or equal completionStartTime, provider from api_base.
    """
    report = _ingest(store, SPEND)

    assert ("read as LiteLLM spend-log rows",) == report.files[0].notes
    assert [
        ("req-1", "openai", "gpt-4o-mini", 0.112, 0.622, 4.789, 1834, 412, "ok",
         None, None, None, False),
        ("req-2", "anthropic", "claude-sonnet-4", 10.0, None, 2.5, 900, 64, "ok",
         None, None, None, False),
        ("req-3", "azure", "gpt-4o", 20.0, None, 0.25, 300, None, "rate_limited",
         "RateLimitError", 429, None, False),
        ("req-4", "groq", "llama-3.1-8b", 30.0, None, 1.0, 40, 10, "ok",
         None, None, None, False),
    ] == store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")  # fmt: skip
    attrs = json.loads(store.fetchall("SELECT attrs FROM calls ORDER BY source_row")[0][0])
    assert ("s-1", 4789, "api_key") == (
        attrs["session_id"],
        attrs["request_duration_ms"],
        "api_key" * ("api_key" not in attrs),
    )


def test_set_overrides_and_map_is_refused(store: Store) -> None:
    """
    --set fills a column over the file's own; --map and --unit do not apply to a fixed layout.
    """
    report = ingest_paths(
        store, [SPEND], format="litellm", options=ScanOptions(sets={"provider": "gateway"})
    )
    assert report.ok
    assert [("gateway",)] == store.fetchall("SELECT DISTINCT provider FROM calls")
    with pytest.raises(MappingError, match="unit ms does not apply to format litellm"):
        Litellm().scan(str(SPEND), [], ScanOptions(unit="ms"))
    with pytest.raises(MappingError, match="mapping does not apply to format litellm"):
        Litellm().scan(str(SPEND), [], ScanOptions(mapping={"model": "x"}))


def test_detect() -> None:
    """
    Both shapes are told by their keys; other JSON is not LiteLLM.
    """
    payload = PAYLOAD.read_text()
    spend = SPEND.read_text()
    first = json.loads(payload.splitlines()[0])
    assert "StandardLoggingPayload" in str(detect(payload, first))
    assert "spend-log" in str(detect(spend, json.loads(spend.splitlines()[0])))
    # A first line longer than the head: found by its keys in the text.
    line = payload.splitlines()[0]
    assert "StandardLoggingPayload" in str(detect(line[: line.index('"endTime"') + 12], None))
    assert detect('{"model": "m", "provider": "p", "total_s": 1.0}', {"model": "m"}) is None
    assert detect("[1, 2]", [1, 2]) is None
    assert detect("a,b\n1,2", None) is None


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
_TIME = st.floats(1.6e9, 1.9e9) | st.sampled_from(["2026-01-01T00:00:00Z", "soon", ""]) | _ANY
_RECORD = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=3) | _ANY,
        "model": st.sampled_from(["gpt-4o", ""]) | _ANY,
        "custom_llm_provider": st.sampled_from(["openai", "azure"]) | _ANY,
        "startTime": _TIME,
        "endTime": _TIME,
        "completionStartTime": _TIME,
        "stream": st.booleans() | _ANY,
        "status": st.sampled_from(["success", "failure", "weird"]) | _ANY,
        "prompt_tokens": st.integers(-5, 10**6) | _ANY,
        "completion_tokens": st.integers(-5, 10**6) | _ANY,
        "error_information": st.fixed_dictionaries(
            {}, optional={"error_code": st.sampled_from(["408", "429", "500", "x"]) | _ANY,
                          "error_class": st.sampled_from(["Timeout", "RateLimitError"]) | _ANY}
        ) | _ANY,
        "metadata": _ANY,
    },
)  # fmt: skip
_LINE = _RECORD.map(json.dumps) | st.sampled_from(['{"id": "torn', "[1, 2]", "null", "{}"])


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_LINE, min_size=1, max_size=6))
def test_any_json_is_stored_or_rejected(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    """
    Arbitrary JSON of roughly the right shape: no crash, every line accounted for with a reason.
    """
    lines = ['{"id": "first", "model": "m"}', *lines]
    assert_every_line_accounted(tmp_path_factory.mktemp("litellm"), lines, format="litellm")
