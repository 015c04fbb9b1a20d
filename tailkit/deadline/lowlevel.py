"""
Low-level deadline hooks: building blocks for the executor and for tests; they may change.

An enforcing scope (`tailkit.deadline.deadline_after`…) and the executor can fall due at the
same instant. So that the executor's `StepTimeout`, which names the step, comes out rather than
the scope's bare `TimeoutError`, the executor marks the code it cuts with `executor_cuts` and
says when it starts cutting with `executor_cutting`; a due scope then waits up to
`CUT_GRACE_S` for it. User code has no reason to call these.

A deadline more than `FAR_S` seconds away is none (``math.inf``): `far` is that rule, for the
instants the executor is handed directly; `instant` and `seconds` check an instant or a
duration as the scopes do (NaN and non-numbers refused, far as ``math.inf``, a negative
duration as 0).
"""

from tailkit.deadline._scope import CUT_GRACE_S, FAR_S, executor_cuts, executor_cutting, far
from tailkit.deadline._scope import _check_at as instant
from tailkit.deadline._scope import _check_seconds as seconds


__all__ = [
    "CUT_GRACE_S",
    "FAR_S",
    "executor_cuts",
    "executor_cutting",
    "far",
    "instant",
    "seconds",
]
