"""
One step in the runs where some attempt failed or returned invalid output: every case played.

The executor's rules, for every run at once (``_reference.py`` has them one run at a time):

- the first attempt runs from 0; if a cutoff passes while it runs, the step acts at that age:
  ``fail`` gives up there; ``retry`` / ``downgrade`` cancel it and start the slot-1 attempt;
  ``hedge`` starts the slot-1 attempt beside it;
- the first valid result wins. A result that fails validation does not: the others race on,
  and the first such result (if no valid one came before it) starts the slot-2 attempt on the
  upgrade route (or the step's own), once;
- a first attempt that fails before the step acted is retried at once on its route (slot 1),
  for idempotent steps; no other failure is retried;
- with no valid result, the step fails when its last attempt ends.

Times below are ages from the step's start; ``inf`` stands for "never" (an attempt that fails
has no valid time, one that did not start has no end), so most cases are plain minimums.
"""

from __future__ import annotations

import math

from collections.abc import Callable

import numpy as np

from tailkit.simulate._couple import RETRY
from tailkit.simulate._model import (
    ACTING,
    Bools,
    StepModel,
    StepOutcome,
    WorkflowModel,
    acts_at,
    needs_slots,
    retries_errors,
)
from tailkit.simulate._sample import Array, Index, RouteSample


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


def general_step(
    step: StepModel, start_s: Array, slot: Callable[[int], Index], model: WorkflowModel
) -> StepOutcome:
    """
    Play one step in the runs ``slot`` draws for, every outcome considered (errors, invalid).
    """
    n = start_s.size
    primary = step.primary
    one_used, two_used = needs_slots(step, model)
    zero = np.zeros(n)
    first = slot(0)
    end, valid, bad = _outcome(primary, first, zero, invalid=two_used)
    watched = step.signal == "ttft" or math.isfinite(step.other_cutoff_s)
    fired, act = acts_at(step, start_s, model, end, primary.ttft_table[first] if watched else end)
    last = end
    recovery = np.zeros(n, dtype=np.int8)
    second = slot(1) if one_used else None
    if second is not None and step.action in ACTING and fired.any():
        # the slot-1 attempt starts at the cut (its times are inf where nothing fired)
        b_end, b_valid, b_bad = _outcome(step.second or primary, second, act, invalid=two_used)
        if step.action == "hedge":  # the first attempt races on
            valid = np.minimum(valid, b_valid)
            bad = b_bad if bad is None else bad if b_bad is None else np.minimum(bad, b_bad)
            last = np.where(fired, np.maximum(end, b_end), end)
        else:  # retry / downgrade: the first attempt was cancelled at the cut
            valid = np.where(fired, b_valid, valid)
            bad = _where(fired, b_bad, bad)
            last = np.where(fired, b_end, end)
    if second is not None and retries_errors(step, model):
        again = (first >= primary.ok_entries) & ~fired  # failed before any cutoff
        if again.any():
            retry = slot(RETRY)  # slot 1's draw, coupled for the step's own route
            r_end, r_valid, r_bad = _outcome(primary, retry, end, invalid=two_used)
            valid = np.where(again, r_valid, valid)
            bad = _where(again, r_bad, bad)
            last = np.where(again, r_end, last)
            recovery += again
    gave_up = fired if step.action == "fail" else None
    if bad is not None:
        redo = bad < valid  # the first result was invalid: re-do it once
        if gave_up is not None:
            redo &= ~gave_up
        if redo.any():
            u_end, u_valid, _ = _outcome(step.upgrade or primary, slot(2), bad, invalid=True)
            valid = np.where(redo, np.minimum(valid, u_valid), valid)
            last = np.where(redo, np.maximum(last, u_end), last)
            recovery += redo
    failed = np.isinf(valid)
    duration = np.where(failed, last, valid)
    if gave_up is not None:
        duration = np.where(gave_up, act, duration)
        failed |= gave_up
        recovery[gave_up] = 0
    extra = fired if step.action in ACTING else np.zeros(n, dtype=np.bool_)
    return StepOutcome(duration, failed, fired, extra, recovery)


def _where(cond: Bools, a: Array | None, b: Array | None) -> Array | None:
    """
    ``where(cond, a, b)`` for invalid times, where ``None`` means never.
    """
    if a is None and b is None:
        return None
    return np.where(cond, np.inf if a is None else a, np.inf if b is None else b)
