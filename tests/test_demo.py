"""
`tailkit demo --quick`: the whole loop on the bundled samples, end to end.
"""

from __future__ import annotations

import json
import re

from pathlib import Path

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import load_plan


def test_demo_quick_runs_the_whole_loop(tmp_path: Path) -> None:
    """The demo ingests, calibrates, serves, runs both sides, reports and prints before/after."""
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = result.output
    for phase in ("ingest the samples", "tail table", "calibrate", "serve the measured tails",
                  "ingest the ledgers back", "write the report"):  # fmt: skip
        assert phase in text
    rows = {m.group(1): m for m in re.finditer(
        r"(without plan|with plan)\s*│\s*([\d.]+)%\s*│\s*([\d.]+)\s*│\s*([\d.]+)\s*│\s*([\d.]+)%",
        text)}  # fmt: skip
    assert set(rows) == {"without plan", "with plan"}
    assert float(rows["without plan"].group(5)) == 0.0  # no cutoffs: no extra attempts
    assert f"report: {out / 'report' / 'index.html'}" in text.replace("\n", "")
    assert (out / "report" / "index.html").stat().st_size > 10_000
    plan = load_plan(out / "plan.yaml")
    assert plan.predicted is not None
    assert any(step.on_cutoff != "wait" for step in plan.steps.values())
    ledger = [
        json.loads(line) for line in (out / "ledger-with-plan.jsonl").read_text().splitlines()
    ]
    assert {row["step"] for row in ledger} == set(plan.steps)
    assert sum(row["winner"] for row in ledger) >= 30 * 5  # most steps of 30 runs won
