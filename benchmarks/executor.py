"""
Executor overhead and loop lag: `run_step` against a bare task, and 10,000 workflow runs.

Every figure is a ratio against a baseline measured in the same run (this machine's speed
varies from minute to minute), except the loop lag, whose target is a latency.

Part 1, per-call overhead. The trivial attempt ``async def fn(a): return 1`` is run
``--calls`` times in a row by each variant:

- bare: ``asyncio.create_task(fn(None))`` then ``asyncio.wait({task})``;
- ``run_step``, unarmed: a step with no cutoff (nothing to watch);
- ``run_step``, armed: a step that hedges at a 30 s total cutoff, and one that hedges at a
  30 s TTFT cutoff (neither fires);
- ``run_step`` with a TTFT and a stall cutoff (the runner also waits on the attempt's chunk
  event), for information.

The ledger is the executor's default (validated and counted, no sink). A round times each
variant once, in an order that rotates from round to round, after a garbage collection; the
figure is the median over ``--repeats`` rounds of each round's ratio variant / bare. Rounds are
short (``--calls`` 1,000: well under a second) so that a busy machine slows the variants of a
round alike. Target: armed <= 2x. ``--profile`` prints cProfile's view of the armed variant
instead.

Part 2, loop lag at scale. ``--runs`` (10,000) runs of a 7-step workflow arrive at ``--rate``
(1,000) runs per second: the DAG and routes of ``data_samples/workflow.yaml``, each step
hedging on its other provider at its total cutoff. An attempt sleeps a lognormal time (step
medians 0.6-2 s, sigma 0.35) and 3 % of attempts stall 4x longer; the cutoffs sit at the body's
p99, so about 4 % of steps hedge. Attempts go to a JSON-lines ledger. A ticker measures how
late a 10 ms sleep wakes (the loop lag: p50, p99, max); the same arrivals run a bare DAG (one
task per step, awaiting its dependencies, the same sleeps, no cutoffs, no ledger) as the
baseline for CPU time per run. Each of these runs in its own process, which also times its
garbage collections (each one stops the loop): the full ones counted, the longest pause and
the total. Target: loop lag p99 < 100 ms. The lag's p99 counts ticks, so a long pause (a full
collection of a large heap) is one late tick: read it with the max and the runs' latency.

Both parts run under the default asyncio loop and, when it is installed (``pip install -e
'.[bench]'``), under uvloop. ``--quick`` is a smaller version (500 calls x 15 rounds; 2,000
runs at 500/s). ``--at REV`` measures the tailkit of a git revision (``--at HEAD``: without
the work tree's uncommitted changes), for before/after figures. ``--tracing off`` gives the
executor an observer that never traces (by default it traces whenever OpenTelemetry's API can
be imported); ``--gc off`` disables garbage collection in part 2, to show what it costs, and
``--gc tuned`` applies docs/executor.md's advice for a service (``gc.freeze()`` after set-up,
thresholds 50,000 / 50 / 50). Part 2 times every collection in wall and CPU time (on a busy
machine the wall time of a pause counts the moments the process waited for a core).

Before and after (issue 31). ``--against DIR`` compares this work tree's tailkit with the one
under ``DIR`` (a git worktree of the old commit: ``git worktree add /tmp/before HEAD``), each
figure in fresh processes, the two versions alternating: part 1 in ``--processes`` processes
each (the median of their medians); part 3, memory per concurrent run (``--census-runs`` runs
parked at each stage of the workflow, gates opening in order: traced bytes and collected
objects per run at the heaviest stage, against the bare DAG parked the same way); part 2 at
``--runs``; and the highest arrival rate at which the loop lag p99 stays under 100 ms (trials of
``--trial-seconds`` of arrivals, doubling from 100 runs/s, then three bisections), for the bare
DAG and each version. ``--only`` picks one of ``overhead``, ``census``, ``scale``, ``rates``.
Exits 0 whatever the figures, nonzero only on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import inspect
import io
import json
import math
import os
import platform
import pstats
import random
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import yaml

from tailkit.config import Plan, parse_plan
from tailkit.executor import Attempt, Executor, JsonlSink, Ledger


ROOT = Path(__file__).resolve().parents[1]
TARGET_ARMED, TARGET_LAG_MS = 2.0, 100.0
MICRO_PLAN = """\
tailkit_plan: 1
workflow: bench
deadline_s: 60
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  unarmed: {route: a/m}
  armed: {route: a/m, cutoff_s: 30, on_cutoff: hedge, hedge_route: b/m}
  ttft: {route: a/m, signal: ttft, ttft_cutoff_s: 30, on_cutoff: hedge, hedge_route: b/m}
  stall: {route: a/m, signal: ttft, ttft_cutoff_s: 30, stall_cutoff_s: 30, on_cutoff: hedge,
          hedge_route: b/m}
