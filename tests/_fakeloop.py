"""
Event loops for tests where timing is the subject.

`VirtualLoop`: virtual time for executor tests; time moves only when nothing is ready.

The loop asks its selector to wait until the next timer; the selector instead advances the
loop's clock by exactly that much and polls without blocking. Every sleep, timeout and cutoff
therefore happens at its exact instant, and a test of a 90-second workflow takes
milliseconds. Real sockets still work (they are polled), but time does not pass while waiting
on them, so loopback I/O tests use the real loop instead.

`WaitLog`: a real-time loop that notes when it sat waiting (for I/O or a timer) rather than
working. On a busy machine every wall-clock span stretches, but the time a loop *chose* to wait
does not: a test can then say "after its deadline, this run waited for nothing", which holds
however slow the machine is, where "it ended within 0.25 s of its deadline" does not.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import selectors

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar


T = TypeVar("T")


class _Selector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or self.loop is None:
            return events
        if timeout is None:
            msg = "the virtual loop would wait forever: nothing is scheduled"
            raise RuntimeError(msg)
        self.loop.advance(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """
    An event loop whose ``time()`` starts at 0 and jumps to the next timer when idle.
    """

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """
        Move the clock forward (tests may also call it to skip time).
        """
        self._now += max(seconds, 0.0)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """
    Run ``coro`` to completion on a fresh virtual loop.
    """
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class _WaitSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: WaitLog | None = None
        self.starts: list[float] = []
        self.ends: list[float] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self.loop is None or (timeout is not None and timeout <= 0):
            return super().select(timeout)  # work was ready: a poll, not a wait
        # The loop asked to wake at its next timer: `timeout` counts from its last clock
        # reading. Sleeping past that instant is the OS running other processes (or the
        # kernel rounding the timeout to a millisecond), not a wait the loop chose.
        wake = self.loop.last_read + timeout if timeout is not None else None
        start = self.loop.clock()
        events = super().select(timeout)
        end = self.loop.clock()
        if wake is not None:
            end = min(end, wake)
        if end > start:
            self.starts.append(start)
            self.ends.append(end)
        return events


class WaitLog(asyncio.SelectorEventLoop):
    """
    A real-time event loop that records each span it spent waiting instead of working.

    A span starts when the loop, with nothing ready, blocks on its selector, and ends when it
    wakes or when the timer it was waiting for fell due, whichever is first; polls (work
    already ready) are not waits. Times are on the loop's clock (``loop.time()``).
    """

    def __init__(self) -> None:
        selector = _WaitSelector()
        super().__init__(selector)
        selector.loop = self
        self._waits = selector
        self.last_read = 0.0
        self._sums: list[float] = []

    def time(self) -> float:
        self.last_read = super().time()
        return self.last_read

    def clock(self) -> float:
        """
        The loop's clock, read without noting it as the loop's own reading.
        """
        return super().time()

    def waited(self, start: float, end: float) -> float:
        """
        Seconds the loop spent waiting between ``start`` and ``end`` (loop clock).
        """
        starts, ends = self._waits.starts, self._waits.ends
        if len(self._sums) != len(starts) + 1:  # the spans are in order: prefix sums of them
            self._sums = [
                0.0,
                *itertools.accumulate(e - s for s, e in zip(starts, ends, strict=True)),
            ]
        first = bisect.bisect_right(ends, start)  # the first span that ends after `start`
        last = bisect.bisect_left(starts, end)  # one past the last span that starts before `end`
        if first >= last:
            return 0.0
        total = self._sums[last] - self._sums[first]
        total -= max(start - starts[first], 0.0)  # clip the spans at the window's edges
        total -= max(ends[last - 1] - end, 0.0)
        return max(total, 0.0)


def run_logged(main: Callable[[WaitLog], Coroutine[Any, Any, T]]) -> T:
    """
    Run ``main(loop)`` on a fresh `WaitLog` loop, as `asyncio.run` runs a coroutine.
    """
    with asyncio.Runner(loop_factory=WaitLog) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, WaitLog)  # the factory made it
        return runner.run(main(loop))
