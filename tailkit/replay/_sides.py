"""
One side of a replay: the workflow run N times through the executor and the HTTP adapter.

The server is time-scaled (``factor`` real seconds per profile second), so the plan runs scaled
too: its deadline and cutoffs are multiplied by the same factor. The ledger is written back in
profile seconds -- durations divided by the factor, and every instant moved to the same
distance from the side's start, divided by the factor -- so that the traces, the plan's
predictions and the production calls all speak one unit, and ``tailkit check`` reads the
ledger like any production ledger.
"""

from __future__ import annotations

import asyncio
import dataclasses

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tailkit.config import Plan, Step
from tailkit.executor import Attempt, Executor, JsonlSink, Ledger, StepPolicy
from tailkit.executor._ledger import AttemptRecord
from tailkit.serve import INVALID_MARK
from tailkit.simulate import SampleKey


__all__ = ["MESSAGES", "SideRun", "run_side", "scaled_plan"]

MESSAGES = [{"role": "user", "content": "Write the next part of the account brief."}]


@dataclass(frozen=True, slots=True)
class SideRun:
    """
    What one side did; its figures are read from its ledger (`tailkit.check.observe`).

    Args:
        label: ``without plan`` or ``with plan``.
        runs: Workflow runs.
        denials: Cutoffs whose hedge the budget or the throttle denied.
        ledger: The side's ledger (JSON lines, profile seconds).
    """

    label: str
    runs: int
    denials: int
    ledger: Path


def scaled_plan(plan: Plan, factor: float) -> Plan:
    """
    The plan with every duration multiplied by ``factor`` (to run on a time-scaled server).
    """

    def times(step: Step) -> Step:
        fields = ("ttft_cutoff_s", "stall_cutoff_s", "cutoff_s")
        values = {f: getattr(step, f) * factor for f in fields if getattr(step, f) is not None}
        predicted = step.predicted
        if predicted is not None:
            predicted = dataclasses.replace(
                predicted, p50_s=predicted.p50_s * factor, p99_s=predicted.p99_s * factor
            )
        return dataclasses.replace(step, predicted=predicted, **values)

    steps = {name: times(step) for name, step in plan.steps.items()}
    return dataclasses.replace(plan, deadline_s=plan.deadline_s * factor, steps=steps)


class ProfileSink(JsonlSink):
    """
    A JSON-lines ledger in profile seconds (the executor measured scaled real seconds).

    Args:
        path: The ledger file.
        factor: Real seconds per profile second.
        origin: The instant that stays put; every other instant moves to ``origin +
            (instant - origin) / factor``.
    """

    def __init__(self, path: Path, factor: float, origin: datetime) -> None:
        super().__init__(path)
        self._factor = factor
        self._origin = origin

    def _instant(self, value: datetime) -> datetime:
        return self._origin + (value - self._origin) / self._factor

    def write(self, line: str, record: AttemptRecord) -> None:
        def back(value: float | None) -> float | None:
            return None if value is None else value / self._factor

        rescaled = dataclasses.replace(
            record,
            ttft_s=back(record.ttft_s),
            total_s=back(record.total_s),
            censored_at_s=back(record.censored_at_s),
            started_at=self._instant(record.started_at),
            deadline_at=None if record.deadline_at is None else self._instant(record.deadline_at),
        )
        super().write(rescaled.to_json(), rescaled)


def _valid(result: Any) -> bool:
    """
    A replayed answer is valid unless the measured call's output was not.
    """
    return INVALID_MARK not in str(getattr(result, "text", result))


async def run_side(
    plan: Plan,
    *,
    url: str,
    model_ids: Mapping[SampleKey, str],
    runs: int,
    factor: float,
    ledger_path: Path,
    label: str,
    pace_s: float,
    offset_s: float = 0.0,
    progress: Callable[[], None] | None = None,
) -> SideRun:
    """
    Run the workflow ``runs`` times against the replay server, one run every ``pace_s``.

    Args:
        plan: The plan in profile seconds (a workflow without cutoffs for the baseline).
        url: The server's base URL.
        model_ids: Served model per (step, route).
        runs: Workflow runs.
        factor: Real seconds per profile second.
        ledger_path: Where the side's ledger goes (replaced).
        label: The side's name, also the prefix of its run ids.
        pace_s: Real seconds between two runs' starts (steady arrivals, as in production).
        offset_s: Real seconds before the first run starts (to interleave two sides).
        progress: Called once per finished run.
    """
    from datetime import UTC

    import httpx

    from tailkit.adapters.openai import chat_attempt

    scaled = scaled_plan(plan, factor)
    ledger_path.unlink(missing_ok=True)
    ledger = Ledger(ProfileSink(ledger_path, factor, datetime.now(UTC)))
    policies = {name: StepPolicy(validator=_valid) for name in plan.steps}
    executor = Executor(scaled, ledger=ledger, policies=policies)
    # No pool limit: httpx's default of 100 connections would queue attempts in the client,
    # and the time spent waiting for a connection would count as the provider's latency.
    pool = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    transport = httpx.AsyncHTTPTransport(retries=0, limits=pool)
    async with (
        httpx.AsyncClient(transport=transport) as client,
        chat_attempt(url, MESSAGES, stream=True, client=client) as chat,
    ):

        def call(attempt: Attempt) -> Any:
            served = model_ids[(attempt.step, attempt.route)]
            return chat(dataclasses.replace(attempt, model=served))

        async def one(i: int) -> None:
            await asyncio.sleep(offset_s + i * pace_s)
            await executor.run(call, run_id=f"{label.replace(' ', '-')}-{i}")
            if progress is not None:
                progress()

        await asyncio.gather(*(one(i) for i in range(runs)))
    ledger.close()
    return SideRun(label, runs, sum(executor.denials.values()), ledger_path)
