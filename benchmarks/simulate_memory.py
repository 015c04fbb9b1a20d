"""
Simulator memory: peak RSS of ``tailkit simulate`` for plans of 10, 100 and 1,000 steps.

All the steps use one route, in the same token bucket.

Ingests the bundled production sample into a temporary store (once), then, for each ``--steps``
size, writes a plan of that many independent steps on ``openai/gpt-4.1-mini`` (the same expected
tokens, a hedge at 2 s on ``google/gemini-2.5-flash``) and runs, in a fresh child process, what
the command runs: `load_samples` and `compare_policies` (``--runs`` runs, four policies). The
child reports its peak RSS (``ru_maxrss``), the route samples it built and a digest of the
results, so two versions can be compared for memory and for equal results
(``PYTHONPATH=/tmp/old python benchmarks/simulate_memory.py`` runs an older tree).

Memory should follow the routes and buckets, not the steps: the target is at most 2x the
10-step peak at 1,000 steps. Prints one row per size and the ratios to the smallest; ``--json``
prints the figures as JSON. Exits 0 whatever the figures, nonzero only on errors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile

from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0  # peak RSS at the largest size over the smallest


def plan_text(steps: int) -> str:
    """
    A plan of ``steps`` independent steps, all on one route and one token bucket.
    """
    lines = [
        "tailkit_plan: 1",
        f"workflow: memory-{steps}",
        "deadline_s: 60",
        "hedge_budget: 0.05",
        "routes:",
        "  openai/gpt-4.1-mini: {provider: openai, model: gpt-4.1-mini}",
        "  google/gemini-2.5-flash: {provider: google, model: gemini-2.5-flash}",
        "steps:",
    ]
    for i in range(steps):
        lines += [
            f"  s{i:05d}:",
            "    route: openai/gpt-4.1-mini",
            "    expected_tokens: {input: 8000, output: 350}",
            "    hedge_route: google/gemini-2.5-flash",
            "    cutoff_s: 2.0",
            "    on_cutoff: hedge",
        ]
    return "\n".join(lines) + "\n"


def child(db: str, plan_file: str, runs: int) -> dict[str, Any]:
    """
    In this process: load the samples and compare the policies; the peak RSS and a digest.
    """
    from tailkit.config import load_plan
    from tailkit.simulation import compare_policies, load_samples
    from tailkit.store import Store

    plan = load_plan(plan_file)
    with Store.open(db, read_only=True) as store:
        samples = load_samples(store, plan)
    policies = compare_policies(plan, samples, runs=runs, seed=0)
    text = json.dumps({k: v.as_dict() for k, v in policies.items()}, sort_keys=True)
    ends = b"".join(v.end_s.tobytes() for v in policies.values())
    return {
        "steps": len(plan.steps),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "samples": len(samples),
        "distinct_samples": len({id(s) for s in samples.values()}),
        "digest": hashlib.sha256(text.encode() + ends).hexdigest()[:16],
        "plan_miss_rate": policies["plan"].miss_rate,
    }


def main() -> None:
    """
    Measure each size in a child process; print the table (or ``--json``).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--runs", type=int, default=100_000, help="runs per policy")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=3, metavar=("DB", "PLAN", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        db, plan_file, runs = args.child
        print(json.dumps(child(db, plan_file, int(runs))))
        return

    from tailkit.ingest import ingest_paths
    from tailkit.store import Store

    rows = []
    with tempfile.TemporaryDirectory(prefix="tailkit-simulate-memory-") as tmp:
        db = Path(tmp) / "calls.duckdb"
        with Store.open(db) as store:
            report = ingest_paths(store, [ROOT / "data_samples" / "production" / "calls.parquet"])
            if not report.ok:
                sys.exit(f"ingest failed: {report.errors}")
        for steps in args.steps:
            plan_file = Path(tmp) / f"plan-{steps}.yaml"
            plan_file.write_text(plan_text(steps), encoding="utf-8")
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(db), str(plan_file), str(args.runs)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["peak_rss_mb"]
    for row in rows:
        row["ratio"] = row["peak_rss_mb"] / base
    ratio = rows[-1]["ratio"]
    summary = {
        "runs": args.runs,
        "rows": rows,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{'steps':>6} {'peak RSS MB':>12} {'x smallest':>10} {'samples':>8} {'built':>6}  digest"
    )
    for row in rows:
        print(
            f"{row['steps']:>6} {row['peak_rss_mb']:>12.0f} {row['ratio']:>10.2f} "
            f"{row['samples']:>8} {row['distinct_samples']:>6}  {row['digest']}"
        )
    verdict = "meets" if summary["meets_target"] else "misses"
    print(
        f"{rows[-1]['steps']} steps over {rows[0]['steps']}: {ratio:.2f}x "
        f"({verdict} <= {TARGET_RATIO}x)"
    )


if __name__ == "__main__":
    main()
