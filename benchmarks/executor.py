"""
Executor overhead and scale: `run_step` against a bare task, and 10,000 concurrent runs.

Part 1, per-step overhead, in one process and interleaved: the same coroutine (it yields to
the loop once, then returns) run ``--steps`` times

- bare: ``asyncio.create_task(coro)`` + ``asyncio.wait({task})``;
- ``run_step`` under a plan whose step has no cutoff (nothing armed);
- ``run_step`` with hedging armed (a total cutoff and a hedge route; it never fires);

each with the ledger counting every attempt (no sink) and, for scale, writing JSON lines to
a file. The target, "overhead <= 1.5x the bare baseline", is read literally: the time
run_step adds, (run_step - bare), at most 1.5x the bare time. The table also shows the plain
ratio run_step / bare, the stricter reading.

Part 2, scale: ``--runs`` (10,000) concurrent runs of the sample workflow
(``data_samples/workflow.yaml``; every step sleeps a lognormal 5-50 ms) in one process, with a
JSON-lines ledger; reports wall time, peak memory (growth of the process's max RSS over its
value before the runs) and event-loop lag (how late a 10 ms ticker wakes). Target: under
300 MB. (tracemalloc is not used: it doubles both the memory and the time it measures.)
Exits 0 whatever the numbers, nonzero only on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import sys
import tempfile
import time

from pathlib import Path
from typing import Any

from tailkit.config import load_plan, parse_plan
from tailkit.executor import Attempt, Executor, HedgeBudget, JsonlSink, Ledger


ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO, TARGET_MB = 1.5, 300.0
PLAN = """\
tailkit_plan: 1
workflow: bench
deadline_s: 60
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  plain: {route: a/m}
  armed: {route: a/m, cutoff_s: 30, on_cutoff: hedge, hedge_route: b/m}
