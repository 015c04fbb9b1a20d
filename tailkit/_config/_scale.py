"""
A plan in another unit of time: every duration multiplied by one factor, nothing else changed.

A plan is written in provider seconds: the latencies the calls were measured in. A rehearsal
against a time-scaled server (``tailkit serve --time-scale 0.01`` answers 100 times faster)
needs the same plan in the server's seconds, or its cutoffs never fire. `SECONDS_FIELDS`
names every field of the plan model that holds seconds; a test keeps it complete.
"""

from __future__ import annotations

import dataclasses
import math

from typing import Any, TypeVar

from tailkit._config._model import (
    LiveRouting,
    Plan,
    PlanInterval,
    PlanPrediction,
    Step,
    StepInterval,
    StepPrediction,
)
from tailkit.errors import ConfigError


__all__ = ["SECONDS_FIELDS", "scale_plan"]

SECONDS_FIELDS: dict[type, tuple[str, ...]] = {
    Plan: ("deadline_s",),
    Step: ("ttft_cutoff_s", "stall_cutoff_s", "cutoff_s"),
    LiveRouting: ("cutoff_bounds_s", "prior_s"),
    StepPrediction: ("p50_s", "p99_s"),
    StepInterval: ("p50_s", "p99_s"),
    PlanPrediction: ("p50_s", "p99_s"),
    PlanInterval: ("p50_s", "p99_s"),
}
"""Per plan dataclass, its fields in seconds (a number, ``None``, ``(low, high)`` bounds, or a
mapping of names to seconds)."""

_T = TypeVar("_T")


def scale_plan(plan: Plan, factor: float) -> Plan:
    """
    The plan with every duration multiplied by ``factor``; everything else as it was.

    The deadline, each step's ``ttft_cutoff_s``, ``stall_cutoff_s`` and ``cutoff_s`` (the
    instant a hedge, retry or downgrade starts), a live step's ``prior_s`` and
    ``cutoff_bounds_s``, and the predicted p50/p99 of steps and runs
    with their intervals are scaled; ``None`` stays ``None`` and ``math.inf`` stays
    ``math.inf``. Rates, budgets, token counts and sample sizes have no unit of time and stay.

    Args:
        plan: The plan, e.g. in provider seconds as ``tailkit calibrate`` writes it.
        factor: Seconds of the new unit per second of the plan's: ``0.01`` for a server run
            with ``--time-scale 0.01`` (100 times faster), ``1`` for an equal copy.

    Returns:
        A new `Plan`; ``plan`` is not changed.

    Raises:
        ConfigError: ``factor`` is not a positive, finite number.

    Example::

        rehearsal = scale_plan(load_plan("plan.yaml"), 0.01)
        rehearsal.steps["draft"].cutoff_s  # 0.042 where the plan says 4.2
    """
    if (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not (math.isfinite(factor) and factor > 0.0)
    ):
        msg = (
            f"the time scale must be a positive finite number of seconds per plan second "
            f"(0.01: 100 times faster), got {factor!r}"
        )
        raise ConfigError(msg)
    return _scaled(plan, float(factor))


def _scaled(value: _T, factor: float) -> _T:
    """
    ``value`` with the seconds fields of every plan dataclass in it multiplied by ``factor``.
    """
    if isinstance(value, dict):
        return {key: _scaled(item, factor) for key, item in value.items()}  # type: ignore[return-value]
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    seconds = SECONDS_FIELDS.get(type(value), ())
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        current = getattr(value, field.name)
        if field.name in seconds:
            changes[field.name] = _times(current, factor)
        elif isinstance(current, dict) or dataclasses.is_dataclass(current):
            changes[field.name] = _scaled(current, factor)
    return dataclasses.replace(value, **changes)


def _times(value: Any, factor: float) -> Any:
    """
    Seconds, bounds in seconds, a mapping to seconds, or ``None``, multiplied by ``factor``.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        return {key: item * factor for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(v * factor for v in value)
    return value * factor
