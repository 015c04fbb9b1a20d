"""
benchmarks/peers.py end to end on a tiny run, without LiteLLM (not in the test extra).

The run is time-scaled hard, so its numbers say nothing about tails: the checks are on what
must hold whatever the machine does -- the JSON's shape, counts that reconcile with serve's
access log, a plan calibrated from the before run, and the verdict logic.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

from pathlib import Path
from typing import Any

import pytest


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "peers.py"
KEYS = {"name", "tool", "p50_s", "p97_s", "p99_s", "miss_rate", "extra_requests",
        "cpu_ms_per_call"}  # fmt: skip


def _peers() -> Any:
    """
    benchmarks/peers.py as a module, leaving ``sys.path`` as it was.

    benchmarks/ holds ``distributed.py``: left on the path, it would shadow the ``distributed``
    package in the processes Dask spawns for other tests.
    """
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("peers_under_test", SCRIPT)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


@pytest.mark.slow
def test_a_tiny_run_reconciles_with_the_access_log(tmp_path: Path) -> None:
    """One step and the workflow, three variants: every call counted, every request seen."""
    cmd = [sys.executable, str(SCRIPT), "--variants", "none,tailkit,tailkit-race",
           "--cases", "one-step,workflow,429-storm", "--calls", "60", "--runs", "8",
           "--probe-calls", "120", "--rate", "30", "--workflow-rate", "4",
           "--time-scale", "0.02", "--workdir", str(tmp_path), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [c["case"] for c in result["cases"]] == ["one-step", "workflow", "429-storm"]
    for case in result["cases"]:
        rows = {r["name"]: r for r in case["variants"]}
        assert set(rows) == {"none", "tailkit", "tailkit-race"}
        for row in rows.values():
            assert KEYS <= set(row)
            assert row["calls"] == (8 if case["case"] == "workflow" else 60)
            assert row["tool"] == ("none" if row["name"] == "none" else "tailkit")
            assert 0.0 <= row["miss_rate"] <= 1.0
            lo, hi = row["miss_interval"]
            assert lo <= row["miss_rate"] <= hi
            assert row["cpu_ms_per_call"] > 0
            assert row["requests"] >= 1
            for q in ("p50", "p97", "p99"):
                value = row[f"{q}_s"]
                low, high = row[f"{q}_interval_s"]
                if value is not None:
                    assert low <= value <= (math.inf if high is None else high)
        # the bare variant sends one request per call, whatever happens to it
        if case["case"] != "workflow":
            assert rows["none"]["requests"] == 60
            assert rows["none"]["extra_requests"] == 0.0
        # the race's plan hedges every call at once: two requests each, unless one was refused
        assert rows["tailkit-race"]["extra_requests"] > 0.5
        assert case["verdicts"] == []  # no LiteLLM variant ran
    # the ledger the access log is checked against: one line per request the executor made
    access = [json.loads(x) for x in (tmp_path / "one-step.access.jsonl").read_text().splitlines()]
    ledger = (tmp_path / "one-step.tailkit.ledger.jsonl").read_text().splitlines()
    assert sum(r["model"].startswith("tailkit.") for r in access) == len(ledger)
    plan = result["plans"]["one-step"]["steps"]["answer"]
    assert plan["peer_timeout_s"] > 0
    assert result["plans"]["one-step"]["hedge_budget"] > 0


def test_the_verdict_takes_the_best_tailkit_variant_at_equal_or_lower_load() -> None:
    """A peer at 5 % extra is compared with the tailkit variant at or under 6 %."""
    peers = _peers()

    def row(name: str, tool: str, p99: float | None, miss: float, extra: float) -> dict[str, Any]:
        return {"name": name, "tool": tool, "p99_s": p99, "p99_interval_s": [p99, p99],
                "calls": 1000, "miss_rate": miss, "miss_interval": [miss, miss],
                "extra_requests": extra, "step_calls": 1000,
                "requests": round(1000 * (1 + extra))}  # fmt: skip

    rows = [
        row("tailkit", "tailkit", 20.0, 0.0, 0.055),
        row("tailkit-race", "tailkit", 12.0, 0.0, 1.0),
        row("litellm-retry", "litellm", 22.0, 0.001, 0.05),
        row("litellm-race", "litellm", 12.5, 0.0, 1.0),
        row("litellm-stream", "litellm", None, 0.04, 0.0),
    ]
    found = {v["peer"]: v for v in peers.verdicts(rows)}
    assert found["litellm-retry"]["tailkit"] == "tailkit"
    assert (found["litellm-retry"]["p99"], found["litellm-retry"]["misses"]) == ("ahead", "ahead")
    assert found["litellm-race"]["tailkit"] == "tailkit-race"
    assert found["litellm-race"]["pass"]
    assert found["litellm-stream"]["tailkit"] is None  # 55 extras against none: not chance
    assert not found["litellm-stream"]["pass"]
    # 6 extras in 100 calls against 3: more, but not more than chance makes it -- compared
    short = [
        dict(r, step_calls=100, requests=round(100 * (1 + r["extra_requests"])))
        for r in (row("tailkit", "tailkit", 20.0, 0.0, 0.06),
                  row("litellm-x", "litellm", 22.0, 0.0, 0.03))
    ]  # fmt: skip
    assert [v["tailkit"] for v in peers.verdicts(short)] == ["tailkit"]
    rows[0] = row("tailkit", "tailkit", 30.0, 0.01, 0.05)
    found = {v["peer"]: v for v in peers.verdicts(rows)}
    assert found["litellm-retry"]["p99"] == "behind"
    assert not found["litellm-retry"]["pass"]


def test_quantile_intervals_hold_the_estimate_and_a_failure_counts_as_never() -> None:
    """Order-statistic intervals; a failed call (inf) pushes p99 to 'failed'."""
    import numpy as np

    peers = _peers()
    x = np.arange(1, 1001, dtype=float)
    value, lo, hi = peers.quantile(x, 0.99)
    assert value == 990.0
    assert lo < value < hi
    x[-20:] = math.inf
    assert math.isinf(peers.quantile(x, 0.99)[0])
    lo, hi = peers.wilson(5, 1000)
    assert lo < 0.005 < hi
