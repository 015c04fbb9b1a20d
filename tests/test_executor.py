"""
The executor on a virtual clock: every cutoff, hedge, retry and budget decision at its instant.
"""

from __future__ import annotations

import asyncio
import gc
import math

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tailkit.config import Plan, parse_plan
from tailkit.executor import (
    FINAL,
    AllAttemptsFailed,
    Attempt,
    AttemptError,
    Chunk,
    Executor,
    HedgeBudget,
    Ledger,
    MemorySink,
    ProviderThrottle,
    StepPolicy,
    StepTimeout,
    deadline_after,
    now,
)
from tests._fakeloop import run


ROUTES = """\
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
  c/small: {provider: c, model: small}
"""


def plan(step: str, *, deadline_s: float = 60.0, budget: float = 0.05) -> Plan:
    """A one-step plan; ``step`` is the step's YAML body (indented four spaces)."""
    text = (
        f"tailkit_plan: 1\nworkflow: t\ndeadline_s: {deadline_s}\nhedge_budget: {budget}\n"
        f"{ROUTES}steps:\n  s:\n    route: a/m\n{step}"
    )
    return parse_plan(text)


def answer(seconds: dict[str, float], value: str = "ok") -> Callable[[Attempt], Any]:
    """An attempt that answers after ``seconds[role]`` (or ``seconds[route]``) seconds."""

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(seconds.get(a.role, seconds.get(a.route, 1.0)))
        return f"{value}:{a.route}:{a.role}"

    return fn


def stream(first_s: float, *, gaps: list[float], final: bool = True) -> Callable[[Attempt], Any]:
    """A stream: a role chunk at once, a keep-alive, first content at ``first_s``, then gaps."""

    async def fn(a: Attempt) -> AsyncIterator[Any]:
        yield Chunk(kind="role")
        await asyncio.sleep(first_s / 2)
        yield ""  # keep-alive
        await asyncio.sleep(first_s / 2)
        yield "first"
        for gap in gaps:
            await asyncio.sleep(gap)
            yield "more"
        if final:
            yield FINAL

    return fn


def execute(p: Plan, fn: Callable[[Attempt], Any], **kw: Any) -> tuple[Any, float, MemorySink]:
    """Run step s once on a fresh virtual loop: (result or raised error, seconds, ledger)."""
    sink = MemorySink()
    executor = Executor(p, ledger=Ledger(sink), **kw)

    async def main() -> tuple[Any, float]:
        t0 = now()
        try:
            value = await executor.run_step("s", fn, run_id="run")
        except Exception as error:
            value = error
        return value, now() - t0

    value, spent = run(main())
    assert executor.ledger.counts()["attempts"] == len(sink.records)
    return value, spent, sink


def test_no_cutoff_fires_on_a_fast_call() -> None:
    """A call faster than every cutoff returns as is: one attempt, one ledger line, the winner."""
    value, spent, sink = execute(
        plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n"),
        answer({"primary": 4.0}),
    )
    assert value == "ok:a/m:primary"
    assert spent == 4.0
    [line] = sink.records
    assert (line.status, line.winner, line.total_s, line.censored_at_s) == ("ok", True, 4.0, None)


def test_hedge_starts_at_the_cutoff_on_the_hedge_route_and_first_good_wins() -> None:
    """At 10 s the hedge starts on b/m; it answers at 15 s and wins; the primary is cut then."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    value, spent, sink = execute(p, answer({"primary": 30.0, "hedge": 5.0}))
    assert value == "ok:b/m:hedge"
    assert spent == 15.0
    hedge, primary = sink.records
    assert (hedge.role, hedge.provider, hedge.winner, hedge.total_s) == ("hedge", "b", True, 5.0)
    assert (primary.status, primary.censored_at_s, primary.total_s) == ("cancelled", 15.0, None)
    assert primary.attrs["cutoff"] == "total"
    assert hedge.idempotency_key == primary.idempotency_key
    assert (primary.attempt, hedge.attempt) == (0, 1)


def test_primary_still_wins_the_race_when_it_is_first() -> None:
    """After the hedge starts, a primary that answers first wins; the hedge is cut."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    value, spent, sink = execute(p, answer({"primary": 12.0, "hedge": 5.0}))
    assert value == "ok:a/m:primary"
    assert spent == 12.0
    assert [(r.role, r.status, r.winner) for r in sink.records] == [
        ("primary", "ok", True), ("hedge", "cancelled", False)]  # fmt: skip
    assert sink.records[1].censored_at_s == 2.0


