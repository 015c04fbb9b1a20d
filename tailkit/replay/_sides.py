"""
One side of a replay: the workflow run N times through the executor and the HTTP adapter.

The server is time-scaled (``factor`` real seconds per profile second), so the executor runs
with the same ``time_scale``: it scales the plan (`tailkit.config.scale_plan`) and writes the
ledger back in profile seconds, so that the traces, the plan's predictions and the production
calls all speak one unit, and ``tailkit check`` reads the ledger like any production ledger.
"""

from __future__ import annotations

import asyncio
import dataclasses

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tailkit.config import Plan
from tailkit.executor import Attempt, Executor, JsonlSink, Ledger, StepPolicy
from tailkit.serve.lowlevel import INVALID_MARK
from tailkit.simulation.lowlevel import SampleKey


__all__ = ["MESSAGES", "SideRun", "run_counted", "run_side"]

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
        errors: Per run that ended in an exception instead of a result, its run id and the
            error (``"AttemptError: …"``): misses, whatever its ledger lines say.
    """

    label: str
    runs: int
    denials: int
    ledger: Path
    errors: tuple[tuple[str, str], ...] = ()


class _Runs(Protocol):
    """
    What `run_counted` needs of an executor.
    """

    def run(self, attempt_fns: Any, *, run_id: str | None = None) -> Awaitable[Any]: ...


async def run_counted(executor: _Runs, fn: Any, *, run_id: str) -> str | None:
    """
    One workflow run; an exception it raises is returned as text, never raised.

    A run's failure is a miss, not the replay's end: on a heavily loaded machine an attempt
    can fail in ways the executor does not turn into a step's failure (`AttemptError`: the
    deadline passed before the request was sent), and one such run must not end the others.
    Cancellation still propagates.

    Returns:
        ``None`` when the run returned, else ``"ErrorType: message"``.
    """
    try:
        await executor.run(fn, run_id=run_id)
    except Exception as error:  # any run's failure: a miss, counted, the others go on
        return f"{type(error).__name__}: {error}"
    return None


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
    import httpx

    from tailkit.adapters.openai import chat_attempt

    ledger_path.unlink(missing_ok=True)
    ledger = Ledger(JsonlSink(ledger_path))
    policies = {name: StepPolicy(validator=_valid) for name in plan.steps}
    executor = Executor(plan, ledger=ledger, policies=policies, time_scale=factor)
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

        errors: list[tuple[str, str]] = []

        async def one(i: int) -> None:
            await asyncio.sleep(offset_s + i * pace_s)
            run_id = f"{label.replace(' ', '-')}-{i}"
            error = await run_counted(executor, call, run_id=run_id)
            if error is not None:
                errors.append((run_id, error))
            if progress is not None:
                progress()

        await asyncio.gather(*(one(i) for i in range(runs)))
    ledger.close()
    return SideRun(label, runs, sum(executor.denials.values()), ledger_path, tuple(errors))
