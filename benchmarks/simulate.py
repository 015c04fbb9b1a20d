"""
Simulator speed: step-samples per second for 1M runs of the sample workflow, on one core.

Ingests the bundled production sample into a temporary store (not timed), loads the route
samples of ``data_samples/workflow.yaml``, calibrates nothing (the workflow as written, with a
hedge at p95 on every step so every code path runs), then times in the same process:

- tailkit: ``simulate_model`` over ``--runs`` runs (default 1,000,000), draws included, with
  what the log shows a repeat shares (each hedge's draw coupled to its first attempt's, as
  calibrate runs it), and again with independent repeats (``sharing_cost``: the ratio);
- baseline: a plain-Python loop over the same model (``tailkit.simulation._reference``, one
  run at a time with ``random.getrandbits(16)`` draws, one per draw slot) over
  ``--loop-runs`` runs, scaled per sample;
- live routing's cost: the plan ``calibrate --live`` finds for the workflow with candidates on
  four steps (``plan``, ``review``, ``draft``, ``revise``: the route and the same model on the
  other provider), simulated with its live blocks (batches of 16 runs in flight) and as fixed
  routing (``live=False``), the same runs: ``live_cost`` is the ratio (target at most 3x).

The process is pinned to one CPU first. Targets: at least 10M step-samples/s, and at least
100x the loop. Exits 0 whatever the numbers, nonzero only on errors.
"""

from __future__ import annotations

import os


os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import random
import statistics
import sys
import tempfile
import time

from pathlib import Path

from tailkit.config import load_plan
from tailkit.ingest import ingest_paths
from tailkit.simulation import (
    WorkflowModel,
    estimate_sharing,
    load_samples,
    policy_model,
    simulate_model,
    workflow_model,
)
from tailkit.simulation.lowlevel import SLOTS, reference_step
from tailkit.store import Store


ROOT = Path(__file__).resolve().parents[1]
TARGET_RATE, TARGET_RATIO = 10e6, 100.0
TARGET_LIVE_COST = 3.0
CANDIDATES = {  # step -> its route and the same model on the other provider
    "plan": ("anthropic/claude-sonnet-4", "bedrock/claude-sonnet-4"),
    "review": ("bedrock/claude-sonnet-4", "anthropic/claude-sonnet-4"),
    "draft": ("openai/gpt-4.1", "azure/gpt-4.1"),
    "revise": ("azure/gpt-4.1", "openai/gpt-4.1"),
}


def live_model(workdir: Path) -> WorkflowModel:
    """
    The plan ``calibrate --live`` finds for the sample workflow with `CANDIDATES` (not timed).
    """
    import dataclasses

    from tailkit.calibration import calibrate

    plan = load_plan(ROOT / "data_samples" / "workflow.yaml")
    steps = {
        name: dataclasses.replace(step, candidates=CANDIDATES.get(name, ()))
        for name, step in plan.steps.items()
    }
    plan = dataclasses.replace(plan, steps=steps)
    with Store.open(workdir / "bench.duckdb", read_only=True) as store:
        found = calibrate(store, plan, live=True, runs=20_000, check_runs=20_000, replicates=0)
        samples = load_samples(store, found.plan)
    return workflow_model(found.plan, samples)


def sample_model(workdir: Path) -> tuple[WorkflowModel, WorkflowModel]:
    """
    The sample workflow over the bundled production log, hedging at p95 on every step.

    Twice: with what the log shows a repeat shares (as calibrate runs it: every hedge's draw
    coupled to its first attempt's) and with independent repeats (the draws as they come).
    """
    db = workdir / "bench.duckdb"
    with Store.open(db) as store:
        report = ingest_paths(store, [ROOT / "data_samples" / "production" / "calls.parquet"])
        if not report.ok:
            sys.exit(f"ingest failed: {report.errors}")
        plan = load_plan(ROOT / "data_samples" / "workflow.yaml")
        samples = load_samples(store, plan)
        sharing = estimate_sharing(store, plan)
    shared = policy_model(workflow_model(plan, samples, sharing=sharing), "hedge_p95")
    return shared, policy_model(workflow_model(plan, samples), "hedge_p95")


def loop(model: WorkflowModel, runs: int, seed: int) -> float:
    """
    Seconds for ``runs`` runs in plain Python (draws included); returns the elapsed time.
    """
    rng = random.Random(seed)  # noqa: S311 - simulation draws, not secrets
    bits = rng.getrandbits
    t0 = time.perf_counter()
    for _ in range(runs):
        ends: list[float] = []
        for step in model.steps:
            start = max((ends[d] for d in step.deps), default=0.0)
            draws = tuple(bits(16) for _ in range(SLOTS))
            duration = reference_step(step, start, draws, model)[0]
            ends.append(start + duration)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """
    Run the benchmark and print a table (or JSON).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--loop-runs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="report the median (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory() as tmp:
        model, free = sample_model(Path(tmp))
        live = live_model(Path(tmp))
    steps = len(model.steps)
    simulate_model(model, runs=10_000)  # warm up imports and caches
    fast, slow, independent, routed, fixed = [], [], [], [], []
    for i in range(args.repeat):
        t0 = time.perf_counter()
        simulate_model(live, runs=args.runs, seed=i)
        routed.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        simulate_model(live, runs=args.runs, seed=i, live=False)
        fixed.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        simulate_model(model, runs=args.runs, seed=i)
        fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        simulate_model(free, runs=args.runs, seed=i)
        independent.append(time.perf_counter() - t0)
        slow.append(loop(model, args.loop_runs, seed=i))
    rate = args.runs * steps / statistics.median(fast)
    loop_rate = args.loop_runs * steps / statistics.median(slow)
    result = {
        "runs": args.runs, "steps": steps, "seconds": statistics.median(fast),
        "step_samples_per_s": rate, "loop_step_samples_per_s": loop_rate,
        "ratio": rate / loop_rate,
        "independent_step_samples_per_s": args.runs * steps / statistics.median(independent),
        "sharing_cost": statistics.median(fast) / statistics.median(independent),
        "live_steps": sum(1 for s in live.steps if s.live is not None),
        "live_seconds": statistics.median(routed), "fixed_seconds": statistics.median(fixed),
        "live_cost": statistics.median(routed) / statistics.median(fixed),
        "pass": rate >= TARGET_RATE and rate / loop_rate >= TARGET_RATIO,
    }  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"runs={args.runs:,} steps={steps} repeat={args.repeat} one core (medians)")
    print("| simulator | step-samples/s | ratio to loop | |")
    print("|---|---:|---:|---|")
    print(f"| plain-Python loop | {loop_rate / 1e6:.2f}M | 1 | |")
    free_rate = result["independent_step_samples_per_s"]
    print(
        f"| tailkit, repeats independent | {free_rate / 1e6:.1f}M | {free_rate / loop_rate:.0f} | |"
    )
    verdict = "PASS" if result["pass"] else "FAIL"
    print(
        f"| tailkit simulate_model | {rate / 1e6:.1f}M | {rate / loop_rate:.0f} | {verdict} "
        f"(targets >= {TARGET_RATE / 1e6:.0f}M/s and >= {TARGET_RATIO:.0f}x) |"
    )
    cost = result["live_cost"]
    print(
        f"live routing ({result['live_steps']} of {steps} steps live, 16 runs in flight): "
        f"{result['live_seconds']:.2f} s against {result['fixed_seconds']:.2f} s fixed, "
        f"{cost:.2f}x ({'PASS' if cost <= TARGET_LIVE_COST else 'FAIL'}: target <= "
        f"{TARGET_LIVE_COST:g}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
