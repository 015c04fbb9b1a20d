"""
Deadline scopes on the event loop's clock, and the hooks the executor cuts through.

The package docstring (`tailkit.deadline`) explains the rule; this module holds the one
contextvar the deadline lives in, the scope that sets and enforces it, and `executor_cuts` /
`executor_cutting`, which let the executor's `StepTimeout` come out of a scope due at the same
instant (re-exported for the executor by `tailkit.deadline.lowlevel`).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import numbers
import time

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import cast


CUT_GRACE_S = 0.05  # how long a due scope waits for the executor to start cutting
FAR_S = 1e9  # seconds: a deadline farther away (about 32 years) is none (see `far`)
_SAME_INSTANT_S = 1e-6  # an executor cut this much after a scope's deadline still counts
_YEAR_S = 365.25 * 86_400.0

_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar(
    "tailkit_deadline", default=math.inf
)
# The enforcing scopes around this point (outermost first): what `executor_cuts` registers with.
_SCOPES: contextvars.ContextVar[tuple[DeadlineScope, ...]] = contextvars.ContextVar(
    "tailkit_deadline_scopes", default=()
)


class _Mark:
    """
    Strictly private: one `executor_cuts`, and whether the executor has started cutting.
    """

    __slots__ = ("cutting",)

    def __init__(self) -> None:
        self.cutting = False


# The innermost executor mark here: what `executor_cutting` flags.
_MARK: contextvars.ContextVar[_Mark | None] = contextvars.ContextVar(
    "tailkit_executor_mark", default=None
)

# A scope's timer: not yet due, due but waiting for an executor cut, cancelled the task, over.
_ARMED, _GRACE, _CANCELLED, _OVER = "armed", "grace", "cancelled", "over"


def now() -> float:
    """
    Seconds on the running event loop's clock (``time.monotonic()`` outside a loop).
    """
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def current_deadline() -> float:
    """
    The deadline in force here: an instant on the loop clock, or ``math.inf`` for none.
    """
    return _DEADLINE.get()


def remaining() -> float:
    """
    Seconds until the current deadline (0 once it has passed, ``math.inf`` for none).
    """
    deadline = _DEADLINE.get()
    return math.inf if math.isinf(deadline) else max(deadline - now(), 0.0)


def _number(api: str, value: object) -> float:
    """
    ``value`` as a float: an int too large for one is infinite; NaN and non-numbers refused.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f"{api} takes a number of seconds, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    try:
        number = float(value)
    except OverflowError:  # an int past 1.8e308
        number = math.inf if cast("float", value) > 0 else -math.inf
    if math.isnan(number):
        msg = f"{api} takes a number of seconds, got NaN"
        raise ValueError(msg)
    return number


def _check_seconds(api: str, seconds: object) -> float:
    """
    A duration as the scopes hold it: never negative, ``math.inf`` beyond `FAR_S`.

    A negative duration is 0 (the deadline has passed); one longer than `FAR_S` is none.

    Raises:
        ValueError: ``seconds`` is NaN.
        TypeError: ``seconds`` is not a number.
    """
    number = _number(api, seconds)
    if number > FAR_S:
        return math.inf
    return max(number, 0.0)


def far(deadline: float, loop_now: float) -> float:
    """
    ``deadline`` itself, or ``math.inf`` when it is more than `FAR_S` seconds after ``loop_now``.

    What every deadline this package makes has been through: an instant that far away is no
    deadline (nothing that far is a wait worth a timer), and one no calendar can write would
    break every ledger line and header that carries it. An instant more than `FAR_S` seconds
    past is moved up to that (it has passed either way).
    """
    if deadline - loop_now > FAR_S:
        return math.inf
    return max(deadline, loop_now - FAR_S)


def _fixes(api: str) -> tuple[str, str, str]:
    """
    How to say "a duration", "an instant on the loop clock", "a wall-clock instant" to ``api``.
    """
    if api == "DeadlineScope":
        return (f"{api}(after=seconds)", f"{api}(at=now() + seconds)",
                f"{api}(at=now() + epoch - time.time())")  # fmt: skip
    if not api.endswith("_at"):  # the executor's deadline= (run_step)
        return ("deadline_after(seconds) around the call", f"{api}(deadline=now() + seconds)",
                "deadline_at_wall(epoch) around the call")  # fmt: skip
    wall = "deadline_at_wall(epoch)" if api in {"deadline_at", "fail_at"} else (
        f"{api}(now() + epoch - time.time())"
    )  # fmt: skip
    return f"{api.removesuffix('_at')}_after(seconds)", f"{api}(now() + seconds)", wall