def test_ttft_cutoff_fires_at_its_instant_and_role_or_keepalive_chunks_do_not_count() -> None:
    """No content token by 2 s: the hedge starts at exactly 2 s, whatever empty chunks came."""
    p = plan("    signal: ttft\n    ttft_cutoff_s: 2\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    slow, fast = stream(5.0, gaps=[0.5]), stream(1.0, gaps=[0.5])

    def fn(a: Attempt) -> Any:
        return slow(a) if a.role == "primary" else fast(a)

    value, spent, sink = execute(p, fn)
    assert value.text == "firstmore"
    assert spent == 2.0 + 1.5
    hedge, primary = sink.records
    assert hedge.ttft_s == 1.0
    assert hedge.total_s == 1.5
    assert hedge.output_tokens == 2
    assert primary.attrs["cutoff"] == "ttft"
    assert primary.censored_at_s == 3.5


def test_a_stall_fires_mid_stream() -> None:
    """A stream silent for 3 s after its first tokens triggers the action at that instant."""
    p = plan("    stall_cutoff_s: 3\n    cutoff_s: 50\n    on_cutoff: retry\n")
    calls: list[str] = []

    def fn(a: Attempt) -> Any:
        calls.append(a.role)
        return stream(1.0, gaps=[0.5, 10.0])(a) if a.role == "primary" else stream(1.0, gaps=[])(a)

    _value, spent, sink = execute(p, fn)
    assert calls == ["primary", "retry"]
    assert spent == 1.0 + 0.5 + 3.0 + 1.0  # stalled from 1.5 s, cut at 4.5 s, retry took 1 s
    assert sink.records[0].attrs["cutoff"] == "stall"
    assert sink.records[0].censored_at_s == 4.5


def test_a_stream_cut_without_its_terminal_marker_is_a_failure() -> None:
    """A stream that ends without FINAL fails; the step retries it once, then gives up."""
    p = plan("")
    value, _, sink = execute(p, stream(1.0, gaps=[0.5], final=False))
    assert isinstance(value, AllAttemptsFailed)
    assert "terminal marker" in str(value)
    assert isinstance(value.__cause__, ExceptionGroup)
    assert len(value.exceptions) == 2
    assert [r.status for r in sink.records] == ["error", "error"]


def test_fail_action_raises_step_timeout_naming_step_and_cutoff() -> None:
    """on_cutoff: fail gives up at the cutoff with a StepTimeout (a TimeoutError)."""
    value, spent, sink = execute(
        plan("    cutoff_s: 7\n    on_cutoff: fail\n"), answer({"primary": 30.0})
    )
    assert isinstance(value, StepTimeout)
    assert isinstance(value, TimeoutError)
    assert value.step == "s"
    assert value.spent_s == 7.0
    assert spent == 7.0
    assert "step 's' gave up at its total cutoff after 7.000 s" in str(value)
    assert sink.records[0].censored_at_s == 7.0


def test_no_attempt_outlives_the_run_deadline() -> None:
    """At the deadline every attempt is cut and the step times out, hedges included."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n", deadline_s=60.0)
    fn = answer({"primary": 100.0, "hedge": 100.0})

    async def main() -> tuple[Any, float, MemorySink]:
        sink = MemorySink()
        executor = Executor(p, ledger=Ledger(sink))
        t0 = now()
        with pytest.raises(StepTimeout) as err, deadline_after(20.0):
            await executor.run_step("s", fn)  # the step enforces the deadline it inherits
        return err.value, now() - t0, sink

    error, spent, sink = run(main())
    assert spent == 20.0
    assert error.cutoff_s is None
    assert [(r.role, r.status, r.censored_at_s) for r in sink.records] == [
        ("primary", "timeout", 20.0), ("hedge", "timeout", 10.0)]  # fmt: skip
    assert all(r.deadline_at is not None for r in sink.records)


def test_spent_budget_stops_the_hedge() -> None:
    """With the hedge budget spent, the cutoff fires, no hedge starts, and the line says why."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n", budget=0.0)
    budget = HedgeBudget(0.0, allowance=0)
    sink = MemorySink()
    executor = Executor(p, ledger=Ledger(sink), budget=budget)
    value = run(executor.run_step("s", answer({"primary": 30.0}), run_id="run"))
    assert value == "ok:a/m:primary"
    [line] = sink.records
    denied = {"cutoff": "total", "hedge_denied": "budget", "action_skipped": "hedge budget spent"}
    assert line.attrs == denied
    assert executor.denials == {"budget": 1, "throttle": 0}


