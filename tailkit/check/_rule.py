"""
The rule a line drifts by: two intervals apart, the family of lines held at one error rate.

A plan's prediction is itself an estimate: calibrate simulated it on a sample of calls, and
writes its interval (``predicted.interval``, at its own ``level``). A ledger's figure is
another estimate, with its interval. Neither is the truth, so comparing the plan's point with
the observed interval flags every thin calibration as a drift. A line drifts only when the two
intervals are *apart*: the observed interval lies wholly above the plan's or wholly below.

One exit code joins many lines. If each line's two intervals cover their true values with
probability ``1 - a``, two intervals around the same truth can only be apart when one misses
it, so a line that still holds reads drifted with probability at most ``2a`` (the union
bound). With ``m`` lines that can tell and ``a = (1 - level) / (2 m)`` (Bonferroni), a plan
that still holds reads drifted on *any* line with probability at most ``1 - level``: one exit
code, one error rate. Each line's observed interval is read again at ``1 - a`` from its data;
the plan's interval, written at its own level, is widened on each side by the ratio of the
normal quantiles (``z(1 - a/2) / z(1 - (1 - level_plan)/2)``), as an interval from a
bootstrap of a roughly normal estimate widens.

Where the plan has no interval for a figure (a plan calibrated with ``replicates=0``, or
written by hand), the prediction is judged as an estimate from its basis: as if it had been
observed on as many units as the step was calibrated on (the workflow: the fewest calls of
its steps), its interval the observed one's half-widths times ``sqrt(n_observed / calls)``.
Without a basis either, the prediction is taken as exact, and the line says so.
"""

from __future__ import annotations

import math
import statistics

from dataclasses import dataclass
from typing import Any

from tailkit.estimate import LEVEL, Estimate


_NORMAL = statistics.NormalDist()
SHARES = (  # figures bounded by 1
    "miss_rate",
    "hedge_rate",
    "explore_share",
    "route_share",
    "off_bounds",
    "off_candidates",
)


@dataclass(frozen=True, slots=True)
class PlanBounds:
    """
    The plan's interval for one figure, at the level a line is judged at.

    Args:
        low: Lower end.
        high: Upper end.
        how: How it was found: ``the plan's interval``, ``from its basis of N calls``, or
            ``taken as exact (no interval, no basis)``.
    """

    low: float
    high: float
    how: str


def line_level(level: float, lines: int) -> float:
    """
    The level each of ``lines`` lines' intervals is read at for the family to hold ``level``.

    Two intervals apart means one of them missed; ``2 * lines`` intervals in all, each
    missing with probability ``(1 - level) / (2 * lines)``, miss together at most ``1 - level``.
    """
    return 1.0 - (1.0 - level) / (2.0 * max(lines, 1))


def _z(level: float) -> float:
    return _NORMAL.inv_cdf(0.5 + level / 2.0)


def plan_interval(owner: Any, figure: str) -> tuple[float, float, float] | None:
    """
    The plan's own interval for a figure and its level: ``(low, high, level)``, or ``None``.

    Reads ``owner.interval`` (a step's or the plan's ``predicted``), a `PlanInterval` /
    `StepInterval` or a mapping ``{figure: (low, high), "level": 0.95}``; `LEVEL` when it does
    not say.
    """
    interval = getattr(owner, "interval", None)
    if interval is None:
        return None
    if isinstance(interval, dict):
        pair, level = interval.get(figure), interval.get("level", LEVEL)
    else:
        pair, level = getattr(interval, figure, None), getattr(interval, "level", LEVEL)
    try:
        low, high = pair  # type: ignore[misc]
        return float(low), float(high), float(level)
    except (TypeError, ValueError):
        return None


def plan_bounds(
    figure: str,
    predicted: float,
    own: tuple[float, float, float] | None,
    judged: Estimate,
    *,
    basis_calls: int | None,
    level: float,
) -> PlanBounds:
    """
    The plan's interval for a figure at ``level`` (see the module doc for each case).

    Args:
        figure: The figure's name (shares stay within [0, 1], everything else above 0).
        predicted: The plan's value.
        own: The plan's interval and its level (`plan_interval`), ``None`` without one.
        judged: The observed figure at ``level``, whose half-widths stand in without ``own``.
        basis_calls: Calls the prediction was calibrated on (``None``: unknown).
        level: The level the line is judged at.
    """
    ceiling = 1.0 if figure in SHARES else math.inf
    if own is not None:
        low, high, own_level = own
        widen = _z(level) / _z(own_level) if level > own_level else 1.0
        low = max(predicted - (predicted - low) * widen, 0.0)
        high = min(predicted + (high - predicted) * widen, max(ceiling, predicted))
        return PlanBounds(low, high, "the plan's interval")
    if basis_calls and judged.n > 0 and math.isfinite(judged.value):
        scale = math.sqrt(judged.n / basis_calls)
        below, above = judged.value - judged.low, judged.high - judged.value
        # an end the data cannot bound (a p99 the cut runs hide) borrows the other's width
        below = below if math.isfinite(below) else above
        above = above if math.isfinite(above) else below
        low = max(predicted - below * scale, 0.0) if math.isfinite(below) else 0.0
        high = predicted + above * scale if math.isfinite(above) else math.inf
        return PlanBounds(low, min(high, max(ceiling, predicted)), f"from its basis of "
                          f"{basis_calls:,} calls (the plan has no interval)")  # fmt: skip
    return PlanBounds(predicted, predicted, "taken as exact (the plan has no interval or basis)")


def apart(judged: Estimate, plan: PlanBounds) -> int:
    """
    ``1`` when the observed interval lies wholly above the plan's, ``-1`` below, else ``0``.
    """
    if judged.low > plan.high:
        return 1
    if judged.high < plan.low:
        return -1
    return 0


def close(predicted: float, observed: float, tolerance: float) -> bool:
    """
    Whether two finite values are within ``tolerance`` of the larger: too close to act on.
    """
    if not (math.isfinite(predicted) and math.isfinite(observed)):
        return False
    return abs(predicted - observed) <= tolerance * max(abs(predicted), abs(observed))
