"""
Executor traces: the ledger the executor writes is read back as calls (--format trace).
"""

from __future__ import annotations

import json

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.formats import detect_format
from tailkit.ingest import ingest_paths
from tailkit.ledger import AttemptRecord, JsonlSink, Ledger
from tailkit.store import Store


_T0 = datetime(2026, 11, 29, 12, 0, 3, 123456, tzinfo=UTC)
_DEADLINE = _T0 + timedelta(seconds=30)
_EPOCH_T0 = 1795953603.123456


def _attempt(call_id: str, attempt: int, role: str, provider: str, **more: object) -> AttemptRecord:
    key = call_id.rsplit("-", 1)[0]
    values: dict[str, object] = {
        "call_id": call_id, "run_id": "run-1", "step": "draft", "attempt": attempt,
        "role": role, "provider": provider, "model": "gpt-4o", "started_at": _T0,
        "idempotency_key": key, "deadline_at": _DEADLINE,
    }  # fmt: skip
    values.update(more)
    return AttemptRecord(**values)  # type: ignore[arg-type]


_RECORDS = [
    # A hedged call: the primary lost the race and was cancelled at 2.0 s; the hedge won.
    _attempt("k1-0", 0, "primary", "openai", status="cancelled", censored_at_s=2.0,
             input_tokens=1200, attrs={"error": "lost the hedge race"}),
    _attempt("k1-1", 1, "hedge", "azure", ttft_s=0.25, total_s=1.5, input_tokens=1200,
             output_tokens=300, winner=True, attrs={"region": "eastus"}),
    # A loser allowed to finish: it completed after the step had moved on.
    _attempt("k2-0", 0, "primary", "openai", ttft_s=0.5, total_s=9.75, output_tokens=700,
             abandoned=True),
    _attempt("k2-1", 1, "hedge", "azure", ttft_s=0.375, total_s=2.0, winner=True),
    # A 429.
    _attempt("k3-0", 0, "primary", "openai", total_s=0.125, status="rate_limited",
             error_type="RateLimitError", http_status=429, deadline_at=None),
    # Not streamed: no time to first token.
    _attempt("k4-0", 0, "primary", "openai", total_s=3.0, output_tokens=64, winner=True),
]  # fmt: skip

_COLUMNS = (
    "call_id, run_id, step, attempt, role, provider, model, epoch(started_at), ttft_s, total_s, "
    "input_tokens, output_tokens, status, error_type, http_status, censored_at_s, abandoned"
)
_EXPECTED = [
    ("k1-0", "run-1", "draft", 0, "primary", "openai", "gpt-4o", _EPOCH_T0, None, None,
     1200, None, "cancelled", None, None, 2.0, False),
    ("k1-1", "run-1", "draft", 1, "hedge", "azure", "gpt-4o", _EPOCH_T0, 0.25, 1.5,
     1200, 300, "ok", None, None, None, False),
    ("k2-0", "run-1", "draft", 0, "primary", "openai", "gpt-4o", _EPOCH_T0, 0.5, 9.75,
     None, 700, "ok", None, None, None, True),
    ("k2-1", "run-1", "draft", 1, "hedge", "azure", "gpt-4o", _EPOCH_T0, 0.375, 2.0,
     None, None, "ok", None, None, None, False),
    ("k3-0", "run-1", "draft", 0, "primary", "openai", "gpt-4o", _EPOCH_T0, None, 0.125,
     None, None, "rate_limited", "RateLimitError", 429, None, False),
    ("k4-0", "run-1", "draft", 0, "primary", "openai", "gpt-4o", _EPOCH_T0, None, 3.0,
     None, 64, "ok", None, None, None, False),
]  # fmt: skip


def _ledger(path: Path, records: list[AttemptRecord] = _RECORDS) -> Path:
    with Ledger(JsonlSink(path)) as ledger:
        for record in records:
            ledger.write(record)
    return path


@pytest.mark.parametrize(
    ("format", "why"),
    [("auto", "a tailkit executor ledger (idempotency_key and winner)"), ("trace", "format given")],
)
def test_every_column_is_read_back(store: Store, tmp_path: Path, format: str, why: str) -> None:
    """
    Detected or forced, every call-record column of every attempt comes back as written.
    """
    report = ingest_paths(store, [_ledger(tmp_path / "ledger.jsonl")], format=format)

    assert report.ok, report.errors
    assert ("trace", why) == (report.files[0].format, report.files[0].why)
    assert _EXPECTED == store.fetchall(f"SELECT {_COLUMNS} FROM calls ORDER BY source_row")


