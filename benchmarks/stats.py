"""
Tail-table speed: `tail_report` against one bare DuckDB GROUP BY with quantile_cont.

Generates a seeded N-row log, ingests it into a fresh store (not timed), then, interleaved and
repeated, times in the same process:

- baseline: ``SELECT model, provider, input bucket, output bucket, quantile_cont(total_s,
  [0.5, 0.9, 0.95, 0.99]) FROM calls GROUP BY ALL`` (the same bucket SQL tailkit uses);
- tailkit: ``tail_report`` grouped by model x provider x both buckets (intervals, fits,
  phase split, work-vs-transient verdicts).

The ratio is tailkit time / baseline time; the target is at most 3. Exits 0 whatever the
ratio, nonzero only on errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from pathlib import Path

from tailkit.ingest import ingest_paths
from tailkit.record import Buckets
from tailkit.store import Store
from tailkit.store.lowlevel import bucket_columns_sql
from tailkit.tails import TableQuery, tail_report


TARGET = 3.0
ROOT = Path(__file__).resolve().parents[1]


def prepare(workdir: Path, rows: int, seed: int) -> Path:
    """
    Generate the log and ingest it; return the store's path.
    """
    subprocess.run(
        [sys.executable, str(ROOT / "data_samples" / "generate.py"), "--rows", str(rows),
         "--seed", str(seed), "--out", str(workdir), "--formats", "parquet"],
        check=True, capture_output=True,
    )  # fmt: skip
    db = workdir / "stats.duckdb"
    with Store.open(db) as store:
        report = ingest_paths(store, [workdir / "calls.parquet"])
    if not report.ok or report.totals()["stored"] != rows:
        sys.exit(f"ingest failed: {report.errors or report.totals()}")
    return db


def baseline(store: Store) -> float:
    """
    Seconds for the bare grouped quantile query.
    """
    sql = (
        f"SELECT model, provider, input_bucket, output_bucket, "
        "quantile_cont(total_s, [0.5, 0.9, 0.95, 0.99]) FROM (SELECT *, "
        f"{bucket_columns_sql(Buckets())} FROM calls) GROUP BY ALL"
    )
    t0 = time.perf_counter()
    store.fetchall(sql)
    return time.perf_counter() - t0


def tailkit(store: Store) -> tuple[float, int]:
    """
    Seconds for the full tail report, and its number of rows.
    """
    query = TableQuery(by=("model", "provider"), bucket=("input", "output"))
    t0 = time.perf_counter()
    report = tail_report(store, query)
    return time.perf_counter() - t0, len(report.table)


def main(argv: list[str] | None = None) -> int:
    """
    Run the benchmark and print a table (or JSON).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5, help="report the median (default 5)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = prepare(Path(tmp), args.rows, args.seed)
        base, full, groups = [], [], 0
        with Store.open(db, read_only=True) as store:
            tailkit(store)  # warm the page cache and imports for both sides
            for i in range(args.repeat):
                if i % 2:
                    seconds, groups = tailkit(store)
                    full.append(seconds)
                    base.append(baseline(store))
                else:
                    base.append(baseline(store))
                    seconds, groups = tailkit(store)
                    full.append(seconds)
    b, t = statistics.median(base), statistics.median(full)
    result = {"rows": args.rows, "groups": groups, "baseline_s": b, "tailkit_s": t,
              "ratio": t / b, "target": TARGET, "pass": t / b <= TARGET}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"rows={args.rows:,} groups={groups} repeat={args.repeat} (medians)")
    print("| query | seconds | ratio to bare | |")
    print("|---|---:|---:|---|")
    print(f"| bare GROUP BY quantile_cont | {b:.3f} | 1.0 | |")
    verdict = "PASS" if result["pass"] else "FAIL"
    print(f"| tailkit tail_report | {t:.3f} | {t / b:.1f} | {verdict} (target <= {TARGET}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
