"""
The simulator once more, one run at a time in plain Python: slow and obviously right.

Tests feed it the same draws as the vectorized engine and expect the same numbers;
``benchmarks/simulate.py`` times it as the baseline. Not for production use.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

from tailkit.simulate._engine import ACTING, StepModel, WorkflowModel
from tailkit.simulate._sample import RouteSample


Attempt = tuple[float, float, bool, bool]


def _attempt(route: RouteSample, index: int) -> Attempt:
    """
    One attempt: (seconds to its end, seconds to first token, failed, invalid).
    """
    return (
        float(route.end_table[index]),
        float(route.ttft_table[index]),
        index >= route.ok_entries,
        bool(route.invalid_table[index]),
    )


def _act(step: StepModel, cut: float, one: Attempt, index: int) -> tuple[float, bool, bool]:
    """
    Duration, failure and invalid output after the step's action fired at ``cut``.
    """
    end1, _, err1, inv1 = one
    if step.action == "fail":
        return cut, True, inv1
    end2, _, err2, inv2 = _attempt(step.second or step.primary, index)
    if step.action != "hedge":
        return cut + end2, err2, inv2
    if err1 and err2:
        return max(end1, cut + end2), True, False
    good1 = math.inf if err1 else end1
    good2 = math.inf if err2 else cut + end2
    return min(good1, good2), False, inv1 if good1 <= good2 else inv2


def reference_step(
    step: StepModel, start_s: float, draws: Sequence[int], model: WorkflowModel
) -> tuple[float, bool, bool, int]:
    """
    One step in one run: (duration, failed, extra attempt started, recovery attempts).

    ``draws`` are the step's three table indexes for this run.
    """
    one = _attempt(step.primary, draws[0])
    duration, _, failed, invalid = one
    fired = False
    if step.action != "wait" and math.isfinite(step.cutoff_s):
        cut = step.cutoff_s
        if math.isfinite(model.deadline_s):
            cut = min(cut, max(model.deadline_s - step.reserve_s - start_s, 0.0))
        fired = (one[1] if step.signal == "ttft" else one[0]) > cut
        if fired:
            duration, failed, invalid = _act(step, cut, one, draws[1])
    recovery = 0
    if model.error_retries and one[2] and not fired:
        end2, _, failed, invalid = _attempt(step.primary, draws[1])
        duration = one[0] + end2
        recovery += 1
    if invalid and not failed:
        end3, _, err3, inv3 = _attempt(step.upgrade or step.primary, draws[2])
        duration, failed = duration + end3, err3 or inv3
        recovery += 1
    return duration, failed, fired and step.action in ACTING, recovery


def reference_run(model: WorkflowModel, draws: Sequence[Sequence[int]]) -> tuple[float, bool, int]:
    """
    One run: (end-to-end seconds, every required step succeeded, extra attempts).

    ``draws[i]`` holds step ``i``'s three table indexes for this run.
    """
    ends: list[float] = []
    ok, extra = True, 0
    for step, d in zip(model.steps, draws, strict=True):
        start = max((ends[i] for i in step.deps), default=0.0)
        duration, failed, hedged, _ = reference_step(step, start, d, model)
        ends.append(start + duration)
        ok = ok and not (failed and step.required)
        extra += hedged
    return max(ends), ok, extra
