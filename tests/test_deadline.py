"""
Deadline scopes on a virtual clock: fail, move on, carry; nesting; cancellation bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

from collections.abc import Callable

import pytest

from tailkit.deadline import (
    DeadlineScope,
    carry_deadline_after,
    carry_deadline_at,
    current_deadline,
    deadline_after,
    deadline_at,
    deadline_at_wall,
    fail_after,
    fail_at,
    move_on_after,
    move_on_at,
    now,
    remaining,
)
from tailkit.deadline.lowlevel import CUT_GRACE_S, executor_cuts, executor_cutting
from tailkit.errors import StepTimeout
from tests._fakeloop import run


async def _cut_by_executor(step: str) -> None:
    """
    What the executor does: sleep to the deadline in force, then raise `StepTimeout`.
    """
    start = now()
    with executor_cuts(current_deadline()):
        await asyncio.sleep(remaining())
        msg = f"step {step!r} ran out of run deadline"
        raise StepTimeout(msg, step=step, spent_s=now() - start, cutoff_s=None)


def test_plain_with_cancels_at_the_instant() -> None:
    """`with deadline_after(0.2)` around a 0.5 s sleep raises TimeoutError at 0.2 s."""

    async def main() -> float:
        with pytest.raises(TimeoutError), deadline_after(0.2):
            await asyncio.sleep(0.5)
        return now()

    assert 0.2 == run(main())


_FAILING = {
    "deadline_after": lambda: deadline_after(3.0),
    "fail_after": lambda: fail_after(3.0),
    "deadline_at": lambda: deadline_at(3.0),
    "fail_at": lambda: fail_at(3.0),
}


@pytest.mark.parametrize("scope", _FAILING.values(), ids=_FAILING.keys())
def test_async_with_enforces_too(scope: Callable[[], DeadlineScope]) -> None:
    """Every failing scope, under `async with`, raises TimeoutError at its deadline."""

    async def main() -> tuple[float, bool, bool]:
        with pytest.raises(TimeoutError):
            async with scope() as entered:
                await asyncio.sleep(10.0)
        return now(), entered.expired, entered.cancelled_caught

    assert (3.0, True, True) == run(main())


def test_timeout_leaves_the_cancel_count_balanced() -> None:
    """After a scope's TimeoutError the task is not marked as being cancelled."""

    async def main() -> tuple[int, float]:
        with pytest.raises(TimeoutError), fail_after(1.0):
            await asyncio.sleep(5.0)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(1.0)  # a cancellation left behind would land here
        return task.cancelling(), now()

    assert (0, 2.0) == run(main())


def test_a_finished_block_is_not_cut() -> None:
    """A block that ends in time returns normally; the scope did not expire."""

    async def main() -> tuple[str, bool, bool, float]:
        with deadline_after(5.0) as scope:
            await asyncio.sleep(1.0)
        await asyncio.sleep(10.0)  # the scope's timer is gone with it
        return "done", scope.expired, scope.cancelled_caught, now()

    assert ("done", False, False, 11.0) == run(main())


@pytest.mark.parametrize(
    "make",
    [deadline_at, fail_at, move_on_at, carry_deadline_at],
    ids=["deadline_at", "fail_at", "move_on_at", "carry_deadline_at"],
)
def test_a_wall_clock_instant_is_refused(make: Callable[[float], DeadlineScope]) -> None:
    """An epoch value where the loop clock is wanted is a ValueError that names the fix."""

    async def main() -> None:
        make(time.time() + 5.0)

    with pytest.raises(ValueError, match="looks like a wall-clock time") as err:
        run(main())
    assert "now() + seconds" in str(err.value)
    assert "_after(seconds)" in str(err.value)


def test_deadline_at_points_to_its_wall_clock_form() -> None:
    """The error of deadline_at names deadline_at_wall, which converts an epoch instant."""

    async def main() -> tuple[str, float, float]:
        with pytest.raises(ValueError, match="deadline_at_wall") as err:
            deadline_at(time.time() + 3.0)
        before = time.time()
        scope = deadline_at_wall(before + 3.0)
        spent = time.time() - before
        with scope:
            return str(err.value), scope.deadline, spent

    message, deadline, spent = run(main())
    assert "deadline_at takes an instant on the event loop's clock" in message
    assert 3.0 - spent <= deadline <= 3.0


def test_deadline_at_wall_refuses_a_loop_clock_instant() -> None:
    """deadline_at_wall(now() + 5) is the opposite mistake, refused the same way."""

    async def main() -> None:
        deadline_at_wall(now() + 5.0)

    with pytest.raises(ValueError, match="deadline_at"):
        run(main())


@pytest.mark.parametrize(
    "make",
    [deadline_at, deadline_after, move_on_at, carry_deadline_after, deadline_at_wall],
)
def test_nan_is_refused(make: Callable[[float], DeadlineScope]) -> None:
    """NaN is never a deadline."""
    with pytest.raises(ValueError, match="NaN"):
        make(math.nan)


