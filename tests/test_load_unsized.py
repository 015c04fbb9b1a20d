"""
Failures and cut calls without token counts (an executor's ledger) still count for their route.
"""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from tailkit.config import parse_plan
from tailkit.ingest import ingest_paths
from tailkit.simulation import load_samples
from tailkit.store import Store


PLAN = parse_plan(
    "tailkit_plan: 1\nworkflow: w\ndeadline_s: 30\n"
    "routes: {p/m: {provider: p, model: m}}\n"
    "steps: {s: {route: p/m, expected_tokens: {input: 200, output: 100}}}\n"
)


def test_unsized_failures_and_cuts_count_in_the_steps_bucket(tmp_path: Path) -> None:
    """400 sized answers, 20 errors and 8 cut calls with no tokens: 5 % errors, cuts kept."""
    rows = [
        {"call_id": f"ok{i}", "provider": "p", "model": "m", "status": "ok",
         "input_tokens": 200, "output_tokens": 100, "ttft_s": 0.5, "total_s": 1.0 + i / 400}
        for i in range(400)
    ]  # fmt: skip
    rows += [
        {"call_id": f"e{i}", "provider": "p", "model": "m", "status": "error", "total_s": 0.3}
        for i in range(20)
    ]
    rows += [
        {"call_id": f"c{i}", "provider": "p", "model": "m", "status": "timeout",
         "ttft_s": 0.5, "censored_at_s": 3.0 + i}
        for i in range(8)
    ]  # fmt: skip
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with Store.open(tmp_path / "s.duckdb") as store:
        assert ingest_paths(store, [tmp_path / "ledger.jsonl"]).ok
        sample = load_samples(store, PLAN, min_calls=100)[("s", "p/m")]

    assert sample.error_rate == pytest.approx(20 / 428)
    assert sample.censored == pytest.approx(8 / 408)
