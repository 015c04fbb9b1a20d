"""
Smoke tests of benchmarks/plan_coverage.py: it runs, seeded, and its table has every cell.

No coverage figures: the study measures them by running it (reports/statistics.md), not here.
"""

from __future__ import annotations

import importlib.util
import json
import sys

from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "plan_coverage.py"
    spec = importlib.util.spec_from_file_location("bench_plan_coverage", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_plan_coverage"] = module
    spec.loader.exec_module(module)
    return module


coverage = _load()
TINY = ["--reps", "2", "--replicates", "5", "--jobs", "1", "--json"]


def test_a_tiny_run_prints_every_figure_of_its_cases_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two replicates of two cases: each figure has its counts and a coverage in [0, 1]."""
    cases = ["lognormal + heavy, 50 calls", "identical latencies, 300 calls"]

    assert 0 == coverage.main([*TINY, "--case", cases[0], "--case", cases[1]])

    doc = json.loads(capsys.readouterr().out)
    assert cases == list(doc["cases"])
    for row in doc["cases"].values():
        assert {"miss_rate", "p50_s", "p99_s", "extra_attempts", "first.hedge_rate"} <= set(row)
        for cell in row.values():
            assert 2 == cell["given"] + cell["refused"]
            assert cell["given"] == 0 or 0.0 <= cell["coverage"] <= 1.0
    # 50 finished calls cannot bound a p99: refused every time, never counted as covering
    assert 2 == doc["cases"][cases[0]]["p99_s"]["refused"]


def test_the_same_seed_gives_the_same_table() -> None:
    """Seeded: two runs of one case give the same counts."""
    one = coverage.run(reps=2, seed=3, jobs=1, replicates=5, cases=(coverage.CASES[3].name,))
    two = coverage.run(reps=2, seed=3, jobs=1, replicates=5, cases=(coverage.CASES[3].name,))

    assert one == two


def test_every_case_supplies_its_own_truth_simulator() -> None:
    """A case is a row: a name, calls per route, and a function giving samples, truth, sharing."""
    plan = coverage.parse_plan(coverage.PLAN)
    rng = coverage.np.random.default_rng(0)
    for case in coverage.CASES:
        samples, truth, sharing = case.truth(plan, 60, rng)
        assert {("first", "fast/a"), ("first", "other/a"), ("second", "heavy/b")} == set(samples)
        assert 0.0 < truth["p50_s"] <= truth["p99_s"]
        # a world of paired jobs states what its predictions assume a repeat shares
        assert (sharing is None) == case.name.startswith(("lognormal", "identical"))