def test_infinity_keeps_the_parents_deadline() -> None:
    """math.inf means no deadline of the scope's own: the parent's stays in force."""

    async def main() -> list[float]:
        seen = []
        with deadline_at(math.inf), deadline_after(math.inf):
            seen.append(current_deadline())
        with carry_deadline_after(4.0), deadline_at(math.inf) as inner:
            seen.append(inner.deadline)
        return seen

    assert [math.inf, 4.0] == run(main())


def test_outer_cancellation_is_not_swallowed() -> None:
    """Cancelling the task inside a scope propagates as CancelledError, not TimeoutError."""

    async def body() -> None:
        with deadline_after(10.0):
            await asyncio.sleep(100.0)

    async def main() -> tuple[bool, float]:
        task = asyncio.ensure_future(body())
        await asyncio.sleep(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled(), now()

    assert (True, 1.0) == run(main())


def test_outer_cancellation_at_the_deadline_is_not_swallowed() -> None:
    """A cancel from outside at the very instant the scope fires still propagates."""

    async def body() -> None:
        with deadline_after(5.0):
            await asyncio.sleep(100.0)

    async def main() -> tuple[bool, float]:
        task = asyncio.ensure_future(body())
        await asyncio.sleep(0.0)  # the task enters its scope and arms its timer first
        asyncio.get_running_loop().call_at(5.0, task.cancel)
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled(), now()

    assert (True, 5.0) == run(main())


def test_nested_scope_never_extends_its_parent() -> None:
    """A child asking for more time gets the parent's deadline, and the parent reports it."""
    outer, inner = deadline_after(2.0), deadline_after(100.0)

    async def body() -> None:
        with outer, inner:
            await asyncio.sleep(50.0)

    async def main() -> tuple[float, float, bool, bool]:
        with pytest.raises(TimeoutError):
            await body()
        return now(), inner.deadline, inner.cancelled_caught, outer.cancelled_caught

    assert (2.0, 2.0, False, True) == run(main())


def test_inner_timeout_leaves_the_outer_scope_running() -> None:
    """The inner scope raises at its own deadline; the outer block goes on to its own."""
    seen: list[float] = []

    async def body() -> None:
        with deadline_after(10.0):
            with pytest.raises(TimeoutError), deadline_after(1.0):
                await asyncio.sleep(5.0)
            seen.append(now())
            with move_on_after(2.0):
                await asyncio.sleep(5.0)
            seen.append(now())
            await asyncio.sleep(50.0)

    async def main() -> list[float]:
        with pytest.raises(TimeoutError):
            await body()
        return [*seen, now()]

    assert [1.0, 3.0, 10.0] == run(main())


def test_move_on_cancels_quietly() -> None:
    """move_on_after ends the block at its deadline with no error and says it did."""

    async def main() -> tuple[float, bool, bool, bool]:
        with move_on_after(2.0) as cut:
            await asyncio.sleep(5.0)
        async with move_on_at(now() + 1.0) as kept:
            await asyncio.sleep(0.5)
        return now(), cut.cancelled_caught, cut.expired, kept.cancelled_caught

    assert (2.5, True, True, False) == run(main())


def test_carry_only_sets_the_deadline() -> None:
    """carry_deadline_after sets what cutoffs and headers read; the block runs past it."""

    async def main() -> tuple[float, float, float, bool, bool]:
        with carry_deadline_after(1.0) as scope:
            seen = current_deadline()
            await asyncio.sleep(3.0)
            left = remaining()
        return seen, left, now(), scope.expired, scope.cancelled_caught

    assert (1.0, 0.0, 3.0, True, False) == run(main())


def test_enforce_false_is_the_carry_form() -> None:
    """DeadlineScope(at=..., enforce=False) is what a runner uses to set a deadline only."""

    async def main() -> tuple[float, float]:
        with DeadlineScope(at=2.0, enforce=False):
            seen = current_deadline()
            await asyncio.sleep(4.0)
        return seen, now()

    assert (2.0, 4.0) == run(main())


def test_outside_a_loop_with_only_sets_the_deadline() -> None:
    """With no running loop a scope sets the deadline (on time.monotonic) and restores it."""
    before = time.monotonic()
    with deadline_after(5.0) as scope:
        inside = current_deadline()
    after = time.monotonic()
    assert before + 5.0 <= inside == scope.deadline <= after + 5.0
    assert math.inf == current_deadline()


def test_a_scope_is_entered_once() -> None:
    """Entering the same scope twice is a RuntimeError."""
    scope = deadline_after(1.0)
    with scope:
        pass
    with pytest.raises(RuntimeError, match="entered only once"), scope:
        pass


def test_a_block_that_swallows_the_cancel_ends_normally() -> None:
    """If the block catches the cancellation itself, nothing is raised and the count balances."""

    async def main() -> tuple[bool, bool, int, float]:
        with deadline_after(1.0) as scope, contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5.0)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(1.0)
        return scope.expired, scope.cancelled_caught, task.cancelling(), now()

    assert (True, False, 0, 2.0) == run(main())