def test_a_throttled_provider_gets_no_hedge() -> None:
    """Failures drain provider b's throttle; while drained, no hedge goes to b."""
    throttle = ProviderThrottle()
    for _ in range(6):
        throttle.on_failure("b")
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    value, _, sink = execute(p, answer({"primary": 30.0}), throttle=throttle)
    assert value == "ok:a/m:primary"
    assert sink.records[0].attrs["action_skipped"] == "provider b throttled"
    assert sink.records[0].attrs["hedge_denied"] == "throttle"


def test_non_idempotent_steps_are_never_duplicated() -> None:
    """A non-idempotent step is not retried after an error, and runs one attempt only."""
    p = plan("    idempotent: false\n")
    seen: list[str] = []

    async def fn(a: Attempt) -> str:
        seen.append(a.idempotency_key)
        await asyncio.sleep(1.0)
        msg = "boom"
        raise AttemptError(msg, http_status=500)

    value, _, sink = execute(p, fn)
    assert isinstance(value, AllAttemptsFailed)
    assert len(seen) == 1
    assert [(r.status, r.http_status) for r in sink.records] == [("error", 500)]


def test_a_429_retries_after_retry_after_only_when_it_fits() -> None:
    """Retry-After is honoured when it fits the deadline and refused when it does not."""

    def limited(retry_after_s: float) -> Callable[[Attempt], Any]:
        async def fn(a: Attempt) -> str:
            await asyncio.sleep(1.0)
            if a.role == "primary":
                msg = "slow down"
                raise AttemptError(msg, status="rate_limited", http_status=429,
                                   retry_after_s=retry_after_s)  # fmt: skip
            return "second"

        return fn

    value, spent, sink = execute(plan("", deadline_s=60.0), limited(5.0))
    assert value == "second"
    assert 1.0 + 5.0 + 1.0 <= spent <= 1.0 + 5.0 + 1.0 + StepPolicy().retry_jitter_s  # jittered
    assert [r.status for r in sink.records] == ["rate_limited", "ok"]
    assert sink.records[1].total_s == 1.0  # the wait is not the attempt's latency

    async def tight() -> Any:
        executor = Executor(plan(""), ledger=Ledger())
        async with deadline_after(4.0):
            try:
                return await executor.run_step("s", limited(5.0))
            except AllAttemptsFailed as error:
                return error

    assert isinstance(run(tight()), AllAttemptsFailed)


def test_invalid_output_escalates_to_the_upgrade_route() -> None:
    """A result the validator refuses goes once to upgrade_route; its good answer wins."""
    p = plan("    upgrade_route: c/small\n")
    policy = StepPolicy(validator=lambda v: "c/small" in v)
    value, spent, sink = execute(
        p, answer({"primary": 2.0, "upgrade": 3.0}), policies={"s": policy}
    )
    assert value == "ok:c/small:upgrade"
    assert spent == 5.0
    assert [(r.role, r.status) for r in sink.records] == [("primary", "invalid"), ("upgrade", "ok")]


