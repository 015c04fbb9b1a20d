"""
Langfuse observations (API JSON, JSON lines, Parquet export): generations become calls.
"""

from __future__ import annotations

import json

from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tailkit.formats

from tailkit.formats._langfuse import detect, detect_parquet
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


LANGFUSE = CORPUS / "langfuse"
_COLUMNS = (
    "call_id, run_id, step, provider, model, strftime(started_at, '%Y-%m-%dT%H:%M:%S.%f'), "
    "ttft_s, total_s, input_tokens, output_tokens, status, error_type, source_row, source"
)


def _ingest(store: Store, path: Path, **kw: Any) -> Any:
    report = ingest_paths(store, [path], format="langfuse", **kw)
    assert report.ok, report.errors
    return report


def _rejects(store: Store) -> list[tuple[int, str]]:
    return [(int(r), str(why)) for r, why in store.fetchall(
        "SELECT source_row, reason FROM rejects ORDER BY source_row"
    )]  # fmt: skip


def test_api_page_maps_every_column(store: Store) -> None:
    """
    An API page: streamed, non-streamed, error, TTFT at the end and microsecond edges.
    """
    report = _ingest(store, LANGFUSE / "api_page.json")

    assert {
        "rows_in": 7,
        "stored": 5,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert ("skipped 2 observation(s) that are not generations (EVENT 1, SPAN 1)",) == report.files[
        0
    ].notes
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    assert [
        ("gen-stream", "trace-1", "draft", "openai", "gpt-4o-mini",
         "2026-01-01T00:00:00.112000", 0.622, 4.789, 1834, 412, "ok", None, 1, "langfuse"),
        ("gen-plain", "trace-1", "summarize", "anthropic", "claude-3-5-sonnet",
         "2026-01-01T00:00:05.000000", None, 2.25, 900, 64, "ok", None, 3, "langfuse"),
        ("gen-error", "trace-2", "draft", "openai", "gpt-4o-mini",
         "2026-01-01T00:01:00.000000", None, 30.0, 1200, 0, "error", None, 5, "langfuse"),
        ("gen-at-end", "trace-2", "draft", "openai", "gpt-4o-mini",
         "2026-01-01T00:02:00.000000", None, 3.0, 50, 7, "ok", None, 6, "langfuse"),
        ("gen-micro", "trace-3", "classify", "azure", "gpt-4o-mini",
         "2026-01-01T00:04:00.000001", 1e-06, 2e-06, 1, 1, "ok", None, 8, "langfuse"),
    ] == rows  # fmt: skip
    assert [(7, "missing_model"), (9, "ok_without_total")] == _rejects(store)


def test_attrs_keep_what_has_no_column(store: Store) -> None:
    """
    Level, status message, costs and Langfuse's own latencies are in attrs; prompts are not.
    """
    _ingest(store, LANGFUSE / "api_page.json")

    attrs = {
        k: json.loads(v) for k, v in store.fetchall("SELECT call_id, attrs::VARCHAR FROM calls")
    }
    stream = attrs["gen-stream"]
    assert stream["parent_observation_id"] == "span-1"
    assert stream["total_cost"] == 0.000522
    assert stream["cost_details"] == {"input": 0.000275, "output": 0.000247}
    assert (stream["reported_latency_s"], stream["reported_ttft_s"]) == (4.789, 0.622)
    assert "input" not in stream
    assert "output" not in stream
    error = attrs["gen-error"]
    assert (error["level"], error["status_message"]) == (
        "ERROR", "Error: 429 Rate limit reached for gpt-4o-mini"
    )  # fmt: skip
    assert attrs["gen-at-end"]["completion_start_not_before_end"] is True
    assert attrs["gen-at-end"]["level"] == "WARNING"
    assert attrs["gen-plain"]["completion_start_not_before_end"] is None


def test_snake_case_lines_reject_bad_records_at_their_place(store: Store) -> None:
    """
    Export JSON lines: a broken line, a negative total and a bad time are rejected.

    A record without a provider is stored with the one its model implies.
    """
    report = _ingest(store, LANGFUSE / "observations.jsonl")

    assert {
        "rows_in": 7,
        "stored": 3,
        "rejected": 4,
        "duplicates": 0,
        "inferred_provider": 1,
    } == report.totals()
    assert [
        (3, "malformed_record"),
        (4, "total_s_negative"),
        (6, "started_at_bad_timestamp"),
        (8, "input_tokens_not_whole"),
    ] == _rejects(store)
    details = dict(store.fetchall("SELECT source_row, detail FROM rejects"))
    assert details[3].startswith('line 3 is not JSON: {"id":"obs_03"')
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    assert [
        ("obs_01", "tr_1", "chat", "openai", "gpt-4o-mini", "2026-01-01T00:00:00.112000",
         0.622, 4.789, 1834, 412, "ok", None, 1, "langfuse"),
        ("obs_05", "tr_2", "chat", "azure.ai.openai", "gpt-4o-mini",
         "2026-01-01T00:02:00.000000", 0.5, 1.5, 10, 2, "ok", None, 5, "langfuse"),
        ("obs_07", "tr_3", "chat", "openai", "gpt-4o-mini", "2026-01-01T00:04:00.000000",
         0.25, 2.0, 5, 9, "ok", None, 7, "langfuse"),
    ] == rows  # fmt: skip


def test_set_provider_fills_what_the_export_lacks(store: Store) -> None:
    """
    --set provider names the provider of every row, so no row lacks one.
    """
    report = _ingest(
        store,
        LANGFUSE / "observations.jsonl",
        options=tailkit.formats.ScanOptions(sets={"provider": "openai"}),
    )

    assert "missing_provider" not in report.reasons()
    assert ("openai",) == store.fetchone("SELECT provider FROM calls WHERE call_id = 'obs_07'")


def _parquet(path: Path) -> Path:
    """
    A blob-storage export as Langfuse writes it: snake_case, naive UTC times, maps.
    """
    t = datetime.fromisoformat
    usage = pa.map_(pa.string(), pa.int64())
    table = pa.table(
        {
            "id": ["p1", "p2", "p3", "p4", "p5"],
            "trace_id": ["t1", "t1", "t1", "t2", "t2"],
            "type": ["GENERATION", "SPAN", "GENERATION", "GENERATION", "GENERATION"],
            "name": ["chat", "agent", "chat", "chat", None],
            "start_time": [t("2026-01-01 00:00:00.112"), t("2026-01-01 00:00:00"),
                           t("2026-01-01 00:00:05"), t("2026-01-01 00:01:00"),
                           t("2026-01-01 00:02:00")],
            "end_time": [t("2026-01-01 00:00:04.901"), t("2026-01-01 00:00:09"),
                         t("2026-01-01 00:00:07.25"), t("2026-01-01 00:01:30"), None],
            "completion_start_time": [t("2026-01-01 00:00:00.734"), None, None, None, None],
            "provided_model_name": ["gpt-4o-mini", None, "gpt-4o", "gpt-4o", "gpt-4o"],
            "model_parameters": ['{"provider": "openai"}', None, None, None, None],
            "metadata": pa.array(
                [[], [], [("ls_provider", "openai")], [("ls_provider", "openai")],
                 [("ls_provider", "openai")]],
                type=pa.map_(pa.string(), pa.string()),
            ),
            "usage_details": pa.array(
                [[("input", 1834), ("output", 412), ("total", 2246)], [], [("input", 900)],
                 [], [("output", 5)]],
                type=usage,
            ),
            "level": ["DEFAULT", "DEFAULT", "DEFAULT", "ERROR", "DEFAULT"],
            "status_message": [None, None, None, "upstream timeout", None],
            "input": ["prompt", None, "prompt", "prompt", "prompt"],
        }
    )  # fmt: skip
    pq.write_table(table, path)
    return path


def test_parquet_export(store: Store, tmp_path: Path) -> None:
    """
    The Parquet export: naive times are UTC, maps give usage and provider, spans are skipped.
    """
    path = _parquet(tmp_path / "observations.parquet")

    report = _ingest(store, path)

    assert {
        "rows_in": 4,
        "stored": 3,
        "rejected": 1,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert ("skipped 1 observation(s) that are not generations (SPAN 1)",) == report.files[0].notes
    rows = store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")
    assert [
        ("p1", "t1", "chat", "openai", "gpt-4o-mini", "2026-01-01T00:00:00.112000",
         0.622, 4.789, 1834, 412, "ok", None, 1, "langfuse"),
        ("p3", "t1", "chat", "openai", "gpt-4o", "2026-01-01T00:00:05.000000",
         None, 2.25, 900, None, "ok", None, 3, "langfuse"),
        ("p4", "t2", "chat", "openai", "gpt-4o", "2026-01-01T00:01:00.000000",
         None, 30.0, None, None, "error", None, 4, "langfuse"),
    ] == rows  # fmt: skip
    assert [(5, "ok_without_total")] == _rejects(store)
    assert detect_parquet(pq.read_schema(path).names) is not None


def test_reingest_counts_duplicates(store: Store) -> None:
    """
    The same page ingested twice stores nothing the second time.
    """
    _ingest(store, LANGFUSE / "api_page.json")
    again = _ingest(store, LANGFUSE / "api_page.json")

    assert {
        "rows_in": 7,
        "stored": 0,
        "rejected": 2,
        "duplicates": 5,
        "inferred_provider": 0,
    } == again.totals()


def test_detect_by_content() -> None:
    """
    Langfuse JSON is told from LiteLLM-like and generic JSON by its keys, not its name.
    """
    page = (LANGFUSE / "api_page.json").read_text()
    line = (LANGFUSE / "observations.jsonl").read_text().split("\n", 1)[0]
    litellm = '{"id": "x", "trace_id": "t", "call_type": "completion", "startTime": 1.0, ' \
        '"completionStartTime": 1.5, "endTime": 2.0, "model": "gpt-4o"}'  # fmt: skip
    assert detect(page, None) == "a Langfuse observations API page (data, meta)"
    assert detect(line, json.loads(line)) is not None
    assert detect(page[:300], None) is not None  # cut mid-record
    assert detect(litellm, json.loads(litellm)) is None
    assert detect('{"call_id": "a", "total_s": 1}', None) is None
    assert detect_parquet(["id", "trace_id", "type", "start_time", "usage_details"]) is not None
    assert detect_parquet(["id", "trace_id", "start_time", "usage_details"]) is None
    assert detect_parquet(["call_id", "total_s"]) is None


_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**15), 10**15),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01 00:00:01.5", "1767225600", "GENERATION",
                     "SPAN", "ERROR", "openai"]),
)  # fmt: skip
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_REQUIRED = {"type", "startTime", "modelParameters", "model"}
_KEYS = ["id", "traceId", "trace_id", "type", "name", "startTime", "start_time", "endTime",
         "end_time", "completionStartTime", "completion_start_time", "model",
         "providedModelName", "modelParameters", "metadata", "usage", "usageDetails",
         "usage_details", "promptTokens", "level", "statusMessage"]  # fmt: skip
