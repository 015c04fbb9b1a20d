"""
The fault suite: workflow runs through the OpenAI adapter against `tailkit serve`, real sockets.

Every scenario runs a two-step workflow (``draft``, hedged to a clean provider, then a
non-idempotent ``tool``) many times at once on 127.0.0.1, time-scaled (profile seconds x 0.02),
with one fault (or all of them) injected into the faulty routes. For every run and scenario:

- it ends by its deadline plus ``BOUND_S`` (the measured slack is printed by ``-s``);
- no task and no connection is left behind;
- the ledger and the server's access log agree: the server never saw an attempt the ledger
  does not have, and every attempt the ledger calls ok the server answered ok;
- the non-idempotent tool executed each logical call at most once (a 429 means it did not run);
- under a 429 storm, extra attempts stay within the hedge budget (no retry amplification).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import math
import time

from typing import Any

import httpx
import pytest

from tailkit.adapters.openai import chat_attempt
from tailkit.config import parse_plan
from tailkit.executor import Executor, HedgeBudget, Ledger, MemorySink, RunResult
from tailkit.serve import Faults, ModelProfile, ServeConfig, Server


SCALE = 0.02
DEADLINE_S = 1.0  # real seconds (50 s of profile time)
BOUND_S = 0.25  # a run may end this much after its deadline (cancellation and socket close)
BUDGET, ALLOWANCE, WINDOW_S = 0.06, 2, 1.0
PLAN = parse_plan(f"""\
tailkit_plan: 1
workflow: faults
deadline_s: {DEADLINE_S}
hedge_budget: {BUDGET}
routes:
  a/m: {{provider: a, model: m-a}}
  b/m: {{provider: b, model: m-b}}
  t/tool: {{provider: t, model: tool}}
steps:
  draft:
    route: a/m
    ttft_cutoff_s: 0.12
    stall_cutoff_s: 0.08
    cutoff_s: 0.3
    on_cutoff: hedge
    hedge_route: b/m
  tool:
    route: t/tool
    depends_on: [draft]
    idempotent: false