"""
VARIANTS = ("bare", "unarmed", "armed", "ttft", "stall")
ARMED = ("armed", "ttft")  # the variants the target is about
TITLES = {
    "bare": "bare `create_task` + `asyncio.wait`",
    "unarmed": "`run_step`, no cutoff",
    "armed": "`run_step`, armed: hedge at a total cutoff",
    "ttft": "`run_step`, armed: hedge at a TTFT cutoff",
    "stall": "`run_step`, armed: TTFT + stall cutoffs",
}
MEDIAN_S = {  # per step of the sample workflow: the simulated attempt's median seconds
    "extract": 0.8, "plan": 1.2, "review": 1.0, "tag": 0.6, "draft": 2.0, "revise": 1.6,
    "summarize": 0.6,
}  # fmt: skip
SIGMA, STALL_SHARE, STALL_FACTOR = 0.35, 0.03, 4.0
CUTOFF_Z = 2.326  # the cutoff at the body's p99
OTHER_PROVIDER = {  # the hedge route of each route: the same kind of model elsewhere
    "openai/gpt-4.1": "azure/gpt-4.1", "azure/gpt-4.1": "openai/gpt-4.1",
    "anthropic/claude-sonnet-4": "bedrock/claude-sonnet-4",
    "bedrock/claude-sonnet-4": "anthropic/claude-sonnet-4",
    "openai/gpt-4.1-mini": "google/gemini-2.5-flash",
    "google/gemini-2.5-flash": "openai/gpt-4.1-mini",
}  # fmt: skip


def loop_factories() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """
    The event loops to measure under: asyncio's default, and uvloop when it is installed.
    """
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop
    except ImportError:
        return loops
    loops["uvloop"] = uvloop.new_event_loop
    return loops


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """
    Run ``coro`` to completion on a new loop of kind ``loop``.
    """
    with asyncio.Runner(loop_factory=loop_factories()[loop]) as runner:
        return runner.run(coro)


def executor_for(plan: Plan, tracing: str, ledger: Ledger | None = None) -> Executor:
    """
    ``Executor(plan)`` as a user makes it; with ``tracing="off"``, told never to trace.
    """
    if tracing == "off" and "observer" in inspect.signature(Executor).parameters:
        import importlib

        # older executors take no observer (and never trace); some leave it unexported
        for where in ("tailkit.executor", "tailkit.executor._events"):
            try:
                observer = getattr(importlib.import_module(where), "Observer", None)
            except ImportError:
                continue
            if observer is not None:
                return Executor(plan, ledger=ledger, observer=observer(tracing=False))
    return Executor(plan, ledger=ledger)


def traces(executor: Executor) -> bool:
    """
    Whether ``executor`` makes OpenTelemetry spans (it does by default when the API imports).
    """
    observer = getattr(executor.shared, "observer", None)
    return bool(getattr(observer, "tracing", False))


# -- part 1: per-call overhead -------------------------------------------------------------


async def trivial(_: Attempt | None = None) -> int:
    """
    The attempt every variant runs: it returns at once, without yielding to the loop.
    """
    return 1


async def time_variant(executor: Executor, variant: str, calls: int) -> float:
    """
    Seconds for ``calls`` calls of ``variant``, one after the other.
    """
    if variant == "bare":
        t0 = time.perf_counter()
        for _ in range(calls):
            task = asyncio.create_task(trivial())
            await asyncio.wait({task})
        return time.perf_counter() - t0
    run_step = executor.run_step
    t0 = time.perf_counter()
    for i in range(calls):
        await run_step(variant, trivial, call_index=i)
    return time.perf_counter() - t0


async def rounds(calls: int, repeats: int, tracing: str) -> dict[str, list[float]]:
    """
    Per variant, the seconds of each round (rounds interleave the variants, order rotating).
    """
    executor = executor_for(parse_plan(MICRO_PLAN), tracing)
    for variant in VARIANTS:  # warm-up: caches, the budget's memory of closed calls
        await time_variant(executor, variant, max(calls // 5, 100))
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(repeats):
        for variant in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
            gc.collect()
            times[variant].append(await time_variant(executor, variant, calls))
    return times


def overhead(loop: str, calls: int, repeats: int, tracing: str) -> dict[str, Any]:
    """
    Microseconds per call and the ratios to bare (median over rounds, and their range).
    """
    times: dict[str, list[float]] = run_on(loop, rounds(calls, repeats, tracing))
    bare = times["bare"]
    result: dict[str, Any] = {"calls": calls, "repeats": repeats, "variants": {}}
    for variant in VARIANTS:
        ratios = [t / b for t, b in zip(times[variant], bare, strict=True)]
        result["variants"][variant] = {
            "us_per_call": statistics.median(times[variant]) / calls * 1e6,
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return result


def profile(loop: str, calls: int, tracing: str) -> str:
    """
    The profiler's table (by own time, then by cumulative time) of ``calls`` armed calls.
    """
    executor = executor_for(parse_plan(MICRO_PLAN), tracing)
    profiler = cProfile.Profile()

    async def main() -> None:
        await time_variant(executor, "armed", calls // 5)
        profiler.enable()
        await time_variant(executor, "armed", calls)
        profiler.disable()

    run_on(loop, main())
    return profile_table(profiler)


def profile_table(profiler: cProfile.Profile, top: int = 30) -> str:
    """
    The ``top`` functions by own time, then by cumulative time.
    """
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


# -- part 2: loop lag at scale --------------------------------------------------------------


def scale_plan() -> Plan:
    """
    The sample workflow, each step hedging on its other provider at its body's p99.
    """
    doc = yaml.safe_load((ROOT / "data_samples" / "workflow.yaml").read_text(encoding="utf-8"))
    for name, step in doc["steps"].items():
        step["cutoff_s"] = round(MEDIAN_S[name] * math.exp(CUTOFF_Z * SIGMA), 3)
        step["on_cutoff"] = "hedge"
        step["hedge_route"] = OTHER_PROVIDER[step["route"]]
    return parse_plan(yaml.safe_dump(doc, sort_keys=False))


class Scale:
    """
    One process's arrivals, ticker and counters for part 2.
    """

    def __init__(self, spec: dict[str, Any], ledger: Path) -> None:
        self.kind, self.runs, self.rate = spec["kind"], spec["runs"], spec["rate"]
        self.plan = scale_plan()
        self.order = self.plan.order()
        # the executor's attempts go to a JSON-lines file (``--ledger none``: counted only)
        self.ledger = Ledger(JsonlSink(ledger)) if spec.get("ledger") != "none" else Ledger()
        self.executor = executor_for(self.plan, spec["tracing"], self.ledger)
        self.rng = random.Random(spec["seed"])  # noqa: S311 - simulated latency, not secrets
        self.roles: Counter[str] = Counter()
        self.lags: list[float] = []
        self.elapsed: list[float] = []
        self.in_flight = self.peak = self.ok = 0
        # (generation, seconds, CPU seconds) per collection: on a shared machine a pause's wall
        # time counts the moments the process waited for a core; its CPU time does not
        self.gc_pauses: list[tuple[int, float, float]] = []
        self._gc_start = self._gc_cpu = 0.0

    def draw(self, step: str) -> float:
        """
        Seconds one attempt of ``step`` takes.
        """
        seconds = MEDIAN_S[step] * self.rng.lognormvariate(0.0, SIGMA)
        return seconds * STALL_FACTOR if self.rng.random() < STALL_SHARE else seconds

    async def attempt(self, a: Attempt) -> str:
        """
        The simulated model call.
        """
        self.roles[a.role] += 1
        await asyncio.sleep(self.draw(a.step))
        return a.step

    async def bare_run(self) -> bool:
        """
        The baseline: one task per step, each awaiting its dependencies, then sleeping.
        """
        tasks: dict[str, asyncio.Task[str]] = {}

        async def step(name: str) -> str:
            deps = [tasks[d] for d in self.plan.steps[name].depends_on]
            if deps:
                await asyncio.gather(*deps)
            await asyncio.sleep(self.draw(name))
            return name

        for name in self.order:
            tasks[name] = asyncio.create_task(step(name))
        await asyncio.gather(*tasks.values())
        return True

    async def one(self, i: int) -> None:
        """
        Run number ``i``, counting runs in flight.
        """
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        t0 = time.perf_counter()
        try:
            if self.kind == "bare":
                ok = await self.bare_run()
            else:
                ok = (await self.executor.run(self.attempt, run_id=f"r{i}")).ok
        finally:
            self.in_flight -= 1
        self.elapsed.append(time.perf_counter() - t0)
        self.ok += ok

    async def ticker(self, stop: asyncio.Event, lags: list[float]) -> None:
        """
        Until ``stop``, sleep 10 ms again and again; add how late each wake-up was to ``lags``.
        """
        while not stop.is_set():
            t0 = time.perf_counter()  # not loop.time(): uvloop's clock counts milliseconds
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - t0 - 0.01)

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """
        Time every garbage collection (``gc.callbacks`` calls this): each one stops the loop.
        """
        if phase == "start":
            self._gc_start, self._gc_cpu = time.perf_counter(), time.thread_time()
        else:
            wall, cpu = time.perf_counter() - self._gc_start, time.thread_time() - self._gc_cpu
            self.gc_pauses.append((info["generation"], wall, cpu))

    async def main(self) -> dict[str, float]:
        """
        The idle loop's lag for a second, then the arrivals, until every run has ended.
        """
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        idle: list[float] = []
        tick = asyncio.create_task(self.ticker(stop, idle))
        await asyncio.sleep(1.0)  # the idle loop's lag: the floor of the figures below
        stop.set()
        await tick
        stop = asyncio.Event()
        tick = asyncio.create_task(self.ticker(stop, self.lags))
        tasks = []
        cpu0, t0 = time.process_time(), loop.time()
        for i in range(self.runs):  # open arrivals: a late loop starts the overdue runs at once
            delay = t0 + i / self.rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one(i)))
        arrivals = loop.time() - t0
        await asyncio.gather(*tasks)
        wall, cpu = loop.time() - t0, time.process_time() - cpu0
        stop.set()
        await tick
        return {"idle_lag_p99_ms": 1e3 * quantile(idle, 0.99), "arrivals_s": arrivals,
                "wall_s": wall, "cpu_s": cpu}  # fmt: skip

    def measure(self, loop: str) -> dict[str, Any]:
        """
        Run `main` on a ``loop`` loop; every figure of part 2.
        """
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        gc.callbacks.append(self.on_gc)
        try:
            times = run_on(loop, self.main())
        finally:
            gc.callbacks.remove(self.on_gc)
            self.ledger.close()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        firsts = self.roles["primary"]
        return {
            "loop": loop, "kind": self.kind, "runs": self.runs, "rate": self.rate,
            "ok": self.ok, "peak_in_flight": self.peak,
            "attempts": self.ledger.counts()["attempts"] if self.kind != "bare" else 0,
            "hedges": self.roles["hedge"], "hedge_share": self.roles["hedge"] / max(firsts, 1),
            "denials": self.executor.denials["budget"] + self.executor.denials["throttle"],
            "lag_p50_ms": 1e3 * quantile(self.lags, 0.5),
            "lag_p99_ms": 1e3 * quantile(self.lags, 0.99),
            "lag_max_ms": 1e3 * max(self.lags, default=0.0),
            "ticks": len(self.lags),
            **times,
            "cpu_ms_per_run": 1e3 * times["cpu_s"] / self.runs,
            "cpu_share": times["cpu_s"] / times["wall_s"],
            "run_p50_s": quantile(self.elapsed, 0.5), "run_p99_s": quantile(self.elapsed, 0.99),
            "gc_full": sum(g == 2 for g, _, _ in self.gc_pauses),
            "gc_longest_ms": 1e3 * max((s for _, s, _ in self.gc_pauses), default=0.0),
            "gc_full_longest_ms": 1e3 * max((s for g, s, _ in self.gc_pauses if g == 2),
                                            default=0.0),
            "gc_full_longest_cpu_ms": 1e3 * max((c for g, _, c in self.gc_pauses if g == 2),
                                                default=0.0),
            "gc_total_s": sum(s for _, s, _ in self.gc_pauses),
            "gc_cpu_s": sum(c for _, _, c in self.gc_pauses),
            "rss_growth_kb_per_run": 1024 * (rss - rss0) / max(self.peak, 1),
            "rss_before_mb": rss0, "rss_peak_mb": rss,
        }  # fmt: skip


def quantile(values: list[float], q: float) -> float:
    """
    The ``q`` quantile of ``values`` (nearest rank; 0 for none).
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def scale(spec: dict[str, Any]) -> dict[str, Any]:
    """
    Part 2 for one loop and one runner (``spec``: loop, kind, runs, rate, seed, tracing, gc).
    """
    loop, kind = spec["loop"], spec["kind"]
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        msg = f"scale worker {loop}/{kind} failed:\n{done.stderr}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def worker(spec: dict[str, Any], *, profiled: bool = False) -> None:
    """
    Run one part-2 measurement and print it as JSON (or, ``profiled``, as a profile).

    A ``spec["part"]`` of ``overhead``, ``census`` or ``trial`` runs that measurement instead.
    """
    part = spec.get("part", "scale")
    if part == "overhead":
        print(json.dumps(overhead(spec["loop"], spec["calls"], spec["repeats"], spec["tracing"])))
        return
    if part in ("census", "trial"):
        print(json.dumps(worker_part(spec)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        bench = Scale(spec, Path(tmp) / "ledger.jsonl")
        set_gc(spec["gc"])
        if not profiled:
            print(json.dumps(bench.measure(spec["loop"])))
            return
        profiler = cProfile.Profile()
        profiler.enable()
        bench.measure(spec["loop"])
        profiler.disable()
        print(profile_table(profiler))


# -- part 3: memory per concurrent run, and the highest rate the loop keeps up with ------------


def census(spec: dict[str, Any]) -> dict[str, Any]:
    """
    Bytes and garbage-collected objects per run in flight, at each stage of the workflow.

    ``spec["runs"]`` runs start at once; every attempt (every bare step) waits on a gate of
    its step, and the gates open one by one in the plan's order. Between two gates every run
    is parked at the same steps, so the difference from before the runs started, divided by
    the runs, is what one run in flight holds there: traced bytes (``tracemalloc``) and
    objects the garbage collector tracks (each one walked by every full collection). The
    figure is the heaviest stage.
    """
    import tracemalloc

    async def main() -> list[tuple[str, float, float]]:
        plan = scale_plan()
        order = plan.order()
        loop = asyncio.get_running_loop()
        gates = {name: loop.create_future() for name in order}
        with tempfile.TemporaryDirectory() as tmp:
            ledger = Ledger(JsonlSink(Path(tmp) / "ledger.jsonl"))
            executor = executor_for(plan, spec["tracing"], ledger)

            async def attempt(a: Attempt) -> str:
                await gates[a.step]
                return a.step

            async def bare_run() -> None:
                tasks: dict[str, asyncio.Task[str]] = {}

                async def step(name: str) -> str:
                    deps = [tasks[d] for d in plan.steps[name].depends_on]
                    if deps:
                        await asyncio.gather(*deps)
                    await gates[name]
                    return name

                for name in order:
                    tasks[name] = asyncio.create_task(step(name))
                await asyncio.gather(*tasks.values())

            async def one(i: int) -> None:
                if spec["kind"] == "bare":
                    await bare_run()
                else:
                    await executor.run(attempt, run_id=f"r{i}")

            for _ in range(3):
                await asyncio.sleep(0)
            gc.collect()
            objects0, bytes0 = len(gc.get_objects()), tracemalloc.get_traced_memory()[0]
            runs = spec["runs"]
            tasks = [asyncio.create_task(one(i)) for i in range(runs)]
            stages = []
            for name in order:
                for _ in range(10):  # every run reaches the gate
                    await asyncio.sleep(0)
                gc.collect()
                objects = (len(gc.get_objects()) - objects0) / runs
                held = (tracemalloc.get_traced_memory()[0] - bytes0) / runs
                stages.append((name, objects, held))
                gates[name].set_result(None)
            await asyncio.gather(*tasks)
            ledger.close()
        return stages

    tracemalloc.start()
    stages = run_on(spec["loop"], main())
    tracemalloc.stop()
    heaviest = max(stages, key=lambda stage: stage[2])
    return {"loop": spec["loop"], "kind": spec["kind"], "runs": spec["runs"],
            "bytes_per_run": heaviest[2], "objects_per_run": max(o for _, o, _ in stages),
            "heaviest_stage": heaviest[0],
            "stages": {name: {"objects": o, "bytes": b} for name, o, b in stages}}  # fmt: skip


class Trial(Scale):
    """
    Part 2's arrivals at one rate for a while: does the loop keep its lag p99 under 100 ms?

    Arrivals last ``spec["seconds"]``; the lag is measured while they do (the runs then in
    flight keep coming: the loop's busiest time), and the runs still going are then cancelled.
    """

    async def main(self) -> dict[str, float]:
        """
        The arrivals for ``seconds``, the lag meanwhile; then cancel what still runs.
        """
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        tick = asyncio.create_task(self.ticker(stop, self.lags))
        tasks = []
        cpu0, t0 = time.process_time(), loop.time()
        i = 0
        while loop.time() - t0 < self.seconds:
            delay = t0 + i / self.rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one(i)))
            i += 1
        cpu = time.process_time() - cpu0
        stop.set()
        await tick
        self.runs = i
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {"arrivals_s": loop.time() - t0, "wall_s": loop.time() - t0, "cpu_s": cpu,
                "idle_lag_p99_ms": 0.0}  # fmt: skip

    def __init__(self, spec: dict[str, Any], ledger: Path) -> None:
        super().__init__(spec, ledger)
        self.seconds = spec["seconds"]