def _check_at(api: str, when: float) -> float:
    """
    ``when`` as the scopes hold it: ``math.inf`` beyond `FAR_S` seconds from now.

    An instant that far is none; ``-math.inf`` is the present (the deadline has passed).

    Raises:
        ValueError: ``when`` is NaN, or looks like epoch seconds.
        TypeError: ``when`` is not a number.
    """
    when = _number(api, when)
    loop_now, wall_now = now(), time.time()
    if when == -math.inf:
        return loop_now
    if when - loop_now > 10 * _YEAR_S and abs(when - wall_now) < 5 * _YEAR_S:
        after, at, wall = _fixes(api)
        msg = (
            f"{api} takes an instant on the event loop's clock (tailkit.deadline.now(), "
            f"{loop_now:.3f} now), got what looks like a wall-clock time: {when!r} is "
            f"{when - wall_now:.3f} s from time.time() but {(when - loop_now) / _YEAR_S:.0f} "
            f"years from now(); use {after} or {at}, or {wall} for a wall-clock instant"
        )
        raise ValueError(msg)
    return far(when, loop_now)


class DeadlineScope:
    """
    A deadline scope; build one with `deadline_after`, `move_on_after`, `carry_deadline_after`….

    Entering it sets the deadline to ``min(parent, own)``. An enforcing scope entered inside a
    running asyncio task also cancels its block at that instant: with ``move_on=False`` it then
    raises `TimeoutError`, with ``move_on=True`` it ends quietly. Any other exception leaving
    the block -- a `StepTimeout`, a cancellation from outside -- passes through unchanged. A
    scope is entered once.

    Args:
        at: Absolute instant on the loop clock, `now()` (``math.inf``: the parent's).
        after: Seconds from entering the scope (``math.inf``: the parent's). Give ``at`` or
            ``after``, not both.
        enforce: Cancel the block at the deadline (``False``: only set the deadline that
            cutoffs and outgoing headers read).
        move_on: When the scope cancels its block, end quietly instead of raising
            `TimeoutError`.

    Attributes:
        deadline: The effective instant once entered: ``min(parent, own)``.
        expired: After exit, whether the deadline had passed by the time the block ended.
        cancelled_caught: After exit, whether this scope cancelled the block (and so raised
            `TimeoutError`, or moved on).
    """

    __slots__ = (
        "_after", "_at", "_cancelling", "_enforce", "_handle", "_marks", "_move_on",
        "_scopes_token", "_started", "_state", "_task", "_token", "cancelled_caught",
        "deadline", "expired",
    )  # fmt: skip

    def __init__(
        self,
        *,
        at: float | None = None,
        after: float | None = None,
        enforce: bool = True,
        move_on: bool = False,
    ) -> None:
        if (at is None) == (after is None):
            msg = "DeadlineScope takes one of at= (an instant) or after= (seconds)"
            raise ValueError(msg)
        self._at = None if at is None else _check_at("DeadlineScope", at)
        self._after = None if after is None else _check_seconds("DeadlineScope", after)
        self._enforce, self._move_on = enforce, move_on
        self._token: contextvars.Token[float] | None = None
        self._scopes_token: contextvars.Token[tuple[DeadlineScope, ...]] | None = None
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | None = None
        self._state = _OVER
        self._cancelling = 0
        self._marks: list[_Mark] = []
        self._started = math.nan
        self.deadline = math.inf
        self.expired = self.cancelled_caught = False

    def __enter__(self) -> DeadlineScope:
        if self._token is not None or not math.isnan(self._started):
            msg = "a deadline scope can be entered only once; make a new one"
            raise RuntimeError(msg)
        self._started = now()
        own = self._at if self._at is not None else self._started + (self._after or 0.0)
        self.deadline = min(_DEADLINE.get(), own)
        self._token = _DEADLINE.set(self.deadline)
        if self._enforce and not math.isinf(self.deadline):
            self._arm()
        return self

    def _arm(self) -> None:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: the deadline is only set
            return
        if task is None:
            return
        self._task, self._cancelling, self._state = task, task.cancelling(), _ARMED
        self._scopes_token = _SCOPES.set((*_SCOPES.get(), self))
        self._handle = task.get_loop().call_at(self.deadline, self._due)

    def _due(self) -> None:
        self._handle = None
        if self._marks and self._task is not None:
            # the executor cuts at this instant too: let its StepTimeout come out first
            self._state = _GRACE
            self._handle = self._task.get_loop().call_later(CUT_GRACE_S, self._grace_over)
        else:
            self._cancel()

    def _grace_over(self) -> None:
        self._handle = None
        if not any(mark.cutting for mark in self._marks):
            self._cancel()  # the executor has not started cutting: do it here

    def _cancel(self) -> None:
        self._handle = None
        if self._task is not None and self._state in {_ARMED, _GRACE} and self._task.cancel():
            self._state = _CANCELLED

    def _mark_over(self, mark: _Mark, *, raised: bool) -> None:
        self._marks.remove(mark)
        if not self._marks and self._state == _GRACE and self._task is not None:
            # The executor is done. If it raised, its error is on its way out of the block
            # (from another task that takes a few loop turns): give it the grace again. If it
            # returned, the block goes on past the deadline: cancel it now. Either way from
            # the loop, not from the running task: if the block ends first, nothing is left.
            if self._handle is not None:
                self._handle.cancel()
            delay = CUT_GRACE_S if raised else 0.0
            self._handle = self._task.get_loop().call_later(delay, self._cancel)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        state, self._state = self._state, _OVER
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._scopes_token is not None:
            _SCOPES.reset(self._scopes_token)
            self._scopes_token = None
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None
        self.expired = state in {_GRACE, _CANCELLED} or now() >= self.deadline
        if state != _CANCELLED or self._task is None:
            return False
        # Take back the cancellation this scope asked for. If someone else cancelled the task
        # too, or the block ended some other way, what is leaving the block leaves unchanged.
        if self._task.uncancel() > self._cancelling or not isinstance(exc, asyncio.CancelledError):
            return False
        self.cancelled_caught = True
        if self._move_on:
            return True
        msg = f"deadline passed: the block was cancelled after {now() - self._started:.3f} s"
        raise TimeoutError(msg) from exc

    async def __aenter__(self) -> DeadlineScope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self.__exit__(exc_type, exc, tb)


