"""
Workflow runs and deadlines on a virtual clock: the DAG, optional steps, one deadline for all.
"""

from __future__ import annotations

import asyncio
import gc
import math

from typing import Any

import pytest

from tailkit.config import parse_plan
from tailkit.errors import ConfigError
from tailkit.executor import (
    Attempt,
    AttemptError,
    Executor,
    Ledger,
    MemorySink,
    StepPolicy,
    current_deadline,
    deadline_after,
    deadline_at,
    deadline_from_headers,
    deadline_headers,
    idempotency_key,
    now,
    remaining,
    run_step,
)
from tailkit.executor import _executor as executor_module
from tests._fakeloop import run


WORKFLOW = """\
tailkit_plan: 1
workflow: brief
deadline_s: 60
routes:
  a/m: {provider: a, model: m}
  b/m: {provider: b, model: m}
steps:
  extract: {route: a/m}
  plan: {route: a/m, depends_on: [extract]}
  review: {route: a/m, depends_on: [extract]}
  tag: {route: a/m, depends_on: [extract], required: false}
  draft: {route: a/m, depends_on: [plan, review]}
"""
SECONDS = {"extract": 2.0, "plan": 5.0, "review": 8.0, "tag": 1.0, "draft": 4.0}


def runner(seconds: dict[str, float], *, failing: tuple[str, ...] = ()) -> Any:
    """One attempt function for every step: sleeps its seconds, returns what it saw."""
    starts: dict[str, float] = {}

    async def fn(a: Attempt) -> dict[str, Any]:
        starts.setdefault(a.step, now())
        await asyncio.sleep(seconds[a.step])
        if a.step in failing:
            msg = f"{a.step} broke"
            raise AttemptError(msg)
        return {"step": a.step, "inputs": sorted(a.inputs), "deadline": a.deadline}

    fn.starts = starts  # type: ignore[attr-defined]
    return fn


def test_steps_start_when_their_dependencies_are_done() -> None:
    """Each step starts the instant its last dependency ends and sees their results."""
    fn = runner(SECONDS)
    executor = Executor(parse_plan(WORKFLOW), ledger=Ledger(MemorySink()))
    result = run(executor.run(fn, run_id="r1"))
    assert result.ok
    assert not result.failed
    assert not result.cancelled
    assert fn.starts == {"extract": 0.0, "plan": 2.0, "review": 2.0, "tag": 2.0, "draft": 10.0}
    assert result.elapsed_s == 14.0
    assert result.results["draft"]["inputs"] == ["plan", "review"]
    assert result.finished == ("extract", "tag", "plan", "review", "draft")
    assert {r["deadline"] for r in result.results.values()} == {60.0}


def test_an_optional_step_may_fail_without_failing_the_run() -> None:
    """A failed optional step is reported; the run still succeeds."""
    executor = Executor(parse_plan(WORKFLOW), ledger=Ledger(MemorySink()))
    result = run(executor.run(runner(SECONDS, failing=("tag",)), run_id="r2"))
    assert result.ok
    assert set(result.failed) == {"tag"}
    assert "tag" not in result.results


def test_a_failed_required_step_fails_the_run_and_skips_what_needs_it() -> None:
    """When review fails, draft never starts and the run fails."""
    executor = Executor(parse_plan(WORKFLOW), ledger=Ledger(MemorySink()))
    result = run(executor.run(runner(SECONDS, failing=("review",)), run_id="r3"))
    assert not result.ok
    assert set(result.failed) == {"review"}
    assert result.skipped == ("draft",)


def test_the_deadline_cuts_everything_still_running() -> None:
    """With a 9 s deadline, review is cut at 9 s, draft never runs, every attempt is recorded."""
    sink = MemorySink()
    executor = Executor(parse_plan(WORKFLOW), ledger=Ledger(sink))
    result = run(executor.run(runner(SECONDS), run_id="r4", deadline_s=9.0))
    assert not result.ok
    assert result.elapsed_s == 9.0
    assert set(result.finished) == {"extract", "plan", "tag"}
    assert "review" in result.failed or "review" in result.cancelled
    assert "draft" in result.skipped or "draft" in result.cancelled
    review = [r for r in sink.records if r.step == "review"]
    assert [(r.status, r.censored_at_s) for r in review] == [("timeout", 7.0)]
    assert executor.ledger.counts()["attempts"] == len(sink.records) == 4


def test_every_step_needs_an_attempt_function() -> None:
    """A mapping without a function for some step is refused before anything runs."""
    executor = Executor(parse_plan(WORKFLOW))
    with pytest.raises(ConfigError, match="no attempt function for step"):
        run(executor.run({"extract": runner(SECONDS)}, run_id="r5"))


