"""
Regenerate reports/example/ from the bundled samples: python reports/example/generate.py.

Ingests data_samples/production/calls.parquet and data_samples/llmperf-leaderboard into a
temporary store, calibrates data_samples/workflow.yaml on it, and writes the report here.
"""

from __future__ import annotations

import sys
import tempfile

from pathlib import Path

from tailkit.calibration import calibrate
from tailkit.config import load_plan
from tailkit.ingest import ingest_paths
from tailkit.report import write_report
from tailkit.store import Store


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SAMPLES = ROOT / "data_samples"


def main() -> int:
    """
    Build the store, calibrate the sample workflow, write the report; print its path.
    """
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "example.duckdb") as store:
        ingest_paths(
            store,
            [str(SAMPLES / "production" / "calls.parquet"), str(SAMPLES / "llmperf-leaderboard")],
        )
        calibration = calibrate(store, load_plan(SAMPLES / "workflow.yaml"), seed=0)
        index = write_report(
            store, HERE, plan=calibration.plan, title="tailkit example report (bundled samples)"
        )
    sys.stdout.write(f"{index.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