def test_executor_fields_land_in_attrs(store: Store, tmp_path: Path) -> None:
    """
    idempotency_key, deadline_at and winner are in attrs, next to the line's own attrs.
    """
    ingest_paths(store, [_ledger(tmp_path / "ledger.jsonl")])

    rows = store.fetchall(
        "SELECT call_id, attrs->>'idempotency_key', epoch(CAST(attrs->>'deadline_at' AS "
        "TIMESTAMPTZ)), CAST(attrs->'winner' AS BOOLEAN), attrs->>'error', attrs->>'region' "
        "FROM calls ORDER BY source_row"
    )
    deadline = _EPOCH_T0 + 30
    assert [
        ("k1-0", "k1", deadline, False, "lost the hedge race", None),
        ("k1-1", "k1", deadline, True, None, "eastus"),
        ("k2-0", "k2", deadline, False, None, None),
        ("k2-1", "k2", deadline, True, None, None),
        ("k3-0", "k3", None, False, None, None),
        ("k4-0", "k4", deadline, True, None, None),
    ] == rows
    first = store.fetchone("SELECT attrs FROM calls WHERE call_id = 'k1-0'")
    assert first is not None
    assert {
        "error": "lost the hedge race",
        "idempotency_key": "k1",
        "deadline_at": "2026-11-29T12:00:33.123456Z",
        "winner": False,
    } == json.loads(first[0])


def test_rows_carry_the_executor_as_source(store: Store, tmp_path: Path) -> None:
    """
    Every row's source is tailkit-executor, with its file and line number.
    """
    path = _ledger(tmp_path / "ledger.jsonl")
    ingest_paths(store, [path])

    assert [("tailkit-executor", str(path), n) for n in range(1, 7)] == store.fetchall(
        "SELECT source, source_file, source_row FROM calls ORDER BY source_row"
    )


def test_counts_reconcile_with_a_malformed_line_and_a_repeat(store: Store, tmp_path: Path) -> None:
    """
    8 lines in = 6 stored + 1 rejected (a torn line, at its line number) + 1 duplicate.
    """
    path = _ledger(tmp_path / "ledger.jsonl")
    lines = path.read_text().splitlines()
    torn = lines[2][:40]
    path.write_text("\n".join([*lines[:2], torn, *lines[2:], lines[0]]) + "\n")
    report = ingest_paths(store, [path])

    assert report.ok, report.errors
    assert {
        "rows_in": 8,
        "stored": 6,
        "rejected": 1,
        "duplicates": 1,
        "inferred_provider": 0,
    } == report.totals()
    assert [(3, "malformed_json", torn)] == store.fetchall(
        "SELECT source_row, reason, raw FROM rejects"
    )
    assert [f"k{k}-{a}" for k, a in ((1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (4, 0))] == [
        r[0] for r in store.fetchall("SELECT call_id FROM calls ORDER BY source_row")
    ]


def test_reingest_counts_every_line_as_a_duplicate(store: Store, tmp_path: Path) -> None:
    """
    The same ledger ingested twice stores nothing the second time.
    """
    path = _ledger(tmp_path / "ledger.jsonl")
    ingest_paths(store, [path])
    again = ingest_paths(store, [path])

    assert {
        "rows_in": 6,
        "stored": 0,
        "rejected": 0,
        "duplicates": 6,
        "inferred_provider": 0,
    } == again.totals()


def test_keys_the_record_does_not_know_are_kept(store: Store, tmp_path: Path) -> None:
    """
    A top-level key from a newer ledger is kept in attrs; the ledger's own keys win a clash.
    """
    line = json.loads(_RECORDS[1].to_json())
    line["hedge_budget_left"] = 3
    line["attrs"]["winner"] = "from attrs"
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(line) + "\n")
    ingest_paths(store, [path])

    assert [(3, True, "eastus")] == store.fetchall(
        "SELECT CAST(attrs->'hedge_budget_left' AS INTEGER), CAST(attrs->'winner' AS BOOLEAN), "
        "attrs->>'region' FROM calls"
    )


def test_detected_by_its_first_object(tmp_path: Path) -> None:
    """
    A JSON-lines file is a trace when its first object has idempotency_key and winner.
    """
    trace = (_RECORDS[0].to_json() + "\n").encode()
    plain = b'{"provider": "p", "model": "m", "total_s": 1.0, "winner": true}\n'

    assert "trace" == detect_format(tmp_path / "a.jsonl", trace).format
    assert "jsonl" == detect_format(tmp_path / "b.jsonl", plain).format


def test_cli_ingests_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """
    `tailkit ingest --format trace ledger.jsonl` stores every attempt.
    """
    monkeypatch.chdir(tmp_path)
    _ledger(tmp_path / "ledger.jsonl")
    result = CliRunner().invoke(
        app, ["ingest", "--format", "trace", "ledger.jsonl", "--db", "t.duckdb", "--quiet"]
    )

    assert 0 == result.exit_code, result.output
    assert (
        "ingested 1 file(s): 6 rows in = 6 stored + 0 rejected + 0 duplicates skipped\n"
    ) == result.stdout
