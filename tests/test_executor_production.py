"""
The executor as a production user meets it: keys, cancellation, retries, lifetimes.

Also: stream cutoffs for streams only, non-idempotent steps, bugs in the caller's own code.

Each test reproduces a behaviour a review observed (and that failed before the fix): over HTTP
against a real `tailkit serve` where HTTP is involved, on the virtual-time loop where the
subject is timing.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tailkit.adapters.openai import chat_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed
from tailkit.executor import (
    FINAL,
    Attempt,
    AttemptError,
    Executor,
    HedgeBudget,
    JsonlSink,
    Ledger,
    MemorySink,
    ProviderThrottle,
    StepPolicy,
    now,
)
from tailkit.serve import ModelProfile, ServeConfig, Server
from tests._fakeloop import run


MESSAGES = [{"role": "user", "content": "go"}]
FAST = ModelProfile(
    ttft_median_s=0.05, ttft_sigma=0.1, tokens_per_s=400.0, gen_sigma=0.0, output_tokens=10
)


def plan(step: str, *, deadline_s: float = 60.0, budget: float = 0.05) -> Plan:
    """A one-step plan on route a/m (hedge b/m, downgrade c/small); ``step`` its YAML body."""
    return parse_plan(
        f"tailkit_plan: 1\nworkflow: prod\ndeadline_s: {deadline_s}\nhedge_budget: {budget}\n"
        "routes:\n  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "  c/small: {provider: c, model: small}\n"
        f"steps:\n  s:\n    route: a/m\n{step}"
    )


# ------------------------------------------------------------------------- 1. idempotency keys


def test_lone_calls_without_a_run_id_get_distinct_keys_on_the_wire(tmp_path: Path) -> None:
    """11 calls of one step, no run id: 11 keys at the server, 11 calls after ingest."""
    from tailkit.ingest import ingest_paths
    from tailkit.store import Store

    ledger_path = tmp_path / "ledger.jsonl"

    async def main() -> list[Any]:
        config = ServeConfig(models={"m": FAST}, time_scale=0.1, seed=1)
        async with (
            Server(config) as server,
            Executor(plan(""), ledger=Ledger(JsonlSink(ledger_path))) as executor,
        ):
            call = chat_attempt(server.url, MESSAGES, stream=True)
            for _ in range(11):
                await executor.run_step("s", call)
            await asyncio.sleep(0.05)
            return list(server.records)

    records = run_real(main())
    assert len({r.idempotency_key for r in records}) == len(records) == 11
    with Store.open(tmp_path / "t.duckdb") as store:
        report = ingest_paths(store, [ledger_path], format="trace")
        assert report.totals()["stored"] == 11


def test_a_calls_retries_and_hedges_share_its_key() -> None:
    """Within one logical call every attempt carries the same key; the next call another."""
    p = plan("    cutoff_s: 1\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    sink = MemorySink()

    async def slow_primary(a: Attempt) -> str:
        await asyncio.sleep(5.0 if a.role == "primary" else 0.5)
        return "ok"

    async def main() -> None:
        executor = Executor(p, ledger=Ledger(sink))
        await executor.run_step("s", slow_primary)
        await executor.run_step("s", slow_primary)

    run(main())
    keys = [r.idempotency_key for r in sink.records]
    assert len(keys) == 4
    assert len(set(keys)) == 2
    assert keys[0] == keys[1] != keys[2] == keys[3]


# ---------------------------------------------------------------------------- 2. cancellation


def test_cancelling_a_run_cancels_its_steps_and_sends_nothing_more(tmp_path: Path) -> None:
    """Cancel Executor.run() mid-step: no later step reaches the server, no task outlives it."""
    text = (
        "tailkit_plan: 1\nworkflow: chain\ndeadline_s: 30\n"
        "routes:\n  a/m: {provider: a, model: m}\n"
        "steps:\n  one: {route: a/m}\n  two: {route: a/m, depends_on: [one]}\n"
        "  three: {route: a/m, depends_on: [two]}\n"
    )
    slow = dataclasses.replace(FAST, ttft_median_s=2.0)
    sink = MemorySink()

    async def main() -> tuple[list[Any], list[asyncio.Task[Any]], int]:
        config = ServeConfig(models={"m": slow}, time_scale=0.1, seed=2)
        async with Server(config) as server:
            executor = Executor(parse_plan(text), ledger=Ledger(sink))
            call = chat_attempt(server.url, MESSAGES, stream=True)
            task = asyncio.create_task(executor.run(call))
            await asyncio.sleep(0.05)  # step one is in flight (0.2 s at this scale)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            leftover = [
                t for t in asyncio.all_tasks()
                if t is not asyncio.current_task() and not t.done()
                and not t.get_coro().__qualname__.startswith("Server.")  # type: ignore[union-attr]
            ]  # fmt: skip
            await asyncio.sleep(0.4)  # long enough for step two to have been sent
            return list(server.records), leftover, server.open_connections

    records, leftover, still_open = run_real(main())
    assert leftover == []
    assert {r.attrs.get("fault") for r in records} <= {None}
    assert len(records) == 1  # only step one's attempt ever reached the server
    assert still_open == 0
    assert [(r.step, r.status) for r in sink.records] == [("one", "cancelled")]


def test_run_step_returns_only_after_the_attempts_it_cancelled_are_gone() -> None:
    """A hedge wins; the primary it cancelled has finished its cleanup when run_step returns."""
    p = plan("    cutoff_s: 1\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    cleaned: list[float] = []

    async def fn(a: Attempt) -> str:
        try:
            await asyncio.sleep(10.0 if a.role == "primary" else 0.5)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # closing a connection takes a while
            cleaned.append(now())
            raise
        return a.role

    async def main() -> tuple[str, float, list[asyncio.Task[Any]]]:
        executor = Executor(p, ledger=Ledger())
        value = await executor.run_step("s", fn)
        returned = now()
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return value, returned, leftover

    value, returned, leftover = run(main())
    assert value == "hedge"
    assert cleaned
    assert cleaned[0] <= returned
    assert leftover == []


# ----------------------------------------------------------------------- 3. budgeted retries


def test_a_429_storm_does_not_come_back_all_at_once() -> None:
    """60 calls all rate-limited: retries stop at the throttle, and the few sent are spread."""
    sink = MemorySink()
    sent: list[tuple[str, float]] = []

    async def storm(a: Attempt) -> str:
        sent.append((a.role, now()))
        await asyncio.sleep(0.05)
        msg = "rate limited"
        raise AttemptError(msg, status="rate_limited", http_status=429)

    async def main() -> None:
        executor = Executor(plan(""), ledger=Ledger(sink), seed=7)

        async def one() -> None:
            with pytest.raises(AllAttemptsFailed):
                await executor.run_step("s", storm)

        await asyncio.gather(*(one() for _ in range(60)))

    run(main())
    retries = [at for role, at in sent if role == "retry"]
    assert len(retries) <= 5  # the provider's throttle engaged after five net failures
    assert len(set(retries)) == len(retries)  # jittered: no two at the same instant
    denied = collections.Counter(r.attrs.get("retry_denied") for r in sink.records)
    assert denied["throttle"] >= 55


def test_retries_and_upgrades_spend_the_hedge_budget() -> None:
    """With no budget left, an error is not retried and an invalid result is not upgraded."""
    sink = MemorySink()

    async def failing(a: Attempt) -> str:
        await asyncio.sleep(1.0)
        msg = "boom"
        raise AttemptError(msg, http_status=503)

    async def main() -> None:
        budget = HedgeBudget(0.0, allowance=0)
        executor = Executor(plan("    upgrade_route: c/small\n"), ledger=Ledger(sink),
                            budget=budget)  # fmt: skip
        with pytest.raises(AllAttemptsFailed):
            await executor.run_step("s", failing)
        refuse = StepPolicy(validator=lambda v: False)
        executor = Executor(plan("    upgrade_route: c/small\n"), ledger=Ledger(sink),
                            budget=budget, policies={"s": refuse})  # fmt: skip
        with pytest.raises(AllAttemptsFailed):
            await executor.run_step("s", lambda a: asyncio.sleep(1.0, "bad"))

    run(main())
    assert [(r.role, r.status, r.attrs.get("retry_denied"), r.attrs.get("upgrade_denied"))
            for r in sink.records] == [
        ("primary", "error", "budget", None),
        ("primary", "invalid", None, "budget"),
    ]  # fmt: skip


def test_retry_after_is_honoured_only_if_the_expected_answer_still_fits() -> None:
    """0.14 s left after a Retry-After, for an answer that takes 0.28 s: no retry."""
    p = plan("")
    p = dataclasses.replace(
        p, steps={"s": dataclasses.replace(p.steps["s"], predicted=_predicted(p50_s=0.28))}
    )
    sent: list[str] = []

    async def limited(a: Attempt) -> str:
        sent.append(a.role)
        await asyncio.sleep(0.1)
        if a.role == "primary":
            msg = "slow down"
            raise AttemptError(msg, status="rate_limited", http_status=429, retry_after_s=0.3)
        return "ok"

    async def main(budget_s: float) -> Any:
        executor = Executor(p, ledger=Ledger(), policies={"s": StepPolicy(retry_jitter_s=0.0)})
        try:
            return await executor.run_step("s", limited, deadline=now() + budget_s)
        except AllAttemptsFailed as error:
            return error

    assert isinstance(run(main(0.1 + 0.3 + 0.14)), AllAttemptsFailed)
    assert sent == ["primary"]
    sent.clear()
    assert run(main(0.1 + 0.3 + 0.3)) == "ok"
    assert sent == ["primary", "retry"]


def test_a_429_fails_over_to_the_hedge_provider_at_once() -> None:
    """A 429 with a 5 s Retry-After on a: the retry goes to b now, not to a in 5 s."""
    sink = MemorySink()

    async def limited(a: Attempt) -> str:
        await asyncio.sleep(0.1)
        if a.provider == "a":
            msg = "slow down"
            raise AttemptError(msg, status="rate_limited", http_status=429, retry_after_s=5.0)
        return a.provider

    async def main() -> tuple[str, float]:
        executor = Executor(plan("    hedge_route: b/m\n"), ledger=Ledger(sink))
        start = now()
        value = await executor.run_step("s", limited)
        return value, now() - start

    value, spent = run(main())
    assert value == "b"
    assert spent < 0.1 + 0.1 + 0.1 + 1e-6  # the 429, a jitter of at most 0.1 s, the answer
    assert [(r.role, r.provider, r.status) for r in sink.records] == [
        ("primary", "a", "rate_limited"),
        ("retry", "b", "ok"),
    ]
    assert sink.records[0].attrs["failover"] == "b/m"


def test_a_failover_after_a_429_needs_no_budget_but_a_retry_on_the_same_route_does() -> None:
    """No hedge budget at all: the 429 fails over to b; a 503 is not retried."""
    sink = MemorySink()

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(0.1)
        if a.provider == "a":
            msg = "no"
            status = "rate_limited" if a.idempotency_key.endswith("429") else "error"
            raise AttemptError(msg, status=status, http_status=429 if status != "error" else 503)
        return a.provider

    async def main() -> list[Any]:
        executor = Executor(plan("    hedge_route: b/m\n"), ledger=Ledger(sink),
                            budget=HedgeBudget(0.0, allowance=0))  # fmt: skip
        out: list[Any] = []
        for key in ("429", "503"):
            try:
                out.append(await executor.run_step("s", lambda a, k=key: fn(
                    dataclasses.replace(a, idempotency_key=k))))  # fmt: skip
            except AllAttemptsFailed:
                out.append("failed")
        return out

    assert run(main()) == ["b", "failed"]
    assert [(r.role, r.provider, r.attrs.get("retry_denied")) for r in sink.records] == [
        ("primary", "a", None), ("retry", "b", None), ("primary", "a", "budget"),
    ]  # fmt: skip


def test_while_a_provider_rests_after_a_429_first_attempts_start_on_the_hedge_route() -> None:
    """Retry-After 1 s on a: calls in that second start on b; after it, on a again."""
    sink = MemorySink()
    told = False

    async def limited(a: Attempt) -> str:
        nonlocal told
        await asyncio.sleep(0.1)
        if a.provider == "a" and not told:
            told = True
            msg = "slow down"
            raise AttemptError(msg, status="rate_limited", http_status=429, retry_after_s=1.0)
        return a.provider

    async def main() -> list[str]:
        executor = Executor(plan("    hedge_route: b/m\n"), ledger=Ledger(sink))
        got = [await executor.run_step("s", limited)]  # a: 429 at 0.1 s, rests until 1.1 s
        got.append(await executor.run_step("s", limited))  # starts at ~0.2 s: on b
        await asyncio.sleep(1.0)
        got.append(await executor.run_step("s", limited))  # starts at ~1.3 s: on a
        return got

    assert run(main()) == ["b", "b", "a"]
    firsts = [r for r in sink.records if r.role == "primary"]
    assert [r.provider for r in firsts] == ["a", "b", "a"]
    assert firsts[1].attrs["rerouted"] == "a/m resting after a 429"


def test_a_rerouted_first_attempt_hedges_on_its_own_route_while_the_other_rests() -> None:
    """Provider a rests 10 s: a call rerouted to b, slow at its cutoff, hedges on b again."""
    sink = MemorySink()
    told = False

    async def fn(a: Attempt) -> str:
        nonlocal told
        if a.provider == "a" and not told:
            told = True
            await asyncio.sleep(0.1)
            msg = "slow down"
            raise AttemptError(msg, status="rate_limited", http_status=429, retry_after_s=10.0)
        await asyncio.sleep(5.0 if a.role in ("primary", "retry") else 0.5)
        return f"{a.provider}:{a.role}"

    async def main() -> list[str]:
        p = plan("    cutoff_s: 1\n    on_cutoff: hedge\n    hedge_route: b/m\n")
        executor = Executor(p, ledger=Ledger(sink))
        return [await executor.run_step("s", fn) for _ in range(2)]

    # the first call: 429 on a, failover on b, watched in the first attempt's place: slow at
    # its cutoff, it hedges on b; the second starts on b, and its hedge goes to b as well
    assert run(main()) == ["b:hedge", "b:hedge"]
    assert not any(r.provider == "a" for r in sink.records[1:])


def test_a_429_without_a_hedge_route_still_waits_its_retry_after_on_the_same_route() -> None:
    """No other provider to go to: the retry waits the Retry-After, on a."""
    sink = MemorySink()

    async def limited(a: Attempt) -> str:
        await asyncio.sleep(0.1)
        if a.role == "primary":
            msg = "slow down"
            raise AttemptError(msg, status="rate_limited", http_status=429, retry_after_s=0.5)
        return a.provider

    async def main() -> float:
        executor = Executor(plan(""), ledger=Ledger(sink))
        start = now()
        await executor.run_step("s", limited)
        return now() - start

    assert run(main()) >= 0.1 + 0.5 + 0.1
    assert [(r.role, r.provider) for r in sink.records] == [("primary", "a"), ("retry", "a")]


def _predicted(p50_s: float) -> Any:
    from tailkit.config import StepPrediction

    return StepPrediction(p50_s=p50_s, p99_s=p50_s * 2, hedge_rate=0.0)


# ------------------------------------------------------------------------------ 4. stall cutoff


def test_heartbeats_and_empty_deltas_do_not_reset_the_stall_timer() -> None:
    """A stream stuck after its first token, sending empty deltas: cut at the stall cutoff."""
    p = plan("    stall_cutoff_s: 2\n    cutoff_s: 50\n    on_cutoff: retry\n")
    sink = MemorySink()

    async def stuck(a: Attempt) -> AsyncIterator[Any]:
        yield {"choices": [{"delta": {"role": "assistant"}}]}
        await asyncio.sleep(0.5)
        yield {"choices": [{"delta": {"content": "Hello"}}]}
        if a.role == "retry":
            yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}
            return
        for _ in range(100):  # a heartbeat every half second, no content
            await asyncio.sleep(0.5)
            yield {"choices": [{"delta": {"content": ""}}]}
            yield {"choices": [{"delta": {}}]}
        yield FINAL

    async def main() -> float:
        executor = Executor(p, ledger=Ledger(sink))
        start = now()
        await executor.run_step("s", stuck)
        return now() - start

    spent = run(main())
    assert sink.records[0].attrs["cutoff"] == "stall"
    assert sink.records[0].censored_at_s == pytest.approx(0.5 + 2.0)
    assert spent == pytest.approx(0.5 + 2.0 + 0.5)


# -------------------------------------------------------------------- 5. non-streamed attempts


def test_a_non_streamed_call_is_judged_by_its_total_cutoff_only() -> None:
    """A healthy 0.5 s JSON answer, TTFT cutoff 0.3 s: not cut, not hedged."""
    p = plan(
        "    signal: ttft\n    ttft_cutoff_s: 0.3\n    cutoff_s: 2\n    on_cutoff: hedge\n"
        "    hedge_route: b/m\n"
    )
    sink = MemorySink()

    async def answer(a: Attempt) -> dict[str, Any]:
        await asyncio.sleep(0.5 if a.role == "primary" else 0.1)
        return {"choices": [{"message": {"content": "fine"}}]}

    async def main() -> Any:
        return await Executor(p, ledger=Ledger(sink)).run_step("s", answer)

    run(main())
    assert [(r.role, r.status, r.total_s) for r in sink.records] == [("primary", "ok", 0.5)]


def test_a_non_streamed_call_over_http_is_not_cut_at_the_ttft_cutoff() -> None:
    """The same over HTTP against `tailkit serve`, stream=False: one request, no hedge."""
    p = plan(
        "    signal: ttft\n    ttft_cutoff_s: 0.03\n    cutoff_s: 5\n    on_cutoff: hedge\n"
        "    hedge_route: b/m\n"
    )
    sink = MemorySink()
    slowish = dataclasses.replace(FAST, ttft_median_s=1.0, ttft_sigma=0.01)

    async def main() -> list[Any]:
        config = ServeConfig(models={"m": slowish}, time_scale=0.1, seed=3)
        async with Server(config) as server:
            call = chat_attempt(server.url, MESSAGES, stream=False)
            await Executor(p, ledger=Ledger(sink)).run_step("s", call)
            await asyncio.sleep(0.05)
            return list(server.records)

    records = run_real(main())
    assert [r.role for r in sink.records] == ["primary"]
    assert len(records) == 1


# ------------------------------------------------------------------- 6. non-idempotent steps


def test_a_non_idempotent_step_is_never_re_sent() -> None:
    """A downgrade at the cutoff cuts and re-sends: skipped unless the step's policy opts in."""
    action = "downgrade"
    p = plan(
        "    idempotent: false\n    cutoff_s: 1\n    on_cutoff: downgrade\n"
        "    downgrade_route: c/small\n"
    )

    async def slow(a: Attempt) -> str:
        await asyncio.sleep(3.0 if a.role == "primary" else 0.5)
        return a.role

    async def main(policy: StepPolicy) -> tuple[Any, list[str]]:
        sink = MemorySink()
        value = await Executor(p, ledger=Ledger(sink), policies={"s": policy}).run_step("s", slow)
        return value, [r.role for r in sink.records]

    value, roles = run(main(StepPolicy()))
    assert (value, roles) == ("primary", ["primary"])
    value, roles = run(main(StepPolicy(resend_non_idempotent=True)))
    assert value == action
    assert action in roles


