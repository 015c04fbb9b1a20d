"""
The simulator once more, one run at a time in plain Python: slow and obviously right.

Tests feed it the same draws as the vectorized engine and expect the same numbers;
``benchmarks/simulate.py`` times it as the baseline. Not for production use.

`reference_trace` also plays the executor's hedge budget: given a budget (a
`tailkit.executor.HedgeBudget`, or anything with its ``open`` / ``try_extra`` / ``close``), it
opens one account per run, asks for every extra attempt -- the action at a cutoff, the retry
after an error, the upgrade after invalid output -- at the instant the executor would, in the
order the executor would (earliest first, across parallel steps), and plays a refused action
as ``wait``, a refused retry or upgrade as the failure it would have recovered. Runs played
one after another through the same budget are what an executor
running them one after another does, denial for denial (``tests/test_twin.py``).
"""

from __future__ import annotations

import heapq
import math

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tailkit.simulation._couple import (
    RETRY,
    action_route,
    after_retry_index,
    repeat_route,
    retry_index,
)
from tailkit.simulation._model import ACTING, NO_TIME_S, StepModel, WorkflowModel
from tailkit.simulation._sample import RouteSample


Attempt = tuple[float, float, bool, bool, float]
"""(seconds to its end, to first token, failed, invalid, to its stall cut (``inf``: none))."""
_INF = math.inf


class Budget(Protocol):
    """
    The hedge budget's shape (`tailkit.executor.HedgeBudget`).
    """

    def open(self, firsts: int = 1) -> Any:
        """
        A run starts with ``firsts`` first attempts; returns its account.
        """

    def try_extra(self, account: Any, *, speculative: bool = False) -> bool:
        """
        Whether one more extra attempt may start, counted to ``account``.

        ``speculative``: an action at a cutoff (a hedge, a retry or downgrade there), which
        leaves the budget's recovery reserve to error retries, failovers and upgrades.
        """

    def close(self, account: Any) -> None:
        """
        The run ended.
        """


def _attempt(route: RouteSample, index: int, stall_cutoff_s: float = _INF) -> Attempt:
    """
    The outcome ``index`` of ``route``; cut by a stall cutoff of ``stall_cutoff_s`` if watched.
    """
    stall = route.stall_cut(np.array([index], dtype=np.intp), stall_cutoff_s)
    return (
        float(route.end_table[index]),
        float(route.ttft_table[index]),
        index >= route.ok_entries,
        bool(route.invalid_table[index]),
        _INF if stall is None else float(stall[0]),
    )


def acts_at(step: StepModel, start_s: float, model: WorkflowModel, one: Attempt) -> float:
    """
    The age at which the step acts on its first attempt ``one`` (``inf``: it does not).
    """
    if not step.acting:
        return _INF
    act = _INF
    if math.isfinite(step.cutoff_s):
        cut = step.cutoff_s
        if math.isfinite(model.deadline_s):
            cut = min(max((model.deadline_s - step.reserve_s) - start_s, 0.0), cut)
        if (one[1] if step.signal == "ttft" else one[0]) > cut:
            act = cut
    other = step.other_cutoff_s
    if math.isfinite(other) and (one[0] if step.signal == "ttft" else one[1]) > other:
        act = min(act, other)
    act = min(act, one[4])  # the stall cutoff, mid-stream (as set)
    if step.action in ACTING and not start_s + act < model.deadline_s - NO_TIME_S:
        return _INF  # an extra attempt due too close to the deadline never starts
    return act


Ask = tuple[float, bool]  # an extra attempt asked for: (its age, speculative)
Play = Generator[Ask, bool, tuple[float, bool, bool, int]]
"""A step played lazily: yields each extra attempt it asks for (`Ask`), is sent the grant."""


