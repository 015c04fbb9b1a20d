"""
One step in the runs where some attempt failed or returned invalid output: every case played.

The executor's rules, for every run at once (``_reference.py`` has them one run at a time):

- the first attempt runs from 0; if a cutoff passes while it runs, the step acts at that age:
  ``fail`` gives up there; ``retry`` / ``downgrade`` cancel it and start the slot-1 attempt;
  ``hedge`` starts the slot-1 attempt beside it;
- the first valid result wins. A result that fails validation does not: the others race on,
  and the first such result (if no valid one came before it) starts the slot-2 attempt on the
  upgrade route (or the step's own), once;
- a first attempt that fails before the step acted is retried at once (slot 1's draw), for
  idempotent steps, on the step's failover route (its hedge route on another provider) or
  its own; no other failure is retried;
- until a cutoff fires, the attempt the step waits on is watched from its own start: the
  retry of a failed first attempt and the upgrade of an invalid first result too. A cutoff
  that fires on either acts as on the first attempt, its attempt drawn from slot 1, or from
  `AFTER_RETRY` when slot 1 went to the retry;
- with no valid result, the step fails when its last attempt ends.

Times below are ages from the step's start; ``inf`` stands for "never" (an attempt that fails
has no valid time, one that did not start has no end), so most cases are plain minimums.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.simulation._couple import AFTER_RETRY, RETRY, action_route, repeat_route
from tailkit.simulation._model import (
    ACTING,
    Bools,
    StepModel,
    StepOutcome,
    WorkflowModel,
    acts_at,
    needs_slots,
    retries_errors,
)
from tailkit.simulation._sample import Array, Index, RouteSample


def _outcome(
    route: RouteSample, index: Index, started: Array, *, invalid: bool
) -> tuple[Array, Array, Array | None]:
    """
    An attempt started at age ``started``: (when it ends, its valid result, its invalid one).

    The valid (invalid) time is ``inf`` where the attempt fails or its result is invalid
    (valid); the invalid time is ``None`` when no result can be invalid.
    """
    end = route.end_table[index] + started
    good = route.good_table[index] + started  # inf for a failure
    if not invalid or route.invalid_rate == 0.0:
        return end, good, None
    refused = route.invalid_table[index]  # only finished attempts are ever invalid
    return end, np.where(refused, np.inf, good), np.where(refused, end, np.inf)


def _acts(
    step: StepModel,
    start_s: Array,
    model: WorkflowModel,
    attempt: tuple[RouteSample, Index],
    *,
    started: Array,
    rows: Bools,
) -> tuple[Bools, Array]:
    """
    Where a cutoff fires on an attempt watched from age ``started`` (in ``rows``), and when.

    ``attempt`` is its route and table indexes. Returns the runs where a cutoff fires and the
    age (from the step's start) it fires at, ``inf`` elsewhere; the deadline tightening counts
    from the attempt's own start.
    """
    route, index = attempt
    at = np.where(rows, started, 0.0)
    end = route.end_table[index]
    watched = step.signal == "ttft" or math.isfinite(step.other_cutoff_s)
    fired, act = acts_at(
        step, start_s + at, model, end, route.ttft_table[index] if watched else end,
        stall_s=route.stall_cut(index, step.stall_cutoff_s),
    )  # fmt: skip
    fired &= rows
    return fired, np.where(fired, act + at, np.inf)


@dataclass(slots=True)
class _Step:
    """
    Strictly private: one step in every run, as far as it has been played.

    ``valid``/``bad``: the first valid and first invalid result (``bad`` ``None``: no
    result can be invalid); ``last``: when its last attempt ends; ``fired``/``act``: where a
    cutoff fired and at what age (``inf`` elsewhere).
    """

    valid: Array
    bad: Array | None
    last: Array
    fired: Bools
    act: Array
    recovery: npt.NDArray[np.int8]

    def race(
        self, step: StepModel, fired: Bools, head: tuple[Array, Array, Array | None],
        action: tuple[RouteSample, Index], *, invalid: bool,
    ) -> tuple[Array, Array | None, Array]:  # fmt: skip
        """
        The step acted (where ``fired``, at ``self.act``) on ``head``: its action's attempt joins.

        ``head`` is the watched attempt's (end, valid time, invalid time); the action's attempt
        (route and indexes) races it (a hedge) or replaces it. Returns (first valid result,
        first invalid one, last end).
        """
        end, valid, bad = head
        started = np.where(fired, self.act, np.inf)
        b_end, b_valid, b_bad = _outcome(*action, started, invalid=invalid)
        if step.action == "hedge":  # the watched attempt races on
            valid = np.where(fired, np.minimum(valid, b_valid), valid)
            if b_bad is not None:
                bad = _where(fired, b_bad if bad is None else np.minimum(bad, b_bad), bad)
            return valid, bad, np.where(fired, np.maximum(end, b_end), end)
        # retry / downgrade: the watched attempt was cancelled at the cut
        return (
            np.where(fired, b_valid, valid),
            _where(fired, b_bad, bad),
            np.where(fired, b_end, end),
        )

    def fire(self, fired: Bools, act: Array) -> None:
        """
        A cutoff fired on a retry or an upgrade (where ``fired``, at age ``act``).
        """
        self.fired, self.act = self.fired | fired, np.where(fired, act, self.act)


def general_step(
    step: StepModel, start_s: Array, slot: Callable[[int], Index], model: WorkflowModel
) -> StepOutcome:
    """
    Play one step in the runs ``slot`` draws for, every outcome considered (errors, invalid).
    """
    n = start_s.size
    primary = step.primary
    one_used, two_used, _ = needs_slots(step, model)
    first = slot(0)
    end, valid, bad = _outcome(primary, first, np.zeros(n), invalid=two_used)
    every = np.ones(n, dtype=np.bool_)
    fired, act = _acts(step, start_s, model, (primary, first), started=np.zeros(n), rows=every)
    gave_first = fired if step.action == "fail" else None
    play = _Step(valid, bad, end, fired, act, np.zeros(n, dtype=np.int8))
    second = slot(1) if one_used else None
    if second is not None and step.action in ACTING and fired.any():
        action = (action_route(step, primary), second)
        play.valid, play.bad, play.last = play.race(
            step, fired, (end, valid, bad), action, invalid=two_used
        )
    retried = np.zeros(n, dtype=np.bool_)
    if second is not None and retries_errors(step, model):
        retried = (first >= primary.ok_entries) & ~fired  # failed before any cutoff
        if retried.any():
            _retry(step, start_s, slot, model, play=play, failed=(end, retried))
    gave_up = play.fired.copy() if step.action == "fail" else None
    if play.bad is not None:
        redo = play.bad < play.valid  # the first result was invalid: re-do it once
        if gave_up is not None:
            redo &= ~gave_up
        if redo.any():
            action_index = second if second is not None else slot(2)
            if retried.any() and needs_slots(step, model)[2]:
                action_index = np.where(retried, slot(AFTER_RETRY), action_index)
            _upgrade(step, start_s, slot, model, play=play, redo_at=(redo, action_index))
            if gave_up is not None:
                gave_up |= play.fired
    failed = np.isinf(play.valid)
    duration = np.where(failed, play.last, play.valid)
    if gave_up is not None and gave_first is not None:
        duration = np.where(gave_up, play.act, duration)
        failed |= gave_up
        play.recovery[gave_first] = 0
    extra = play.fired if step.action in ACTING else np.zeros(n, dtype=np.bool_)
    return StepOutcome(duration, failed, play.fired, extra, play.recovery)


def _retry(
    step: StepModel,
    start_s: Array,
    slot: Callable[[int], Index],
    model: WorkflowModel,
    *,
    play: _Step,
    failed: tuple[Array, Bools],
) -> None:
    """
    Retry the first attempts that failed (``failed``: when they ended, and where), watched.
    """
    end, again = failed
    _, two_used, three_used = needs_slots(step, model)
    route = repeat_route(step, RETRY)
    retry = slot(RETRY)  # slot 1's draw, coupled for the retry's route
    r_end, r_valid, r_bad = _outcome(route, retry, end, invalid=two_used)
    r_fired, r_act = _acts(step, start_s, model, (route, retry), started=end, rows=again)
    r_last = r_end
    play.fire(r_fired, r_act)
    if three_used and r_fired.any():
        action = (action_route(step, route), slot(AFTER_RETRY))
        r_valid, r_bad, r_last = play.race(
            step, r_fired, (r_end, r_valid, r_bad), action, invalid=two_used
        )
    play.valid = np.where(again, r_valid, play.valid)
    play.bad = _where(again, r_bad, play.bad)
    play.last = np.where(again, r_last, play.last)
    play.recovery += again


def _upgrade(
    step: StepModel,
    start_s: Array,
    slot: Callable[[int], Index],
    model: WorkflowModel,
    *,
    play: _Step,
    redo_at: tuple[Bools, Index],
) -> None:
    """
    Re-do the first invalid results (where ``redo``) on the upgrade route, watched if alone.

    A cutoff that fires on the upgrade starts its action's attempt from ``action_index``.
    """
    redo, action_index = redo_at
    assert play.bad is not None  # noqa: S101 - only called where a result can be invalid
    route = step.upgrade or step.primary
    upgrade = slot(2)
    u_end, u_valid, _ = _outcome(route, upgrade, play.bad, invalid=True)
    u_last = u_end
    watched = redo & ~play.fired  # nothing else runs: the upgrade is watched in its place
    u_fired, u_act = _acts(step, start_s, model, (route, upgrade), started=play.bad, rows=watched)
    play.fire(u_fired, u_act)
    if step.action in ACTING and u_fired.any():
        action = (action_route(step, route), action_index)
        u_valid, _, u_last = play.race(step, u_fired, (u_end, u_valid, None), action, invalid=True)
    play.valid = np.where(redo, np.minimum(play.valid, u_valid), play.valid)
    play.last = np.where(redo, np.maximum(play.last, u_last), play.last)
    play.recovery += redo


def _where(cond: Bools, a: Array | None, b: Array | None) -> Array | None:
    """
    ``where(cond, a, b)`` for invalid times, where ``None`` means never.
    """
    if a is None and b is None:
        return None
    return np.where(cond, np.inf if a is None else a, np.inf if b is None else b)
