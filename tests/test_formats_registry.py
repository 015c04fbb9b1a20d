"""
Format registry: detection by content, --list-formats, and a --format that does not fit.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit import formats
from tailkit.cli import app
from tailkit.errors import InputFileError
from tailkit.formats import FORMATS, _registry, detect_format
from tailkit.formats.lowlevel import Detector, read_head
from tailkit.ingest import ingest_paths
from tailkit.store import Store


LEDGER_LINE = {
    "call_id": "k-0", "run_id": "r", "step": "s", "attempt": 0, "role": "primary",
    "provider": "a", "model": "m", "started_at": "2026-11-29T12:00:00.000000Z",
    "ttft_s": None, "total_s": 1.5, "input_tokens": None, "output_tokens": None,
    "status": "ok", "error_type": None, "http_status": None, "censored_at_s": None,
    "abandoned": False, "idempotency_key": "k", "deadline_at": None, "winner": True, "attrs": {},
}  # fmt: skip


def test_list_formats_names_every_format() -> None:
    """`tailkit ingest --list-formats` prints one line per registered format, and JSON."""
    result = CliRunner().invoke(app, ["ingest", "--list-formats"])
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()] == list(FORMATS)
    result = CliRunner().invoke(app, ["ingest", "--list-formats", "--json"])
    assert [row["format"] for row in json.loads(result.output)] == list(FORMATS)


def test_a_specific_format_that_does_not_fit_names_the_one_that_does(tmp_path: Path) -> None:
    """--format llmperf on an executor ledger says it looks like trace, and stores nothing."""
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(LEDGER_LINE) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest_paths(store, [path], format="llmperf")
        assert store.counts()["calls"] == 0
    [error] = report.errors
    assert "format llmperf does not fit this file; it looks like trace" in str(error)
    assert "use format trace or format auto" in str(error)


def test_a_generic_format_may_read_a_specific_file(tmp_path: Path) -> None:
    """--format jsonl still reads a ledger (generic readers take any file of their kind)."""
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(LEDGER_LINE) + "\n")
    with Store.open(tmp_path / "s.duckdb") as store:
        report = ingest_paths(store, [path], format="jsonl")
    assert report.ok
    assert report.totals()["stored"] == 1


def test_specific_detectors_come_before_the_generic_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registered detector wins over the generic JSON-lines rule, by content alone."""
    path = tmp_path / "any-name.txt"
    path.write_text('{"vendor_latency_ms": 12}\n')
    assert detect_format(path, read_head(path)).format == "jsonl"
    seen = Detector("vendor", text=lambda text, first: "vendor keys" if "vendor_" in text else None)
    monkeypatch.setattr(_registry, "DETECTORS", [seen])  # the registry detect_format asks
    detected = formats.detect_format(path, read_head(path))
    assert (detected.format, detected.why) == ("vendor", "vendor keys")


def test_binary_and_empty_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    """Detection refuses what no format reads, naming the file."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("   \n")
    with pytest.raises(InputFileError, match="empty file"):
        detect_format(empty, read_head(empty))


CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("langfuse/api_page.json", "langfuse"),
        ("langfuse/observations.jsonl", "langfuse"),
        ("vllm-bench/detailed.json", "vllm-bench"),
        ("vllm-bench/appended.json", "vllm-bench"),
        ("guidellm/report.json", "guidellm"),
        ("genai-perf/profile_export.json", "genai-perf"),
        ("aiperf/profile_export.jsonl", "aiperf"),
        ("otel/genai.jsonl", "otel"),
        ("otel/document.json", "otel"),
        ("litellm/standard_logging_payload.jsonl", "litellm"),
        ("litellm/spend_logs.jsonl", "litellm"),
        ("helicone/export.jsonl", "helicone"),
    ],
)
def test_each_format_is_detected_by_content(path: str, expected: str, tmp_path: Path) -> None:
    """Every format's fixture is recognised with --format auto, even under a neutral name."""
    source = CORPUS / path
    assert detect_format(source, read_head(source)).format == expected
    renamed = tmp_path / "export.dat"
    renamed.write_bytes(source.read_bytes())
    assert detect_format(renamed, read_head(renamed)).format == expected
