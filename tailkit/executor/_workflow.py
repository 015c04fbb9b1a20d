"""
Workflow runs: a plan's DAG under one deadline.

Each step starts as soon as the steps it depends on are done and gets their results as
``attempt.inputs``. A failed optional step is left out of its dependents' inputs; a failed
required step fails the run, and the steps that need it never start. At the deadline every
step still running is cancelled (its attempts get their ledger lines, cut at the deadline),
and the run reports which steps finished.
"""

from __future__ import annotations

import asyncio

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailkit.errors import ConfigError
from tailkit.executor._deadline import current_deadline, deadline_at, now
from tailkit.executor._types import AttemptFn


if TYPE_CHECKING:
    from tailkit.executor._executor import Executor


@dataclass(frozen=True, slots=True)
class RunResult:
    """
    One workflow run.

    Args:
        run_id: The run's id (part of every idempotency key).
        ok: Every required step finished with a good result, by the deadline.
        results: Result of every step that finished, by name.
        finished: Steps that finished, in the order they did.
        failed: Steps that ended in an error (`StepTimeout`, `AllAttemptsFailed`, …), by name.
        skipped: Steps that never started: a required step they need failed.
        cancelled: Steps still running (or waiting) when the deadline passed.
        elapsed_s: Seconds from the run's start to its end.
        deadline_s: The run's budget in seconds.
    """

    run_id: str
    ok: bool
    results: dict[str, Any]
    finished: tuple[str, ...]
    failed: dict[str, BaseException]
    skipped: tuple[str, ...]
    cancelled: tuple[str, ...]
    elapsed_s: float
    deadline_s: float


def _resolve(
    names: tuple[str, ...], fns: Mapping[str, AttemptFn] | AttemptFn
) -> dict[str, AttemptFn]:
    if callable(fns):
        return dict.fromkeys(names, fns)
    missing = [n for n in names if n not in fns]
    if missing:
        msg = f"no attempt function for step(s) {', '.join(missing)}: "
        msg += "pass one per step, or one for all"
        raise ConfigError(msg)
    return {n: fns[n] for n in names}


async def run_workflow(
    executor: Executor,
    attempt_fns: Mapping[str, AttemptFn] | AttemptFn,
    *,
    run_id: str,
    deadline_s: float | None = None,
) -> RunResult:
    """
    Run the executor's plan once, every step under the run's one deadline.

    Args:
        executor: The executor (plan, budgets, ledger).
        attempt_fns: One attempt function per step name, or one for every step (it reads
            ``attempt.step``).
        run_id: The run's id.
        deadline_s: The run's budget in seconds (``None``: the plan's ``deadline_s``); never
            later than a deadline already in force.
    """
    plan = executor.plan
    order = plan.order()
    fns = _resolve(order, attempt_fns)
    budget_s = plan.deadline_s if deadline_s is None else deadline_s
    started = now()
    deadline = min(started + budget_s, current_deadline())
    results: dict[str, Any] = {}
    failed: dict[str, BaseException] = {}
    finished: list[str] = []
    skipped: list[str] = []
    done = {name: asyncio.Event() for name in order}

    async def one(name: str) -> None:
        step = plan.steps[name]
        try:
            for dep in step.depends_on:
                await done[dep].wait()
            if any(
                d in skipped or (d in failed and plan.steps[d].required) for d in step.depends_on
            ):
                skipped.append(name)
                return
            inputs = {d: results[d] for d in step.depends_on if d in results}
            value = await executor.run_step(
                name, fns[name], run_id=run_id, inputs=inputs, deadline=deadline
            )
            results[name] = value
            finished.append(name)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            failed[name] = error
        finally:
            done[name].set()

    with deadline_at(deadline):
        tasks = {name: asyncio.ensure_future(one(name)) for name in order}
    _, pending = await asyncio.wait(tasks.values(), timeout=max(deadline - now(), 0.0))
    cancelled = tuple(name for name, task in tasks.items() if task in pending)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    ok = all(name in results for name in order if plan.steps[name].required)
    return RunResult(
        run_id=run_id,
        ok=ok,
        results=results,
        finished=tuple(finished),
        failed=failed,
        skipped=tuple(skipped),
        cancelled=cancelled,
        elapsed_s=now() - started,
        deadline_s=budget_s,
    )