TUNED_THRESHOLDS = (50_000, 50, 50)  # what docs/executor.md recommends for a service


def set_gc(mode: str) -> None:
    """
    Garbage collection for part 2, once set up: ``default``, ``off``, or ``tuned``.

    ``tuned`` is docs/executor.md's advice for a service: ``gc.freeze()`` once start-up is
    done (the modules and the plan are never walked again) and a first threshold of 50,000.
    """
    if mode == "off":
        gc.disable()
    elif mode == "tuned":
        gc.collect()
        gc.freeze()
        gc.set_threshold(*TUNED_THRESHOLDS)


def worker_part(spec: dict[str, Any]) -> dict[str, Any]:
    """
    One measurement in this process: part 2 (``scale``), a ``census`` or a rate ``trial``.
    """
    part = spec.get("part", "scale")
    if part == "census":
        return census(spec)
    with tempfile.TemporaryDirectory() as tmp:
        bench = (Trial if part == "trial" else Scale)(spec, Path(tmp) / "ledger.jsonl")
        set_gc(spec["gc"])
        return bench.measure(spec["loop"])


def in_process(spec: dict[str, Any], tailkit_root: str | None = None) -> dict[str, Any]:
    """
    Run ``spec`` in a fresh process, with the tailkit package found under ``tailkit_root``.
    """
    env = dict(os.environ)
    if tailkit_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tailkit_root, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        msg = f"worker {spec} failed:\n{done.stderr}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def highest_rate(spec: dict[str, Any], tailkit_root: str | None, *, lo: float = 100.0,
                 top: float = 3200.0, steps: int = 3) -> dict[str, Any]:  # fmt: skip
    """
    The highest arrival rate (runs/s) whose trial keeps the loop lag p99 under 100 ms.

    Doubling from ``lo`` until a trial fails (or ``top``), then ``steps`` geometric bisections.
    """
    trials = []

    def passes(rate: float) -> bool:
        result = in_process({**spec, "part": "trial", "rate": rate}, tailkit_root)
        trials.append({"rate": rate, "lag_p99_ms": result["lag_p99_ms"],
                       "cpu_ms_per_run": result["cpu_ms_per_run"]})  # fmt: skip
        return bool(result["lag_p99_ms"] < TARGET_LAG_MS)

    good, bad = 0.0, math.inf
    rate = lo
    while rate <= top:
        if not passes(rate):
            bad = rate
            break
        good, rate = rate, rate * 2
    if good and math.isfinite(bad):
        for _ in range(steps):
            mid = math.sqrt(good * bad)
            good, bad = (mid, bad) if passes(mid) else (good, mid)
    return {"kind": spec["kind"], "highest_rate": good, "first_failing_rate": bad,
            "trials": trials}  # fmt: skip


