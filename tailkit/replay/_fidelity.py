"""
How faithfully a replay kept time: served latency against intended, against the smallest cutoff.

A time-scaled replay is only worth its numbers if the latencies the executor sees are the ones
the outcome table intended. The server writes each request's intended TTFT and end into its
access log (``intended_ttft_s``, ``intended_total_s``, real seconds from receipt); the
executor's ledger has what the client's code saw, from the attempt's start. Joined by
idempotency key and attempt number, their difference is the replay's timing error per request:
network, the server's and the client's event loops, everything.

Part of it is a constant (the time an answer takes to reach the client's code): the replay
measures it on a short probe and has the server send everything that much early (the *lead*).
What is left -- the bias that remains and the jitter -- is reported in profile seconds (real
seconds divided by the time scale). The timing error is the mean of its absolute value: a
cutoff's firing rate moves by the latency density at the cutoff times the displacement, so the
mean displacement is what shifts the figures (its 95th percentile is reported too). It must
stay within 2 % of the plan's smallest cutoff, or the cutoffs fire at the wrong moments and the
figures mean nothing: then the replay slows down, or says so. A lag monitor on the client's
loop reports how busy it was.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailkit.fit import quantile
from tailkit.text import percent, seconds


__all__ = ["MAX_ERROR_SHARE", "Fidelity", "LagMonitor", "fidelity", "timing_errors"]

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


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    if path.exists():
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)


def timing_errors(ledgers: Sequence[Path], access_log: Path, *, factor: float) -> list[float]:
    """
    Per request, real seconds between what the client saw and what the server intended.

    One value for each first token of a stream and each end of a finished answer, joined by
    idempotency key and attempt number; positive when the client saw it late.

    Args:
        ledgers: The executor's ledgers, in profile seconds (``factor`` converts back).
        access_log: The server's access log (real seconds, intended times in ``attrs``).
        factor: Real seconds per profile second.
    """
    intended: dict[tuple[str, int], tuple[float, float]] = {}
    for record in _lines(access_log):
        attrs = record.get("attrs") or {}
        first, end = attrs.get("intended_ttft_s"), attrs.get("intended_total_s")
        if first is not None and end is not None and record.get("idempotency_key"):
            intended[(record["idempotency_key"], int(record["attempt"]))] = (first, end)
    errors: list[float] = []
    for ledger in ledgers:
        for record in _lines(ledger):
            key = (record.get("idempotency_key") or "", int(record["attempt"]))
            if key not in intended:
                continue
            first, end = intended[key]
            if record.get("ttft_s") is not None:
                errors.append(record["ttft_s"] * factor - first)
            if record.get("total_s") is not None and record.get("status") == "ok":
                errors.append(record["total_s"] * factor - end)
    return errors


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _quantile(values: Sequence[float], q: float) -> float:
    """
    The ``q`` quantile by `tailkit.fit.quantile`'s ``"linear"`` method; 0 for no values.

    Type 7, what ``tailkit stats`` prints and the simulator's quantiles use: one p95 in every
    figure. No values is no timing measured, so no error either.
    """
    return quantile(values, q) if len(values) else 0.0


@dataclass(frozen=True, slots=True)
class Fidelity:
    """
    A replay's own timing error, in profile seconds, against the plan's smallest cutoff.

    Args:
        time_scale: Real seconds per profile second.
        smallest_cutoff_s: The plan's smallest cutoff (profile seconds; ``inf``: none).
        lead_s: Real seconds the server sent everything early (the measured constant).
        bias_s: Median timing error left (profile seconds; positive: late).
        error_s: Mean absolute timing error (profile seconds).
        p95_s: 95th percentile of the absolute timing error (profile seconds).
        jitter_s: Mean distance of the timing error from its median: what a lead cannot remove.
        loop_lag_s: 99th percentile of the client loop's lag (profile seconds).
        requests: Timings the error is measured on (first tokens and ends).
        error_share: ``error_s / smallest_cutoff_s``.
        ok: ``error_share`` is within `MAX_ERROR_SHARE`.
    """

    time_scale: float
    smallest_cutoff_s: float
    lead_s: float
    bias_s: float
    error_s: float
    p95_s: float
    jitter_s: float
    loop_lag_s: float
    requests: int
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
        share = percent(self.error_share if math.isfinite(self.smallest_cutoff_s) else None)
        return (
            f"replay timing error {self.error_s * 1000:.1f} ms (mean, profile seconds; p95 "
            f"{self.p95_s * 1000:.0f} ms; {self.requests:,} timings) = {share} of the smallest "
            f"cutoff ({seconds(self.smallest_cutoff_s)}; allowed {percent(MAX_ERROR_SHARE)}); "
            f"time scale {self.time_scale:.3g}"
        )


def fidelity(
    *,
    time_scale: float,
    smallest_cutoff_s: float,
    lead_s: float,
    errors_s: Sequence[float],
    loop_lag_s: Sequence[float],
) -> Fidelity:
    """
    Summarize measured timing errors and loop lag (real seconds) into a `Fidelity`.
    """
    median = _quantile(errors_s, 0.5)
    error = _mean([abs(e) for e in errors_s]) / time_scale
    share = error / smallest_cutoff_s if math.isfinite(smallest_cutoff_s) else 0.0
    return Fidelity(
        time_scale=time_scale,
        smallest_cutoff_s=smallest_cutoff_s,
        lead_s=lead_s,
        bias_s=median / time_scale,
        error_s=error,
        p95_s=_quantile([abs(e) for e in errors_s], 0.95) / time_scale,
        jitter_s=_mean([abs(e - median) for e in errors_s]) / time_scale,
        loop_lag_s=_quantile(loop_lag_s, 0.99) / time_scale,
        requests=len(errors_s),
        error_share=share,
        ok=share <= MAX_ERROR_SHARE and len(errors_s) > 0,
    )
