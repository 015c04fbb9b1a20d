"""
Live routing, one run at a time in plain Python: the rule as written, for the tests.

`reference_live` plays runs in order through the one-run reference (`reference_trace`), each
live step on the candidate the rule chooses with the cutoff it sets, and derives what each
first attempt observed from the run itself: its own end, the age the step acted at and the
step's result (a hedge's win ends the first attempt). The engine's `LiveState` reaches the
same decisions by another road (a threshold per run and candidate, `tailkit.simulation._live`);
``tests/test_simulate_live.py`` and ``tests/test_twin.py`` hold them, and the executor, to
each other. Not for production use: a run costs milliseconds.
"""

from __future__ import annotations

import dataclasses
import math

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailkit.simulation._couple import step_indexes
from tailkit.simulation._model import LiveModel, StepModel, WorkflowModel
from tailkit.simulation._reference import RunTrace, _attempt, acts_at, reference_trace


__all__ = ["LiveDecision", "reference_live"]


@dataclass(frozen=True, slots=True)
class LiveDecision:
    """
    One live step's decision in one run (the reference's).

    Args:
        route: The chosen candidate route.
        why: ``best`` or ``explore``.
        value_s: The chosen route's value (its window's quantile or its prior; may be inf).
        calls: Observations in its window when it was chosen.
        cutoff_s: The live cutoff (``None``: the step sets no cutoff on its signal clock).
        seen_s: What the first attempt told (``inf``: censored; ``None``: nothing).
    """

    route: str
    why: str
    value_s: float
    calls: int
    cutoff_s: float | None
    seen_s: float | None


class _Step:
    """
    Strictly private: one live step's windows and decision counter.
    """

    def __init__(self, live: LiveModel) -> None:
        self.live = live
        self.windows: list[deque[float]] = [deque(maxlen=live.window) for _ in live.routes]
        self.pending: list[tuple[int, float]] = []
        self.turn = 0
        self.values: list[tuple[float, int]] = []
        self.shares: list[float] = []  # each window's share of inf (cut) observations

    def snapshot(self) -> None:
        for r, value in self.pending:
            self.windows[r].append(value)
        self.pending.clear()
        live = self.live
        self.values, self.shares = [], []
        for r, window in enumerate(self.windows):
            k = len(window)
            if k < live.min_calls:
                self.values.append((live.prior_s[r], k))
                self.shares.append(0.0)
            else:
                self.values.append((sorted(window)[math.ceil(live.quantile * k) - 1], k))
                self.shares.append(sum(1 for v in window if v == math.inf) / k)

    def decide(self) -> tuple[int, str, float]:
        live = self.live
        values = [v for v, _ in self.values]
        # lowest value; between cut values, the window cut least often; then plan order
        best = min(
            range(len(values)),
            key=lambda r: (values[r], self.shares[r] if values[r] == math.inf else 0.0, r),
        )
        n, every = self.turn, live.explore_every
        if every > 0 and len(values) > 1 and n % every == every - 1:
            others = [r for r in range(len(values)) if r != best]
            return others[(n // every) % len(others)], "explore", values[best]
        return best, "best", values[best]


def seen(step: StepModel, start_s: float, duration_s: float, model: WorkflowModel,
         draws: Sequence[int]) -> float | None:  # fmt: skip
    """
    What the first attempt of a step (started at ``start_s``, ``duration_s`` long) told.

    ``inf`` when something ended it first (the step's action at a cutoff, a hedge's win,
    the deadline); its value on the signal clock when it got there; ``None`` when it failed
    by itself before it had one.
    """
    one = _attempt(step.primary, draws[0], step.stall_cutoff_s)
    end, ttft, failed = one[0], one[1], one[2]
    act = acts_at(step, start_s, model, one)
    stop = math.inf
    if act < math.inf and step.action in ("fail", "retry", "downgrade"):
        stop = act
    elif act < math.inf and step.action == "hedge" and duration_s < end:
        stop = duration_s  # the step's result came from the hedge's side first
    stop = min(stop, model.deadline_s - start_s)
    if step.signal == "ttft":
        value = ttft if not failed or ttft < end else None
    else:
        value = None if failed else end
    if value is None:
        return None if end <= stop else math.inf
    return value if value <= stop else math.inf


def _trace(
    model: WorkflowModel, steps: Sequence[StepModel], draws: Sequence[Sequence[int]]
) -> RunTrace:
    """
    One run of ``model`` with ``steps`` played.

    Each step's repeats are coupled to its first attempt on the route it went to
    (`step_indexes`), as the engine couples them.
    """
    indexes = [
        step_indexes(step, np.asarray(d, dtype=np.uint16).reshape(-1, 1))[:, 0].tolist()
        for step, d in zip(steps, draws, strict=True)
    ]
    return reference_trace(dataclasses.replace(model, steps=tuple(steps)), indexes)


def reference_live(
    model: WorkflowModel, draws: Sequence[Sequence[Sequence[int]]], *, concurrency: int = 1
) -> list[tuple[RunTrace, dict[str, LiveDecision]]]:
    """
    Runs in order, their live steps routed by the rule; each run's trace and decisions.

    Args:
        model: The workflow (its live steps' ``live`` set).
        draws: Per run, per step, the step's four raw slot draws; each run's repeats are
            coupled for the routes its steps chose (`step_indexes`).
        concurrency: Runs per batch: each decides from the state at its batch's start.
    """
    states = {i: _Step(s.live) for i, s in enumerate(model.steps) if s.live is not None}
    out = []
    for run, run_draws in enumerate(draws):
        if run % concurrency == 0:
            for state in states.values():
                state.snapshot()
        chosen = {}
        steps = list(model.steps)
        for i, state in states.items():
            live = state.live
            r, why, _ = state.decide()
            value, calls = state.values[r]
            cutoff = min(max(value, live.low_s), live.high_s) if live.sets_cutoff else None
            variant = live.variants[r]
            if cutoff is not None:
                variant = dataclasses.replace(variant, cutoff_s=cutoff)
            steps[i] = variant
            chosen[i] = (r, why, value, calls, cutoff)
        trace = _trace(model, steps, run_draws)
        # a step that never starts before the deadline takes no decision: it is played on
        # its own route, as the engine plays it (what it does then changes no verdict)
        late = {i for i in chosen if trace.skipped[i] or trace.starts[i] >= model.deadline_s}
        if late:
            steps = [model.steps[i] if i in late else s for i, s in enumerate(steps)]
            trace = _trace(model, steps, run_draws)
        decisions = {}
        for i, (r, why, value, calls, cutoff) in chosen.items():
            if i in late:
                continue  # never started (or not before the run was cut): no decision taken
            state = states[i]
            state.turn += 1
            told = seen(steps[i], trace.starts[i], trace.durations[i], model, run_draws[i])
            if told is not None:
                state.pending.append((r, told))
            name = model.steps[i].name
            decisions[name] = LiveDecision(state.live.routes[r], why, value, calls, cutoff, told)
        out.append((trace, decisions))
    return out
