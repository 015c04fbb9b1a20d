"""
Predictions against a world whose repeat attempts share the job: modelled, or assumed away.

The world is `tailkit.demo._paired`'s (jobs with a size and hidden work on six routes of three
providers, transient stalls, provider spells; a hedge re-does the same job). A benchmark of
``--jobs`` jobs run on every route (with job keys) is ingested into a store; the 3-step
workflow of ``tests/test_sharing.py`` is calibrated on it at each ``--deadline`` twice: with
the sharing `estimate_sharing` reads from the job keys, and with repeats assumed independent
(the simulator before it modelled sharing). Each plan's predicted miss rate, and its predicted
gain over no cutoffs, are set against the world's own (a Monte Carlo of ``--truth-runs``
runs in which every attempt of a step does the same job).

    python3 benchmarks/paired.py [--jobs 4000] [--deadline 20 --deadline 24] [--json]

About a minute on 2 cores. Exits 0 whatever it finds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from tailkit.calibration import calibrate, predict  # noqa: E402
from tailkit.config import parse_plan  # noqa: E402
from tailkit.demo._paired import benchmark_calls, truth_miss_rate  # noqa: E402
from tailkit.ingest import ingest_paths  # noqa: E402
from tailkit.simulation.lowlevel import independent_sharing  # noqa: E402
from tailkit.store import Store  # noqa: E402
from tests.test_sharing import WORKFLOW, WORLD  # noqa: E402


def run(*, jobs: int, deadlines: list[float], truth_runs: int, seed: int) -> dict[str, object]:
    """
    Per deadline and assumption: the plan, its predicted miss rate and gain, and the world's.
    """
    rows = benchmark_calls(WORLD, jobs=jobs, seed=seed)
    out: dict[str, object] = {"jobs": jobs, "truth_runs": truth_runs, "deadlines": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        with Store.open(folder / "calls.duckdb") as store:
            ingest_paths(store, [folder / "bench.jsonl"])
            for deadline in deadlines:
                workflow = parse_plan(WORKFLOW.replace("deadline_s: 24", f"deadline_s: {deadline}"))
                none_truth = truth_miss_rate(WORLD, workflow, runs=truth_runs, seed=seed + 3)
                sides = {}
                for label, sharing in (
                    ("shared", None),
                    ("independent", independent_sharing(workflow)),
                ):
                    cal = calibrate(store, workflow, sharing=sharing, seed=seed)
                    used = {n: s.basis.shared for n, s in cal.plan.steps.items()}
                    none = predict(store, cal.plan, policy="none", replicates=0, sharing=used)  # type: ignore[arg-type]
                    miss = cal.prediction.miss_rate
                    truth = truth_miss_rate(WORLD, cal.plan, runs=truth_runs, seed=seed + 3)
                    sides[label] = {
                        "plan": {n: [s.on_cutoff, s.cutoff_s] for n, s in cal.plan.steps.items()},
                        "shared": {
                            n: s.basis.shared.other_provider for n, s in cal.plan.steps.items()
                        },  # type: ignore[union-attr]
                        "predicted_miss": [miss.value, miss.low, miss.high],
                        "true_miss": truth,
                        "predicted_gain": none.miss_rate.value - miss.value,
                        "true_gain": none_truth - truth,
                    }
                out["deadlines"][str(deadline)] = {"true_miss_without_cutoffs": none_truth, **sides}  # type: ignore[index]
    return out


def main(argv: list[str] | None = None) -> int:
    """
    Run it; print a table, or JSON with ``--json``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4000, help="benchmark jobs (default 4000)")
    parser.add_argument("--deadline", type=float, action="append", help="deadline s (20, 24)")
    parser.add_argument("--truth-runs", type=int, default=400_000, help="world runs (400,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    doc = run(jobs=args.jobs, deadlines=args.deadline or [20.0, 24.0],
              truth_runs=args.truth_runs, seed=args.seed)  # fmt: skip
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for deadline, row in doc["deadlines"].items():  # type: ignore[attr-defined]
        print(f"deadline {deadline} s: the world misses {row['true_miss_without_cutoffs']:.2%} "
              "without cutoffs")  # fmt: skip
        for label in ("shared", "independent"):
            side = row[label]
            value, low, high = side["predicted_miss"]
            print(f"  {label:<12} plan {side['plan']}\n"
                  f"               predicted {value:.2%} [{low:.2%}-{high:.2%}], world "
                  f"{side['true_miss']:.2%}; gain predicted {side['predicted_gain']:.2%}, "
                  f"world {side['true_gain']:.2%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
