"""
The llmperf leaderboard data: every request accounted for, TTFT kept apart from total.
"""

from __future__ import annotations

from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import LLMPERF


def test_all_requests_accounted_for(store: Store) -> None:
    """
    2,845 requests: 2,306 ok with latency, 539 failures stored with status and no latency.
    """
    report = ingest_paths(store, [LLMPERF])

    assert report.ok
    assert {
        "rows_in": 2845,
        "stored": 2845,
        "rejected": 0,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    rows = store.fetchall(
        "SELECT status, count(*), count(ttft_s), count(total_s) FROM calls GROUP BY 1 ORDER BY 1"
    )
    assert [
        ("error", 1, 0, 0),
        ("invalid", 146, 0, 0),
        ("ok", 2306, 2306, 2306),
        ("rate_limited", 392, 0, 0),
    ] == rows


def test_summary_files_are_skipped_and_name_the_model(store: Store) -> None:
    """
    Summary files hold no calls; their model ids name each results file's model.
    """
    report = ingest_paths(store, [LLMPERF])

    assert 19 == sum(1 for f in report.files if f.skipped)
    row = store.fetchone(
        "SELECT DISTINCT model FROM calls WHERE provider = 'bedrock' AND source_file LIKE '%70b%'"
    )
    assert ("meta.llama2-70b-chat-v1",) == row


def test_ttft_is_separate_from_total(store: Store) -> None:
    """
    TTFT is below the total for every ok request, and the phases differ in the known outlier.
    """
    ingest_paths(store, [LLMPERF / "individual" / "together_13b.json"])

    bad = store.fetchone("SELECT count(*) FROM calls WHERE ttft_s >= total_s OR ttft_s <= 0")
    worst = store.fetchone("SELECT max(ttft_s), median(ttft_s) FROM calls WHERE status = 'ok'")
    assert (0,) == bad
    assert worst is not None
    assert worst[0] > 50
    assert worst[1] < 1


def test_failures_keep_codes_and_reported_values(store: Store) -> None:
    """
    429s are rate_limited with http_status 429; llmperf's -100 is an invalid output.
    """
    ingest_paths(store, [LLMPERF / "individual"])

    rows = store.fetchall(
        "SELECT status, error_type, http_status, count(*) FROM calls WHERE status <> 'ok' "
        "GROUP BY ALL ORDER BY 4 DESC"
    )
    assert [
        ("rate_limited", "http_429", 429, 392),
        ("invalid", "too_few_output_tokens", None, 146),
        ("error", "llmperf_error_-1", None, 1),
    ] == rows
    kept = store.fetchone(
        "SELECT count(*) FROM calls WHERE status = 'invalid' "
        "AND (attrs->>'reported_end_to_end_latency_s')::DOUBLE > 0"
    )
    assert (146,) == kept


def test_reingest_stores_nothing_twice(store: Store) -> None:
    """
    Ingesting the same files again counts every row as a duplicate.
    """
    ingest_paths(store, [LLMPERF])
    again = ingest_paths(store, [LLMPERF])

    assert {
        "rows_in": 2845,
        "stored": 0,
        "rejected": 0,
        "duplicates": 2845,
        "inferred_provider": 0,
    } == again.totals()
    assert (2845,) == store.fetchone("SELECT count(*) FROM calls")
