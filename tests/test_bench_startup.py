"""
benchmarks/startup.py end to end on one round: its JSON names every command and its ratios.

One round on a busy machine says nothing about speed, so the checks are on the shape: every
command timed, each ratio against ``python -c pass``, the old checkout's rows with ``--before``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "startup.py"


def test_one_round_times_every_command_against_the_interpreter_and_the_before_checkout() -> None:
    """--json has each command with its wall, CPU and ratios; --before adds its rows."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--runs", "30", "--before", str(ROOT),
         "--json"],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
    )  # fmt: skip

    assert 0 == result.returncode, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    rows = {row["command"]: row for row in doc["commands"]}
    assert {"python -c pass", "bare typer app", "tailkit --help", "tailkit docs",
            "tailkit check", "before: tailkit check"} <= set(rows)  # fmt: skip
    assert 1.0 == rows["python -c pass"]["wall_ratio"]
    for name in ("tailkit --help", "tailkit docs", "tailkit check"):
        assert rows[name]["wall_s"] > 0
        assert rows[name]["cpu_s"] > 0
        assert "wall_vs_before" in rows[name]


def test_a_folder_without_tailkit_is_refused_as_before() -> None:
    """--before must name a tailkit checkout."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--before", str(ROOT / "docs")],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=60,
    )  # fmt: skip

    assert 2 == result.returncode
    assert "not a tailkit checkout" in result.stderr
