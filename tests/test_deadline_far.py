"""
Far, past and malformed deadlines, end to end: a scope, the executor's ledger line, the headers.

A deadline more than `FAR_S` seconds (about 32 years) away is no deadline (``math.inf``): a
finished answer used to be thrown away because its ledger line could not write a date past
year 9999. A negative duration has passed; NaN and non-numbers are refused.
"""

from __future__ import annotations

import asyncio
import math
import time

from typing import Any

import pytest

from tailkit.deadline import (
    DEADLINE_HEADER,
    REMAINING_HEADER,
    carry_deadline_at,
    current_deadline,
    deadline_after,
    deadline_at,
    deadline_from_headers,
    deadline_headers,
    fail_after,
    move_on_after,
    now,
)
from tailkit.deadline.lowlevel import FAR_S
from tailkit.executor import Attempt, Executor, Ledger, MemorySink, StepTimeout
from tailkit.executor._attempt import Live, record_of
from tests._fakeloop import run
from tests.test_executor import answer, plan


FAR = [1e12, 1e300, 1e308, math.inf, 10**400, FAR_S * 1.0001]


@pytest.mark.parametrize("seconds", FAR, ids=["1e12", "1e300", "1e308", "inf", "10**400", "far"])
def test_a_far_deadline_keeps_the_answer_and_writes_its_ledger_line(seconds: float) -> None:
    """deadline_after(1e12) and beyond is no deadline: the answer, one line, no deadline_at."""
    sink = MemorySink()
    executor = Executor(plan(""), ledger=Ledger(sink))

    async def main() -> Any:
        with deadline_after(seconds) as scope:
            assert (math.inf, {}) == (current_deadline(), deadline_headers())
            return await executor.run_step("s", answer({"primary": 1.0}), run_id="r"), scope

    value, scope = run(main())
    assert "ok:a/m:primary" == value
    assert math.isinf(scope.deadline)
    [line] = sink.records
    assert (line.status, line.deadline_at) == ("ok", None)
    assert line.to_json()


def test_a_deadline_just_inside_the_limit_is_kept_and_written() -> None:
    """Thirty years is still a deadline: written on the line, carried in headers."""
    sink = MemorySink()
    executor = Executor(plan(""), ledger=Ledger(sink))

    async def main() -> Any:
        with deadline_after(FAR_S * 0.99):
            headers = deadline_headers()
            await executor.run_step("s", answer({"primary": 1.0}), run_id="r")
        return headers

    headers = run(main())
    assert float(headers[REMAINING_HEADER]) == pytest.approx(FAR_S * 0.99)
    [line] = sink.records
    assert line.deadline_at is not None
    assert line.deadline_at.year == time.gmtime(time.time() + FAR_S * 0.99).tm_year


def test_a_rehearsal_with_a_far_deadline_still_writes_its_line() -> None:
    """At time_scale 0.0001, decades of real seconds are millennia in plan seconds: no date."""
    sink = MemorySink()
    executor = Executor(plan(""), ledger=Ledger(sink), time_scale=0.0001)

    async def main() -> Any:
        with deadline_after(FAR_S * 0.9):
            return await executor.run_step("s", answer({"primary": 0.0001}), run_id="r")

    assert "ok:a/m:primary" == run(main())
    [line] = sink.records
    assert (line.status, line.deadline_at) == ("ok", None)


def test_an_attempt_made_by_hand_with_a_far_deadline_still_has_a_line() -> None:
    """record_of never raises for a deadline past the calendar (an Attempt built by hand)."""

    async def main() -> Any:
        live = Live(Attempt("s", "a/m", "a", "m", 0, "primary", "k", now() + 1e300),
                    now(), time.time())  # fmt: skip
        return record_of(live, status="ok", at=now())

    record = run(main())
    assert record.deadline_at is None
    assert record.to_json()