_OBSERVATION = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["GENERATION", "SPAN", "EVENT"]),
         "startTime": st.just("2026-01-01T00:00:00Z"),
         "modelParameters": st.just({"provider": "openai"}), "model": st.just("m")},
        optional={k: _VALUE for k in _KEYS if k not in _REQUIRED},
    ),
    _VALUE,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_OBSERVATION, max_size=6), page=st.booleans())
def test_arbitrary_observations_are_accounted_for(
    tmp_path_factory: pytest.TempPathFactory, records: list[Any], page: bool
) -> None:
    """
    Any JSON of roughly the right shape: no crash, and rows in = stored + rejected + duplicates.
    """
    folder = tmp_path_factory.mktemp("lf")
    path = folder / "obs.jsonl"
    if page:
        path.write_text(json.dumps({"data": records, "meta": {}}) + "\n")
    else:
        # An empty first line-array: today's detect_format refuses a file starting with a
        # scalar even under --format.
        path.write_text("[]\n" + "".join(json.dumps(r) + "\n" for r in records))
    with Store.open(folder / "t.duckdb") as store:
        report = ingest_paths(store, [path], format="langfuse")
        assert report.ok, report.errors
        totals = report.totals()
        assert totals["rows_in"] == totals["stored"] + totals["rejected"] + totals["duplicates"]
        notes = " ".join(report.files[0].notes)
        skipped = int(notes.split("skipped ", 1)[1].split(" ", 1)[0]) if "skipped" in notes else 0
        assert store.fetchone("SELECT count(*) FROM rejects WHERE reason IS NULL") == (0,)
        observations = sum(_count(r) for r in records) if not page else len(records)
        assert totals["rows_in"] + skipped == observations


def _count(line: Any) -> int:
    """
    How many observations one JSON line holds, as the reader unpacks it.
    """
    if isinstance(line, list):
        return len(line)
    if isinstance(line, dict) and isinstance(line.get("data"), list):
        return len(line["data"])
    return 1