""")
CLEAN = ModelProfile(ttft_median_s=1.0, ttft_sigma=0.2, tokens_per_s=50.0, gen_sigma=0.1,
                     output_tokens=20)  # fmt: skip
SCENARIOS = {
    "hang": Faults(hang=0.3),
    "stall_mid": Faults(stall_mid=0.3),
    "error_5xx": Faults(error_5xx=0.3),
    "reset": Faults(reset=0.3),
    "garbage": Faults(garbage=0.3),
    "schema_invalid": Faults(schema_invalid=0.3),
    "cut_stream": Faults(cut_stream=0.3),
    "mixed": Faults(
        hang=0.05,
        stall_mid=0.05,
        error_5xx=0.05,
        reset=0.05,
        garbage=0.05,
        schema_invalid=0.05,
        cut_stream=0.05,
    ),
}
MESSAGES = [{"role": "user", "content": "go"}]
SHARD = 50  # runs per HTTP client


async def _runs(
    faults: Faults, runs: int, *, faulty_b: bool = False, deadline_s: float = DEADLINE_S
) -> dict[str, Any]:
    """
    ``runs`` concurrent workflow runs; everything the checks need, after every socket closed.
    """
    broken = dataclasses.replace(CLEAN, faults=faults)
    models = {"m-a": broken, "m-b": broken if faulty_b else CLEAN, "tool": broken}
    sink = MemorySink()
    budget = HedgeBudget(BUDGET, window_s=WINDOW_S, allowance=ALLOWANCE)
    executor = Executor(PLAN, ledger=Ledger(sink), budget=budget)
    started = time.perf_counter()
    async with Server(ServeConfig(models=models, time_scale=SCALE, seed=11)) as server:
        # One client per 50 runs: httpcore's pool does work quadratic in the requests it holds,
        # so one pool for 1,000 concurrent runs spends seconds on bookkeeping.
        async with contextlib.AsyncExitStack() as stack:
            attempts = []
            for _ in range(0, runs, SHARD):
                # no client timeout: the attempt's deadline is the timeout (the adapter sets it)
                pool = httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=None)  # noqa: S113
                await stack.enter_async_context(pool)
                attempts.append(chat_attempt(server.url, MESSAGES, stream=True, client=pool))

            async def one(i: int) -> tuple[RunResult, float]:
                t0 = time.perf_counter()
                attempt = attempts[i // SHARD]
                result = await executor.run(attempt, run_id=f"run-{i}", deadline_s=deadline_s)
                return result, time.perf_counter() - t0

            outcomes = await asyncio.gather(*(one(i) for i in range(runs)))
        await asyncio.sleep(0.05)  # let the server log the last disconnects
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    return {
        "outcomes": outcomes, "ledger": sink.records, "server": server.records,
        "open": server.open_connections, "leftover": leftover,
        "seconds": time.perf_counter() - started, "counts": executor.ledger.counts(),
        "deadline_s": deadline_s,
    }  # fmt: skip


def _check(found: dict[str, Any]) -> None:
    """The checks every scenario must pass (see the module docstring)."""
    late = max(elapsed - found["deadline_s"] for _, elapsed in found["outcomes"])
    assert late <= BOUND_S, f"a run ended {late:.3f} s after its deadline"
    assert found["open"] == 0
    assert found["leftover"] == []
    ledger, server = found["ledger"], found["server"]
    assert found["counts"]["attempts"] == len(ledger)
    by_ledger = collections.Counter(r.idempotency_key for r in ledger)
    by_server = collections.Counter(r.idempotency_key for r in server)
    assert not (by_server - by_ledger), "the server saw attempts the ledger does not have"
    ok_ledger = collections.Counter(r.idempotency_key for r in ledger if r.status == "ok")
    ok_server = collections.Counter(r.idempotency_key for r in server if r.status == "ok")
    assert not (ok_ledger - ok_server), "the ledger calls ok what the server did not answer ok"
    tool_keys = {r.idempotency_key for r in ledger if r.step == "tool"}
    ran = collections.Counter(
        r.idempotency_key for r in server
        if r.idempotency_key in tool_keys and r.status != "rate_limited"
    )  # fmt: skip
    assert max(ran.values(), default=0) <= 1, "the non-idempotent tool ran a call twice"
    for result, _ in found["outcomes"]:
        assert result.ok == ("tool" in result.results)


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_fault_ends_in_time_leaks_nothing_and_reconciles(name: str) -> None:
    """Each fault alone (and all mixed): deadlines, no leaks, ledger = server log, tool once."""
    found = asyncio.run(_runs(SCENARIOS[name], 40))
    _check(found)
    outcomes = [r for r, _ in found["outcomes"]]
    assert sum(r.ok for r in outcomes) >= 1  # the faults are 30 %: some runs get through
    firsts = sum(1 for r in found["ledger"] if r.attempt == 0)
    assert len(found["ledger"]) > firsts  # the faults made the executor act


def test_a_429_storm_does_not_amplify() -> None:
    """Both providers rate-limited: extra attempts stay within budget, attempts stay bounded."""
    storm = Faults(tpm_limit=300)  # ~10 requests' worth of tokens per profile minute
    found = asyncio.run(_runs(storm, 60, faulty_b=True))
    _check(found)
    ledger = found["ledger"]
    firsts = sum(1 for r in ledger if r.attempt == 0)
    hedges = sum(1 for r in ledger if r.role == "hedge")
    # the budget credits each run's two steps as it starts, with 3 sigmas of noise headroom
    credited = 2 * 60
    assert hedges <= BUDGET * credited + 3 * math.sqrt(BUDGET * credited) + ALLOWANCE
    assert sum(1 for r in ledger if r.status == "rate_limited") > firsts // 2  # it was a storm
    assert len(ledger) <= 2 * firsts + hedges  # one retry each, at most, and the hedges


def test_a_thousand_concurrent_runs_through_one_process() -> None:
    """1,000 runs at once against one server: all by their deadline, nothing left open."""
    found = asyncio.run(_runs(Faults(), 1000, deadline_s=30.0))
    _check(found)
    print(f"1,000 runs: {found['seconds']:.1f} s, {len(found['ledger'])} attempts")
    assert sum(r.ok for r, _ in found["outcomes"]) == 1000