def compare(args: argparse.Namespace, against: str) -> dict[str, Any]:
    """
    This work tree's executor against the tailkit under ``against``, process by process.

    Each figure alternates the two (old, new, old, new, ...) in fresh processes, so a busy
    machine slows both alike; the bare baselines run in the same rounds.
    """
    loop, tracing = "asyncio", args.tracing
    trees = {"before": against, "after": str(ROOT)}
    out: dict[str, Any] = {"against": against, "overhead": {}, "census": {}, "scale": {},
                           "rates": {}}  # fmt: skip
    calls, repeats = args.calls or 1_000, args.repeats or 41
    if args.only in (None, "overhead"):
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(args.processes):
            for name, root in trees.items():
                spec = {"part": "overhead", "loop": loop, "calls": calls, "repeats": repeats,
                        "tracing": tracing}  # fmt: skip
                rounds[name].append(in_process(spec, root))
        for name, results in rounds.items():
            out["overhead"][name] = {
                variant: statistics.median(r["variants"][variant]["ratio"] for r in results)
                for variant in VARIANTS
            }
    if args.only in (None, "census"):
        for name, root in trees.items():
            for kind in ("bare", "executor"):
                spec = {"part": "census", "loop": loop, "kind": kind, "runs": args.census_runs,
                        "tracing": tracing}  # fmt: skip
                out["census"][f"{name}/{kind}"] = in_process(spec, root)
    base = {"loop": loop, "runs": args.runs or 10_000, "rate": args.rate or 1_000.0,
            "seed": args.seed, "tracing": tracing, "gc": args.gc,
            "ledger": args.ledger}  # fmt: skip
    if args.only in (None, "scale"):
        for name, root in trees.items():
            for kind in ("bare", "executor"):
                out["scale"][f"{name}/{kind}"] = in_process({**base, "kind": kind}, root)
    if args.only in (None, "rates"):
        trial = {**base, "seconds": args.trial_seconds}
        out["rates"]["bare"] = highest_rate({**trial, "kind": "bare"}, str(ROOT))
        for name, root in trees.items():
            out["rates"][name] = highest_rate({**trial, "kind": "executor"}, root)
    return out


