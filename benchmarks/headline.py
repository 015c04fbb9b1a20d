"""
The headline check: a calibrated plan against a served transient tail, over real sockets.

`tailkit serve` replays one step whose latency has a narrow body (p50 ≈ 10 s) and a few
percent of transient stalls (6× slower), on two routes (two providers, the same model). Then,
in one process, time-scaled (default 0.2: 10 s of profile time are 2 s; at 0.05 the 100
calls in flight keep the one process busy, its loop lags and the lag reads as provider tail):

1. before: ``--calls`` calls through the executor and the OpenAI adapter with no cutoffs,
   on each route (the second route's calls are only there to measure it);
2. the ledger is ingested into a store (``--format trace``) and the one-step workflow is
   calibrated on it (hedge budget 6 %, a 40 s deadline);
3. after: the same number of calls with the calibrated plan, on a fresh server seed, each cut
   at the 40 s deadline from its start (a call cut there counts as never answered).

The plan is calibrated and run in real (scaled) seconds, and the hedge budget counts first
attempts, not seconds, so nothing else needs scaling.

Both sides are read from the ledgers: per logical call (idempotency key), from its first
attempt's start to its winner's end. Target: p99 cut by at least 2×, at most 6 % extra
attempts, p50 within 5 %. Exits 0 whatever the numbers, nonzero only on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import sys
import tempfile

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from tailkit.adapters.openai import chat_attempt
from tailkit.calibration import calibrate
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed, StepTimeout
from tailkit.executor import Executor, HedgeBudget, JsonlSink, Ledger, now
from tailkit.ingest import ingest_paths
from tailkit.serve import ModelProfile, ServeConfig, Server
from tailkit.store import Store


WORKFLOW = """\
tailkit_plan: 1
workflow: headline
deadline_s: {deadline_s}
hedge_budget: 0.06
routes:
  a/m: {{provider: a, model: m-a}}
  b/m: {{provider: b, model: m-b}}
steps:
  answer: {{route: a/m, hedge_route: b/m}}
