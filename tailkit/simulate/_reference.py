"""
The simulator once more, one run at a time in plain Python: slow and obviously right.

Tests feed it the same uniforms as the vectorized engine and expect the same numbers;
``benchmarks/simulate.py`` times it as the baseline. Not for production use.
"""

from __future__ import annotations

import math

from tailkit.simulate._engine import ACTING, StepModel, WorkflowModel
from tailkit.simulate._sample import RouteSample


def _attempt(route: RouteSample, rank: float, coin: float) -> tuple[float, float, bool, bool]:
    """
    One attempt: (seconds to its end, seconds to first token, error, invalid).
    """
    i = int(rank * route.total_s.size)
    total, first = float(route.total_s[i]), float(route.ttft_s[i])
    err = coin < route.error_rate
    if err:
        total = first = float(route.error_s[int(rank * route.error_s.size)])
    invalid = route.error_rate <= coin < route.error_rate + route.invalid_rate
    return total, first, err, invalid


def reference_step(
    step: StepModel, start_s: float, u: list[float], model: WorkflowModel
) -> tuple[float, bool, bool, int]:
    """
    One step in one run: (duration, failed, extra attempt started, recovery attempts).
    """
    end1, first1, err1, inv1 = _attempt(step.primary, u[0], u[1])
    duration, failed, invalid, fired = end1, err1, inv1, False
    if step.action != "wait" and math.isfinite(step.cutoff_s):
        cut = step.cutoff_s
        if math.isfinite(model.deadline_s):
            cut = min(cut, max(model.deadline_s - step.reserve_s - start_s, 0.0))
        fired = (first1 if step.signal == "ttft" else end1) > cut
        if fired and step.action == "fail":
            duration, failed = cut, True
        elif fired:
            route = step.second or step.primary
            end2, _, err2, inv2 = _attempt(route, u[2], u[3])
            if step.action == "hedge":
                good1 = math.inf if err1 else end1
                good2 = math.inf if err2 else cut + end2
                if err1 and err2:
                    duration, failed, invalid = max(end1, cut + end2), True, False
                else:
                    duration, failed = min(good1, good2), False
                    invalid = inv1 if good1 <= good2 else inv2
            else:
                duration, failed, invalid = cut + end2, err2, inv2
    recovery = 0
    if model.error_retries and step.primary.error_rate > 0.0 and err1 and not fired:
        end2, _, err2, inv2 = _attempt(step.primary, u[2], u[3])
        duration, failed, invalid = end1 + end2, err2, inv2
        recovery += 1
    if invalid and not failed:
        end3, _, err3, inv3 = _attempt(step.upgrade or step.primary, u[4], u[5])
        duration, failed = duration + end3, err3 or inv3
        recovery += 1
    return duration, failed, fired and step.action in ACTING, recovery


def reference_run(model: WorkflowModel, uniforms: list[list[float]]) -> tuple[float, bool, int]:
    """
    One run: (end-to-end seconds, every required step succeeded, extra attempts).

    ``uniforms[i]`` holds step ``i``'s six uniforms for this run.
    """
    ends: list[float] = []
    ok, extra = True, 0
    for step, u in zip(model.steps, uniforms, strict=True):
        start = max((ends[d] for d in step.deps), default=0.0)
        duration, failed, hedged, _ = reference_step(step, start, u, model)
        ends.append(start + duration)
        ok = ok and not (failed and step.required)
        extra += hedged
    return max(ends), ok, extra
