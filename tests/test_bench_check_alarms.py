"""
benchmarks/check_alarms.py end to end on a tiny study: its JSON, its tables and its options.

Tiny means one plan, one ledger a cell, few bootstrap replicates: the shares say nothing about
the rule, so the checks are on what must hold whatever the draws -- the shape, the counts, that
a seed repeats itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "check_alarms.py"
TINY = ["--plans", "1", "--ledgers", "1", "--replicates", "5", "--sim-runs", "4000",
        "--runs", "60", "--bases", "300"]  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False,
        cwd=ROOT, timeout=600,
    )  # fmt: skip


def test_help_names_every_option() -> None:
    """--help exits 0 and lists the study's options."""
    result = _run("--help")
    assert 0 == result.returncode, result.stderr
    for option in ("--bases", "--runs", "--plans", "--ledgers", "--replicates", "--slowdown",
                   "--level", "--seed", "--json"):  # fmt: skip
        assert option in result.stdout


def test_a_tiny_study_has_its_documented_shape_and_repeats_with_its_seed() -> None:
    """Two cells (no drift, slowdown), each with its shares and counts; the same seed agrees."""
    first, again = _run(*TINY, "--json"), _run(*TINY, "--json")
    assert 0 == first.returncode, first.stderr
    doc: dict[str, Any] = json.loads(first.stdout)
    assert [("none", 300, 60), ("slowdown", 300, 60)] == [
        (c["case"], c["basis"], c["runs"]) for c in doc["cells"]
    ]
    for cell in doc["cells"]:
        for key in ("drifted", "named", "old_rule"):
            share = cell[key]
            assert 1 == share["n"]
            assert share["k"] in (0, 1)
            assert share["low"] <= share["share"] <= share["high"]
        assert 0 < cell["lines_judged"] <= 16
    assert doc["cells"] == json.loads(again.stdout)["cells"]


def test_the_tables_are_printed_without_json() -> None:
    """Without --json: the false-alarm table, then the detection table."""
    result = _run(*TINY, "--seed", "3")
    assert 0 == result.returncode, result.stderr
    assert result.stdout.startswith("False alarms (no drift)")
    assert "| 300 | 60 |" in result.stdout
    assert "Detection (a/big 30% slower)" in result.stdout