def deadline_after(seconds: float) -> DeadlineScope:
    """
    A scope that cancels its block ``seconds`` after it is entered and raises `TimeoutError`.

    The deadline is never later than the parent's. Outside a running asyncio task it only
    sets the deadline.

    Args:
        seconds: Budget in seconds from entering the scope; ``math.inf`` keeps the parent's.

    Example::

        with deadline_after(8.0):
            answer = await executor.run_step("search", call)  # StepTimeout at 8 s
    """
    return DeadlineScope(after=_check_seconds("deadline_after", seconds))


def deadline_at(when: float) -> DeadlineScope:
    """
    A scope that cancels its block at the instant ``when`` and raises `TimeoutError`.

    Args:
        when: Absolute instant in seconds on the event loop's clock (`now()`), not wall-clock
            time (see `deadline_at_wall`); ``math.inf`` keeps the parent's.

    Raises:
        ValueError: ``when`` is NaN, or looks like epoch seconds.
    """
    return DeadlineScope(at=_check_at("deadline_at", when))


def deadline_at_wall(epoch_seconds: float) -> DeadlineScope:
    """
    `deadline_at` for a wall-clock instant: cancels the block then, raising `TimeoutError`.

    Args:
        epoch_seconds: The instant as ``time.time()`` counts it (seconds since the epoch);
            ``math.inf`` keeps the parent's.

    Raises:
        ValueError: ``epoch_seconds`` is NaN, or looks like a loop-clock instant.
    """
    epoch_seconds = _number("deadline_at_wall", epoch_seconds)
    if math.isinf(epoch_seconds):
        return DeadlineScope(at=epoch_seconds)
    wall_now, loop_now = time.time(), now()
    if wall_now - epoch_seconds > 10 * _YEAR_S:
        msg = (
            f"deadline_at_wall takes epoch seconds (time.time(), {wall_now:.3f} now), got "
            f"{epoch_seconds!r}, which looks like an instant on the event loop's clock; "
            "use deadline_at(when) for that"
        )
        raise ValueError(msg)
    return DeadlineScope(at=loop_now + (epoch_seconds - wall_now))


