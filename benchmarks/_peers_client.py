"""
One variant of `benchmarks/peers.py`, in a process of its own: its CPU and event loop are its own.

The parent starts one of these per variant and talks JSON lines: it sends ``{"op": "case",
...}`` (or ``{"op": "probe", ...}`` for the runs a plan is calibrated on) and reads back
``{"op": "done", ...}``; ``{"op": "quit"}`` ends the process. Every call of a case has a
scheduled start, the same for every variant; a call's seconds run from that instant (so a
client that falls behind pays for it) to its answer, or are ``inf`` when it fails. CPU is the
process's own (`time.process_time`, all threads) over the case; the event loop's lag is how
late a 20 ms ticker wakes.

Variants: ``none`` (one bare request per call, through tailkit's OpenAI adapter: no retry, no
timeout), ``tailkit`` (the calibrated plan, through the executor and the same adapter),
``tailkit-sdk`` (the same plan and executor around the official OpenAI SDK: an
``openai.AsyncOpenAI`` client per provider, through `tailkit.adapters.openai_sdk`, as a team
that already has the SDK would), ``tailkit-race``, and the LiteLLM Router variants of
`_peers_litellm`. A spec's ``base_urls`` gives a provider a base URL of its own (the outage
puts provider a behind a switch); every other route is on ``base_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import time

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tailkit.adapters.openai import chat_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import StepTimeout, TailkitError
from tailkit.executor import (
    Attempt,
    AttemptError,
    Executor,
    HedgeBudget,
    JsonlSink,
    Ledger,
    now,
)


MESSAGES = [{"role": "user", "content": "Write the account brief."}]
TICK_S = 0.02
WARMUP = "warmup"  # the served model every client calls once before a case starts
Call = Callable[[str], Awaitable[Any]]  # one step's call, by step name


class Lag:
    """
    How late a ticker wakes on the running loop, in milliseconds.
    """

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.late_ms.append(max(loop.time() - due, 0.0) * 1000.0)

    def start(self) -> None:
        """
        Start ticking.
        """
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> dict[str, float]:
        """
        Stop, and return the p50, p99 and largest lag.
        """
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        late = sorted(self.late_ms) or [0.0]
        p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
        return {"p50_ms": statistics.median(late), "p99_ms": p99, "max_ms": late[-1]}


def _attempt(route: Mapping[str, str], step: str, index: int) -> Attempt:
    return Attempt(step, route["name"], route["provider"], route["model"], 0, "primary",
                   f"{step}-{index}")  # fmt: skip


class ByProvider:
    """
    An attempt function that sends each attempt to its provider's own attempt function.
    """

    def __init__(self, fns: Mapping[str, Any], default: Any) -> None:
        self.fns, self.default = dict(fns), default

    def __call__(self, attempt: Attempt) -> Any:
        return self.fns.get(attempt.provider, self.default)(attempt)


class SdkClients:
    """
    ``tailkit-sdk``: one ``openai.AsyncOpenAI`` client per base URL, each in the SDK adapter.
    """

    def __init__(self, base_url: str, base_urls: Mapping[str, str], *, stream: bool) -> None:
        import openai

        from tailkit.adapters.openai_sdk import openai_chat_attempt

        urls = {base_url, *base_urls.values()}
        self.clients = {u: openai.AsyncOpenAI(base_url=u, api_key="sk-bench") for u in urls}
        fns = {u: openai_chat_attempt(c, MESSAGES, stream=stream) for u, c in self.clients.items()}
        self.attempt = ByProvider({p: fns[u] for p, u in base_urls.items()}, fns[base_url])

    async def aclose(self) -> None:
        """
        Close the clients (their connection pools).
        """
        for client in self.clients.values():
            await client.close()


def _tailkit_attempt(spec: Mapping[str, Any], variant: str) -> tuple[Any, Any]:
    """
    The attempt function of a tailkit variant for a case, and what to close after it.
    """
    urls: Mapping[str, str] = spec.get("base_urls") or {}
    if variant == "tailkit-sdk":
        sdk = SdkClients(spec["base_url"], urls, stream=spec["stream"])
        return sdk.attempt, sdk
    fns = {p: chat_attempt(u, MESSAGES, stream=spec["stream"]) for p, u in urls.items()}
    return ByProvider(fns, chat_attempt(spec["base_url"], MESSAGES, stream=spec["stream"])), None


class Bare:
    """
    ``none``: one request per call through the adapter, nothing else.
    """

    def __init__(self, base_url: str, routes: Mapping[str, Mapping[str, str]], *, stream: bool):
        self.routes = routes
        urls = {r.get("base_url", base_url) for r in routes.values()} | {base_url}
        self.fns = {u: chat_attempt(u, MESSAGES, stream=stream) for u in urls}
        self.base_url = base_url
        self.count = 0

    async def call(self, step: str) -> Any:
        """
        One request on the step's route; raises if it fails.
        """
        self.count += 1
        route = self.routes[step]
        fn = self.fns[route.get("base_url", self.base_url)]
        return await _once(fn(_attempt(route, step, self.count)))


async def _once(result: Any) -> Any:
    """
    What an attempt function returned, awaited, or (a stream) read to the end.
    """
    if hasattr(result, "__aiter__"):
        async for _ in result:
            pass
        return None
    return await result


async def _one_step(call: Call, step: str, at: float, deadline_s: float) -> tuple[float, bool]:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(at - loop.time(), 0.0))
    try:
        await call(step)
    except Exception:
        return math.inf, False
    seconds = loop.time() - at
    return seconds, seconds <= deadline_s


async def _dag(call: Call, plan: Plan, at: float, deadline_s: float) -> tuple[float, bool]:
    """
    One workflow run of bare or LiteLLM calls: each step when the steps it needs are done.
    """
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(at - loop.time(), 0.0))
    done: dict[str, asyncio.Future[bool]] = {n: loop.create_future() for n in plan.steps}

    async def step(name: str) -> None:
        needs = plan.steps[name].depends_on
        if needs and not all(await asyncio.gather(*(done[d] for d in needs))):
            done[name].set_result(False)
            return
        try:
            await call(name)
        except Exception:
            done[name].set_result(False)
            return
        done[name].set_result(True)

    await asyncio.gather(*(step(n) for n in plan.steps))
    required = [n for n, s in plan.steps.items() if s.required]
    if not all(done[n].result() for n in required):
        return math.inf, False
    seconds = loop.time() - at
    return seconds, seconds <= deadline_s


class Client:
    """
    One variant: the caller it builds for each case, and the case's measurements.
    """

    def __init__(self, variant: str) -> None:
        self.variant = variant

    async def _caller(self, spec: Mapping[str, Any]) -> tuple[Call, Callable[[], int], Any]:
        """
        The variant's call for a case, a counter of the step calls it made, and a closer.
        """
        routes = spec["routes"]
        if self.variant == "none":
            bare = Bare(spec["base_url"], routes, stream=spec["stream"])
            return bare.call, lambda: bare.count, None
        if self.variant.startswith("litellm"):
            import _peers_litellm as peers

            groups = [peers.Group(**g) for g in spec["groups"]]
            groups.append(peers.Group(WARMUP, WARMUP, None, 60.0))
            client = await peers.PeerClient.open(
                self.variant, groups, base_url=spec["base_url"], stream=spec["stream"],
                time_scale=spec["time_scale"],
            )  # fmt: skip
            counter = {"n": 0}

            async def litellm_call(step: str) -> Any:
                counter["n"] += step != WARMUP
                return await client.call(step, MESSAGES)

            return litellm_call, lambda: counter["n"], client
        msg = f"unknown variant {self.variant!r}"
        raise ValueError(msg)

    async def case(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """
        Run one case: every scheduled call (or run), then the measurements.
        """
        loop = asyncio.get_running_loop()
        steps = {"n": 0}  # the tailkit variant's step calls
        count: Callable[[], int] = lambda: steps["n"]  # noqa: E731
        deadline_s = float(spec["deadline_s"])
        offsets = spec["offsets"]
        plan = parse_plan(spec["plan"])
        closer: Any = None
        executor: Executor | None = None
        ledger = Ledger(JsonlSink(spec["ledger"])) if spec.get("ledger") else Ledger()
        if self.variant.startswith("tailkit"):
            # the race hedges every call: no share of its budget kept for recovery
            race = self.variant == "tailkit-race"
            budget = HedgeBudget(plan.hedge_budget, reserve=0.0) if race else None
            executor = Executor(plan, ledger=ledger, seed=spec.get("seed", 0), budget=budget)
            attempt, closer = _tailkit_attempt(spec, self.variant)
        else:
            call, count, closer = await self._caller(spec)
        # one untimed call on the server's warm-up model: connections, TLS and first-use costs
        # are paid before the clock starts (the access log leaves it out of every variant)
        warm = {"name": "warmup", "provider": "warmup", "model": WARMUP}
        if self.variant.startswith("litellm"):
            await call(WARMUP)
        elif executor is not None:  # through the variant's own attempt function (its SDK)
            await _once(attempt(_attempt(warm, WARMUP, 0)))
        else:
            await Bare(spec["base_url"], {WARMUP: warm}, stream=spec["stream"]).call(WARMUP)
        # start together: the parent gave a wall-clock instant
        await asyncio.sleep(max(spec["start_at"] - time.time(), 0.0))
        late_s = time.time() - spec["start_at"]  # > 0: the warm-up outlasted the lead
        lag = Lag()
        lag.start()
        cpu0, t0 = time.process_time(), loop.time()
        if executor is not None:
            runner = _TailkitRunner(executor, attempt, plan, deadline_s, steps)
            jobs = [runner.one(i, t0 + off, spec["kind"]) for i, off in enumerate(offsets)]
        elif spec["kind"] == "workflow":
            jobs = [_dag(call, plan, t0 + off, deadline_s) for off in offsets]
        else:
            step = next(iter(plan.steps))
            jobs = [_one_step(call, step, t0 + off, deadline_s) for off in offsets]
        results = await asyncio.gather(*jobs)
        cpu, wall = time.process_time() - cpu0, loop.time() - t0
        lags = await lag.stop()
        if closer is not None:
            await closer.aclose()
        ledger.close()
        denials = dict(executor.denials) if executor is not None else {}
        return {
            "op": "done", "variant": self.variant, "seconds": [r[0] for r in results],
            "ok": [r[1] for r in results], "step_calls": count(), "cpu_s": cpu,
            "wall_s": wall, "lag": lags, "denials": denials, "late_start_s": late_s,
        }  # fmt: skip


class _TailkitRunner:
    """
    The tailkit variant's calls: `Executor.run_step` for one step, `Executor.run` for a workflow.
    """

    def __init__(
        self, executor: Executor, attempt: Any, plan: Plan, deadline_s: float, steps: dict[str, int]
    ) -> None:
        self.executor, self.attempt, self.plan = executor, attempt, plan
        self.deadline_s, self.steps = deadline_s, steps

    async def one(self, index: int, at: float, kind: str) -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(at - loop.time(), 0.0))
        if kind == "workflow":
            result = await self.executor.run(
                self.attempt, run_id=f"w{index}", deadline_s=self.deadline_s
            )
            self.steps["n"] += len(result.finished) + len(result.failed) + len(result.cancelled)
            if not result.ok:
                return math.inf, False
            seconds = loop.time() - at
            return seconds, seconds <= self.deadline_s
        self.steps["n"] += 1
        step = next(iter(self.plan.steps))
        try:
            await self.executor.run_step(
                step, self.attempt, run_id="one", call_index=index,
                deadline=at + self.deadline_s,
            )  # fmt: skip
        except (StepTimeout, TailkitError, AttemptError):
            return math.inf, False
        seconds = now() - at
        return seconds, seconds <= self.deadline_s


async def probe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """
    Calls with no policy on every listed route, into a ledger the parent calibrates on.
    """
    plan = parse_plan(spec["plan"])
    ledger = Ledger(JsonlSink(spec["ledger"]))
    executor = Executor(plan, ledger=ledger)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    fns = {s: chat_attempt(spec["base_url"], MESSAGES, stream=bool(st))
           for s, st in spec["stream"].items()}  # fmt: skip

    async def one(i: int, step: str, at: float) -> None:
        await asyncio.sleep(max(at - loop.time(), 0.0))
        with contextlib.suppress(TailkitError):
            await executor.run_step(step, fns[step], run_id="probe", call_index=i)

    await asyncio.gather(*(one(i, s, t0 + off) for i, (s, off) in enumerate(spec["calls"])))
    ledger.close()
    return {"op": "done", "variant": "probe"}


async def serve_commands(variant: str) -> None:
    """
    Read commands from stdin, one JSON object per line, and answer each on stdout.
    """
    client = Client(variant)
    if variant.startswith("litellm"):  # import LiteLLM (seconds) before the first case
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # noqa: F401
    print(json.dumps({"op": "ready", "variant": variant}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        spec = json.loads(line)
        if spec["op"] == "quit":
            return
        answer = await (probe(spec) if spec["op"] == "probe" else client.case(spec))
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    asyncio.run(serve_commands(sys.argv[1]))