@pytest.mark.parametrize(
    ("project", "spent_s", "why"), [(True, 10.0, "projected"), (False, 32.0, "total")]
)
def test_downgrade_when_a_stream_is_projected_to_overrun(
    project: bool, spent_s: float, why: str
) -> None:
    """Asked to, a stream too slow to finish by the cutoff is downgraded early; else at 30 s."""
    p = plan(
        "    expected_tokens: {output: 100}\n    cutoff_s: 30\n    on_cutoff: downgrade\n"
        "    downgrade_route: c/small\n"
    )

    def fn(a: Attempt) -> Any:
        if a.role == "primary":  # 1 token/s: 100 tokens would take until ~101 s
            return stream(1.0, gaps=[1.0] * 200)(a)
        return answer({"downgrade": 2.0})(a)

    policy = StepPolicy(project_overrun=project)
    value, spent, sink = execute(p, fn, policies={"s": policy})
    assert value == "ok:c/small:downgrade"
    # projected after 8 tokens (at 8 s), or cut at the 30 s cutoff; then 2 s on c/small
    assert spent == spent_s
    assert sink.records[0].attrs["cutoff"] == why
    assert sink.records[1].attrs["started_by"] == "cutoff"


def test_abandoned_losers_finish_and_are_recorded_when_they_land() -> None:
    """With losers: finish, the slow primary lands later and is recorded as abandoned."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    sink = MemorySink()
    executor = Executor(p, ledger=Ledger(sink), policies={"s": StepPolicy(losers="finish")})

    async def main() -> Any:
        value = await executor.run_step("s", answer({"primary": 18.0, "hedge": 5.0}))
        assert len(sink.records) == 1  # only the winner so far
        await asyncio.sleep(10.0)
        return value

    assert run(main()) == "ok:b/m:hedge"
    _winner, loser = sink.records
    assert (loser.status, loser.abandoned, loser.total_s, loser.winner) == ("ok", True, 18.0, False)
    counts = executor.ledger.counts()
    assert counts["attempts"] == 2
    assert counts["abandoned"] == 1
    assert counts["winners"] == 1


def test_cutoff_tightens_when_the_run_is_late() -> None:
    """A step acts at min(cutoff, deadline - reserve - start) (docs/deadline.md)."""
    text = (
        f"tailkit_plan: 1\nworkflow: t\ndeadline_s: 40\n{ROUTES}steps:\n"
        "  s:\n    route: a/m\n    cutoff_s: 30\n    on_cutoff: hedge\n    hedge_route: b/m\n"
        "  after:\n    route: a/m\n    depends_on: [s]\n"
        "    predicted: {p50_s: 25.0, p99_s: 30.0, hedge_rate: 0.0}\n"
    )
    executor = Executor(parse_plan(text), ledger=Ledger(MemorySink()))
    assert executor.reserve_s == {"s": 25.0, "after": 0.0}
    fn = answer({"primary": 100.0, "hedge": 1.0})

    async def main() -> float:
        t0 = now()
        async with deadline_after(40.0):
            await executor.run_step("s", fn)
        return now() - t0

    assert run(main()) == 15.0 + 1.0  # hedged at 40 - 25 = 15 s, not at 30 s


def test_ledger_counts_reconcile_over_many_calls() -> None:
    """Over many mixed calls: one line per attempt; statuses add up; one winner per success."""
    p = plan("    cutoff_s: 5\n    on_cutoff: hedge\n    hedge_route: b/m\n", budget=0.5)
    sink = MemorySink()
    executor = Executor(p, ledger=Ledger(sink))
    started = 0

    async def fn(a: Attempt) -> str:
        nonlocal started
        started += 1
        i = int(a.idempotency_key, 16) % 7
        await asyncio.sleep([1.0, 8.0, 30.0, 2.0, 6.0, 0.5, 9.0][i])
        if i == 3:
            msg = "flaky"
            raise AttemptError(msg)
        return "fine"

    async def main() -> tuple[int, int]:
        results = await asyncio.gather(
            *(executor.run_step("s", fn, run_id="r", call_index=k) for k in range(200)),
            return_exceptions=True,
        )
        return sum(r == "fine" for r in results), sum(isinstance(r, Exception) for r in results)

    good, bad = run(main())
    counts = executor.ledger.counts()
    assert counts["attempts"] == started == len(sink.records)
    assert (
        sum(counts[s] for s in ("ok", "error", "timeout", "cancelled", "invalid", "rate_limited"))
        == started
    )
    assert counts["winners"] == good
    assert good + bad == 200
    assert math.isclose(sum(1 for r in sink.records if r.role == "hedge") / 200, 0.5, abs_tol=0.5)


def test_what_started_an_attempt_is_on_its_line() -> None:
    """attrs.started_by: cutoff for an action's attempt, error for a retry, invalid for upgrade."""
    p = plan(
        "    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n    upgrade_route: c/small\n"
    )

    async def fn(a: Attempt) -> str:
        await asyncio.sleep({"primary": 1.0, "retry": 8.0, "hedge": 2.0}.get(a.role, 1.0))
        if a.role == "primary":
            msg = "boom"
            raise AttemptError(msg, http_status=503)
        return "bad" if a.role == "retry" else "good"

    policy = StepPolicy(validator=lambda v: v == "good", retry_jitter_s=0.0)
    value, spent, sink = execute(p, fn, policies={"s": policy})
    assert value == "good"
    assert spent == 1.0 + 8.0 + 1.0  # the failover (b/m) and the upgrade, each under its cutoff
    assert [(r.role, r.status, r.attrs.get("started_by")) for r in sink.records] == [
        ("primary", "error", None),
        ("retry", "invalid", "error"),
        ("upgrade", "ok", "invalid"),
    ]