def test_idempotency_keys_are_per_logical_call() -> None:
    """Same run, step and call index: same key; anything else differs."""
    key = idempotency_key("r", "s", 0)
    assert key == idempotency_key("r", "s", 0)
    assert len(key) == 32
    assert (
        len(
            {
                key,
                idempotency_key("r", "s", 1),
                idempotency_key("r", "t", 0),
                idempotency_key("q", "s", 0),
            }
        )
        == 4
    )


def test_deadline_scopes_compose_with_min_and_never_extend() -> None:
    """A child deadline is min(parent, own); relative budgets become absolute on entry."""

    async def main() -> list[float]:
        seen = [current_deadline(), remaining()]
        with deadline_after(10.0):
            await asyncio.sleep(4.0)
            seen += [current_deadline(), remaining()]
            with deadline_after(100.0):
                seen.append(current_deadline())
            with deadline_at(7.0):
                seen.append(current_deadline())
        seen.append(current_deadline())
        return seen

    assert run(main()) == [math.inf, math.inf, 10.0, 6.0, 10.0, 7.0, math.inf]


def test_async_scope_enforces_its_deadline() -> None:
    """`async with deadline_after(s)` cancels the block at the instant, as a TimeoutError."""

    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with deadline_after(3.0):
                await asyncio.sleep(10.0)
        return now()

    assert run(main()) == 3.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-tailkit-deadline": "1010", "x-tailkit-remaining-s": "10"}, 108.0),  # queued 2 s
        ({"X-Tailkit-Deadline": "1020", "X-Tailkit-Remaining-S": "5"}, 105.0),  # skewed: min
        ({"x-tailkit-remaining-s": "5"}, 105.0),
        ({"x-tailkit-deadline": "1005"}, 103.0),
        ({"x-tailkit-deadline": "990"}, 100.0),  # already expired: now
        ({"x-tailkit-deadline": "soon", "x-tailkit-remaining-s": "3"}, 103.0),  # malformed one
        ({}, math.inf),
    ],
)
def test_receiver_takes_the_stricter_of_wall_deadline_and_remaining(
    headers: dict[str, str], expected: float
) -> None:
    """deadline_from_headers uses min(deadline_wall - now_wall, remaining_at_send)."""
    assert deadline_from_headers(headers, now_mono=100.0, now_wall=1002.0) == expected


def test_sender_headers_carry_both_forms() -> None:
    """deadline_headers sends the absolute wall instant and the seconds left at send time."""
    headers = deadline_headers(deadline=30.0, now_mono=20.0, now_wall=5000.0)
    assert headers == {"x-tailkit-deadline": "5010.000000", "x-tailkit-remaining-s": "10.000000"}
    assert deadline_headers(deadline=math.inf) == {}
    assert deadline_from_headers(headers, now_mono=0.0, now_wall=5000.0) == 10.0


# ------------------------------------------------------------------ operations: policy, run_step


@pytest.mark.parametrize(
    ("field", "bad", "good", "message"),
    [
        ("losers", "finsh", "finish", "losers must be 'cancel' or 'finish', got 'finsh'"),
        ("error_retries", -1, 0, "error_retries must be an integer, 0 or more (retries), got -1"),
        ("error_retries", 1.5, 2, "error_retries must be an integer, 0 or more (retries), got 1.5"),
        ("retry_jitter_s", -0.1, 0, "retry_jitter_s must be a finite number of seconds"),
        ("retry_jitter_s", math.inf, 0.5, "retry_jitter_s must be a finite number of seconds"),
        ("validator", "len", bool, "validator must be callable or None, got 'len'"),
        ("project_overrun", "yes", True, "project_overrun must be True or False, got 'yes'"),
        ("provider_errors", (KeyError, "x"), (KeyError,), "provider_errors must be a tuple of"),
        ("provider_errors", KeyError, (), "provider_errors must be a tuple of exception"),
    ],
)
def test_step_policy_refuses_what_it_would_misread(
    field: str, bad: Any, good: Any, message: str
) -> None:
    """A typo in a policy is an error naming the field, its value and what it accepts."""
    assert good == getattr(StepPolicy(**{field: good}), field)
    with pytest.raises(ConfigError) as caught:
        StepPolicy(**{field: bad})

    assert str(caught.value).startswith(message)


def _executors_of(plan: Any) -> list[Executor]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Executor) and o.profile_plan is plan]


def test_run_step_with_a_plan_keeps_no_executor_forever() -> None:
    """run_step(plan=...) keeps executors for the latest plans only: older ones are let go."""
    first = parse_plan(WORKFLOW)
    fn = runner(SECONDS)

    async def main() -> None:
        await run_step("extract", fn, plan=first)
        await run_step("extract", fn, plan=first)
        (kept,) = _executors_of(first)  # one executor per plan while it is kept: one budget
        assert 2 == kept.shared.budget.firsts
        del kept
        for _ in range(executor_module.KEPT_PLANS):  # a new plan object per reload
            await run_step("extract", fn, plan=parse_plan(WORKFLOW))

    run(main())

    assert [] == _executors_of(first)
