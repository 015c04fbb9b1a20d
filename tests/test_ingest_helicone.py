"""
Helicone request exports: milliseconds to seconds, HTTP status to call status.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.formats._helicone import detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tests._fuzz import assert_every_line_accounted

from .conftest import CORPUS


EXPORT = CORPUS / "helicone" / "export.jsonl"
_COLUMNS = (
    "call_id, provider, model, round(epoch(started_at) - 1767225600, 6), ttft_s, total_s, "
    "input_tokens, output_tokens, status, error_type, http_status, censored_at_s"
)


def test_every_column(store: Store) -> None:
    """
    Every mapped column of the fixture, durations converted from milliseconds once.
    """
    report = ingest_paths(store, [EXPORT], format="helicone")

    assert report.ok, report.errors
    assert [
        ("7c0e1a2b-0001", "openai", "gpt-4o-mini", 0.112, 0.622, 4.789, 1834, 412, "ok",
         None, 200, None),
        ("7c0e1a2b-0002", "anthropic", "claude-sonnet-4", 10.0, None, 2.5, 900, 64, "ok",
         None, 200, None),
        ("7c0e1a2b-0003", "openai", "gpt-4o", 20.0, None, 1.25, 12, 1, "ok", None, 200, None),
        ("7c0e1a2b-0004", "azure", "gpt-4o", 30.0, None, 0.18, 300, None, "rate_limited",
         "http_429", 429, None),
        ("7c0e1a2b-0005", "bedrock", "anthropic.claude-3-haiku", 40.0, None, 2.5, 1000, None,
         "error", "http_500", 500, None),
        ("7c0e1a2b-0006", "openai", "gpt-4o", 60.0, None, None, 5000, None, "timeout",
         "http_504", 504, 90.0),
        ("7c0e1a2b-0007", "groq", "llama-3.1-8b-instant", 180.0, 0.12, 0.35, 40, 10, "ok",
         None, 200, None),
        ("7c0e1a2b-0008", "openai", "gpt-4o-mini", 240.0, 0.001, 0.002, 5, 1, "ok",
         None, 200, None),
        ("7c0e1a2b-0009", "openai", "gpt-4o", 300.0, None, 30.0, 100, None, "error",
         "no_response", None, None),
    ] == store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")  # fmt: skip


def test_ttft_null_when_absent_or_equal_to_latency(store: Store) -> None:
    """
    No time_to_first_token, or one equal to delay_ms, is NULL TTFT: never 0, never the total.
    """
    ingest_paths(store, [EXPORT], format="helicone")

    rows = dict(store.fetchall("SELECT call_id, ttft_s FROM calls"))
    assert rows["7c0e1a2b-0002"] is None  # null
    assert rows["7c0e1a2b-0003"] is None  # == delay_ms
    assert 0.001 == rows["7c0e1a2b-0008"]  # 1 ms is a real TTFT
    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0 OR ttft_s = total_s")


def test_reconciliation_and_rejects(store: Store) -> None:
    """
    11 records = 9 stored + 2 rejected with their line and reason.
    """
    report = ingest_paths(store, [EXPORT], format="helicone")

    assert {
        "rows_in": 11,
        "stored": 9,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert [
        (10, "total_s_not_a_number", "total_s is not a finite number: 'fast' (from delay_ms)"),
        (11, "ttft_after_total", "ttft_s 0.9 is larger than total_s 0.5"),
    ] == store.fetchall("SELECT source_row, reason, detail FROM rejects ORDER BY 1")
    raw = store.fetchone("SELECT raw FROM rejects WHERE source_row = 10")
    assert raw is not None
    assert EXPORT.read_text().splitlines()[9] == raw[0]
    assert ("helicone",) == store.fetchone("SELECT DISTINCT source FROM calls")


def test_torn_line_is_rejected_at_its_line(store: Store, tmp_path: Path) -> None:
    """
    A line that is not JSON sends the file down the line-by-line path; only that line is lost.
    """
    lines = EXPORT.read_text().splitlines()[:3]
    path = tmp_path / "torn.jsonl"
    path.write_text("\n".join([lines[0], "not json", lines[1], lines[2], lines[2]]) + "\n")
    report = ingest_paths(store, [path], format="helicone")

    assert {
        "rows_in": 5,
        "stored": 3,
        "rejected": 1,
        "duplicates": 1,
        "inferred_provider": 0,
    } == report.totals()
    assert [(2, "malformed_json", "not json")] == store.fetchall(
        "SELECT source_row, reason, raw FROM rejects"
    )


def test_attrs_keep_the_rest_but_not_bodies(store: Store) -> None:
    """
    cost, properties, response_model stay in attrs; request and response bodies do not.
    """
    ingest_paths(store, [EXPORT], format="helicone")

    row = store.fetchone("SELECT attrs FROM calls WHERE source_row = 1")
    assert row is not None
    attrs = json.loads(row[0])
    assert (0.00052, {"env": "prod"}, "gpt-4o-mini-2024-07-18") == (
        attrs["cost"],
        attrs["request_properties"],
        attrs["response_model"],
    )
    assert not {"request_body", "response_body", "delay_ms"} & set(attrs)


def test_detect() -> None:
    """
    Helicone keys are recognised in a parsed first line or in the text; others are not.
    """
    text = EXPORT.read_text()
    line = text.splitlines()[0]
    assert "Helicone" in str(detect(text, json.loads(line)))
    assert "Helicone" in str(detect(line[: line.index('"delay_ms"') + 12], None))
    assert (
        detect('{"request_id": "r", "startTime": 1}', {"request_id": "r", "startTime": 1}) is None
    )
    assert detect("[]", []) is None


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
_RECORD = st.fixed_dictionaries(
    {},
    optional={
        "request_id": st.text(max_size=3) | _ANY,
        "request_created_at": st.sampled_from(["2026-01-01T00:00:00Z", "x"]) | _ANY,
        "response_created_at": st.sampled_from(["2026-01-01T00:00:01Z"]) | _ANY,
        "response_status": st.sampled_from([200, 429, 504, -1, "200", "ok"]) | _ANY,
        "provider": st.sampled_from(["OPENAI", "AWS", ""]) | _ANY,
        "request_model": st.sampled_from(["gpt-4o", ""]) | _ANY,
        "delay_ms": st.integers(-5, 10**7) | st.floats(allow_nan=False) | _ANY,
        "latency": st.integers(0, 10**6) | _ANY,
        "time_to_first_token": st.integers(-5, 10**6) | _ANY,
        "prompt_tokens": st.integers(-5, 10**6) | _ANY,
        "completion_tokens": st.integers(-5, 10**6) | _ANY,
        "request_properties": _ANY,
    },
)  # fmt: skip
_LINE = _RECORD.map(json.dumps) | st.sampled_from(['{"request_id": "torn', "[1]", "null", "{}"])


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
    lines = ['{"request_id": "first"}', *lines]
    assert_every_line_accounted(tmp_path_factory.mktemp("helicone"), lines, format="helicone")
