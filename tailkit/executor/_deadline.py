"""
One deadline per run (DESIGN.md §3): an absolute instant on the loop's monotonic clock.

The deadline lives in a contextvar, so every task a run starts inherits it. A scope never
extends its parent: entering ``deadline_at(t)`` sets ``min(parent, t)``; a relative
``deadline_after(s)`` becomes absolute when the scope is entered. Used with ``with`` a scope
only sets the deadline that cutoffs and outgoing requests read; used with ``async with`` it
also enforces it, cancelling the block at the instant and raising `TimeoutError`.

Across a process boundary both the absolute wall-clock instant and the remaining seconds at
send time travel (`deadline_headers`); the receiver takes ``min(deadline_wall - now_wall,
remaining_at_send)`` (`deadline_from_headers`): queueing before it starts counts, and a skewed
clock can only make the deadline stricter.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time

from collections.abc import Mapping
from types import TracebackType


DEADLINE_HEADER = "x-tailkit-deadline"  # absolute wall-clock instant, epoch seconds
REMAINING_HEADER = "x-tailkit-remaining-s"  # seconds left when the request was sent

_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar(
    "tailkit_deadline", default=math.inf
)


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


class DeadlineScope:
    """
    A deadline scope: ``with`` sets it, ``async with`` sets and enforces it.

    Attributes:
        deadline: The effective instant once entered: ``min(parent, own)``.
        expired: After an ``async with`` exit, whether the deadline cut the block short.
    """

    __slots__ = ("_after", "_at", "_timeout", "_token", "deadline", "expired")

    def __init__(self, *, at: float | None = None, after: float | None = None) -> None:
        for name, value in (("deadline_at", at), ("deadline_after", after)):
            if value is not None and math.isnan(value):
                msg = f"{name} takes a number of seconds, got NaN"
                raise ValueError(msg)
        self._at, self._after = at, after
        self._token: contextvars.Token[float] | None = None
        self._timeout: asyncio.Timeout | None = None
        self.deadline = math.inf
        self.expired = False

    def _own(self) -> float:
        if self._at is not None:
            return self._at
        assert self._after is not None  # noqa: S101 - one of the two is always set
        return now() + self._after

    def __enter__(self) -> DeadlineScope:
        self.deadline = min(_DEADLINE.get(), self._own())
        self._token = _DEADLINE.set(self.deadline)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)
            self._token = None

    async def __aenter__(self) -> DeadlineScope:
        self.__enter__()
        when = None if math.isinf(self.deadline) else self.deadline
        self._timeout = asyncio.timeout_at(when)
        await self._timeout.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            assert self._timeout is not None  # noqa: S101 - set by __aenter__
            await self._timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError when expired
            self.expired = self._timeout.expired()
            return None
        finally:
            self.__exit__()


def deadline_at(when: float) -> DeadlineScope:
    """
    A scope whose deadline is the instant ``when`` on the loop clock (never later than now's).

    Args:
        when: Absolute instant (seconds, `now()` clock); ``math.inf`` keeps the parent's.
    """
    return DeadlineScope(at=when)


def deadline_after(seconds: float) -> DeadlineScope:
    """
    A scope whose deadline is ``seconds`` after it is entered (never later than the parent's).

    Args:
        seconds: Budget in seconds from entering the scope; ``math.inf`` keeps the parent's.
    """
    return DeadlineScope(after=seconds)


def deadline_headers(
    *,
    deadline: float | None = None,
    now_mono: float | None = None,
    now_wall: float | None = None,
) -> dict[str, str]:
    """
    Headers that carry a deadline to another process (empty when there is none).

    Args:
        deadline: Instant on the loop clock (``None``: the current deadline).
        now_mono: The loop clock now (``None``: `now()`).
        now_wall: Wall-clock epoch seconds now (``None``: ``time.time()``).

    Returns:
        ``x-tailkit-deadline`` (the absolute wall-clock instant, epoch seconds) and
        ``x-tailkit-remaining-s`` (seconds left at send time).
    """
    deadline = current_deadline() if deadline is None else deadline
    if math.isinf(deadline):
        return {}
    left = max(deadline - (now() if now_mono is None else now_mono), 0.0)
    wall = time.time() if now_wall is None else now_wall
    return {DEADLINE_HEADER: f"{wall + left:.6f}", REMAINING_HEADER: f"{left:.6f}"}


def _header(headers: Mapping[str, str], name: str) -> float | None:
    for key, value in headers.items():
        if key.lower() == name:
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            return number if math.isfinite(number) else None
    return None


def deadline_from_headers(
    headers: Mapping[str, str],
    *,
    now_mono: float | None = None,
    now_wall: float | None = None,
) -> float:
    """
    The deadline a request carries, as an instant on this process's loop clock.

    Takes ``min(deadline_wall - now_wall, remaining_at_send)``: time spent in queues before
    this process saw the request counts (the wall-clock term), and a receiver whose clock runs
    behind cannot stretch the budget (the remaining term). A malformed header is ignored, the
    other still applies; none gives ``math.inf``.

    Args:
        headers: Request headers (names compared case-insensitively).
        now_mono: The loop clock now (``None``: `now()`).
        now_wall: Wall-clock epoch seconds now (``None``: ``time.time()``).
    """
    wall_deadline = _header(headers, DEADLINE_HEADER)
    left = _header(headers, REMAINING_HEADER)
    budget = math.inf
    if wall_deadline is not None:
        budget = wall_deadline - (time.time() if now_wall is None else now_wall)
    if left is not None:
        budget = min(budget, left)
    if math.isinf(budget):
        return math.inf
    return (now() if now_mono is None else now_mono) + max(budget, 0.0)