def step_play(step: StepModel, start_s: float, draws: Sequence[int], model: WorkflowModel) -> Play:
    """
    One step in one run, asking for each extra attempt as the executor does.

    Yields (age, speculative) for each extra attempt it asks for -- the action at a cutoff
    (speculative), the retry after an error, the upgrade after an invalid result -- the age
    in seconds into the step, and is sent whether it was granted. Returns (duration, failed,
    extra attempt started at a cutoff, recovery attempts). ``draws`` are the step's table
    indexes for this run (its four raw slots, or `step_indexes`' coupled rows).

    Until a cutoff fires, the attempt the step waits on is watched, from its own start: the
    first attempt, then the retry (or failover) of a first attempt that failed, or the
    upgrade of a first result that was invalid. The first cutoff that passes acts, once.
    """
    one = _attempt(step.primary, draws[0], step.stall_cutoff_s)
    act = acts_at(step, start_s, model, one)
    if act < _INF and step.action == "fail":
        return act, True, False, 0
    fired = act < _INF  # a cutoff passed (its action granted or not): nothing more is watched
    acted = fired and step.action in ACTING and (yield act, True)
    recovery = 0
    valid = bad = _INF  # the first valid result, the first invalid one
    end1, _, err1, inv1, _ = one
    last = end1
    if acted:
        other = _attempt(action_route(step, step.primary), draws[1])
        last, valid, bad = _raced(step, act, one, 0.0, other)
    elif err1 and model.error_retries and step.idempotent:
        if (yield end1, False):
            recovery = 1
            route = repeat_route(step, RETRY)
            two = _Watched(
                route,
                _attempt(route, retry_index(draws), step.stall_cutoff_s),
                end1,
                after_retry_index(draws),
            )
            last, valid, bad, fired2, acted = yield from _watched(step, start_s, model, two, fired)
            if fired2 and step.action == "fail":
                return last, True, False, recovery
            fired = fired or fired2
    elif not err1:
        valid, bad = (end1 if not inv1 else _INF), (end1 if inv1 else _INF)
    if bad < valid and (yield bad, False):  # the first result came back invalid: re-do it once
        route = step.upgrade or step.primary
        index = after_retry_index(draws) if recovery else draws[1]
        three = _Watched(route, _attempt(route, draws[2], step.stall_cutoff_s), bad, index)
        recovery += 1
        up_last, up_valid, _, fired3, acted3 = yield from _watched(
            step, start_s, model, three, fired
        )
        if fired3 and step.action == "fail":
            return up_last, True, False, recovery
        acted = acted or acted3
        valid = min(valid, up_valid)
        last = max(last, up_last)
    if valid < _INF:
        return valid, False, acted, recovery
    return last, True, acted, recovery


@dataclass(frozen=True, slots=True)
class _Watched:
    """
    Strictly private: a retry or an upgrade the step watches (route, draw, start, next slot).
    """

    route: RouteSample
    attempt: Attempt
    at: float  # its start, seconds into the step
    action_index: int  # the table index its cutoff's attempt reads


def _watched(
    step: StepModel, start_s: float, model: WorkflowModel, head: _Watched, fired: bool
) -> Generator[Ask, bool, tuple[float, float, float, bool, bool]]:
    """
    A retry or an upgrade, watched unless a cutoff ``fired`` already.

    Returns (its end, first valid result, first invalid one, a cutoff fired on it, an
    attempt started at that cutoff); for ``fail``, its end is when the step gave up.
    """
    at = head.at
    act = _INF if fired else acts_at(step, start_s + at, model, head.attempt)
    if act < _INF and step.action == "fail":
        return at + act, _INF, _INF, True, False
    acted = act < _INF and step.action in ACTING and (yield at + act, True)
    if acted:
        other = _attempt(action_route(step, head.route), head.action_index)
        last, valid, bad = _raced(step, at + act, head.attempt, at, other)
    else:
        last, valid, bad = _plain(head.attempt, at)
    return last, valid, bad, act < _INF, acted


