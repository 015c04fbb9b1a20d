"""
One loop timer for every wait of an executor: the instants its steps and runs sleep until.

A step waiting on its attempts also sleeps until the next instant that matters (a cutoff, the
run deadline), and a workflow run until its deadline. Almost every such wait ends before its
instant -- the attempt answers -- so the timer is set and cancelled again and again. With the
loop's own timers (``loop.call_at``) that costs a `asyncio.TimerHandle` per wait (a context
copy, a Python ``__init__``) pushed on the loop's heap, whose entries compare in Python: at
10,000 runs in flight a heap of some 40,000 timers, and each push or pop about 15 Python
calls. `Alarms` keeps the instants on a heap of its own, whose entries (lists) compare in C,
and keeps one loop timer, at the earliest of them.

A cancelled entry stays on the heap, marked, until it reaches the top or until more than half
of the heap is cancelled (then the heap is rebuilt without them), as the loop does with its
cancelled timers. Not thread-safe: one `Alarms` per event loop, used from that loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math

from collections.abc import Callable
from typing import Any


__all__ = ["Alarms"]

_COMPACT_AFTER = 100  # cancelled entries tolerated before a rebuild is considered

# An entry: [instant, sequence number, callback or None once cancelled or fired]
Entry = list[Any]


class Alarms:
    """
    Callbacks due at instants on one event loop's clock, behind one loop timer.

    Args:
        loop: The event loop whose clock the instants are on.

    Attributes:
        loop: That loop.
        context: An empty context, for callbacks that only wake a task (which resumes in its
            own): registered with it, a done callback costs no copy of the current context.
            One per loop, as a context cannot be entered twice at once.
    """

    __slots__ = ("_armed_at", "_count", "_dead", "_handle", "_heap", "context", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.context = contextvars.Context()
        self._heap: list[Entry] = []
        self._count = itertools.count()  # ties fire in the order they were set
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf  # the instant the loop timer is set for
        self._dead = 0  # cancelled entries still on the heap

    def add(self, when: float, callback: Callable[[], object]) -> Entry:
        """
        Call ``callback()`` at the instant ``when`` (on the loop's clock); returns its entry.

        An instant already past is due at the loop's next turn, as with ``loop.call_at``.
        """
        entry: Entry = [when, next(self._count), callback]
        heapq.heappush(self._heap, entry)
        if when < self._armed_at:
            self._arm(when)
        return entry

    def cancel(self, entry: Entry) -> None:
        """
        Do not call ``entry``'s callback (nothing happens if it was called or cancelled).
        """
        if entry[2] is None:
            return
        entry[2] = None
        self._dead += 1
        heap = self._heap
        if self._dead > _COMPACT_AFTER and 2 * self._dead > len(heap):
            heap[:] = [e for e in heap if e[2] is not None]
            heapq.heapify(heap)
            self._dead = 0

    def __len__(self) -> int:
        """
        Entries on the heap, cancelled ones not yet dropped included.
        """
        return len(self._heap)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        self._handle = self.loop.call_at(when, self._fire, context=self.context)

    def _fire(self) -> None:
        """
        The loop timer: call every callback due (the loop judged ``_armed_at`` due), re-arm.
        """
        due = max(self._armed_at, self.loop.time())
        self._handle, self._armed_at = None, math.inf
        heap = self._heap
        try:
            while heap and (heap[0][0] <= due or heap[0][2] is None):
                entry = heapq.heappop(heap)
                callback = entry[2]
                if callback is None:
                    self._dead -= 1
                    continue
                entry[2] = None
                callback()
        finally:
            if heap and heap[0][0] < self._armed_at:  # a callback may have armed a later one
                self._arm(heap[0][0])
