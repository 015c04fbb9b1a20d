"""
The executor: a plan, its budgets and its ledger; runs single steps and whole workflows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import os
import random
import time

from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tailkit.config import Plan, scale_plan
from tailkit.deadline import current_deadline
from tailkit.deadline.lowlevel import instant
from tailkit.errors import ConfigError
from tailkit.executor._breaker import Breaker
from tailkit.executor._budget import HedgeBudget, ProviderThrottle
from tailkit.executor._events import Observer
from tailkit.executor._live import LiveRouter, LiveValue
from tailkit.executor._scale import check_time_scale
from tailkit.executor._shared import RunBook, Shared, StepPolicy
from tailkit.executor._step import StepRun
from tailkit.executor._types import AttemptFn
from tailkit.ledger import Ledger


def new_run_id() -> str:
    """
    A fresh run id: 16 random hex digits (what a call gets when the caller names no run).
    """
    return os.urandom(8).hex()


def idempotency_key(run_id: str | None, step: str, index: int = 0) -> str:
    """
    The key every attempt of one logical call shares: a hash of (run, step, call index).

    Distinct logical calls need distinct run ids (or call indexes): the executor gives a call
    without a run id a fresh one, so no two calls share a key by accident.
    """
    text = f"{run_id or ''}\x1f{step}\x1f{index}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Executor:
    """
    Runs a plan's steps in production: cutoffs, hedges, budgets, one ledger line per attempt.

    Args:
        plan: The (calibrated) plan.
        ledger: Where attempt lines go (``None``: counted, then dropped).
        budget: The global hedge budget (``None``: ``HedgeBudget(plan.hedge_budget)``, counted
            per first attempt as the simulator counts it, as this process's share of a fleet
            of ``TAILKIT_WORKERS`` or ``WEB_CONCURRENCY`` workers, with a recovery reserve of
            0.2; see `HedgeBudget`).
        throttle: The per-provider throttle (``None``: 10 tokens, 0.1 per success).
        breaker: The per-provider circuit breaker (``None``: ``Breaker()``: open after 5
            failures in a row or half of the last 20, for 30 plan seconds, scaled by
            ``time_scale``; see `Breaker`; one you pass counts real seconds). It outlives
            `replace_plan`.
        policies: Per step name, a validator and what happens to losing attempts.
        seed: Seed of the retry jitter (``None``: fresh randomness).
        observer: Who watches it: an `Observer` with an event hook and/or OpenTelemetry
            tracing (``None``: ``Observer()``, which traces when OpenTelemetry's API is
            installed and has no hook).
        time_scale: Real seconds per plan second, for a rehearsal against a time-scaled
            server: pass the server's time scale (``0.01``: 100 times faster). The
            executor runs ``scale_plan(plan, time_scale)`` (deadline, cutoffs, predictions),
            scales the retry jitter and ``run(deadline_s=...)`` alike, and writes its ledger
            and `RunResult` times back in plan seconds, so a rehearsal's ledger ingests like a
            production one. In (0, 10]; ``1`` (the default) changes nothing.
        live: Follow the plan's ``live`` blocks (the default): a step that has one sends each
            first attempt to the candidate route whose recent latency is best, with a cutoff
            that follows it (see `live_state` and docs/executor.md, "Live routing"); a step
            without one runs as the plan fixes it. ``False`` ignores the blocks: every step
            runs its fixed route and cutoffs (to compare the two).

    Raises:
        ConfigError: ``policies`` names a step the plan lacks, ``time_scale`` is not in
            (0, 10], or ``live`` is not a bool.

    ``executor.plan`` is the plan the steps run (the one given, or its scaled copy when
    ``time_scale`` is not 1); ``executor.profile_plan`` is the one given, in plan seconds.

    Use it as ``async with Executor(...) as executor:`` (or call `aclose` when done): leaving
    waits for the losing attempts still finishing (``StepPolicy(losers="finish")``) and closes
    the ledger's sinks (unless another open executor shares the ledger). `replace_plan` swaps
    in a recalibrated plan while it runs; calls already running finish under their own.

    Example::

        async with Executor(load_plan("plan.yaml"),
                            ledger=Ledger(JsonlSink("ledger.jsonl"))) as executor:
            answer = await executor.run_step("extract", call_model)
            run = await executor.run({"extract": call_model, "draft": call_model})
    """

    def __init__(
        self,
        plan: Plan,
        *,
        ledger: Ledger | None = None,
        budget: HedgeBudget | None = None,
        throttle: ProviderThrottle | None = None,
        breaker: Breaker | None = None,
        policies: Mapping[str, StepPolicy] | None = None,
        seed: int | None = None,
        observer: Observer | None = None,
        time_scale: float = 1.0,
        live: bool = True,
    ) -> None:
        _check_policies(plan, policies)
        if not isinstance(live, bool):
            msg = f"{{field}} must be True or False, got {live!r}."
            raise ConfigError(msg, field="live", value=live, fix="Pass True or False.")
        self.time_scale = check_time_scale(time_scale)
        self._own_budget = budget is None  # a plan's reload may retune a budget it made
        self._closed = False
        self._state = self._prepare(
            plan,
            Shared(
                plan,  # replaced by the plan the steps run, below
                budget or HedgeBudget(plan.hedge_budget),
                throttle or ProviderThrottle(),
                (ledger or Ledger()).acquire(),
                dict(policies or {}),
                rng=random.Random(seed),  # noqa: S311 - jitter, not cryptography
                observer=Observer() if observer is None else observer,
                breaker=Breaker(cooldown_s=30.0 * self.time_scale) if breaker is None else breaker,
                time_scale=self.time_scale,
                origin=datetime.fromtimestamp(time.time(), UTC),
                router=LiveRouter() if live else None,
            ),
        )

    def _prepare(self, plan: Plan, shared: Shared) -> Loaded:
        # the plan the steps run, in real seconds: the same object in production
        scaled = plan if self.time_scale == 1.0 else scale_plan(plan, self.time_scale)
        order = scaled.order()
        return Loaded(
            profile_plan=plan,
            plan=scaled,
            shared=dataclasses.replace(shared, plan=scaled),
            reserve_s=reserves(scaled),
            order=order,
            dependents={name: scaled.dependents(name) for name in order},
        )

    @property
    def plan(self) -> Plan:
        """
        The plan new steps run (the one given, or its scaled copy when ``time_scale`` != 1).
        """
        return self._state.plan

    @property
    def profile_plan(self) -> Plan:
        """
        The plan as given, in plan seconds.
        """
        return self._state.profile_plan

    @property
    def shared(self) -> Shared:
        """
        What the steps that start now share: the plan, the budgets, the ledger.
        """
        return self._state.shared

    @property
    def reserve_s(self) -> dict[str, float]:
        """
        Per step, the seconds the steps after it are expected to need (see `reserves`).
        """
        return self._state.reserve_s

    @property
    def order(self) -> tuple[str, ...]:
        """
        The plan's steps in an order that puts each after the steps it depends on.
        """
        return self._state.order

    @property
    def dependents(self) -> dict[str, tuple[str, ...]]:
        """
        Per step, the steps that depend on it.
        """
        return self._state.dependents

    @property
    def loaded(self) -> Loaded:
        """
        The plan new calls run and what goes with it, as one snapshot (see `replace_plan`).
        """
        return self._state

    def replace_plan(self, plan: Plan, *, policies: Mapping[str, StepPolicy] | None = None) -> None:
        """
        Run ``plan`` from now on (a recalibrated plan), without closing anything.

        Calls and workflow runs that start after this run ``plan``; those already running
        finish under the plan they started with, step for step (a run never mixes two plans).
        Everything else carries over: the ledger and its sinks (not one line is lost or
        closed), the hedge budget's count, the provider throttle and its rests, the losing
        attempts still finishing, the observer, the seen durations and live routing's windows
        (by step and route name: a step or route the new plan keeps keeps its window, and the
        new plan's ``window`` applies from then on). A budget the executor
        made itself (``budget=None``) takes the new plan's ``hedge_budget``, keeping its
        count; one passed in is the caller's and is left as it is.

        Args:
            plan: The new plan, in plan seconds (a time-scaled executor scales it too).
            policies: Per step name, the new policies (``None``: keep the current ones).

        Raises:
            ConfigError: The executor is closed, or a policy names a step the new plan
                lacks. The old plan stays in force.
        """
        if self._closed:
            msg = "replace_plan: the executor is closed; make a new Executor"
            raise ConfigError(msg)
        current = self._state.shared
        chosen = dict(current.policies if policies is None else policies)
        _check_policies(plan, chosen)
        state = self._prepare(plan, dataclasses.replace(current, policies=chosen))
        if self._own_budget and current.budget.ratio != plan.hedge_budget:
            current.budget.set_ratio(plan.hedge_budget)
        self._state = state  # one assignment: a call sees the old state or the new, whole

    async def __aenter__(self) -> Executor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self, timeout_s: float | None = None) -> None:
        """
        Wait for the losing attempts still finishing, then close the ledger's sinks.

        Each such attempt is cut at its run's deadline anyway; ``timeout_s`` bounds the wait
        (``None``: until they land), after which the rest are cancelled and written as cut.
        A ledger shared with another executor still open stays open until that one closes
        too (see `Ledger.acquire`); closing twice closes once.
        """
        pending = set(self.shared.abandoned)
        if pending:
            _, late = await asyncio.wait(pending, timeout=timeout_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        if not self._closed:
            self._closed = True
            self.shared.ledger.release()

    @property
    def ledger(self) -> Ledger:
        """
        The ledger every attempt is written to.
        """
        return self.shared.ledger

    def live_state(self) -> dict[str, dict[str, LiveValue]]:
        """
        What live routing knows now: per step that routes live, per candidate route, a view.

        Each `LiveValue` gives the first attempts in the route's window, the value the next
        decision compares (the window's quantile, or the plan's prior while the window holds
        fewer than ``min_calls``) in plan seconds, and which of the two it is. A step without
        a ``live`` block is absent; so is every step when the executor was made with
        ``live=False``. A snapshot: it does not change as calls go on.
        """
        shared = self.shared
        router = shared.router
        if router is None:
            return {}
        out = {}
        for name, step in self.plan.steps.items():
            if step.live is not None:
                out[name] = router.view(step, step.live, shared.time_scale)
        return out

    @property
    def denials(self) -> dict[str, int]:
        """
        Actions refused so far: ``{"budget": n, "throttle": m}``.

        ``budget``: a cutoff fired but the hedge budget refused the extra attempt (hedge, retry
        or downgrade); ``throttle``: the hedge provider was throttled. Each refusal is also on
        the ledger line of the attempt whose cutoff fired, as ``attrs.hedge_denied``.
        """
        return dict(self.shared.denials)

    async def run_step(
        self,
        name: str,
        attempt_fn: AttemptFn,
        *,
        run_id: str | None = None,
        call_index: int = 0,
        inputs: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        enforce: bool = True,
    ) -> Any:
        """
        Run one logical call of step ``name`` under its plan; return the winning result.

        Args:
            name: A step of the plan.
            attempt_fn: Called once per attempt with an `Attempt`; returns the answer or an
                async iterator of chunks.
            run_id: The workflow run (part of the idempotency key; ``None``: a fresh id, so
                this call's attempts share a key with no other call).
            call_index: Which logical call of the step this is within the run (part of the key).
            inputs: Results of the steps it depends on, passed to every attempt.
            deadline: Run deadline, an instant on the loop clock (``None``: the current one;
                never later than it; one more than about 32 years away is none, as in
                `tailkit.deadline`).
            enforce: Cut the step at the deadline here (``False``: the caller does, as a
                workflow run does for all its steps at once).

        Raises:
            StepTimeout: The deadline passed, or the step's action is ``fail`` and it fired.
            AllAttemptsFailed: Every attempt failed or returned invalid output.
            ConfigError: ``name`` is not a step of the plan.
        """
        state = self._state  # the call runs one plan to its end, whatever replaces it
        plan = state.plan
        if name not in plan.steps:
            known = ", ".join(plan.steps)
            msg = f"step {name!r} is not in plan {plan.workflow!r};"
            raise ConfigError(msg, field="name", value=name, fix=f"it has {known}")
        limit = current_deadline()
        if deadline is not None:
            limit = min(instant("run_step", deadline), limit)
        run_id = new_run_id() if run_id is None else run_id
        budget = state.shared.budget
        book = RunBook(budget.open(1))  # a lone call: one first attempt
        try:
            return await state.step_run(
                name, attempt_fn, book=book, run_id=run_id, call_index=call_index,
                inputs=inputs, deadline=limit, enforce=enforce,
            ).run()  # fmt: skip
        finally:
            budget.close(book.account)

    def step_run(
        self,
        name: str,
        attempt_fn: AttemptFn,
        *,
        book: RunBook,
        run_id: str | None,
        call_index: int = 0,
        inputs: Mapping[str, Any] | None = None,
        deadline: float,
        enforce: bool = True,
    ) -> StepRun:
        """
        One logical call of a known step, in a run whose budget account is open (not started).

        For `run_workflow` and `run_step`: the run's account already holds the step's first
        attempt. Await its ``run()`` for the step's result. Runs under the current plan (a
        workflow run keeps the `loaded` snapshot it started with and calls its ``step_run``).
        """
        return self._state.step_run(
            name, attempt_fn, book=book, run_id=run_id, call_index=call_index, inputs=inputs,
            deadline=deadline, enforce=enforce,
        )  # fmt: skip

    async def run(
        self,
        attempt_fns: Mapping[str, AttemptFn] | AttemptFn,
        *,
        run_id: str | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """
        Run the plan's workflow once (see `tailkit.executor.run_workflow`).
        """
        from tailkit.executor._workflow import prepared_run

        run = prepared_run(self, attempt_fns, run_id=run_id or new_run_id(), deadline_s=deadline_s)
        return await run.go()


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    """
    One plan as an executor runs it: what a call or a workflow run keeps from start to end.

    Args:
        profile_plan: The plan as given, in plan seconds.
        plan: The plan the steps run (scaled by the executor's time scale).
        shared: The budgets, ledger and the rest, shared with every other plan the executor
            ran, with this plan and its policies.
        reserve_s: Per step, the seconds the steps after it are expected to need.
        order: The steps, each after the steps it depends on.
        dependents: Per step, the steps that depend on it.
    """

    profile_plan: Plan
    plan: Plan
    shared: Shared
    reserve_s: dict[str, float]
    order: tuple[str, ...]
    dependents: dict[str, tuple[str, ...]]

    def step_run(
        self,
        name: str,
        attempt_fn: AttemptFn,
        *,
        book: RunBook,
        run_id: str | None,
        call_index: int = 0,
        inputs: Mapping[str, Any] | None = None,
        deadline: float,
        enforce: bool = True,
    ) -> StepRun:
        """
        One logical call of step ``name`` of this plan (see `Executor.step_run`).
        """
        return StepRun(
            self.shared, self.plan.steps[name], attempt_fn,
            key=idempotency_key(run_id, name, call_index), deadline=deadline, run_id=run_id,
            inputs=dict(inputs or {}), reserve_s=self.reserve_s.get(name, 0.0), book=book,
            enforce=enforce,
        )  # fmt: skip


def _check_policies(plan: Plan, policies: Mapping[str, StepPolicy] | None) -> None:
    unknown = sorted(set(policies or {}) - set(plan.steps))
    if unknown:
        known = ", ".join(plan.steps)
        msg = f"{{field}} name unknown step(s) {', '.join(unknown)};"
        raise ConfigError(msg, field="policies", value=unknown, fix=f"the plan has {known}")


def reserves(plan: Plan) -> dict[str, float]:
    """
    Per step, the predicted median seconds of the longest chain of steps still waiting on it.

    The plan's ``predicted.p50_s`` per step (0 for steps without a prediction). A step acts
    on its cutoff no later than ``deadline - reserve``, so the steps after it still fit. The
    simulator reads the same numbers from the plan (falling back to its samples' medians only
    for steps without a prediction, where this reads 0).
    """
    order = plan.order()
    reserve: dict[str, float] = {}
    for name in reversed(order):
        after = []
        for d in plan.dependents(name):
            predicted = plan.steps[d].predicted
            after.append((predicted.p50_s if predicted else 0.0) + reserve[d])
        reserve[name] = max(after, default=0.0)
    return reserve


KEPT_PLANS = 8  # `run_step(plan=...)` keeps the executors of this many plans, latest used


_KEPT: OrderedDict[int, Executor] = OrderedDict()  # id(plan) -> its executor, oldest first


async def run_step(
    name: str,
    attempt_fn: AttemptFn,
    *,
    plan: Plan,
    executor: Executor | None = None,
    run_id: str | None = None,
    call_index: int = 0,
) -> Any:
    """
    Run one logical call of a step under ``plan``, with an executor kept for that plan.

    Calls with the same plan object share one executor (its hedge budget, throttle and
    ledger count) while the plan is among the `KEPT_PLANS` plans used last; a plan used
    after that gets a fresh executor. So a service that builds a new plan object per reload,
    or per request, holds at most `KEPT_PLANS` executors (and plans), never one per plan it
    ever saw. The executor made here writes its ledger lines nowhere (``Ledger()``, counted
    only); for a ledger, a budget across calls you control, or a closed-down shutdown, make
    an `Executor` and pass it as ``executor``.

    Args:
        name: A step of the plan.
        attempt_fn: Called once per attempt with an `Attempt`.
        plan: The plan.
        executor: Use this executor (its budgets and ledger) instead of the kept one.
        run_id: The workflow run (part of the idempotency key; ``None``: a fresh id).
        call_index: Which logical call of the step this is within the run.
    """
    if executor is None:
        executor = _kept_executor(plan)
    return await executor.run_step(
        name, attempt_fn, run_id=run_id, call_index=call_index, deadline=math.inf
    )


def _kept_executor(plan: Plan) -> Executor:
    """
    The executor kept for ``plan`` (a new one if none is), now the latest used.

    An entry holds its plan (through its executor), so its ``id`` names no other object while
    it is kept. One pushed out is dropped: its losing attempts were cancelled (the default
    policy), and its ledger is released (it has no sinks: nothing waits to be written).
    """
    key = id(plan)
    executor = _KEPT.get(key)
    if executor is not None and executor.profile_plan is plan:
        _KEPT.move_to_end(key)
        return executor
    executor = _KEPT[key] = Executor(plan)
    _KEPT.move_to_end(key)
    while len(_KEPT) > KEPT_PLANS:
        _, gone = _KEPT.popitem(last=False)
        if not gone._closed:
            gone._closed = True
            gone.shared.ledger.release()
    return executor
