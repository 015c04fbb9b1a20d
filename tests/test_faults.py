"""
The fault suite: workflow runs through the OpenAI adapter against `tailkit serve`, real sockets.

Every scenario runs a two-step workflow (``draft``, hedged to a clean provider, then a
non-idempotent ``tool``) many times at once on 127.0.0.1, time-scaled (profile seconds x 0.02),
with one fault (or all of them) injected into the faulty routes. For every run and scenario:

- after its deadline it waits for nothing: the event loop never sits idle between a run's
  deadline and its end, so the run ends as soon as the loop has cut it; and cutting it takes
  less time than a whole clean run takes on this machine right now (how long both take on the
  wall clock depends on how busy the machine is; ``-s`` prints them);
- no task and no connection is left behind;
- the ledger and the server's access log agree: the server never saw an attempt the ledger
  does not have, and every attempt the ledger calls ok the server answered ok;
- the non-idempotent tool executed each logical call at most once (a 429 means it did not run);
- under a 429 storm, extra attempts stay within the hedge budget (no retry amplification).

The deadline is one second on an idle machine. The runs all share one event loop (and here a
CPU), so on a busy machine the whole batch slows down together; a clean pass of the same
number of runs, measured just before, tells how slow, and the deadline grows to ``SLACK`` times
the clean pass's slowest run when that is longer. A deadline fixed on an idle machine would
otherwise cut every run of a batch that is merely slow, and "some runs get through" would fail.
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
from tests._fakeloop import WaitLog, run_logged


SCALE = 0.02
DEADLINE_S = 1.0  # real seconds (50 s of profile time), at least
SLACK = 4.0  # the deadline is at least this many times the slowest clean run, measured just before
CLEAN_CEILING_S = 120.0  # a clean run that needs this long is broken, not slow
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
    loop: WaitLog,
    faults: Faults,
    runs: int,
    *,
    faulty_b: bool = False,
    deadline_s: float = DEADLINE_S,
) -> dict[str, Any]:
    """
    ``runs`` concurrent workflow runs; everything the checks need, after every socket closed.

    Each outcome is the run's result, its seconds from start to end, and the seconds the loop
    sat waiting between the run's deadline and its end.
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

            async def one(i: int) -> tuple[RunResult, float, float]:
                attempt = attempts[i // SHARD]
                t0 = loop.time()
                result = await executor.run(attempt, run_id=f"run-{i}", deadline_s=deadline_s)
                ended = loop.time()
                # its deadline on its own clock (it started `elapsed_s` before it returned): an
                # instant no earlier than the real one, so no wait for it is counted
                deadline = ended - result.elapsed_s + deadline_s
                return result, ended - t0, loop.waited(deadline, ended)

            outcomes = await asyncio.gather(*(one(i) for i in range(runs)))
        # Every client is closed: the server sees each connection go as soon as the loop
        # reads the closes (the limit only keeps a leaked connection from hanging the test).
        give_up = loop.time() + deadline_s
        while server.open_connections and loop.time() < give_up:
            await asyncio.sleep(0.01)
        still_open = server.open_connections
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    return {
        "outcomes": outcomes, "ledger": sink.records, "server": server.records,
        "open": still_open, "leftover": leftover,
        "seconds": time.perf_counter() - started, "counts": executor.ledger.counts(),
        "deadline_s": deadline_s,
    }  # fmt: skip


async def _deadline_for(
    loop: WaitLog, runs: int, *, idle_s: float = DEADLINE_S
) -> tuple[float, float]:
    """
    The deadline for ``runs`` concurrent runs, and the slowest run of a clean pass.

    The deadline is ``idle_s`` on an idle machine; on a busy one, at least ``SLACK`` times the
    slowest run of a clean pass of up to ``SHARD`` runs, times how many more runs the batch
    has (the loop does their work in turn).
    """
    sample = min(runs, SHARD)
    clean = await _runs(loop, Faults(), sample, deadline_s=CLEAN_CEILING_S)
    assert all(result.ok for result, _, _ in clean["outcomes"]), "a clean run failed"
    slowest = max(elapsed for _, elapsed, _ in clean["outcomes"])
    deadline_s = max(idle_s, SLACK * slowest * runs / sample)
    print(f"clean pass: slowest of {sample} runs {slowest:.3f} s; deadline {deadline_s:.2f} s")
    return deadline_s, slowest


async def _faulty(
    loop: WaitLog, faults: Faults, runs: int, *, faulty_b: bool = False
) -> dict[str, Any]:
    """``runs`` runs under ``faults``, with the deadline a clean pass says this machine needs."""
    deadline_s, clean_s = await _deadline_for(loop, runs)
    found = await _runs(loop, faults, runs, faulty_b=faulty_b, deadline_s=deadline_s)
    return {**found, "clean_s": clean_s}


def _check(found: dict[str, Any]) -> None:
    """The checks every scenario must pass (see the module docstring)."""
    late = max(elapsed - found["deadline_s"] for _, elapsed, _ in found["outcomes"])
    waited = max(waited for _, _, waited in found["outcomes"])
    print(f"latest end {late:+.3f} s from the deadline; the loop waited {waited:.6f} s past it")
    # Past its deadline a run only has work to do (cancel, close, log): the loop waiting then
    # means the run waited for something (a reply, a close, a timer) it should have cut.
    assert waited == 0.0, f"a run waited {waited:.6f} s past its deadline"
    # That work is less than a whole run's: the same many clean runs, just before, bound it.
    clean_s = found["clean_s"]
    assert late <= clean_s, (
        f"a run ended {late:.3f} s after its deadline (a clean run: {clean_s:.3f} s)"
    )
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
    for result, _, _ in found["outcomes"]:
        assert result.ok == ("tool" in result.results)


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_fault_ends_in_time_leaks_nothing_and_reconciles(name: str) -> None:
    """Each fault alone (and all mixed): deadlines, no leaks, ledger = server log, tool once."""
    found = run_logged(lambda loop: _faulty(loop, SCENARIOS[name], 40))
    _check(found)
    outcomes = [r for r, _, _ in found["outcomes"]]
    assert sum(r.ok for r in outcomes) >= 1  # the faults are 30 %: some runs get through
    firsts = sum(1 for r in found["ledger"] if r.attempt == 0)
    assert len(found["ledger"]) > firsts  # the faults made the executor act


def test_a_429_storm_does_not_amplify() -> None:
    """Both providers rate-limited: extra attempts stay within budget, attempts stay bounded."""
    storm = Faults(tpm_limit=300)  # ~10 requests' worth of tokens per profile minute
    found = run_logged(lambda loop: _faulty(loop, storm, 60, faulty_b=True))
    _check(found)
    ledger = found["ledger"]
    firsts = sum(1 for r in ledger if r.attempt == 0)
    hedges = sum(1 for r in ledger if r.role == "hedge")
    # the budget credits each run's two steps as it starts, with 3 sigmas of noise headroom
    credited = 2 * 60
    assert hedges <= BUDGET * credited + 3 * math.sqrt(BUDGET * credited) + ALLOWANCE
    assert sum(1 for r in ledger if r.status == "rate_limited") > firsts // 2  # it was a storm
    assert len(ledger) <= 2 * firsts + hedges  # one retry each, at most, and the hedges


@pytest.mark.slow
def test_a_thousand_concurrent_runs_through_one_process() -> None:
    """1,000 runs at once against one server: all by their deadline, nothing left open."""

    async def main(loop: WaitLog) -> dict[str, Any]:
        deadline_s, clean_s = await _deadline_for(loop, 1000, idle_s=30.0)
        found = await _runs(loop, Faults(), 1000, deadline_s=deadline_s)
        return {**found, "clean_s": clean_s}

    found = run_logged(main)
    _check(found)
    print(f"1,000 runs: {found['seconds']:.1f} s, {len(found['ledger'])} attempts")
    assert sum(r.ok for r, _, _ in found["outcomes"]) == 1000