# --------------------------------------------------------------- 7. errors not the provider's


def test_a_raising_validator_counts_as_invalid_and_upgrades() -> None:
    """The validator raises: the attempt's line says invalid, and the upgrade runs."""
    sink = MemorySink()

    def validator(value: str) -> bool:
        if value == "primary":
            msg = "no 'answer' key"
            raise KeyError(msg)
        return True

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(1.0)
        return a.role

    async def main() -> Any:
        executor = Executor(plan("    upgrade_route: c/small\n"), ledger=Ledger(sink),
                            policies={"s": StepPolicy(validator=validator)})  # fmt: skip
        return await executor.run_step("s", fn)

    assert run(main()) == "upgrade"
    assert [(r.role, r.status) for r in sink.records] == [("primary", "invalid"),
                                                          ("upgrade", "ok")]  # fmt: skip
    assert "KeyError" in sink.records[0].attrs["error"]


def test_a_bug_in_the_callers_attempt_code_is_raised_at_once_and_touches_no_throttle() -> None:
    """A KeyError in the attempt function: not retried, throttle untouched, raised as is."""
    sink = MemorySink()
    calls: list[str] = []

    async def buggy(a: Attempt) -> str:
        calls.append(a.role)
        await asyncio.sleep(0.2)
        return {"answer": "x"}["missing"]

    async def main() -> ProviderThrottle:
        throttle = ProviderThrottle()
        executor = Executor(plan(""), ledger=Ledger(sink), throttle=throttle)
        for _ in range(10):
            with pytest.raises(KeyError):
                await executor.run_step("s", buggy)
        return throttle

    throttle = run(main())
    assert calls == ["primary"] * 10
    assert throttle.tokens("a") == 10.0
    assert all(r.status == "error" and r.attrs.get("caller_error") for r in sink.records)