def test_executor_cut_lets_step_timeout_through() -> None:
    """Under executor_cuts the executor's StepTimeout, naming the step, wins over the timer."""

    async def main() -> tuple[str, float, int, bool]:
        with pytest.raises(StepTimeout) as err, deadline_after(5.0) as scope:
            await _cut_by_executor("draft")
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(1.0)
        return err.value.step, now(), task.cancelling(), scope.cancelled_caught

    assert ("draft", 6.0, 0, False) == run(main())


def test_executor_cut_from_a_child_task() -> None:
    """A cut entered in a task started inside the scope counts too (the step runs in gather)."""

    async def main() -> tuple[str, float, bool, int]:
        with pytest.raises(StepTimeout) as err, fail_after(5.0) as scope:
            await asyncio.gather(_cut_by_executor("a"))
        task = asyncio.current_task()
        assert task is not None
        return err.value.step, now(), scope.cancelled_caught, task.cancelling()

    assert ("a", 5.0, False, 0) == run(main())


def test_without_a_cut_the_timer_wins() -> None:
    """The same race without executor_cuts: the scope's TimeoutError, not StepTimeout."""

    async def body() -> None:
        with deadline_after(5.0):
            await asyncio.sleep(remaining())
            msg = "step 'draft' ran out of run deadline"
            raise StepTimeout(msg, step="draft", spent_s=5.0, cutoff_s=None)

    async def main() -> float:
        with pytest.raises(TimeoutError) as err:
            await body()
        assert not isinstance(err.value, StepTimeout)
        return now()

    assert 5.0 == run(main())


def test_a_cut_that_does_not_cut_still_times_out() -> None:
    """Code under executor_cuts that sleeps past the deadline gets TimeoutError after the grace."""

    async def main() -> float:
        with (
            pytest.raises(TimeoutError) as err,
            deadline_after(5.0) as scope,
            executor_cuts(scope.deadline),
        ):
            await asyncio.sleep(100.0)
        assert not isinstance(err.value, StepTimeout)
        return now()

    assert 5.0 + CUT_GRACE_S == run(main())


def test_a_cut_that_ends_in_time_hands_back_at_once() -> None:
    """When the cut code ends cleanly during the grace, the block is cancelled at once."""

    async def body() -> None:
        with deadline_after(5.0):
            with executor_cuts(current_deadline()):
                await asyncio.sleep(5.0)  # finishes at the deadline, without cutting
            await asyncio.sleep(100.0)

    async def main() -> float:
        with pytest.raises(TimeoutError):
            await body()
        return now()

    assert 5.0 == run(main())


def test_a_later_cut_does_not_delay_the_scope() -> None:
    """A cut at a later instant than the scope's deadline buys no grace."""

    async def main() -> float:
        with pytest.raises(TimeoutError), deadline_after(5.0), executor_cuts(10.0):
            await asyncio.sleep(100.0)
        return now()

    assert 5.0 == run(main())


def test_a_cut_that_ends_with_the_block_leaves_no_cancel_behind() -> None:
    """When the cut code and the block end together at the deadline, nothing is cancelled later."""

    async def main() -> tuple[float, bool, bool]:
        with deadline_after(5.0) as scope, executor_cuts(current_deadline()):
            await asyncio.sleep(5.0)  # finishes at the deadline, without cutting
        await asyncio.sleep(1.0)  # a cancellation left on the task would land here
        return now(), scope.expired, scope.cancelled_caught

    assert (6.0, True, False) == run(main())


async def _cut_with_teardown(step: str, *, says_so: bool) -> None:
    """
    An executor that raises `StepTimeout` and then spends 1 s tearing its attempts down.
    """
    with executor_cuts(current_deadline()):
        await asyncio.sleep(remaining())
        if says_so:
            executor_cutting()
        try:
            msg = f"step {step!r} ran out of run deadline"
            raise StepTimeout(msg, step=step, spent_s=now(), cutoff_s=None)
        finally:
            await asyncio.sleep(1.0)


def test_a_cutting_executor_keeps_the_scope_waiting_through_its_teardown() -> None:
    """After executor_cutting() the scope waits for the teardown; the StepTimeout comes out."""

    async def main() -> tuple[str, float, int]:
        with pytest.raises(StepTimeout) as err, deadline_after(5.0):
            await _cut_with_teardown("draft", says_so=True)
        task = asyncio.current_task()
        assert task is not None
        return err.value.step, now(), task.cancelling()

    assert ("draft", 6.0, 0) == run(main())


def test_a_silent_executor_is_cancelled_after_the_grace() -> None:
    """Without executor_cutting() a teardown longer than the grace is cut by the scope."""

    async def main() -> float:
        with pytest.raises(TimeoutError) as err, deadline_after(5.0):
            await _cut_with_teardown("draft", says_so=False)
        assert isinstance(err.value.__context__, asyncio.CancelledError)
        return now()

    assert 5.0 + CUT_GRACE_S == run(main())


def test_executor_cutting_without_a_mark_does_nothing() -> None:
    """Outside executor_cuts, executor_cutting() changes nothing: the scope cuts at once."""

    async def body() -> None:
        with deadline_after(5.0):
            executor_cutting()
            await asyncio.sleep(100.0)

    async def main() -> float:
        with pytest.raises(TimeoutError):
            await body()
        return now()

    assert 5.0 == run(main())
