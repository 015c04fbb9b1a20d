"""
The executor's timer heap (`tailkit.executor._alarm.Alarms`): one loop timer for every wait.
"""

from __future__ import annotations

import asyncio

from tailkit.executor._alarm import Alarms


def test_callbacks_fire_in_instant_order_ties_in_the_order_set() -> None:
    """Each callback once, at its instant; equal instants in the order they were set."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        alarms = Alarms(loop)
        fired: list[str] = []
        at = loop.time()
        for name, offset in (("c", 0.03), ("a", 0.01), ("b1", 0.02), ("b2", 0.02)):
            alarms.add(at + offset, lambda name=name: fired.append(name))
        await asyncio.sleep(0.05)
        return fired

    assert asyncio.run(main()) == ["a", "b1", "b2", "c"]


def test_a_cancelled_callback_never_fires_and_the_heap_sheds_cancelled_entries() -> None:
    """Cancelling is idempotent; past half cancelled (and 100), the heap drops them."""

    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        alarms = Alarms(loop)
        fired: list[int] = []
        at = loop.time() + 0.02
        entries = [alarms.add(at + i * 1e-6, lambda i=i: fired.append(i)) for i in range(300)]
        for i, entry in enumerate(entries):
            if i % 3:
                alarms.cancel(entry)
                alarms.cancel(entry)  # again: nothing
        left = len(alarms)
        await asyncio.sleep(0.05)
        return fired, left

    fired, left = asyncio.run(main())
    assert fired == list(range(0, 300, 3))
    assert left < 300  # the cancelled ones did not all wait for their instant


def test_a_past_instant_is_due_at_the_next_turn_and_an_earlier_one_rearms() -> None:
    """An instant already past fires at once; one earlier than the armed timer moves it."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        alarms = Alarms(loop)
        fired: list[str] = []
        alarms.add(loop.time() + 60.0, lambda: fired.append("late"))
        alarms.add(loop.time() - 1.0, lambda: fired.append("past"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        alarms.add(loop.time() + 0.01, lambda: fired.append("soon"))
        await asyncio.sleep(0.03)
        return fired

    assert asyncio.run(main()) == ["past", "soon"]
