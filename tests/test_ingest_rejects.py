"""
Bad input loses nothing: every row is stored, rejected with its reason, or a duplicate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tailkit.errors import InputFileError, StrictModeError
from tailkit.ingest import ingest_paths
from tailkit.store import Store

from .conftest import CORPUS


def _rejects(store: Store) -> list[tuple[int, str]]:
    return [(int(r), str(why)) for r, why in store.fetchall(
        "SELECT source_row, reason FROM rejects ORDER BY source_row"
    )]  # fmt: skip


def test_each_bad_row_kind_is_rejected_with_its_row(store: Store) -> None:
    """
    Each failure kind lands in rejects at its row; a reused id with other values is a conflict.
    """
    report = ingest_paths(store, [CORPUS / "bad_rows.jsonl"])

    assert {
        "rows_in": 14,
        "stored": 3,
        "rejected": 11,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert [
        (2, "total_s_negative"),
        (3, "total_s_not_a_number"),
        (4, "ttft_after_total"),
        (5, "missing_model"),
        (6, "started_at_bad_timestamp"),
        (7, "input_tokens_negative"),
        (9, "output_tokens_not_whole"),
        (10, "bad_status"),
        (11, "total_s_not_a_number"),
        (12, "ok_without_total"),
        (14, "call_id_conflict"),
    ] == _rejects(store)


def test_reject_messages_show_the_value_and_the_fix(store: Store) -> None:
    """
    A reject's detail names the column and the value, and for a missing model the flag.
    """
    ingest_paths(store, [CORPUS / "bad_rows.jsonl"])

    details = dict(store.fetchall("SELECT source_row, detail FROM rejects"))
    assert "total_s is negative: -1.5" == details[2]
    assert "total_s is not a finite number: 'abc' (from column 'total_s')" == details[3]
    assert "ttft_s 3.0 is larger than total_s 2.0" == details[4]
    assert "--set model=VALUE" in details[5]
    assert "started_at is not an ISO-8601 time or epoch number: 'yesterday'" == details[6]
    assert (
        f'call_id "a1" of openai/gpt-4o came earlier in {CORPUS / "bad_rows.jsonl"} row 1 with '
        "other values: started_at 2026-10-01 12:00:00+00 there, null here; ttft_s 0.4 there, "
        "null here; total_s 1.5 there, 9.9 here; input_tokens 1200 there, null here; "
        "output_tokens 300 there, null here"
    ) == details[14]


def test_good_rows_keep_their_values_and_rows(store: Store) -> None:
    """
    TTFT of 0 is stored as unknown; epoch seconds and milliseconds become UTC times.
    """
    ingest_paths(store, [CORPUS / "bad_rows.jsonl"])

    rows = store.fetchall(
        "SELECT call_id, source_row, ttft_s, total_s, status, censored_at_s, "
        "strftime(started_at, '%Y-%m-%dT%H:%M:%S.%g') FROM calls ORDER BY source_row"
    )
    assert [
        ("a1", 1, 0.4, 1.5, "ok", None, "2026-10-01T12:00:00.000"),
        ("a8", 8, None, 3.25, "ok", None, "2026-09-21T14:13:20.000"),
        ("a13", 13, None, None, "timeout", 90.0, "2026-09-21T14:13:20.123"),
    ] == rows


def test_malformed_json_lines_are_rejected_alone(store: Store) -> None:
    """
    A line that is not a JSON object is rejected with its raw text; blank lines are not rows.
    """
    report = ingest_paths(store, [CORPUS / "malformed_lines.jsonl"])

    assert {
        "rows_in": 5,
        "stored": 3,
        "rejected": 2,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    raw = store.fetchall("SELECT source_row, reason, raw FROM rejects ORDER BY 1")
    assert [
        (2, "malformed_json", '{"provider": "openai", "model": '),
        (4, "malformed_json", "[1, 2]"),
    ] == raw
    assert [1, 3, 5] == [r[0] for r in store.fetchall("SELECT source_row FROM calls ORDER BY 1")]


def test_csv_reader_rejects_keep_row_numbers(store: Store) -> None:
    """
    Rows with too few or too many fields are rejected by the reader; row numbers stay true.
    """
    report = ingest_paths(store, [CORPUS / "bad_rows.csv"])

    assert {
        "rows_in": 5,
        "stored": 2,
        "rejected": 3,
        "duplicates": 0,
        "inferred_provider": 0,
    } == report.totals()
    assert [
        (2, "total_s_not_a_number"),
        (3, "malformed_row"),
        (4, "malformed_row"),
    ] == _rejects(store)
    assert [1, 5] == [r[0] for r in store.fetchall("SELECT source_row FROM calls ORDER BY 1")]


def test_strict_stores_nothing_and_names_the_first_rows(store: Store) -> None:
    """
    --strict refuses a file with bad rows and stores nothing from it.
    """
    report = ingest_paths(store, [CORPUS / "bad_rows.jsonl"], strict=True)

    assert 1 == len(report.errors)
    error = report.errors[0]
    assert isinstance(error, StrictModeError)
    assert "10 bad row(s), nothing stored (strict); first: row 2: total_s is negative" in str(error)
    assert {"calls": 0, "rejects": 0, "ingests": 0} == store.counts()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("empty.jsonl", "empty file (0 bytes), nothing to ingest"),
        ("blank.jsonl", "empty file (only whitespace), nothing to ingest"),
        ("binary.jsonl", "binary file, not JSON, CSV or Parquet"),
        ("missing.jsonl", "no such file or folder"),
    ],
)
def test_unreadable_files_get_one_clear_line(store: Store, name: str, message: str) -> None:
    """
    An empty, blank, binary or missing file is one error naming the path; nothing is stored.
    """
    report = ingest_paths(store, [CORPUS / name])

    assert 1 == len(report.errors)
    assert isinstance(report.errors[0], InputFileError)
    assert f"{CORPUS / name}: {message}" == str(report.errors[0]).split(" (use")[0]
    assert {"calls": 0, "rejects": 0, "ingests": 0} == store.counts()


def test_a_failed_file_does_not_stop_the_others(store: Store, tmp_path: Path) -> None:
    """
    A missing path is reported, and the next file is still ingested.
    """
    report = ingest_paths(store, [tmp_path / "nope.csv", CORPUS / "malformed_lines.jsonl"])

    assert 1 == len(report.errors)
    assert 3 == report.totals()["stored"]


def test_reconciliation_holds_per_file_in_the_store(store: Store) -> None:
    """
    For every ingest row, stored + rejected + duplicates equals the rows read.

    A file ingested again with the same options writes no rejects: they are the first ingest's.
    """
    ingest_paths(store, [CORPUS / "bad_rows.jsonl", CORPUS / "bad_rows.csv"])
    ingest_paths(store, [CORPUS / "bad_rows.jsonl"])

    rows = store.fetchall("SELECT rows_in, stored, rejected, duplicates FROM ingests")
    assert 3 == len(rows)
    assert all(n == s + r + d for n, s, r, d in rows)
    per_file = store.fetchall(
        "SELECT i.ingest_id, i.stored, (SELECT count(*) FROM calls c WHERE c.ingest_id = "
        "i.ingest_id), i.rejected, (SELECT count(*) FROM rejects j WHERE j.ingest_id = "
        "i.ingest_id) FROM ingests i ORDER BY 1"
    )
    assert [(3, 3, 11, 11), (2, 2, 3, 3), (0, 0, 11, 0)] == [row[1:] for row in per_file]


@pytest.mark.parametrize("name", ["bad_rows.jsonl", "malformed_lines.jsonl", "bad_rows.csv"])
def test_reingesting_a_bad_file_adds_nothing(store: Store, name: str) -> None:
    """
    The second ingest of a file counts its bad rows as rejected again, the rest as duplicates.
    """
    first = ingest_paths(store, [CORPUS / name])
    before = store.counts()
    again = ingest_paths(store, [CORPUS / name])

    assert again.ok
    n, bad = first.totals()["rows_in"], first.totals()["rejected"]
    assert {
        "rows_in": n,
        "stored": 0,
        "rejected": bad,
        "duplicates": n - bad,
        "inferred_provider": 0,
    } == again.totals()
    assert first.reasons() == again.reasons()
    assert first.files[0].ingest_id == again.files[0].already_ingested
    note = f"{bad} row(s) already rejected in ingest #{first.files[0].ingest_id}"
    assert ((note,) if bad else ()) == again.files[0].notes
    assert before["calls"] == store.counts()["calls"]
    assert before["rejects"] == store.counts()["rejects"]
