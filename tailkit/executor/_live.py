"""
Live routing: each first attempt goes to the candidate route whose recent latency is best.

A step with a ``live`` block (`tailkit.config.LiveRouting`) keeps, per candidate route, its
last ``window`` first attempts on that route, as their latency on the step's signal clock (the
total age, or the time to first token); an attempt cut, cancelled or beaten before it got
there counts as ``math.inf``: slower than any value, which is what it told us. A route's
*value* is the ``quantile`` of its window (the order statistic at index
``ceil(quantile * k) - 1`` of its ``k`` sorted values, numpy's ``inverted_cdf``; it may be
``math.inf``) once the window holds ``min_calls``; before that, the plan's prior for it.

The decision, when a call of the step starts: the candidate with the lowest value (when every
value is ``math.inf``, the one whose window holds the smallest share of cut calls; ties: the
first in plan order), except every ``explore_every``-th call of the step, which goes to one of
the others in turn (so a route that was slow is measured again once it recovers). The call's
cutoff on the signal clock is the chosen route's value clamped into ``cutoff_bounds_s``. The
simulator plays the same rule on the same numbers (`tailkit.simulation`), which is why the
index and the explore turn are spelled out here and nowhere else in the executor.

The state lives in the process (each worker learns on its own) and outlives
`Executor.replace_plan`: it is keyed by step and route names. A window is a deque in arrival
order (for eviction) beside a sorted list (for the order statistic): an observation costs a
binary search and a list insert and delete, a decision one index per candidate.
"""

from __future__ import annotations

import bisect
import math

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from tailkit.config import LiveRouting, Step


__all__ = ["Decision", "LiveRouter", "LiveValue", "order_index"]


def order_index(quantile: float, calls: int) -> int:
    """
    The 0-based index of the order statistic at ``quantile`` among ``calls`` sorted values.

    ``ceil(quantile * calls) - 1``, at least 0 (numpy's ``inverted_cdf``); ``calls`` >= 1.
    """
    return max(math.ceil(quantile * calls) - 1, 0)


class _Window:
    """
    Strictly private: one route's latest observations, in arrival order and sorted.
    """

    __slots__ = ("arrived", "ranked")

    def __init__(self) -> None:
        self.arrived: deque[float] = deque()
        self.ranked: list[float] = []

    def add(self, value: float, window: int) -> None:
        self.arrived.append(value)
        bisect.insort(self.ranked, value)
        self.trim(window)

    def trim(self, window: int) -> None:
        arrived, ranked = self.arrived, self.ranked
        while len(arrived) > window:
            old = arrived.popleft()
            del ranked[bisect.bisect_left(ranked, old)]


class Decision(NamedTuple):
    """
    Where one live call's first attempt goes, and why (times in the executor's clock seconds).

    Args:
        route: The chosen route.
        why: ``best`` (the lowest value) or ``explore`` (another candidate's turn).
        value_s: The chosen route's value (``math.inf``: its window's quantile is a cut call).
        calls: Observations in the chosen route's window when it was chosen.
        cutoff_s: ``value_s`` clamped into the step's ``cutoff_bounds_s``.
    """

    route: str
    why: str
    value_s: float
    calls: int
    cutoff_s: float


@dataclass(frozen=True, slots=True)
class LiveValue:
    """
    What live routing knows of one route of one step (see `Executor.live_state`).

    Args:
        calls: Observations in the route's window.
        value_s: The route's value now, in plan seconds: its window's quantile, or its prior
            while the window is thin (``math.inf``: the quantile is a call that was cut).
        source: ``window`` or ``prior``: where ``value_s`` comes from.
    """

    calls: int
    value_s: float
    source: str


class _Step:
    """
    Strictly private: one step's windows (by route name) and its decision counter.
    """

    __slots__ = ("turn", "windows")

    def __init__(self) -> None:
        self.windows: dict[str, _Window] = {}
        self.turn = 0


class LiveRouter:
    """
    The live-routing state of one executor: a window per (step, route), a turn per step.

    Strictly the executor's; `Executor.live_state` shows it.
    """

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: dict[str, _Step] = {}

    def _state(self, step: str) -> _Step:
        state = self._steps.get(step)
        if state is None:
            state = self._steps[step] = _Step()
        return state

    def _value(self, window: _Window | None, route: str, live: LiveRouting) -> tuple[float, int]:
        """
        A route's value and its window's size (the prior while fewer than ``min_calls``).
        """
        if window is None:
            return live.prior_s.get(route, math.inf), 0
        ranked = window.ranked
        if len(ranked) > live.window:
            window.trim(live.window)  # a reloaded plan's smaller window applies at once
        k = len(ranked)
        if k < live.min_calls:
            return live.prior_s.get(route, math.inf), k
        return ranked[order_index(live.quantile, k)], k

    @staticmethod
    def _cut_share(window: _Window | None, k: int, live: LiveRouting) -> float:
        """
        The share of a window's observations that were cut (``inf``); 0 while the prior stands.
        """
        if window is None or k < live.min_calls:
            return 0.0
        ranked = window.ranked
        return (k - bisect.bisect_left(ranked, math.inf)) / k

    def decide(self, step: Step, live: LiveRouting) -> Decision:
        """
        The route and cutoff of the step's next first attempt (the turn counter advances).
        """
        candidates = step.first_routes()
        state = self._state(step.name)
        windows, value = state.windows, self._value
        values = [value(windows.get(route), route, live) for route in candidates]
        best, lowest = 0, values[0][0]
        for i in range(1, len(values)):
            if values[i][0] < lowest:
                best, lowest = i, values[i][0]
        if lowest == math.inf and len(values) > 1:  # every value a cut call: the least cut
            share = self._cut_share
            cut = [share(windows.get(r), k, live) for r, (_, k) in zip(candidates, values)]  # noqa: B905 - one per candidate
            best = min(range(len(values)), key=lambda i: (cut[i], i))
        n = state.turn
        state.turn = n + 1
        every = live.explore_every
        chosen, why = best, "best"
        if every > 0 and len(candidates) > 1 and n % every == every - 1:
            others = [i for i in range(len(candidates)) if i != best]
            chosen, why = others[(n // every) % len(others)], "explore"
        seconds, calls = values[chosen]
        low, high = live.cutoff_bounds_s
        cutoff = low if seconds < low else high if seconds > high else seconds
        return Decision(candidates[chosen], why, seconds, calls, cutoff)

    def observe(self, step: str, route: str, value: float, window: int) -> None:
        """
        A first attempt of ``step`` on ``route`` told ``value`` seconds (``math.inf``: cut).
        """
        windows = self._state(step).windows
        held = windows.get(route)
        if held is None:
            held = windows[route] = _Window()
        held.add(value, window)

    def view(self, step: Step, live: LiveRouting, time_scale: float) -> dict[str, LiveValue]:
        """
        Per candidate route of ``step``: its window's size and value, in plan seconds.
        """
        out = {}
        state = self._steps.get(step.name)
        for route in step.first_routes():
            window = None if state is None else state.windows.get(route)
            value, calls = self._value(window, route, live)
            source = "window" if calls >= live.min_calls else "prior"
            out[route] = LiveValue(calls, value / time_scale, source)
        return out