def test_provider_errors_are_still_retried() -> None:
    """An error carrying an HTTP status (an SDK's) is the provider's: retried once."""

    class APIStatusError(Exception):
        status_code = 503

    calls: list[str] = []

    async def flaky(a: Attempt) -> str:
        calls.append(a.role)
        await asyncio.sleep(0.2)
        if a.role == "primary":
            raise APIStatusError
        return "ok"

    async def main() -> Any:
        return await Executor(plan(""), ledger=Ledger()).run_step("s", flaky)

    assert run(main()) == "ok"
    assert calls == ["primary", "retry"]


# ------------------------------------------------------------------------------- 8. lifetimes


def test_finishing_losers_outlive_the_adapter_block_and_aclose_waits_for_them(
    tmp_path: Path,
) -> None:
    """losers="finish" under `async with chat_attempt(...)`: the loser lands ok, on the ledger."""
    p = plan("    cutoff_s: 0.05\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    ledger_path = tmp_path / "ledger.jsonl"
    slow_a = dataclasses.replace(FAST, ttft_median_s=1.5, ttft_sigma=0.01)
    fast_b = dataclasses.replace(FAST, ttft_median_s=0.1, ttft_sigma=0.01)

    async def main() -> None:
        config = ServeConfig(models={"m": slow_a, "b-m": fast_b}, time_scale=0.1, seed=4)
        async with Server(config) as server:
            executor = Executor(p, ledger=Ledger(JsonlSink(ledger_path)),
                                policies={"s": StepPolicy(losers="finish")})  # fmt: skip

            def route(a: Attempt) -> Any:
                model = "b-m" if a.provider == "b" else "m"
                return call(dataclasses.replace(a, model=model))

            async with chat_attempt(server.url, MESSAGES, stream=True) as call:
                await executor.run_step("s", route)
            await executor.aclose()  # waits for the loser, then closes the ledger file

    run_real(main())
    import json

    lines = [json.loads(line) for line in ledger_path.read_text().splitlines()]
    assert sorted((r["role"], r["status"], r["abandoned"]) for r in lines) == [
        ("hedge", "ok", False),
        ("primary", "ok", True),
    ]


def run_real(coro: Any) -> Any:
    """Run on a real event loop (sockets and real time)."""
    return asyncio.run(coro)


_: Callable[..., Any] = run_real


# --------------------------------------------------------------------------- 11. observability


def test_decisions_reach_an_event_hook() -> None:
    """A hook sees the step, its attempts, the cutoff, the denied hedge and the throttle."""
    from tailkit.executor._events import Event, Observer

    events: list[Event] = []
    p = plan("    cutoff_s: 1\n    on_cutoff: hedge\n    hedge_route: b/m\n")

    async def slow(a: Attempt) -> str:
        await asyncio.sleep(3.0)
        return "ok"

    async def main() -> None:
        throttle = ProviderThrottle()
        for _ in range(5):
            throttle.on_failure("b")
        executor = Executor(p, ledger=Ledger(), throttle=throttle,
                            observer=Observer(events.append, tracing=False))  # fmt: skip
        await executor.run_step("s", slow, run_id="r1")

    run(main())
    kinds = [e.kind for e in events]
    assert kinds == ["step_started", "attempt_started", "cutoff_fired", "extra_denied",
                     "attempt_ended", "step_ended"]  # fmt: skip
    denied = events[3]
    assert (denied.detail["reason"], denied.detail["action"]) == ("throttle", "hedge")
    assert all(e.run_id == "r1" and e.step == "s" for e in events)


def test_steps_and_attempts_are_opentelemetry_spans() -> None:
    """With OpenTelemetry: a step span, attempt spans as its children, the deadline on them."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tailkit.executor._events import Observer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    p = plan("    cutoff_s: 1\n    on_cutoff: hedge\n    hedge_route: b/m\n")

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(3.0 if a.role == "primary" else 0.5)
        return "ok"

    async def main() -> None:
        observer = Observer(tracing=True, tracer_provider=provider)
        await Executor(p, ledger=Ledger(), observer=observer).run_step("s", fn, deadline=now() + 9)

    run(main())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"tailkit.step s", "chat m"} or len(exporter.get_finished_spans()) == 3
    step = spans["tailkit.step s"]
    attempts = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
    assert len(attempts) == 2
    assert all(s.parent is not None and s.parent.span_id == step.context.span_id for s in attempts)
    assert {s.attributes["tailkit.role"] for s in attempts} == {"primary", "hedge"}
    assert all("tailkit.deadline" in s.attributes for s in [step, *attempts])
    assert {s.attributes["gen_ai.provider.name"] for s in attempts} == {"a", "b"}