"""
# Waiting dominates (8 s to the first token, 2 s of output): a stall makes the wait 6x longer.
PROFILE = ModelProfile(
    ttft_median_s=8.0, ttft_sigma=0.15, tokens_per_s=5.0, gen_sigma=0.1, output_tokens=10,
    stall_share=0.03, stall_factor=6.0,
)  # fmt: skip
MESSAGES = [{"role": "user", "content": "Write the account brief."}]
DEADLINE_S = 40.0  # profile seconds


async def serve_calls(
    plan: Plan,
    calls: int,
    *,
    seed: int,
    time_scale: float,
    ledger_path: Path,
    concurrency: int,
    deadline: bool = True,
) -> None:
    """
    ``calls`` logical calls of step ``answer`` under ``plan`` against a fresh server.

    With ``deadline``, each call is cut at the plan's deadline from its start (the after run);
    without, calls run to their end (the before run measures the whole tail).
    """
    config = ServeConfig(models={"m-a": PROFILE, "m-b": PROFILE}, time_scale=time_scale, seed=seed)
    ledger = Ledger(JsonlSink(ledger_path))
    # The budget counts first attempts, never seconds: a time-scaled run needs no scaled window.
    executor = Executor(plan, ledger=ledger, budget=HedgeBudget(plan.hedge_budget))
    gate = asyncio.Semaphore(concurrency)
    async with Server(config) as server:
        attempt = chat_attempt(server.url, MESSAGES, stream=False)
        async with attempt:

            async def one(i: int) -> None:
                async with gate:
                    # every call under the plan's deadline (real seconds: the plan is scaled),
                    # from when it starts, as a caller's gateway would hold it
                    until = now() + plan.deadline_s if deadline else math.inf
                    with contextlib.suppress(StepTimeout, AllAttemptsFailed):
                        await executor.run_step(
                            "answer", attempt, run_id=f"s{seed}", call_index=i, deadline=until
                        )

            await asyncio.gather(*(one(i) for i in range(calls)))
    ledger.close()


def per_call(ledger_path: Path, time_scale: float) -> tuple[list[float], int, int]:
    """
    From a ledger: each logical call's seconds (profile time), first attempts, all attempts.

    A call with no winner (cut at the deadline, or failed) never answered: ``inf``.
    """
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    attempts = defaultdict(int)
    for line in ledger_path.read_text().splitlines():
        row = json.loads(line)
        key = row["idempotency_key"]
        attempts[key] += 1
        t0 = datetime.fromisoformat(row["started_at"].replace("Z", "+00:00")).timestamp()
        starts[key] = min(starts.get(key, t0), t0)
        if row["winner"]:
            ends[key] = t0 + row["total_s"]
    seconds = [(ends[k] - starts[k]) / time_scale if k in ends else math.inf for k in starts]
    return seconds, len(attempts), sum(attempts.values())


def quantiles(values: list[float]) -> tuple[float, float]:
    """
    p50 and p99 (order statistics: a call that never answered is ``inf``, so it counts).
    """
    ranked = sorted(values)
    p50, p99 = (ranked[max(math.ceil(q * len(ranked)) - 1, 0)] for q in (0.5, 0.99))
    return p50, p99


def main(argv: list[str] | None = None) -> int:
    """
    Run the headline check and print before/after (or JSON).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # Everything runs in real (scaled) seconds: the ledger, the calibration, the plan.
    workflow = parse_plan(WORKFLOW.format(deadline_s=DEADLINE_S * args.time_scale))
    on_b = dataclasses.replace(
        workflow,
        steps={
            "answer": dataclasses.replace(workflow.steps["answer"], route="b/m", hedge_route="a/m")
        },
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run: dict[str, Any] = {"time_scale": args.time_scale, "concurrency": args.concurrency,
                               "deadline": False}  # fmt: skip
        asyncio.run(
            serve_calls(workflow, args.calls, seed=args.seed, ledger_path=work / "a.jsonl", **run)
        )
        asyncio.run(
            serve_calls(on_b, args.calls, seed=args.seed + 1, ledger_path=work / "b.jsonl", **run)
        )
        with Store.open(work / "calls.duckdb") as store:
            report = ingest_paths(store, [work / "a.jsonl", work / "b.jsonl"], format="trace")
            if not report.ok:
                sys.exit(f"ingest failed: {report.errors}")
            found = calibrate(store, workflow, runs=20_000, check_runs=50_000, min_calls=100)
        asyncio.run(
            serve_calls(
                found.plan,
                args.calls,
                seed=args.seed + 2,
                ledger_path=work / "after.jsonl",
                **{**run, "deadline": True},
            )
        )
        before, first_b, all_b = per_call(work / "a.jsonl", args.time_scale)
        after, first_a, all_a = per_call(work / "after.jsonl", args.time_scale)
    (p50_b, p99_b), (p50_a, p99_a) = quantiles(before), quantiles(after)
    step = found.plan.steps["answer"]
    result: dict[str, Any] = {
        "calls": args.calls, "time_scale": args.time_scale,
        "plan": {"signal": step.signal, "cutoff_s": step.cutoff_s,
                 "ttft_cutoff_s": step.ttft_cutoff_s, "on_cutoff": step.on_cutoff,
                 "hedge_route": step.hedge_route},
        "before": {"p50_s": p50_b, "p99_s": p99_b, "extra_attempts": all_b / first_b - 1,
                   "miss_rate": sum(x > DEADLINE_S for x in before) / len(before)},
        "after": {"p50_s": p50_a, "p99_s": p99_a, "extra_attempts": all_a / first_a - 1,
                  "miss_rate": sum(x > DEADLINE_S for x in after) / len(after)},
    }  # fmt: skip
    result["p99_cut"] = p99_b / p99_a
    result["p50_change"] = p50_a / p50_b - 1
    result["pass"] = (
        result["p99_cut"] >= 2.0
        and result["after"]["extra_attempts"] <= 0.06
        and abs(result["p50_change"]) <= 0.05
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.calls:,} calls per side, time scale {args.time_scale}; seconds in profile time")
    print(f"calibrated: {json.dumps(result['plan'])}")
    print("| | p50 s | p99 s | extra attempts | misses (40 s) |")
    print("|---|---:|---:|---:|---:|")
    for side in ("before", "after"):
        r = result[side]
        print(f"| {side} | {r['p50_s']:.2f} | {r['p99_s']:.2f} | {r['extra_attempts']:.1%} | "
              f"{r['miss_rate']:.1%} |")  # fmt: skip
    verdict = "PASS" if result["pass"] else "FAIL"
    print(
        f"p99 cut {result['p99_cut']:.2f}x, p50 {result['p50_change']:+.1%}: {verdict} "
        "(targets: p99 cut >= 2x, extra attempts <= 6 %, p50 within 5 %)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
