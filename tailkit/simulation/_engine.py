"""
The vectorized Monte Carlo of a workflow: every run at once, one step at a time.

How a step plays out, in each run (all runs are numpy arrays; the only Python loop is over
steps). The first attempt goes to the step's route. If the signal it is watched on -- total
age, or time to first token -- passes the cutoff while it still runs, the step acts:

- ``hedge``: a second attempt starts on the hedge route; the first valid result wins, and the
  loser is still billed (it counts as an extra attempt whoever wins);
- ``retry`` / ``downgrade``: the first attempt is cancelled and a fresh one starts on the same
  route (retry) or the downgrade route;
- ``fail``: the step gives up (a run survives that only for optional steps);
- ``wait``: nothing; the step takes as long as it takes.

The cutoff is deadline aware: a step acts at ``min(cutoff, deadline - reserve - start)``, where
the reserve is what the steps still waiting on it need at their median (the plan's predicted
step medians, as the executor reads them), so a late run acts early rather than overrun. A
plan may also set a cutoff on the other clock, and a stall cutoff, which act as set: a stream
that stalls longer than the stall cutoff is cut mid-stream, ``stall_cutoff_s`` after its last
chunk before the gap (`RouteSample.stall_cut`), and the step acts there as at any cutoff --
its hedge racing the stalled stream (which may resume), its retry or downgrade replacing it,
an extra attempt all the same. The step acts at the earliest cutoff that passes.

An idempotent step's first attempt that fails before the cutoff is retried at once: on the
step's hedge route when that is on another provider (a failover, ``StepModel.failover``),
else on the same route; a result that fails validation goes to the upgrade route (or again to
the step's own route). Until the step acts, the retry and the upgrade are watched like the
first attempt (by every cutoff, the stall cutoff too), each from its own start, and a cutoff
that passes on one makes the step act (`_general`).

What the simulator does not model: the executor's circuit breaker, which takes a provider out
of first attempts after a streak of failures (5 in a row, or half of the last 20, by default).
Its runs draw their failures independently, as measured: at the error rates a plan is
calibrated on (a few per cent), such a streak is rare (5 in a row at 5 %: 3 in 10 million), and
an outage that does make one is a change of the provider, not the tail the plan is built on.
Where the breaker does open, the executor does better than the prediction (the first attempt
goes straight to the healthy route instead of failing first). The 429 rest and the throttle
are left out for the same reason. A repeat (every
attempt after the first) does the same job: its draw is coupled to the first attempt's by what
the step's repeats share (`StepModel.shares`, `tailkit.simulation._couple`); with nothing shared
it is an independent draw, which escapes the first attempt's tail.

The run follows the executor: a step whose required dependency failed never starts; an
optional step still running at the deadline is cut there without failing the run; an extra
attempt due at or after the deadline never starts and is not counted. ``tests/test_twin.py``
runs the executor on these same draws and expects the same runs.

The hedge budget is not simulated here, and need not be: the executor's `HedgeBudget` counts
in the simulator's terms (extra attempts per first attempt, a run's steps its first attempts,
no clock) and leaves headroom for the noise of a plan on budget, so a plan calibrated within
its budget is not denied the extra attempts counted here. `_reference.reference_trace` plays
the budget, decision by decision, when one is given.

Every draw comes from `Draws`, seeded per step name, so two plans that differ in one step see
the same luck in every other step: comparisons between candidates are paired (common random
numbers) and their differences far more precise than either estimate alone.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from tailkit.simulation._couple import AFTER_RETRY, SlotSource, StepSlots
from tailkit.simulation._draws import Draws
from tailkit.simulation._general import general_step
from tailkit.simulation._live import DEFAULT_CONCURRENCY, LiveState
from tailkit.simulation._model import (
    ACTING,
    NO_TIME_S,
    SLOTS,
    Bools,
    RunOutcome,
    StepModel,
    StepOutcome,
    WorkflowModel,
    acts_at,
    cut_at,
    in_time,
    needs_slots,
)
from tailkit.simulation._sample import Array, Index


__all__ = [
    "ACTING",
    "NO_TIME_S",
    "SLOTS",
    "Draws",
    "RunOutcome",
    "StepModel",
    "StepOutcome",
    "WorkflowModel",
    "general_step",
    "live_steps",
    "run_step",
    "simulate_runs",
]


def run_step(
    step: StepModel, start_s: Array, draws: SlotSource, model: WorkflowModel
) -> StepOutcome:
    """
    Play one step in every run, starting at ``start_s`` (seconds into each run).

    Most attempts neither fail nor return invalid output, so every run is first played as if
    none did, in a few whole-array operations; the runs where some attempt did fail or was
    invalid are then played again in full by `general_step` and written over. Both paths
    agree exactly on the runs they share (a test checks every run against a plain-Python
    reference).
    """
    primary = step.primary
    slot = StepSlots(step, draws)

    # Read every slot this step may need, needed in this block or not: streams stay aligned.
    first = slot.raw(0)
    one_used, two_used, three_used = needs_slots(step, model)
    if one_used:
        slot.raw(1)
    if two_used:
        slot.raw(2)
    if three_used:
        slot.raw(AFTER_RETRY)
    end1 = primary.end_table[first]
    fired = np.zeros(start_s.size, dtype=np.bool_)
    failed = np.zeros(start_s.size, dtype=np.bool_)
    duration, second = end1, None
    if step.acting:
        fired, act, plain = _fired(step, start_s, model, end1, first)
        if step.action == "fail":
            duration = np.minimum(end1, act) if plain else np.where(fired, act, end1)
            failed |= fired
        else:
            second = slot.where(1, fired)  # coupled where it starts: elsewhere unused
            start2 = (step.second or primary).end_table[second]
            start2 += act
            if step.action != "hedge":
                duration = np.where(fired, start2, end1)
            elif plain:  # an attempt that did not fire ended before the hedge could start
                duration = np.minimum(end1, start2, out=start2)
            else:
                duration = np.where(fired, np.minimum(end1, start2), end1)
        late = _late(step, start_s, act, fired, model)
        if late is not None:  # an extra attempt due too late never starts: the step waits
            fired[late], duration[late] = False, end1[late]
    special = _special(step, first, second, fired)
    recovery = np.zeros(start_s.size, dtype=np.int8)
    if special is not None:
        rows = np.flatnonzero(special)
        if rows.size:
            some = (
                step
                if step.cutoffs_s is None
                else dataclasses.replace(step, cutoffs_s=step.cutoffs_s[rows])
            )  # each run's own live cutoff
            sub = general_step(some, start_s[rows], lambda k: slot.at(k, rows), model)
            duration[rows], failed[rows], recovery[rows] = sub.duration_s, sub.failed, sub.recovery
            fired[rows] = sub.fired  # a retry or an upgrade may fire where the first did not
    extra = fired if step.action in ACTING else np.zeros(start_s.size, dtype=np.bool_)
    return StepOutcome(duration, failed, fired, extra, recovery)


def _fired(
    step: StepModel, start_s: Array, model: WorkflowModel, end1: Array, first: Index
) -> tuple[Bools, Array | float, bool]:
    """
    Where the step acts, the age it acts at, and whether that is the plain case.

    Plain: watched on the total age alone, so an attempt that did not fire ended by the age
    the step would have acted at (and the hedge's duration is a plain minimum). A cutoff that
    acts as set -- the other clock's, or the stall cutoff, which passes mid-stream -- makes it
    general.
    """
    primary = step.primary
    stall = primary.stall_cut(first, step.stall_cutoff_s)
    if stall is not None or math.isfinite(step.other_cutoff_s) or math.isinf(step.cutoff_s):
        # the earliest cutoff that passes acts (with no cutoff on the signal clock, only the
        # others can)
        fired, act = acts_at(step, start_s, model, end1, primary.ttft_table[first], stall_s=stall)
        return fired, act, False
    by_total = step.signal == "total"
    cut = cut_at(step, start_s, model)
    return (end1 if by_total else primary.ttft_table[first]) > cut, cut, by_total


def _late(
    step: StepModel, start_s: Array, cut: Array | float, fired: Bools, model: WorkflowModel
) -> npt.NDArray[np.intp] | None:
    """
    Runs in which an extra attempt would be due too close to the deadline (`in_time`).

    With a reserve beyond `NO_TIME_S` the tightened cut comes by ``deadline - reserve``, or at
    once for a step starting later: only a step starting past ``deadline - NO_TIME_S`` is late.
    ``None``: no run (the common case, found with one pass over the starts).
    """
    if step.action not in ACTING or not math.isfinite(model.deadline_s):
        return None
    if step.reserve_s > NO_TIME_S and not step.as_set:
        last_chance = model.deadline_s - NO_TIME_S
        if start_s.max(initial=-np.inf) < last_chance:
            return None
        rows = np.flatnonzero(start_s >= last_chance)
    else:
        rows = np.flatnonzero(~in_time(step, start_s, cut, model))
    rows = rows[fired[rows]]
    return rows if rows.size else None


def _special(step: StepModel, first: Index, second: Index | None, fired: Bools) -> Bools | None:
    """
    Runs in which an attempt the step used failed or returned invalid output (None: none).
    """
    primary, route = step.primary, step.second or step.primary
    special = None
    if primary.fails:
        special = first >= primary.ok_entries
    if primary.invalid_rate > 0.0:
        bad = primary.invalid_table[first]
        special = bad if special is None else special | bad
    if second is not None:
        if route.fails:
            bad = fired & (second >= route.ok_entries)
            special = bad if special is None else special | bad
        if route.invalid_rate > 0.0:
            bad = fired & route.invalid_table[second]
            special = bad if special is None else special | bad
    return special


def _skip(outcome: StepOutcome, skipped: Bools) -> StepOutcome:
    """
    The outcome with the skipped runs written over: no time, no result, no attempt.

    Writes into the outcome's arrays, which `run_step` made for this outcome alone.
    """
    rows = np.flatnonzero(skipped)
    outcome.duration_s[rows] = 0.0
    outcome.failed[rows] = True
    outcome.fired[rows] = False
    outcome.extra[rows] = False
    outcome.recovery[rows] = 0
    return dataclasses.replace(outcome, skipped=skipped)


def simulate_runs(
    model: WorkflowModel,
    draws: Draws,
    *,
    reuse: RunOutcome | None = None,
    changed: int = 0,
    on_step: Callable[[int, StepOutcome], None] | None = None,
    live: LiveState | bool | None = True,
) -> RunOutcome:
    """
    Play every run of the workflow.

    Args:
        model: The workflow.
        draws: Uniforms for every step (``draws.runs`` runs).
        reuse: A previous outcome whose steps before ``changed`` are still valid (the
            calibrator changes one step at a time; earlier steps do not move).
        changed: Index of the first step that differs from ``reuse``.
        on_step: Called with each step's index and outcome as it is played; the outcome
            then keeps no step (``starts`` and ``steps`` empty), and a step's arrays are let
            go once no step still waits on them: memory follows the steps running side by
            side (`live_steps`), not the plan. The runs are the same.
        live: How the steps with a ``live`` block route: ``True``, live, from a fresh
            `LiveState` (16 runs in flight, `DEFAULT_CONCURRENCY`); a `LiveState`, live,
            from that state, in batches of its ``concurrency`` runs (pass the same state to
            every block of one simulation: it carries on); ``False`` or ``None`` (what
            `live_state` gives for a model that routes nothing live): every step on its own
            route at its plan's cutoff (fixed routing).
    """
    if on_step is not None and reuse is not None:
        msg = "on_step keeps no steps to reuse"
        raise ValueError(msg)
    keep = on_step is None
    state = _live_state(model, live)
    runs = draws.runs
    starts: list[Array] = []
    outcomes: list[StepOutcome] = []
    ends: list[Array | None] = []
    dead: list[Bools | None] = []  # runs in which the step left its dependents nothing to wait on
    last = _last_use(model)
    zero = np.zeros(runs)
    sinks: list[Array] = []
    end: Array | None = None
    bad = np.zeros(runs, dtype=np.bool_)
    for i, step in enumerate(model.steps):
        if reuse is not None and i < changed:
            start, outcome = reuse.starts[i], reuse.steps[i]
        else:
            start, outcome = _play(step, ends, dead, zero, draws, model=model, live=state)
        finish = start + outcome.duration_s
        ends.append(finish)
        gone = outcome.failed if step.required and outcome.failed.any() else None
        dead.append(_any((gone, outcome.skipped)))
        if step.required:
            bad |= outcome.failed
        sink = _sink(step, finish, waited=last[i] >= 0, deadline_s=model.deadline_s)
        if keep:
            starts.append(start)
            outcomes.append(outcome)
            if sink is not None:
                sinks.append(sink)
            continue
        assert on_step is not None  # noqa: S101 - keep is False
        on_step(i, outcome)
        if sink is not None:  # the maximum is exact: the same end in any order
            end = sink if end is None else np.maximum(end, sink)
        for d in (*step.deps, i):
            if last[d] <= i:  # nothing after this step waits on d
                ends[d] = dead[d] = None
    if keep:
        end = np.maximum.reduce(sinks) if len(sinks) > 1 else sinks[0]
    assert end is not None  # noqa: S101 - a workflow has a required step or a sink
    return RunOutcome(end, ~bad, tuple(starts), tuple(outcomes))


def _live_state(model: WorkflowModel, live: LiveState | bool | None) -> LiveState | None:
    """
    The state a simulation routes its live steps by (``None``: fixed routing, or none live).
    """
    if isinstance(live, LiveState):
        return live
    if not live or all(step.live is None for step in model.steps):
        return None
    return LiveState(DEFAULT_CONCURRENCY)


def _sink(step: StepModel, finish: Array, *, waited: bool, deadline_s: float) -> Array | None:
    """
    What a step gives the run's end (``None``: nothing).

    A step ends after the steps it waits for: the run ends with the last of its sinks, an
    optional one cut at the deadline -- but never before its required steps (an optional
    sink after a late required step must not hide that the run missed).
    """
    if step.required:
        return finish
    if waited:
        return None
    return np.minimum(finish, deadline_s) if math.isfinite(deadline_s) else finish


def _play(
    step: StepModel,
    ends: list[Array | None],
    dead: list[Bools | None],
    zero: Array,
    draws: Draws,
    *,
    model: WorkflowModel,
    live: LiveState | None,
) -> tuple[Array, StepOutcome]:
    """
    A step's start in every run (the last of its dependencies' ends) and its outcome.

    A live step is routed by ``live`` (`LiveState.play`); without it, on its own route.
    """
    start = _end(ends, step.deps[0]) if step.deps else zero
    for d in step.deps[1:]:
        start = np.maximum(start, _end(ends, d))
    skipped = _any(dead[d] for d in step.deps)
    if live is not None and step.live is not None:
        outcome = live.play(step, start, skipped=skipped, draws=draws, model=model, run=run_step)
    else:
        outcome = run_step(step, start, draws, model)
    if skipped is not None:
        outcome = _skip(outcome, skipped)
    return start, outcome


def _end(ends: list[Array | None], d: int) -> Array:
    found = ends[d]
    assert found is not None  # noqa: S101 - let go only after its last dependent
    return found


def _last_use(model: WorkflowModel) -> list[int]:
    """
    Per step, the index of the last step that waits on it (-1: none does).
    """
    last = [-1] * len(model.steps)
    for i, step in enumerate(model.steps):
        for d in step.deps:
            last[d] = max(last[d], i)
    return last


def live_steps(model: WorkflowModel) -> int:
    """
    The most steps whose ends are held at once when `simulate_runs` lets them go (at least 1).
    """
    last = _last_use(model)
    live = peak = 0
    for i in range(len(model.steps)):
        live += 1
        peak = max(peak, live)
        live -= sum(1 for d in {*model.steps[i].deps, i} if last[d] <= i)
    return max(peak, 1)


def _any(masks: Iterable[Bools | None]) -> Bools | None:
    """
    The union of the masks that are not ``None`` (``None`` if there are none, or none is set).
    """
    out: Bools | None = None
    for mask in masks:
        if mask is None or not mask.any():
            continue
        out = mask if out is None else out | mask
    return out