"""


WORK_S = 0.0  # --work-ms: how long the coroutine sleeps (0: it only yields to the loop once)


async def work(_: Attempt | None = None) -> int:
    """
    The coroutine every variant runs: one trip through the loop, or a short sleep.
    """
    await asyncio.sleep(WORK_S)
    return 1


async def bare(n: int) -> float:
    """
    Seconds for n create_task + wait of `work`.
    """
    t0 = time.perf_counter()
    for _ in range(n):
        task = asyncio.create_task(work())
        await asyncio.wait({task})
    return time.perf_counter() - t0


async def stepped(executor: Executor, step: str, n: int) -> float:
    """
    Seconds for n `run_step` calls of `work`.
    """
    t0 = time.perf_counter()
    for i in range(n):
        await executor.run_step(step, work, call_index=i)
    return time.perf_counter() - t0


def overhead(steps: int, repeat: int, ledger_dir: Path) -> dict[str, Any]:
    """
    Medians of the bare and the run_step variants, interleaved, and their ratios.
    """
    plan = parse_plan(PLAN)
    big = HedgeBudget(0.05)  # counted per first attempt: it remembers at most 10,000 of them
    counted = Executor(plan, ledger=Ledger(), budget=big)
    written = Executor(plan, ledger=Ledger(JsonlSink(ledger_dir / "overhead.jsonl")), budget=big)
    times: dict[str, list[float]] = {k: [] for k in ("bare", "plain", "armed", "armed+jsonl")}

    async def main() -> None:
        await bare(1000)
        await stepped(counted, "armed", 1000)
        for _ in range(repeat):
            times["bare"].append(await bare(steps))
            times["plain"].append(await stepped(counted, "plain", steps))
            times["armed"].append(await stepped(counted, "armed", steps))
            times["armed+jsonl"].append(await stepped(written, "armed", steps))

    asyncio.run(main())
    written.ledger.close()
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "steps": steps,
        "us_per_step": {k: v / steps * 1e6 for k, v in medians.items()},
        "ratio": {k: v / medians["bare"] for k, v in medians.items() if k != "bare"},
        "overhead": {k: v / medians["bare"] - 1 for k, v in medians.items() if k != "bare"},
    }


def scale(runs: int, ledger_dir: Path, seed: int) -> dict[str, Any]:
    """
    Wall time, memory and loop lag of ``runs`` concurrent workflow runs.
    """
    plan = load_plan(ROOT / "data_samples" / "workflow.yaml")
    ledger = Ledger(JsonlSink(ledger_dir / "scale.jsonl"))
    executor = Executor(plan, ledger=ledger)
    rng = random.Random(seed)  # noqa: S311 - simulated latency, not secrets
    lags: list[float] = []

    async def step(a: Attempt) -> str:
        await asyncio.sleep(min(rng.lognormvariate(-4.0, 0.6), 0.05))
        return a.step

    async def ticker(stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            t0 = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - t0 - 0.01)

    async def main() -> tuple[float, int]:
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(stop))
        t0 = time.perf_counter()
        results = await asyncio.gather(*(executor.run(step, run_id=f"r{i}") for i in range(runs)))
        elapsed = time.perf_counter() - t0
        stop.set()
        await tick
        return elapsed, sum(r.ok for r in results)

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    elapsed, ok = asyncio.run(main())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ledger.close()
    lags.sort()
    return {
        "runs": runs, "ok": ok, "seconds": elapsed, "attempts": ledger.counts()["attempts"],
        "rss_before_mb": rss0, "rss_growth_mb": rss - rss0,
        "loop_lag_p50_ms": 1e3 * lags[len(lags) // 2] if lags else 0.0,
        "loop_lag_max_ms": 1e3 * lags[-1] if lags else 0.0,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """
    Run both parts and print tables (or JSON).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5, help="report the median (default 5)")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--work-ms", type=float, default=0.0,
        help="the coroutine sleeps this long (default 0: it only yields once, the strictest)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    global WORK_S  # noqa: PLW0603 - the coroutine under test reads it
    WORK_S = args.work_ms / 1000.0
    with tempfile.TemporaryDirectory() as tmp:
        over = overhead(args.steps, args.repeat, Path(tmp))
        big = scale(args.runs, Path(tmp), args.seed)
    result = {"overhead": over, "scale": big}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"per-step overhead: {args.steps:,} steps, coroutine sleeps {args.work_ms:g} ms, "
          f"median of {args.repeat}")  # fmt: skip
    print("| variant | µs per step | ratio to bare | overhead / bare | |")
    print("|---|---:|---:|---:|---|")
    print(f"| bare create_task + wait | {over['us_per_step']['bare']:.1f} | 1.00 | 0 | |")
    for key, title in (("plain", "run_step, no cutoff"), ("armed", "run_step, hedging armed"),
                       ("armed+jsonl", "run_step, hedging armed, JSONL ledger")):  # fmt: skip
        ratio, extra = over["ratio"][key], over["overhead"][key]
        verdict = ("PASS" if extra <= TARGET_RATIO else "FAIL") if key != "armed+jsonl" else ""
        us = over["us_per_step"][key]
        print(f"| {title} | {us:.1f} | {ratio:.2f} | {extra:.2f} | {verdict} |")
    print(f"\nscale: {big['runs']:,} concurrent runs of the sample workflow")
    verdict = "PASS" if big["rss_growth_mb"] < TARGET_MB else "FAIL"
    print(
        "| runs ok | attempts | seconds | RSS before MB | RSS growth MB | loop lag p50 / max ms | |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {big['ok']:,} | {big['attempts']:,} | {big['seconds']:.1f} | "
        f"{big['rss_before_mb']:.0f} | {big['rss_growth_mb']:.0f} | "
        f"{big['loop_lag_p50_ms']:.1f} / {big['loop_lag_max_ms']:.0f} | "
        f"{verdict} (< {TARGET_MB:.0f} MB) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