def fail_after(seconds: float) -> DeadlineScope:
    """
    The same as `deadline_after` (trio's and anyio's name).
    """
    return DeadlineScope(after=_check_seconds("fail_after", seconds))


def fail_at(when: float) -> DeadlineScope:
    """
    The same as `deadline_at` (trio's and anyio's name).
    """
    return DeadlineScope(at=_check_at("fail_at", when))


def move_on_after(seconds: float) -> DeadlineScope:
    """
    A scope that cancels its block ``seconds`` after it is entered and then ends quietly.

    Afterwards ``scope.cancelled_caught`` says whether the block was cut short.

    Args:
        seconds: Budget in seconds from entering the scope; ``math.inf`` keeps the parent's.
    """
    return DeadlineScope(after=_check_seconds("move_on_after", seconds), move_on=True)


def move_on_at(when: float) -> DeadlineScope:
    """
    A scope that cancels its block at the instant ``when`` and then ends quietly.

    Args:
        when: Absolute instant in seconds on the event loop's clock (`now()`); ``math.inf``
            keeps the parent's.

    Raises:
        ValueError: ``when`` is NaN, or looks like epoch seconds.
    """
    return DeadlineScope(at=_check_at("move_on_at", when), move_on=True)


def carry_deadline_after(seconds: float) -> DeadlineScope:
    """
    A scope that only sets the deadline, ``seconds`` after entering it; it cancels nothing.

    Cutoffs and outgoing headers read the deadline it sets (never later than the parent's).

    Args:
        seconds: Budget in seconds from entering the scope; ``math.inf`` keeps the parent's.
    """
    return DeadlineScope(after=_check_seconds("carry_deadline_after", seconds), enforce=False)


def carry_deadline_at(when: float) -> DeadlineScope:
    """
    A scope that only sets the deadline to the instant ``when``; it cancels nothing.

    Args:
        when: Absolute instant in seconds on the event loop's clock (`now()`); ``math.inf``
            keeps the parent's.

    Raises:
        ValueError: ``when`` is NaN, or looks like epoch seconds.
    """
    return DeadlineScope(at=_check_at("carry_deadline_at", when), enforce=False)


@contextmanager
def executor_cuts(deadline: float) -> Iterator[None]:
    """
    For the executor: mark code that the executor itself cuts at ``deadline``.

    The executor enters this around a step (or a run) whose deadline it enforces. An
    enforcing scope around the mark whose own deadline is no earlier (to within a
    microsecond) does not cancel at once when it falls due while the mark is on: it waits up
    to `CUT_GRACE_S` for the executor to start cutting, and once the executor has said so
    (`executor_cutting`), until the marked code ends. An error the executor raises -- its
    `StepTimeout` -- then has `CUT_GRACE_S` more to leave the block, and passes through the
    scope unchanged; if the marked code returns instead, the scope cancels the block at once.
    The mark reaches scopes through the context, so it also counts from tasks started inside
    the scope (they copy the context).

    Args:
        deadline: The instant, on the loop clock, at which the executor cuts.
    """
    mark = _Mark()
    scopes = [s for s in _SCOPES.get() if s.deadline >= deadline - _SAME_INSTANT_S]
    for scope in scopes:
        scope._marks.append(mark)
    token = _MARK.set(mark)
    raised = True
    try:
        yield
        raised = False
    finally:
        _MARK.reset(token)
        for scope in scopes:
            scope._mark_over(mark, raised=raised)


def executor_cutting() -> None:
    """
    For the executor: say that it is cutting the code under the innermost `executor_cuts`.

    Call it when the deadline has passed and the executor starts giving up (before it tears
    down its attempts): a scope due at the same instant then waits for the marked code to end,
    however long the teardown takes, instead of cancelling it after `CUT_GRACE_S`. Without
    a mark here it does nothing.
    """
    mark = _MARK.get()
    if mark is not None:
        mark.cutting = True
