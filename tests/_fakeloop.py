"""
A virtual-time asyncio event loop for executor tests: time moves only when nothing is ready.

The loop asks its selector to wait until the next timer; the selector instead advances the
loop's clock by exactly that much and polls without blocking. Every sleep, timeout and cutoff
therefore happens at its exact instant, and a test of a 90-second workflow takes
milliseconds. Real sockets still work (they are polled), but time does not pass while waiting
on them, so loopback I/O tests use the real loop instead.
"""

from __future__ import annotations

import asyncio
import selectors

from collections.abc import Coroutine
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
