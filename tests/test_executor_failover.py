"""
Failover on errors and the circuit breaker: a failing provider's calls recover on another.

Over HTTP against two `tailkit serve` instances (provider a answers 503 to everything,
provider b is healthy) where the subject is what reaches the providers; on the virtual-time
loop where it is the breaker's clock (its cool-down, its probe).
"""

from __future__ import annotations

import asyncio

from typing import Any

import pytest

from tailkit.adapters.openai import chat_attempt
from tailkit.config import Plan, parse_plan
from tailkit.errors import AllAttemptsFailed, ConfigError
from tailkit.executor import (
    Attempt,
    AttemptError,
    AttemptRecord,
    Breaker,
    Executor,
    HedgeBudget,
    Ledger,
    MemorySink,
    StepPolicy,
    now,
)
from tailkit.serve import Faults, ModelProfile, ServeConfig, Server
from tests._fakeloop import run


MESSAGES = [{"role": "user", "content": "go"}]
FAST = ModelProfile(
    ttft_median_s=0.05, ttft_sigma=0.1, tokens_per_s=400.0, gen_sigma=0.0, output_tokens=10
)
DOWN = ModelProfile(
    ttft_median_s=0.05, ttft_sigma=0.1, tokens_per_s=400.0, gen_sigma=0.0, output_tokens=10,
    faults=Faults(error_5xx=1.0),
)  # fmt: skip


def plan(step: str = "", *, budget: float = 0.05) -> Plan:
    """One step on route a/m whose hedge route b/m is on another provider."""
    return parse_plan(
        f"tailkit_plan: 1\nworkflow: failover\ndeadline_s: 60\nhedge_budget: {budget}\n"
        "routes:\n  a/m: {provider: a, model: m}\n  b/m: {provider: b, model: m}\n"
        "  a/m2: {provider: a, model: m2}\n"
        f"steps:\n  s:\n    route: a/m\n    hedge_route: b/m\n{step}"
    )


def _by_provider(**calls: Any) -> Any:
    """An attempt function that sends each attempt to its provider's server."""

    def attempt(a: Attempt) -> Any:
        return calls[a.provider](a)

    return attempt


def test_a_provider_answering_503_fails_over_and_then_is_skipped() -> None:
    """Provider a answers 503 to everything: 40 of 40 calls succeed via b; after 5, a gets none."""
    sink = MemorySink()

    async def main() -> tuple[list[Any], list[Any]]:
        # five failovers before the breaker opens: a budget that grants them (the subject
        # here is where the calls go, not the budget)
        budget = HedgeBudget(0.05, allowance=5)
        async with (
            Server(ServeConfig(models={"m": DOWN}, seed=1)) as a,
            Server(ServeConfig(models={"m": FAST}, seed=2)) as b,
            Executor(plan(), ledger=Ledger(sink), budget=budget) as executor,
        ):
            fn = _by_provider(
                a=chat_attempt(a.url, MESSAGES, stream=True),
                b=chat_attempt(b.url, MESSAGES, stream=True),
            )
            for _ in range(40):
                result = await executor.run_step("s", fn)
                assert result.text
            await asyncio.sleep(0.05)
            return list(a.records), list(b.records)

    at_a, at_b = asyncio.run(main())
    assert len(at_a) == 5  # the breaker opened after 5 failures in a row
    assert all(r.http_status in {500, 502, 503} for r in at_a)
    assert len(at_b) == 40
    lines = sink.records
    firsts = [r for r in lines if r.attempt == 0]
    assert [r.provider for r in firsts] == ["a"] * 5 + ["b"] * 35
    failed = [r for r in firsts if r.provider == "a"]
    assert all(r.status == "error" and r.attrs["failover"] == "b/m" for r in failed)
    assert failed[-1].attrs["breaker"] == "opened: 5 failures in a row"
    retries = [r for r in lines if r.role == "retry"]
    assert len(retries) == 5
    assert all(r.provider == "b" and r.status == "ok" and r.winner for r in retries)
    assert all(r.attrs["started_by"] == "error" for r in retries)
    rerouted = firsts[5:]
    assert all(r.attrs["breaker"] == "open" and r.status == "ok" for r in rerouted)
    assert all(
        r.attrs["rerouted"].startswith("a/m: provider a's breaker is open") for r in rerouted
    )


