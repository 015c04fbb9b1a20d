"""
Workflow runs: a plan's DAG under one deadline.

Each step starts as soon as the steps it depends on are done and gets their results as
``attempt.inputs``. A failed optional step is left out of its dependents' inputs; a failed
required step fails the run, and the steps that need it never start. At the deadline every
step still running is cancelled (its attempts get their ledger lines, cut at the deadline),
and the run reports which steps finished. An optional step cut at the deadline does not fail
the run; the simulator counts it the same way.

A run opens one hedge-budget account with one first attempt per step of the plan (the
simulator's count, steps that never start included) and closes it when it ends. It runs the
plan that was in force when it started, to its end: `Executor.replace_plan` meanwhile changes
the plan of the runs that start after it, never a run's later steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailkit.deadline import carry_deadline_at, current_deadline, now
from tailkit.deadline.lowlevel import executor_cuts, executor_cutting, far, seconds
from tailkit.errors import ConfigError
from tailkit.executor._shared import RunBook
from tailkit.executor._types import AttemptFn


if TYPE_CHECKING:
    from tailkit.executor._executor import Executor, Loaded


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
        elapsed_s: Seconds from the run's start to its end (plan seconds: a time-scaled
            executor divides what it measured by its time scale).
        deadline_s: The run's budget in (plan) seconds.
        denials: Extra attempts the run's cutoffs called for but did not get, by reason:
            ``budget`` (the hedge budget refused) and ``throttle`` (the hedge provider was
            throttled).
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
    denials: dict[str, int] = field(default_factory=lambda: {"budget": 0, "throttle": 0})


def _resolve(
    names: tuple[str, ...], fns: Mapping[str, AttemptFn] | AttemptFn
) -> dict[str, AttemptFn]:
    if callable(fns):
        return dict.fromkeys(names, fns)
    missing = [n for n in names if n not in fns]
    if missing:
        msg = f"no attempt function for step(s) {', '.join(missing)}:"
        fix = "pass one per step, or one for all"
        raise ConfigError(msg, field="attempt_fns", value=missing, fix=fix)
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

    A step's task is created only when its last dependency is done (no task waits on
    another), and one timer -- the run deadline -- cuts whatever is still running.

    Args:
        executor: The executor (plan, budgets, ledger).
        attempt_fns: One attempt function per step name, or one for every step (it reads
            ``attempt.step``).
        run_id: The run's id.
        deadline_s: The run's budget in plan seconds (``None``: the plan's ``deadline_s``);
            never later than a deadline already in force; more than about 32 years is none
            (``math.inf``), NaN is refused. A time-scaled executor scales it like the plan,
            and reports the `RunResult`'s seconds back in plan seconds.
    """
    return await prepared_run(executor, attempt_fns, run_id=run_id, deadline_s=deadline_s).go()


def prepared_run(
    executor: Executor,
    attempt_fns: Mapping[str, AttemptFn] | AttemptFn,
    *,
    run_id: str,
    deadline_s: float | None = None,
) -> _Run:
    """
    One run of the executor's plan, made: await its ``go()`` (see `run_workflow`).

    `Executor.run` awaits it directly, so a run in flight is one coroutine of the executor's.
    """
    loaded = executor.loaded  # the run keeps this plan to its end, whatever replaces it
    fns = _resolve(loaded.order, attempt_fns)
    budget_s = loaded.profile_plan.deadline_s if deadline_s is None else deadline_s
    budget_s = seconds("Executor.run(deadline_s=...)", budget_s)  # NaN refused; far: none
    return _Run(executor, loaded, fns, run_id, budget_s)