def _raced(
    step: StepModel, act: float, head: Attempt, head_at: float, other: Attempt
) -> tuple[float, float, float]:
    """
    The step acted at age ``act`` on ``head`` (started at age ``head_at``), starting ``other``.

    Returns (its end, first valid result, first invalid one).
    """
    end1, _, err1, inv1, _ = head
    end1 += head_at
    valid = bad = _INF
    end2, _, err2, inv2, _ = other
    last = act + end2
    if not err2:
        valid, bad = (last if not inv2 else _INF), (last if inv2 else _INF)
    if step.action == "hedge":  # the watched attempt races on
        if not err1 and inv1:
            bad = min(bad, end1)
        elif not err1:
            valid = min(valid, end1)
        last = max(last, end1)
    return last, valid, bad


def _plain(attempt: Attempt, started: float) -> tuple[float, float, float]:
    """
    An attempt started at age ``started`` and run to its end: (end, valid result, invalid one).
    """
    end, _, err, inv, _ = attempt
    last = started + end
    return last, (last if not err and not inv else _INF), (last if inv and not err else _INF)


def play_step(
    step: StepModel, start_s: float, draws: Sequence[int], model: WorkflowModel
) -> tuple[float, bool, bool, int]:
    """
    One step in one run, every extra attempt granted: (duration, failed, extra, recovery).

    ``draws`` are the step's table indexes for this run (see `step_play`).
    """
    play = step_play(step, start_s, draws, model)
    try:
        next(play)
        while True:
            play.send(True)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def reference_step(
    step: StepModel, start_s: float, draws: Sequence[int], model: WorkflowModel
) -> tuple[float, bool, bool, int]:
    """
    One step in one run, every action granted: (duration, failed, extra, recovery).
    """
    return play_step(step, start_s, draws, model)


@dataclass(frozen=True, slots=True)
class RunTrace:
    """
    One run as the executor would see it.

    Args:
        end_s: Seconds from the run's start to its end (an optional step still running at
            the deadline counts as ending there; the executor's run ends at ``min(end_s,
            deadline)``).
        ok: Every required step produced a valid result (deadline not applied).
        missed: Not ``ok``, or it ended after the deadline.
        extras: Extra attempts started at cutoffs (granted).
        denials: Extra attempts refused by the budget (at cutoffs, retries, upgrades).
        ends: Each step's end, seconds into the run (``nan`` where skipped).
        recoveries: Attempts started after errors or invalid output (granted).
        starts: Each step's start, seconds into the run.
        skipped: Per step, whether it never started (a required step it waits on failed).
        durations: Each step's seconds from its start to its result (or to giving up).
    """

    end_s: float
    ok: bool
    missed: bool
    extras: int
    denials: int
    ends: tuple[float, ...]
    recoveries: int = 0
    starts: tuple[float, ...] = ()
    skipped: tuple[bool, ...] = ()
    durations: tuple[float, ...] = ()


def reference_trace(
    model: WorkflowModel, draws: Sequence[Sequence[int]], *, budget: Budget | None = None
) -> RunTrace:
    """
    One run, step by step in the executor's order; ``draws[i]`` are step ``i``'s indexes.

    With a ``budget``, the run opens an account with one first attempt per step, asks for each
    extra attempt in the order of the instants they are due, and closes it at the end.
    """
    run = _Run(model, draws, budget)
    ready = [i for i, step in enumerate(model.steps) if not step.deps]
    while ready or run.due:
        while ready:
            ready += run.start(ready.pop())
        if run.due:
            _, i = heapq.heappop(run.due)
            ready += run.decide(i)
    if budget is not None:
        budget.close(run.account)
    end = _run_end(model, run.ends)
    ok = not any(bad and s.required for s, bad in zip(model.steps, run.failed, strict=True))
    missed = not ok or end > model.deadline_s
    return RunTrace(
        end, ok, missed, run.extras, run.denials, tuple(run.ends), run.recoveries,
        starts=tuple(run.starts), skipped=tuple(run.skipped), durations=tuple(run.durations),
    )  # fmt: skip