class _Flaky:
    """Provider a fails (503 after 1 s) while ``down``; b answers in 2 s; calls logged."""

    def __init__(self) -> None:
        self.down = True
        self.calls: list[tuple[float, str, str]] = []

    async def __call__(self, a: Attempt) -> str:
        self.calls.append((now(), a.provider, a.role))
        await asyncio.sleep(1.0 if a.provider == "a" else 2.0)
        if a.provider == "a" and self.down:
            msg = "unavailable"
            raise AttemptError(msg, http_status=503)
        return a.provider


def _breaker_notes(lines: list[AttemptRecord]) -> list[tuple[int, str, Any]]:
    return [(i, r.provider, r.attrs.get("breaker")) for i, r in enumerate(lines) if r.attempt == 0]


def test_the_breaker_cools_down_probes_once_and_closes_on_success() -> None:
    """Open for 30 s; then one probe at a time; a failed probe re-opens, a good one closes."""
    sink = MemorySink()
    flaky = _Flaky()
    results: list[str] = []

    async def main() -> None:
        budget = HedgeBudget(1.0, allowance=100)
        policy = StepPolicy(retry_jitter_s=0.0)
        executor = Executor(plan(), ledger=Ledger(sink), budget=budget, policies={"s": policy})
        for _ in range(5):  # 5 failures in a row (each recovered on b)
            results.append(await executor.run_step("s", flaky))
        for _ in range(5):  # within the cool-down: straight to b
            results.append(await executor.run_step("s", flaky))
        await asyncio.sleep(30.0)  # the cool-down is over: half-open
        # two calls at once: the first probes a (and fails), the second is held off a
        results.extend(
            await asyncio.gather(executor.run_step("s", flaky), executor.run_step("s", flaky))
        )
        results.append(await executor.run_step("s", flaky))  # open again: b
        flaky.down = False
        await asyncio.sleep(31.0)
        results.append(await executor.run_step("s", flaky))  # the probe succeeds: closed
        results.append(await executor.run_step("s", flaky))  # closed: a again

    run(main())
    assert results == ["b"] * 13 + ["a", "a"]
    firsts = [r for r in sink.records if r.attempt == 0]
    notes = [(r.provider, r.attrs.get("breaker")) for r in firsts]
    opened = ("a", "opened: 5 failures in a row")
    assert notes[:5] == [("a", None)] * 4 + [opened]
    assert notes[5:10] == [("b", "open")] * 5
    reopened = ("a", "opened: the probe after its cool-down failed")
    assert sorted(notes[10:12]) == sorted([reopened, ("b", "open")])
    assert notes[12] == ("b", "open")
    assert notes[13] == ("a", "closed")  # the probe's own line says it closed the breaker
    assert notes[14] == ("a", None)
    # provider a saw the 5 failures, one probe at the first half-open, then the good probe
    assert [p for _, p, role in flaky.calls if role == "primary"].count("a") == 8


def test_a_failing_hedge_provider_is_not_where_first_attempts_go() -> None:
    """Both providers failing: the first attempt stays on its route, nothing fails over."""
    sink = MemorySink()

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(1.0)
        msg = "unavailable"
        raise AttemptError(msg, http_status=503)

    async def main() -> None:
        budget = HedgeBudget(1.0, allowance=100)
        policy = StepPolicy(retry_jitter_s=0.0)
        executor = Executor(plan(), ledger=Ledger(sink), budget=budget, policies={"s": policy})
        for _ in range(8):
            with pytest.raises(AllAttemptsFailed):
                await executor.run_step("s", fn)

    run(main())
    firsts = [r for r in sink.records if r.attempt == 0]
    assert {r.provider for r in firsts} == {"a"}
    assert firsts[-1].attrs["breaker"] == "open: no other route"
    # b failed its 5 failovers and its breaker opened: no more failover goes there
    assert [r.provider for r in sink.records if r.role == "retry"][:5] == ["b"] * 5
    assert not any(r.role == "retry" and r.provider == "b" for r in sink.records[10:])
    assert "failover" not in firsts[-1].attrs