def test_only_the_first_attempt_is_retried_after_an_error() -> None:
    """Primary and hedge both fail: no retry after the hedged race (the simulator's rule)."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")

    async def fn(a: Attempt) -> str:
        await asyncio.sleep({"primary": 14.0, "hedge": 5.0}.get(a.role, 1.0))
        msg = f"{a.role} failed"
        raise AttemptError(msg, http_status=500)

    value, spent, sink = execute(p, fn)
    assert isinstance(value, AllAttemptsFailed)
    assert spent == 15.0
    assert [(r.role, r.status) for r in sink.records] == [("primary", "error"), ("hedge", "error")]


def test_an_invalid_result_does_not_win_the_race() -> None:
    """The hedge answers invalid first: the upgrade starts, and the primary still wins at 16 s."""
    p = plan("    cutoff_s: 10\n    on_cutoff: hedge\n    hedge_route: b/m\n")
    policy = StepPolicy(validator=lambda v: "hedge" not in v)
    value, spent, sink = execute(
        p, answer({"primary": 16.0, "hedge": 3.0, "upgrade": 9.0}), policies={"s": policy}
    )
    assert value == "ok:a/m:primary"
    assert spent == 16.0
    # the upgrade goes to the step's own route (no upgrade_route), not to the hedge's
    assert [(r.role, r.provider, r.status) for r in sink.records] == [
        ("hedge", "b", "invalid"),
        ("primary", "a", "ok"),
        ("upgrade", "a", "cancelled"),
    ]


def test_no_extra_attempt_starts_at_the_deadline() -> None:
    """A cutoff within a microsecond of the deadline does not hedge: no time is left to use."""
    p = plan(
        "    cutoff_s: 19.9999995\n    on_cutoff: hedge\n    hedge_route: b/m\n", deadline_s=20.0
    )
    sink = MemorySink()
    executor = Executor(p, ledger=Ledger(sink))
    result = run(executor.run(answer({"primary": 100.0}), run_id="late"))
    assert (result.ok, result.elapsed_s) == (False, 20.0)
    [line] = sink.records
    assert (line.role, line.status) == ("primary", "timeout")
    assert line.attrs == {"cutoff": "total", "action_skipped": "no time left"}
    assert result.denials == {"budget": 0, "throttle": 0}


def test_an_attempt_that_fails_as_the_deadline_cuts_it_leaves_no_unread_error() -> None:
    """An adapter's own timer at the run deadline: its error is read, not logged by asyncio."""
    unread: list[str] = []

    async def fn(a: Attempt) -> str:
        await asyncio.sleep(max(a.deadline - now(), 0.0))  # the adapter's timer: the deadline
        msg = "timed out at the attempt's deadline"
        raise AttemptError(msg, status="timeout")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: unread.append(str(context.get("message")))
        )
        async with Executor(plan("", deadline_s=5.0)) as executor:
            for _ in range(10):
                await executor.run({"s": fn})
        gc.collect()
        await asyncio.sleep(0)

    run(main())
    assert unread == []