class _Run:
    """
    Strictly private: the state of one workflow run.
    """

    def __init__(
        self,
        executor: Executor,
        loaded: Loaded,
        fns: dict[str, AttemptFn],
        run_id: str,
        budget_s: float,
    ) -> None:
        self.loaded, self.plan, self.fns, self.run_id = loaded, loaded.plan, fns, run_id
        self.budget_s = budget_s  # plan seconds
        self.scale = executor.time_scale  # real seconds per plan second
        self.started = now()
        self.deadline = min(
            far(self.started + budget_s * self.scale, self.started), current_deadline()
        )
        self.results: dict[str, Any] = {}
        self.failed: dict[str, BaseException] = {}
        self.finished: list[str] = []
        self.skipped: list[str] = []
        self.order = loaded.order
        self.dependents = loaded.dependents
        self.waiting = {name: len(self.plan.steps[name].depends_on) for name in self.order}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.left = len(self.order)
        self.loop = asyncio.get_running_loop()
        self.over: asyncio.Future[None] = self.loop.create_future()
        self.budget = loaded.shared.budget
        self.book = RunBook(self.budget.open(len(self.order)))
        self.stopping = False
        self.context: contextvars.Context | None = None  # the step tasks' (see `_go`)

    async def go(self) -> RunResult:
        """
        The run, to its end or its deadline (a scope due at the same instant lets it report).

        One coroutine for the whole run (at 10,000 runs in flight, every object a run holds is
        walked by every full garbage collection).
        """
        with executor_cuts(self.deadline):
            try:
                # every step task (created here or in a callback registered here) inherits the
                # deadline
                with carry_deadline_at(self.deadline):
                    # One context for every step task, the run's: a step task sets no context
                    # variable (its attempts run in copies of their own), and a copy per task
                    # would be one more object per step for the garbage collector to walk.
                    self.context = contextvars.copy_context()
                    for name in self.order:
                        if self.waiting[name] == 0:
                            self._begin(name)
                # wait for the last step or the deadline, on the executor's timer heap
                alarms = self.loaded.shared.alarms_on(self.loop)
                due = None if math.isinf(self.deadline) else alarms.add(self.deadline, self._due)
                try:
                    await self.over
                finally:
                    if due is not None:
                        alarms.cancel(due)
                pending = [task for task in self.tasks.values() if not task.done()]
                cancelled = [name for name, task in self.tasks.items() if task in pending]
                cancelled += [
                    n for n in self.order if n not in self.tasks and n not in self.skipped
                ]
            finally:
                if now() >= self.deadline:
                    executor_cutting()
                # at the deadline, and also when the run itself is cancelled: no step outlives it
                await self._stop_steps()
                self.budget.close(self.book.account)
            required = (n for n in self.order if self.plan.steps[n].required)
            return RunResult(
                run_id=self.run_id,
                ok=all(name in self.results for name in required),
                results=self.results,
                finished=tuple(self.finished),
                failed=self.failed,
                skipped=tuple(self.skipped),
                cancelled=tuple(cancelled),
                elapsed_s=(now() - self.started) / self.scale,
                deadline_s=self.budget_s,
                denials=dict(self.book.denials),
            )

    async def _stop_steps(self) -> None:
        """
        Cancel the steps still running and wait until they (and their attempts) are gone.

        No step starts once the run is over, and a cancellation that arrives meanwhile is
        re-raised only after they are.
        """
        self.stopping = True
        interrupted = False
        while pending := [task for task in self.tasks.values() if not task.done()]:
            for task in pending:
                task.cancel()
            try:
                await asyncio.wait(pending)
            except asyncio.CancelledError:
                interrupted = True
        for task in self.tasks.values():
            if not task.cancelled():
                task.exception()  # retrieved: reported in the result, or not wanted
        if interrupted:
            raise asyncio.CancelledError

    def _due(self) -> None:
        """
        The run deadline: stop waiting for the steps (`_go` cuts the ones still running).
        """
        if not self.over.done():
            self.over.set_result(None)

    def _settle(self, name: str) -> None:
        self.left -= 1
        for child in self.dependents[name]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                self._begin(child)
        if self.left == 0 and not self.over.done():
            self.over.set_result(None)

    def _begin(self, name: str) -> None:
        if self.stopping:
            return  # the run is over: a step whose dependencies landed late never starts
        deps = self.plan.steps[name].depends_on
        failed = self.failed
        if any(d in self.skipped or (d in failed and self.plan.steps[d].required) for d in deps):
            self.skipped.append(name)
            self._settle(name)
            return
        inputs = {d: self.results[d] for d in deps if d in self.results}
        step = self.loaded.step_run(
            name, self.fns[name], book=self.book, run_id=self.run_id, inputs=inputs,
            deadline=self.deadline, enforce=False,
        )  # fmt: skip
        task = self.loop.create_task(step.run(), context=self.context)
        self.tasks[name] = task
        task.add_done_callback(functools.partial(self._landed, name), context=self.context)

    def _landed(self, name: str, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return  # cut at the deadline: reported as cancelled
        error = task.exception()
        if error is None:
            self.results[name] = task.result()
            self.finished.append(name)
        else:
            self.failed[name] = error
        self._settle(name)