def test_the_executors_breaker_is_the_one_given_and_outlives_a_reload() -> None:
    """Executor(breaker=Breaker(failures=2)) opens after 2; a swapped-in plan keeps it open."""
    sink = MemorySink()
    flaky = _Flaky()
    results: list[str] = []

    async def main() -> None:
        executor = Executor(
            plan(), ledger=Ledger(sink), budget=HedgeBudget(1.0, allowance=100),
            breaker=Breaker(failures=2, cooldown_s=60.0),
            policies={"s": StepPolicy(retry_jitter_s=0.0)},
        )  # fmt: skip
        for _ in range(2):
            results.append(await executor.run_step("s", flaky))
        executor.replace_plan(plan(budget=0.1))
        results.append(await executor.run_step("s", flaky))

    run(main())
    assert results == ["b"] * 3
    firsts = [r for r in sink.records if r.attempt == 0]
    assert [r.attrs.get("breaker") for r in firsts] == [None, "opened: 2 failures in a row", "open"]


# ------------------------------------------------------------------------------ the breaker


def test_breaker_opens_on_a_failure_rate_over_its_window() -> None:
    """Alternating failures never make a streak of 3, but 50 % of 10 opens it."""
    breaker = Breaker(failures=3, failure_rate=0.5, window=10, min_calls=10, cooldown_s=5.0)
    flips = [breaker.record("p", float(i), failed=i % 2 == 0) for i in range(10)]
    assert flips[:9] == [None] * 9
    assert flips[9] is None  # only a failure opens it
    assert breaker.state("p", 9.0) == "closed"
    assert breaker.record("p", 10.0, failed=True) == "opened"  # still 5 of the last 10
    assert breaker.why("p") == "5 of the last 10 attempts failed"
    assert breaker.state("p", 14.9) == "open"
    assert breaker.state("p", 15.0) == "half_open"


def test_breaker_probe_place_is_held_and_released() -> None:
    """Half-open: one probe at a time; a probe cut without a verdict lets the next go."""
    breaker = Breaker(failures=1, cooldown_s=1.0)
    assert breaker.admits("p", 0.0, "x") == "closed"
    assert breaker.record("p", 0.0, failed=True) == "opened"
    assert breaker.admits("p", 0.5, "x") is None
    assert breaker.admits("p", 1.0, "x") == "probe"
    assert breaker.admits("p", 1.0, "y") is None
    breaker.release("p", "x")
    assert breaker.admits("p", 1.1, "y") == "probe"
    assert breaker.record("p", 1.2, failed=False, attempt="y") == "closed"
    assert breaker.state("p", 1.2) == "closed"
    assert breaker.admits("p", 1.2, "z") == "closed"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failures": 0}, "failures must be an integer of at least 1, got 0"),
        ({"cooldown_s": 0.0}, "cooldown_s must be a positive number of seconds, got 0.0"),
        ({"failure_rate": 1.5}, r"failure_rate must be in \(0, 1\] or None, got 1.5"),
        ({"window": 0}, "window must be an integer of at least 1, got 0"),
        ({"min_calls": 30}, r"min_calls must be an integer in \[1, window=20\], got 30"),
    ],
)
def test_breaker_names_a_bad_parameter(kwargs: dict[str, Any], message: str) -> None:
    """A parameter out of range is a ConfigError naming it and its value."""
    with pytest.raises(ConfigError, match=message):
        Breaker(**kwargs)


def test_the_default_breaker_cools_down_in_plan_seconds() -> None:
    """A rehearsal at time scale 0.01 cools a provider down for 30 plan seconds: 0.3 s."""
    executor = Executor(plan(), time_scale=0.01)
    assert executor._state.shared.breaker.cooldown_s == pytest.approx(0.3)
