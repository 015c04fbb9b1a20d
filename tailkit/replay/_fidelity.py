"""
How faithfully a replay kept time: measured on both ends, compared with the smallest cutoff.

A time-scaled replay is only worth its numbers if the served latencies are the intended ones.
Two things can make them late, and both are measured while the replay runs:

- the server sends late: each request's access-log line carries the intended TTFT and end
  (``intended_ttft_s``, ``intended_total_s``) next to what it sent (``ttft_s``, ``total_s``);
- the client sees late: a lag monitor on the client's event loop sleeps a few milliseconds at
  a time and records how much longer each sleep took (a busy loop reads every chunk late).

The replay's timing error is the server's p99 lateness plus the client loop's p99 lag, in
profile seconds (real seconds divided by the time scale). It must stay within 2 % of the
smallest cutoff of the plan, or the cutoffs fire at the wrong moments and the figures mean
nothing: then the replay slows down, or says so.
"""

from __future__ import annotations

import asyncio
import json
import math

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


__all__ = ["MAX_ERROR_SHARE", "Fidelity", "LagMonitor", "fidelity", "server_lateness"]

MAX_ERROR_SHARE = 0.02  # timing error allowed, as a share of the smallest cutoff
_TICK_S = 0.005  # real seconds between the lag monitor's wake-ups


class LagMonitor:
    """
    Measure the event loop's lag: how much later than asked each short sleep wakes.

    Use as ``async with LagMonitor() as lag: ...``; ``lag.samples_s`` holds one lateness in
    real seconds per tick.
    """

    def __init__(self, tick_s: float = _TICK_S) -> None:
        self.tick_s = tick_s
        self.samples_s: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.samples_s.append(max(loop.time() - asked, 0.0))

    async def __aenter__(self) -> LagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def server_lateness(access_log: Path) -> list[float]:
    """
    Real seconds each replayed answer reached its client after the intended instant.

    One value per request with an intended schedule: the first token's lateness for a stream,
    and the end's lateness for every request that finished (negative values count as 0).
    """
    late: list[float] = []
    if not access_log.exists():
        return late
    with access_log.open(encoding="utf-8") as lines:
        for line in lines:
            record: dict[str, Any] = json.loads(line)
            attrs = record.get("attrs") or {}
            first, end = attrs.get("intended_ttft_s"), attrs.get("intended_total_s")
            if first is None or end is None:
                continue
            if record.get("ttft_s") is not None:
                late.append(max(record["ttft_s"] - first, 0.0))
            if record.get("total_s") is not None:
                late.append(max(record["total_s"] - end, 0.0))
    return late


def _quantile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


@dataclass(frozen=True, slots=True)
class Fidelity:
    """
    A replay's own timing error, in profile seconds, against the plan's smallest cutoff.

    Args:
        time_scale: Real seconds per profile second.
        smallest_cutoff_s: The plan's smallest cutoff (profile seconds; ``inf``: none).
        server_p99_s: 99th percentile of the server's lateness (profile seconds).
        client_p99_s: 99th percentile of the client loop's lag (profile seconds).
        client_max_s: The client loop's largest lag (profile seconds).
        requests: Requests the server's figure is measured on.
        error_s: The timing error: ``server_p99_s + client_p99_s``.
        error_share: ``error_s / smallest_cutoff_s``.
        ok: ``error_share`` is within `MAX_ERROR_SHARE`.
    """

    time_scale: float
    smallest_cutoff_s: float
    server_p99_s: float
    client_p99_s: float
    client_max_s: float
    requests: int
    error_s: float
    error_share: float
    ok: bool

    def to_json(self) -> dict[str, Any]:
        """
        The figures as a JSON object (``null`` for an infinite cutoff).
        """
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = None if isinstance(value, float) and not math.isfinite(value) else value
        out["max_error_share"] = MAX_ERROR_SHARE
        return out

    def describe(self) -> str:
        """
        One line for a person.
        """
        share = f"{self.error_share:.1%}" if math.isfinite(self.smallest_cutoff_s) else "-"
        return (
            f"replay timing error {self.error_s * 1000:.1f} ms (profile) = {share} of the "
            f"smallest cutoff ({self.smallest_cutoff_s:.2f} s); allowed {MAX_ERROR_SHARE:.0%}; "
            f"time scale {self.time_scale:g}"
        )


def fidelity(
    *,
    time_scale: float,
    smallest_cutoff_s: float,
    server_late_s: list[float],
    client_lag_s: list[float],
) -> Fidelity:
    """
    Summarize the measured lateness (real seconds) into a `Fidelity` (profile seconds).
    """
    server = _quantile(server_late_s, 0.99) / time_scale
    client = _quantile(client_lag_s, 0.99) / time_scale
    worst = max(client_lag_s, default=0.0) / time_scale
    error = server + client
    share = error / smallest_cutoff_s if math.isfinite(smallest_cutoff_s) else 0.0
    return Fidelity(
        time_scale=time_scale,
        smallest_cutoff_s=smallest_cutoff_s,
        server_p99_s=server,
        client_p99_s=client,
        client_max_s=worst,
        requests=len(server_late_s),
        error_s=error,
        error_share=share,
        ok=share <= MAX_ERROR_SHARE,
    )