@pytest.mark.parametrize("deadline", [1e300, 10**400, math.inf])
def test_run_step_and_run_take_a_far_deadline_as_none(deadline: float) -> None:
    """run_step(deadline=1e300) and run(deadline_s=1e12) answer, their lines written."""
    sink = MemorySink()
    executor = Executor(plan(""), ledger=Ledger(sink))

    async def main() -> Any:
        one = await executor.run_step("s", answer({"primary": 1.0}), deadline=deadline)
        whole = await executor.run({"s": answer({"primary": 1.0})}, deadline_s=deadline)
        return one, whole

    one, whole = run(main())
    assert ("ok:a/m:primary", True, math.inf) == (one, whole.ok, whole.deadline_s)
    assert ["ok", "ok"] == [line.status for line in sink.records]


def test_a_nan_deadline_is_refused_by_every_entry() -> None:
    """NaN is never a deadline: the scopes, run_step and run say so."""
    executor = Executor(plan(""))

    async def main() -> list[str]:
        out = []
        for call in (
            lambda: executor.run_step("s", answer({}), deadline=math.nan),
            lambda: executor.run(answer({}), deadline_s=math.nan),
        ):
            with pytest.raises(ValueError, match="got NaN") as info:
                await call()
            out.append(str(info.value))
        return out

    assert 2 == len(run(main()))
    for scope in (deadline_after, fail_after, move_on_after, deadline_at):
        with pytest.raises(ValueError, match="got NaN"):
            scope(math.nan)
        with pytest.raises(TypeError, match="takes a number of seconds, got str '5'"):
            scope("5")  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, -1, -1e300, -math.inf, -(10**400)])
def test_a_deadline_that_has_passed_cuts_at_once(seconds: float) -> None:
    """0, negative, -inf: the deadline is now, finite; the step times out with a line written."""
    sink = MemorySink()
    executor = Executor(plan(""), ledger=Ledger(sink))

    async def main() -> Any:
        with move_on_after(seconds) as scope:
            await asyncio.sleep(1.0)
        with pytest.raises(StepTimeout), deadline_after(seconds):
            await executor.run_step("s", answer({"primary": 1.0}), run_id="r")
        return scope, deadline_headers(deadline=scope.deadline)

    scope, headers = run(main())
    assert scope.cancelled_caught
    assert math.isfinite(scope.deadline)
    assert "0.000000" == headers[REMAINING_HEADER]
    assert all(line.to_json() for line in sink.records)


@pytest.mark.parametrize(
    ("value", "left", "wall_left"),
    [
        ("1e308", 1e308, 1e308),
        ("1e999", math.inf, math.inf),  # float() says inf: malformed
        ("inf", math.inf, math.inf),
        ("nan", math.inf, math.inf),
        ("9" * 400, math.inf, math.inf),
        ("-inf", 0.0, 0.0),
        ("-1e308", 0.0, 0.0),
        ("12.5", 12.5, 0.0),  # as an epoch instant: 1970, which has passed
    ],
)
def test_a_header_from_a_client_gives_a_deadline_a_scope_can_hold(
    value: str, left: float, wall_left: float
) -> None:
    """Deadline headers: malformed is none, -inf has passed; a far one, carried, is none."""
    assert left == deadline_from_headers({REMAINING_HEADER: value}, now_mono=0.0)
    at = deadline_from_headers({DEADLINE_HEADER: value}, now_mono=0.0, now_wall=2.5e9)
    assert at == pytest.approx(wall_left)

    async def main() -> tuple[float, dict[str, str]]:
        with carry_deadline_at(deadline_from_headers({REMAINING_HEADER: value})):
            return current_deadline(), deadline_headers()

    deadline, headers = run(main())
    if left > FAR_S:
        assert (math.inf, {}) == (deadline, headers)
    else:
        assert math.isfinite(deadline)
        assert float(headers[REMAINING_HEADER]) == left


def test_run_step_refuses_a_wall_clock_deadline_naming_real_fixes() -> None:
    """run_step(deadline=time.time() + 5) is refused with fixes that exist, not taken as far."""
    executor = Executor(plan(""))

    async def main() -> str:
        with pytest.raises(ValueError, match="looks like a wall-clock time") as info:
            await executor.run_step("s", answer({}), deadline=time.time() + 5.0)
        return str(info.value)

    message = run(main())
    assert "use deadline_after(seconds) around the call or run_step(deadline=now() + " in message
    assert "deadline_at_wall(epoch) around the call" in message
