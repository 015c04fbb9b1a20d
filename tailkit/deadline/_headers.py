"""
A deadline across a process boundary: the two headers a request carries, and reading them back.

Both the absolute wall-clock instant and the seconds remaining at send time travel
(`deadline_headers`); the receiver takes ``min(deadline_wall - now_wall, remaining_at_send)``
(`deadline_from_headers`): time spent queued before it starts counts, and a skewed clock can
only make the deadline stricter.
"""

from __future__ import annotations

import math
import time

from collections.abc import Mapping

from tailkit.deadline._scope import FAR_S, current_deadline, now


DEADLINE_HEADER = "x-tailkit-deadline"  # absolute wall-clock instant, epoch seconds
REMAINING_HEADER = "x-tailkit-remaining-s"  # seconds left when the request was sent


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
    left = deadline - (now() if now_mono is None else now_mono)
    if math.isnan(left) or left > FAR_S:  # none, or so far that it is none (`far`)
        return {}
    left = max(left, 0.0)
    wall = time.time() if now_wall is None else now_wall
    return {DEADLINE_HEADER: f"{wall + left:.6f}", REMAINING_HEADER: f"{left:.6f}"}


def _header(headers: Mapping[str, str], name: str) -> float | None:
    """
    A header's number; ``None`` when absent, malformed, NaN or ``inf`` (no deadline said).

    ``-inf`` stays: a deadline that has passed.
    """
    for key, value in headers.items():
        if key.lower() == name:
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            return None if math.isnan(number) or number == math.inf else number
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
    other still applies; none gives ``math.inf``. ``inf`` and ``nan`` are malformed and
    ``-inf`` has passed. A far budget (``1e308``) is returned as read, so a server can tell
    what was asked (``tailkit serve`` clamps it); a scope entered with it, or the executor
    handed it, takes one more than ``tailkit.deadline.lowlevel.FAR_S`` seconds away as none.

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
    if math.isinf(budget) and budget > 0:
        return math.inf
    return (now() if now_mono is None else now_mono) + max(budget, 0.0)
