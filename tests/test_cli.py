"""
The CLI: exact output for the common paths, `Error: …` and exit 1 for bad input.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.cli import app

from .conftest import CORPUS, ROOT


runner = CliRunner()


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """
    Run in a temporary folder holding a copy of the corpus, so paths in output are short.
    """
    for name in ("latency_ms.csv", "bad_rows.jsonl"):
        (tmp_path / name).write_bytes((CORPUS / name).read_bytes())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_ingest_prints_counts_and_summary(here: Path) -> None:
    """
    A mapped CSV: one line for the file, the reconciliation, the route table and buckets.
    """
    result = runner.invoke(
        app,
        ["ingest", "latency_ms.csv", "--map", "total_s=latency_ms", "--map", "call_id=id",
         "--map", "input_tokens=prompt_tokens", "--map", "output_tokens=completion_tokens",
         "--set", "provider=openai", "--set", "model=gpt-4o", "--unit", "ms",
         "--output-edges", "0,600"],
    )  # fmt: skip

    assert 0 == result.exit_code, result.output
    assert (
        "latency_ms.csv: csv (comma-separated text): 3 rows, 3 stored, 0 rejected, 0 duplicates\n"
        "ingested 1 file(s): 3 rows in = 3 stored + 0 rejected + 0 duplicates skipped\n"
        "store: 3 calls, 0 rejects, 1 ingests\n"
        "route              calls         ok   failed     cut       ttft    p50_s    p99_s\n"
        "openai/gpt-4o          3          3        0       0          0     2.50    11.81\n"
        "calls per token bucket (rows: input tokens, columns: output tokens)\n"
        "               0-600      600+\n"
        "      0-1k         1         0\n"
        "     1k-4k         1         0\n"
        "    4k-16k         0         0\n"
        "   16k-64k         0         1\n"
        "      64k+         0         0\n"
    ) == result.stdout
    assert (here / "tailkit.duckdb").exists()


def test_rejects_lists_file_row_reason(here: Path) -> None:
    """
    After ingesting the bad-row corpus, `rejects` shows where each bad row is and why.
    """
    runner.invoke(app, ["ingest", "bad_rows.jsonl"])
    result = runner.invoke(app, ["rejects", "--reason", "total_s_negative"])

    assert 0 == result.exit_code
    assert (
        "bad_rows.jsonl:2: total_s_negative: total_s is negative: -1.5\n"
        '    {"call_id":"a2","provider":"openai","model":"gpt-4o","total_s":-1.5}\n'
    ) == result.stdout


def test_ingest_json_reconciles(here: Path) -> None:
    """
    --json gives per-file counts and reasons that add up.
    """
    result = runner.invoke(app, ["ingest", "bad_rows.jsonl", "--json"])
    doc = json.loads(result.stdout)

    assert {
        "rows_in": 14,
        "stored": 3,
        "rejected": 11,
        "duplicates": 0,
        "inferred_provider": 0,
    } == doc["totals"]
    assert 11 == sum(doc["rejected_by_reason"].values())
    assert 3 == doc["store"]["calls"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "nope.jsonl"], "Error: nope.jsonl: no such file or folder\n"),
        (["ingest", "latency_ms.csv", "--map", "x"], "Error: --map takes COLUMN=VALUE, got 'x'\n"),
        (["ingest", "latency_ms.csv", "--output-edges", "0,9,3"],
         "Error: output edges must be strictly increasing, got 0, 9, 3\n"),
        (["summary", "--db", "none.duckdb"],
         "Error: no store at none.duckdb: run `tailkit ingest` first or pass --db PATH\n"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_line(here: Path, args: list[str], message: str) -> None:
    """
    Bad paths, flags and stores print `Error: …` on stderr and exit 1, never a traceback.
    """
    result = runner.invoke(app, args)

    assert 1 == result.exit_code
    assert message == result.stderr


@pytest.mark.slow
def test_samples_ingest_end_to_end(tmp_path: Path) -> None:
    """
    The README's main command on the bundled samples stores every call once.
    """
    db = tmp_path / "s.duckdb"
    result = runner.invoke(app, ["ingest", str(ROOT / "data_samples"), "--db", str(db), "--json"])
    doc = json.loads(result.stdout)

    assert 0 == result.exit_code
    assert {
        "rows_in": 402_845,
        "stored": 202_845,
        "rejected": 0,
        "duplicates": 200_000,
        "inferred_provider": 0,
    } == doc["totals"]


def test_quiet_prints_the_totals_only(here: Path) -> None:
    """
    --quiet skips the store summary and keeps the reconciliation and the reasons.
    """
    result = runner.invoke(app, ["ingest", "bad_rows.jsonl", "--quiet"])

    assert 0 == result.exit_code
    assert [
        "ingested 1 file(s): 14 rows in = 3 stored + 11 rejected + 0 duplicates skipped",
        "rejected by reason: total_s_not_a_number 2, bad_status 1, call_id_conflict 1, "
        "input_tokens_negative 1, "
        "missing_model 1, ok_without_total 1, output_tokens_not_whole 1, "
        "started_at_bad_timestamp 1, total_s_negative 1, ttft_after_total 1",
        "see them with: tailkit rejects",
    ] == result.stdout.splitlines()
