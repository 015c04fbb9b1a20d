"""
vLLM bench serve results: per-request arrays become calls, failures stay failures.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailkit.errors import MappingError
from tailkit.formats import ScanOptions
from tailkit.formats._vllm_bench import VllmBench, detect
from tailkit.ingest import ingest_paths
from tailkit.store import Store
from tests._fuzz import assert_document_accounted

from .conftest import CORPUS


DIR = CORPUS / "vllm-bench"
_COLUMNS = (
    "source_row, provider, model, started_at, ttft_s, total_s, input_tokens, output_tokens, "
    "status, error_type, http_status, censored_at_s, abandoned, source"
)
_LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _rows(store: Store, where: str = "true") -> list[tuple[object, ...]]:
    return store.fetchall(f"SELECT {_COLUMNS} FROM calls WHERE {where} ORDER BY source_row")


def test_every_mapped_column(store: Store) -> None:
    """
    Each request is one call; failed ones keep their status and no latency.
    """
    report = ingest_paths(store, [DIR / "detailed.json"], format="vllm-bench")

    assert report.ok, report.errors
    assert {
        "rows_in": 8,
        "stored": 7,
        "rejected": 1,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    src = "vllm-bench"
    assert [
        (1, "openai-chat", _LLAMA, None, 0.212, 0.235, 1024, 3, "ok", None, None, None, False, src),
        (2, "openai-chat", _LLAMA, None, None, 1.5, 512, 2, "ok", None, None, None, False, src),
        (3, "openai-chat", _LLAMA, None, None, None, 1024, None, "error", "ClientConnectorError",
         None, None, False, src),
        (4, "openai-chat", _LLAMA, None, None, None, 1024, None, "timeout", "asyncio.TimeoutError",
         None, None, False, src),
        (5, "openai-chat", _LLAMA, None, 1e-06, 2e-06, 2048, 2, "ok", None, None, None, False, src),
        (6, "openai-chat", _LLAMA, None, None, None, 300, None, "rate_limited", "Too Many Requests",
         429, None, False, src),
        (8, "openai-chat", _LLAMA, None, 0.5, 3599.7, 4096, 5, "ok", None, None, None, False, src),
    ] == _rows(store)  # fmt: skip


def test_zeros_of_failed_requests_are_not_latencies(store: Store) -> None:
    """
    A 0.0 TTFT is unknown, never zero; failed requests keep what vLLM wrote only in attrs.
    """
    ingest_paths(store, [DIR / "detailed.json"], format="vllm-bench")

    assert (0,) == store.fetchone("SELECT count(*) FROM calls WHERE ttft_s = 0 OR total_s = 0")
    rows = store.fetchall(
        "SELECT source_row, (attrs->>'reported_ttft_s')::DOUBLE, "
        "(attrs->>'reported_latency_s')::DOUBLE, attrs->>'error' IS NOT NULL FROM calls "
        "WHERE status <> 'ok' ORDER BY 1"
    )
    assert [(3, 0.0, 0.0, True), (4, 0.305, 0.0, True), (6, 0.0, 0.0, True)] == rows


def test_attrs_keep_run_fields_and_chunk_gaps(store: Store) -> None:
    """
    Run fields, the relative start and the chunk count and largest gap are in attrs.
    """
    ingest_paths(store, [DIR / "detailed.json"], format="vllm-bench")

    row = store.fetchone("SELECT attrs FROM calls WHERE source_row = 8")
    assert row is not None
    attrs = json.loads(row[0])
    assert {
        "result": 1, "request_index": 7, "date": "20260101-120000", "backend": "openai-chat",
        "endpoint_type": "openai-chat", "label": None, "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": 64, "start_time_s": 1043.27, "chunks": 5, "max_itl_s": 3598.9,
        "error": None, "reported_ttft_s": None, "reported_latency_s": None,
    } == attrs  # fmt: skip


def test_without_latencies_total_is_ttft_plus_gaps(store: Store) -> None:
    """
    Older files without latencies: total = ttft + sum(itls); appended results number on.
    """
    report = ingest_paths(store, [DIR / "appended.json"], format="vllm-bench")

    assert {
        "rows_in": 5,
        "stored": 3,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    rows = store.fetchall(
        "SELECT source_row, ttft_s, total_s, attrs->>'result' FROM calls ORDER BY 1"
    )
    assert [(1, 0.05, pytest.approx(0.09), "1"), (2, 0.06, pytest.approx(0.16), "1"),
            (3, 0.07, pytest.approx(0.1), "2")] == rows  # fmt: skip


def test_bad_requests_are_rejected_at_their_place(store: Store) -> None:
    """
    A non-number, a negative latency and a request missing from an array are rejected.
    """
    ingest_paths(store, [DIR / "detailed.json", DIR / "appended.json"], format="vllm-bench")

    rejects = store.fetchall(
        "SELECT parse_filename(source_file), source_row, reason, detail, raw::JSON->>'request' "
        "FROM rejects ORDER BY 1, 2"
    )
    assert [
        ("appended.json", 4, "ttft_s_not_a_number",
         "ttft_s is not a finite number: 'abc' (from ttfts)", "1"),
        ("appended.json", 5, "arrays_differ_in_length",
         "request 3 of 3 in result 2 is missing from output_lens (2): the per-request arrays "
         "have different lengths", "2"),
        ("detailed.json", 7, "total_s_negative", "total_s is negative: -0.5", "6"),
    ] == rejects  # fmt: skip


def test_missing_model_is_rejected_unless_set(store: Store, tmp_path: Path) -> None:
    """
    Without model_id every request is rejected; --set model fills it.
    """
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"backend": "vllm", "ttfts": [0.1], "itls": [[0.2]]}))

    first = ingest_paths(store, [path], format="vllm-bench")
    again = ingest_paths(
        store, [path], format="vllm-bench", options=ScanOptions(sets={"model": "m"})
    )

    assert {"missing_model": 1} == first.reasons()
    assert [(1, "vllm", "m", None, 0.1, pytest.approx(0.3), None, None, "ok", None, None,
             None, False, "vllm-bench")] == _rows(store)  # fmt: skip
    assert again.ok


def test_map_is_refused(store: Store) -> None:
    """
    --map names columns of a file with columns; this layout is fixed.
    """
    with pytest.raises(MappingError, match="mapping does not apply to format vllm-bench"):
        VllmBench().scan(str(DIR / "detailed.json"), [], ScanOptions(mapping={"model": "x"}))


def test_detect_by_content() -> None:
    """
    A JSON object with ttfts and itls is a vLLM result; llmperf and JSON lines are not.
    """
    text = (DIR / "detailed.json").read_text()
    first = json.loads((DIR / "appended.json").read_text().splitlines()[0])
    assert "vLLM bench" in (detect(text, None) or "")
    assert "vLLM bench" in (detect("", first) or "")
    assert detect('[{"ttft_s": 1, "end_to_end_latency_s": 2}]', None) is None
    assert detect('{"total_s": 1, "model": "m"}', {"total_s": 1, "model": "m"}) is None


_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False),
    st.sampled_from(["", "abc", "1.5", "TimeoutError", "Too Many Requests"]),
)  # fmt: skip
_ARRAY = st.lists(st.one_of(_VALUE, st.lists(_VALUE, max_size=3)), max_size=4)
_RESULT = st.fixed_dictionaries(
    {"model_id": st.one_of(st.none(), st.text(max_size=5)),
     "backend": st.sampled_from(["vllm", 3])},
    optional={
        k: st.one_of(_ARRAY, _VALUE)
        for k in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors",
                  "start_times")
    },
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(results=st.lists(_RESULT, min_size=1, max_size=3))
def test_arbitrary_results_are_accounted_for(results: list[dict[str, object]]) -> None:
    """
    Any result-shaped JSON: no crash, and every request is stored or rejected with a reason.
    """
    assert_document_accounted("\n".join(json.dumps(r) for r in results), format="vllm-bench")
