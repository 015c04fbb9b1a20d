"""
`tailkit demo --quick`: the whole loop on the bundled samples, end to end.
"""

from __future__ import annotations

import json

from pathlib import Path

from typer.testing import CliRunner

from tailkit.cli import app
from tailkit.config import load_plan


def test_demo_quick_runs_the_whole_loop(tmp_path: Path) -> None:
    """The demo calibrates, replays both sides, checks and reports; --json has the contract."""
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--quick", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert ["without plan", "with plan"] == [side["label"] for side in doc["sides"]]
    keys = {"miss_rate", "p50_s", "p99_s", "extra_attempts"}
    for side in doc["sides"]:
        assert 30 == side["runs"]
        assert keys == set(side["predicted"]) == set(side["observed"])
        assert side["verdict"] in ("agrees", "differs")
        assert all(low <= high for low, high in side["observed_interval"].values() if high)
    assert 0 == doc["sides"][0]["observed"]["extra_attempts"]  # no cutoffs, no extra attempts
    assert doc["verdict"] in ("agrees", "differs", "can't tell")
    assert {"time_scale", "error_s", "error_share", "ok", "lead_s"} <= set(doc["fidelity"])
    assert doc["check"]["verdict"] in ("holds", "drifted")
    assert "steps" in doc["check"]
    assert (out / "report" / "index.html").stat().st_size > 10_000
    assert "Replay against the simulation" in (out / "report" / "index.html").read_text()
    plan = load_plan(out / "plan.yaml")
    assert plan.predicted is not None
    assert any(step.on_cutoff != "wait" for step in plan.steps.values())
    for name in ("without-plan", "with-plan"):
        ledger = [
            json.loads(line) for line in (out / f"ledger-{name}.jsonl").read_text().splitlines()
        ]
        assert {row["step"] for row in ledger} == set(plan.steps)
        assert sum(row["winner"] for row in ledger) >= 30 * 5  # most steps of 30 runs won
        assert len({row["run_id"] for row in ledger}) == 30