class _Run:
    """
    Strictly private: the state of one run in `reference_trace`.
    """

    def __init__(
        self, model: WorkflowModel, draws: Sequence[Sequence[int]], budget: Budget | None
    ) -> None:
        steps = self.steps = model.steps
        self.model, self.draws, self.budget = model, draws, budget
        self.account = None if budget is None else budget.open(len(steps))
        self.ends = [math.nan] * len(steps)
        self.starts = [math.nan] * len(steps)
        self.failed = [False] * len(steps)
        self.dead = [False] * len(steps)  # a required step failed, or the step was skipped
        self.skipped = [False] * len(steps)
        self.durations = [0.0] * len(steps)
        self.waiting = [len(s.deps) for s in steps]
        self.dependents: list[list[int]] = [[] for _ in steps]
        for i, step in enumerate(steps):
            for d in step.deps:
                self.dependents[d].append(i)
        self.due: list[tuple[float, int]] = []  # (instant, step) of pending budget decisions
        self.plays: list[Play | None] = [None] * len(steps)
        self.speculative = [False] * len(steps)  # each step's pending ask: an action at a cutoff
        self.extras = self.denials = self.recoveries = 0

    def start(self, i: int) -> list[int]:
        """
        Start step ``i``: play it up to its first budget decision; returns the steps now ready.
        """
        step = self.steps[i]
        start = self.starts[i] = max((self.ends[d] for d in step.deps), default=0.0)
        if any(self.dead[d] for d in step.deps):
            return self._finish(i, start, True, skipped=True)
        self.plays[i] = step_play(step, start, self.draws[i], self.model)
        return self._advance(i, None)

    def decide(self, i: int) -> list[int]:
        """
        Step ``i`` asks for an extra attempt now: ask the budget, play on; the steps now ready.
        """
        granted = True
        if self.budget is not None:
            granted = self.budget.try_extra(self.account, speculative=self.speculative[i])
            self.denials += not granted
        return self._advance(i, granted)

    def _advance(self, i: int, granted: bool | None) -> list[int]:
        """
        Play step ``i`` on to its next decision (queued at its instant) or its end.

        A decision at or after the deadline is never asked: by then the executor has cut the
        run, so the step plays it as refused without counting it.
        """
        play, start = self.plays[i], self.starts[i]
        assert play is not None  # noqa: S101 - started by `start`
        try:
            age, speculative = next(play) if granted is None else play.send(granted)
            while True:
                if self.budget is None:
                    age, speculative = play.send(True)  # no budget: every one is granted
                elif start + age >= self.model.deadline_s - NO_TIME_S:
                    age, speculative = play.send(False)  # too late: never asked
                else:
                    break
        except StopIteration as done:
            duration, bad, extra, recovery = done.value
            self.durations[i] = duration
            self.extras += extra
            self.recoveries += recovery
            return self._finish(i, start + duration, bad)
        self.speculative[i] = speculative
        heapq.heappush(self.due, (start + age, i))  # decided when its instant comes
        return []

    def _finish(self, i: int, end: float, bad: bool, *, skipped: bool = False) -> list[int]:
        self.ends[i], self.failed[i] = end, bad
        self.skipped[i] = skipped
        self.dead[i] = skipped or (bad and self.steps[i].required)
        ready = []
        for child in self.dependents[i]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                ready.append(child)
        return ready


def _run_end(model: WorkflowModel, ends: Sequence[float]) -> float:
    """
    The run's end: its last sink's (an optional one cut at the deadline), or a required step's.
    """
    waited = {d for step in model.steps for d in step.deps}
    return max(
        min(ends[i], model.deadline_s) if not step.required else ends[i]
        for i, step in enumerate(model.steps)
        if step.required or i not in waited
    )


def reference_run(model: WorkflowModel, draws: Sequence[Sequence[int]]) -> tuple[float, bool, int]:
    """
    One run, every action granted: (end-to-end seconds, every required step succeeded, extras).

    ``draws[i]`` holds step ``i``'s table indexes for this run (see `step_play`).
    """
    trace = reference_trace(model, draws)
    return trace.end_s, trace.ok, trace.extras