def compare_report(out: dict[str, Any]) -> list[str]:
    """
    The comparison as markdown: before and after, each against its bare baseline.
    """
    lines = [f"before: tailkit under {out['against']}; after: this work tree", ""]
    if out["overhead"]:
        lines += ["| per-call overhead (median of processes' medians) | before | after |",
                  "|---|---:|---:|"]  # fmt: skip
        for variant in VARIANTS[1:]:
            b, a = out["overhead"]["before"][variant], out["overhead"]["after"][variant]
            lines.append(f"| {TITLES[variant]} / bare | {b:.2f}× | {a:.2f}× |")
        lines.append("")
    if out["census"]:
        c = out["census"]
        lines += ["| memory per concurrent run (heaviest stage) | bare DAG | before | after |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        bare = c["after/bare"]
        for key, unit, scale_by in (("bytes_per_run", "KB", 1e-3), ("objects_per_run", "", 1)):
            row = [bare[key] * scale_by, c["before/executor"][key] * scale_by,
                   c["after/executor"][key] * scale_by]  # fmt: skip
            lines.append(
                f"| {key.replace('_', ' ')} | {row[0]:.1f} {unit} | {row[1]:.1f} {unit} "
                f"({row[1] / row[0]:.2f}×) | {row[2]:.1f} {unit} ({row[2] / row[0]:.2f}×) |"
            )
        lines.append("")
    if out["scale"]:
        lines += ["| scale (one process each) | CPU ms per run (× its bare) | full GCs "
                  "| longest full GC ms (CPU ms) | lag p99 / max ms | RSS growth KB per run |",
                  "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for key, r in out["scale"].items():
            bare = out["scale"][key.split("/")[0] + "/bare"]
            lines.append(
                f"| {key} | {r['cpu_ms_per_run']:.2f} "
                f"({r['cpu_ms_per_run'] / bare['cpu_ms_per_run']:.2f}×) | {r['gc_full']} "
                f"| {r['gc_full_longest_ms']:.0f} ({r['gc_full_longest_cpu_ms']:.0f}) "
                f"| {r['lag_p99_ms']:.0f} / {r['lag_max_ms']:.0f} "
                f"| {r['rss_growth_kb_per_run']:.1f} |"
            )
        lines.append("")
    if out["rates"]:
        bare = out["rates"]["bare"]["highest_rate"]
        lines += ["| highest arrival rate with lag p99 < 100 ms | runs/s | × bare DAG |",
                  "|---|---:|---:|"]  # fmt: skip
        for key, r in out["rates"].items():
            ratio = r["highest_rate"] / bare if bare else math.nan
            lines.append(f"| {key} | {r['highest_rate']:.0f} | {ratio:.2f}× |")
    return lines


# -- output ---------------------------------------------------------------------------------


def overhead_table(results: dict[str, dict[str, Any]]) -> list[str]:
    """
    Part 1 as a markdown table.
    """
    lines = [
        "| loop | variant | µs per call | ratio to bare (median of rounds) | rounds' range | |",
        "|---|---|---:|---:|---:|---|",
    ]
    for loop, result in results.items():
        for variant, v in result["variants"].items():
            verdict = ""
            if variant in ARMED:
                verdict = "PASS" if v["ratio"] <= TARGET_ARMED else f"FAIL (> {TARGET_ARMED:g}×)"
            lines.append(
                f"| {loop} | {TITLES[variant]} | {v['us_per_call']:.1f} | {v['ratio']:.2f}× "
                f"| {v['ratio_min']:.2f}–{v['ratio_max']:.2f} | {verdict} |"
            )
    return lines


def scale_table(results: list[dict[str, Any]]) -> list[str]:
    """
    Part 2 as a markdown table (the CPU ratio against the bare DAG of the same loop).
    """
    lines = [
        "| loop | runner | runs ok | peak runs in flight | attempts (hedges) | wall s "
        "| loop lag p50 / p99 / max ms | CPU ms per run (× bare) | run p50 / p99 s "
        "| GC: full collections / longest pause ms / total s | peak RSS MB | |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    bare = {r["loop"]: r for r in results if r["kind"] == "bare"}
    for r in results:
        times = ""
        if r["kind"] != "bare" and r["loop"] in bare:
            times = f" ({r['cpu_ms_per_run'] / bare[r['loop']]['cpu_ms_per_run']:.1f}×)"
        attempts = f"{r['attempts']:,} ({r['hedges']:,})" if r["kind"] != "bare" else "–"
        verdict = "PASS" if r["lag_p99_ms"] < TARGET_LAG_MS else "FAIL"
        verdict = verdict if r["kind"] != "bare" else ""
        lines.append(
            f"| {r['loop']} | {r['kind']} | {r['ok']:,} / {r['runs']:,} | {r['peak_in_flight']:,} "
            f"| {attempts} | {r['wall_s']:.1f} | {r['lag_p50_ms']:.1f} / {r['lag_p99_ms']:.1f} / "
            f"{r['lag_max_ms']:.0f} | {r['cpu_ms_per_run']:.2f}{times} "
            f"| {r['run_p50_s']:.2f} / {r['run_p99_s']:.2f} "
            f"| {r['gc_full']} / {r['gc_longest_ms']:.0f} / {r['gc_total_s']:.1f} "
            f"| {r['rss_peak_mb']:.0f} | {verdict} |"
        )
    return lines


def provenance() -> str:
    """
    Which tailkit is measured: its folder, and for this checkout its commit.
    """
    import tailkit

    where = Path(tailkit.__file__).resolve().parent
    if where != ROOT / "tailkit":
        return os.environ.get("TAILKIT_BENCH_AT", str(where))
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    dirty = subprocess.run([*git, "status", "--porcelain", "tailkit"],
                           capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return f"work tree at {head or '?'}" + (" + uncommitted changes" if dirty else "")


def at_revision(rev: str, argv: list[str]) -> int:
    """
    Run this benchmark (from the work tree) against the tailkit package of git revision ``rev``.
    """
    rest = [a for i, a in enumerate(argv) if a != "--at" and (i == 0 or argv[i - 1] != "--at")]
    rest = [a for a in rest if not a.startswith("--at=")]
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", rev],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run([*git, "archive", commit, "tailkit"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        path = os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "TAILKIT_BENCH_AT": f"git {rev} ({commit})"}
        return subprocess.run([sys.executable, __file__, *rest], env=env, check=False).returncode


def arguments() -> argparse.ArgumentParser:
    """
    The command line.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="a smaller version (~2 minutes)")
    add("--json", action="store_true", help="print JSON instead of tables")
    add("--only", choices=("overhead", "scale", "census", "rates"),
        help="run one part (census and rates: with --against only)")  # fmt: skip
    add("--against", metavar="DIR",
        help="compare with the tailkit package under DIR (e.g. a git worktree of the old "
        "commit), process against process, interleaved: overhead, memory per concurrent run, "
        "part 2 at --runs, and the highest arrival rate with lag p99 < 100 ms")  # fmt: skip
    add("--processes", type=int, default=5,
        help="with --against: overhead processes per version (default 5)")  # fmt: skip
    add(
        "--census-runs",
        type=int,
        default=2_000,
        help="with --against: runs parked at each stage for the memory census (default 2,000)",
    )
    add(
        "--trial-seconds",
        type=float,
        default=8.0,
        help="with --against: seconds of arrivals per rate trial (default 8)",
    )
    add("--loops", help="comma-separated: asyncio,uvloop (default: those installed)")
    add("--calls", type=int, help="calls per round (default 1,000; quick 500)")
    add("--repeats", type=int, help="rounds (default 41; quick 15)")
    add("--runs", type=int, help="workflow runs (default 10,000; quick 2,000)")
    add("--rate", type=float, help="runs per second (default 1,000; quick 500)")
    add("--seed", type=int, default=7)
    add(
        "--profile",
        action="store_true",
        help="print a profile of the armed run_step (with --only scale: of part 2), nothing else",
    )
    add("--at", metavar="REV", help="measure tailkit as of this git revision")
    add(
        "--tracing",
        choices=("auto", "off"),
        default="auto",
        help="auto: Executor(plan) as is (it traces when OpenTelemetry's API imports); "
        "off: an observer that never traces",
    )
    add(
        "--gc",
        choices=("default", "off", "tuned"),
        default="default",
        help="off: no garbage collection in part 2 (what the full collections cost); tuned: "
        "gc.freeze() after set-up and thresholds (50,000, 50, 50), as docs/executor.md advises",
    )
    add(
        "--ledger",
        choices=("jsonl", "none"),
        default="jsonl",
        help="with --against: part 2's ledger (none: attempts counted, no line written)",
    )
    add("--worker", help=argparse.SUPPRESS)
    return parser  # fmt: skip


def report(meta: dict[str, Any], over: dict[str, Any], big: list[dict[str, Any]]) -> None:
    """
    Print the figures as markdown.
    """
    load = f"load average {meta['loadavg_before'][0]:.2f} → {meta['loadavg_after'][0]:.2f}"
    tracing = "on" if meta["default_executor_traces"] and meta["tracing"] == "auto" else "off"
    print(f"tailkit {meta['tailkit']}; Python {meta['python']}, {meta['cpus']} CPUs, {load}; "
          f"tracing {tracing}; garbage collection in part 2: {meta['gc']}\n")  # fmt: skip
    if over:
        print(f"per-call overhead: {meta['calls']:,} calls per round, {meta['repeats']} rounds, "
              f"interleaved; target: armed ≤ {TARGET_ARMED:g}× bare\n")  # fmt: skip
        print("\n".join(overhead_table(over)))
    if big:
        target = f"target: loop lag p99 < {TARGET_LAG_MS:.0f} ms"
        print(f"\nloop lag at scale: {meta['runs']:,} runs of the 7-step sample workflow "
              f"arriving at {meta['rate']:,.0f}/s; {target}\n")  # fmt: skip
        print("\n".join(scale_table(big)))


def main(argv: list[str] | None = None) -> int:
    """
    Run both parts and print markdown tables (or JSON).
    """
    parser = arguments()
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.at:
        return at_revision(args.at, sys.argv[1:] if argv is None else argv)
    if args.against:
        out = compare(args, str(Path(args.against).resolve()))
        out["meta"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "loadavg": os.getloadavg(), "tailkit_after": provenance()}  # fmt: skip
        print(json.dumps(out, indent=2) if args.json else "\n".join(compare_report(out)))
        return 0
    if args.only in ("census", "rates"):
        parser.error("--only census and --only rates need --against DIR")
    calls = args.calls or (500 if args.quick else 1_000)
    repeats = args.repeats or (15 if args.quick else 41)
    runs = args.runs or (2_000 if args.quick else 10_000)
    rate = args.rate or (500.0 if args.quick else 1_000.0)
    loops = args.loops.split(",") if args.loops else list(loop_factories())
    unknown = set(loops) - set(loop_factories())
    if unknown:
        parser.error(f"loop(s) not available: {', '.join(sorted(unknown))}")
    specs = [
        {"loop": loop, "kind": kind, "runs": runs, "rate": rate, "seed": args.seed,
         "tracing": args.tracing, "gc": args.gc}
        for loop in loops for kind in ("bare", "executor")
    ]  # fmt: skip
    if args.profile:
        for loop in loops:
            if args.only == "scale":
                print(f"## {loop}: {runs:,} workflow runs at {rate:,.0f}/s under cProfile\n")
                worker(next(s for s in specs if s["loop"] == loop and s["kind"] == "executor"),
                       profiled=True)  # fmt: skip
            else:
                print(f"## {loop}: {calls:,} armed run_step calls under cProfile\n")
                print(profile(loop, calls, args.tracing))
        return 0
    meta = {
        "tailkit": provenance(), "tracing": args.tracing, "gc": args.gc,
        "default_executor_traces": traces(Executor(parse_plan(MICRO_PLAN))),
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(), "calls": calls, "repeats": repeats, "runs": runs,
        "rate": rate, "seed": args.seed,
    }  # fmt: skip
    over = {}
    if args.only != "scale":
        over = {loop: overhead(loop, calls, repeats, args.tracing) for loop in loops}
    big = [scale(spec) for spec in specs] if args.only != "overhead" else []
    meta["loadavg_after"] = os.getloadavg()
    if args.json:
        print(json.dumps({"meta": meta, "overhead": over, "scale": big}, indent=2))
    else:
        report(meta, over, big)
    return 0


if __name__ == "__main__":
    sys.exit(main())
