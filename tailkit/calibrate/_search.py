"""
The cutoff optimizer: per step, which clock to watch, when to act and how.

How the search works. A workflow misses its deadline when a step on its critical path hits
its tail; cutting that step early and racing a fresh attempt fixes it only where the tail is
transient, and every extra attempt spends the hedge budget. So the search is over whole plans,
judged end to end by simulation, never step by step in isolation:

1. Every step starts at ``wait`` (no cutoff). Its candidates are every allowed action (hedge
   on an independent route, retry, downgrade, fail for optional steps) at each cutoff on a
   grid of quantiles of its own latency (plus the quantiles the budget affords, so a tail of
   5 % is not left waiting because the grid's p95 costs just over a 5 % budget), on the total
   clock and, for streamed routes, on the time to first token.
2. Coordinate descent: step by step, most tail-exposed first, every candidate for that step is
   simulated with the other steps held fixed, and the best feasible one (extra attempts within
   the budget) is kept. Passes repeat until nothing changes. A change in one step re-plays
   only it and the steps after it; earlier steps are reused.
3. All candidates see the same random numbers (common random numbers): differences between
   candidates are paired, so the search is not fooled by Monte Carlo noise the way independent
   runs would be.
4. The score is the miss rate, then the p99 (as a small fraction of the deadline), then the
   extra attempts: among plans that miss equally often, the faster and cheaper wins. Required
   steps and steps that much of the run waits on matter through the miss rate itself; an
   optional step is free to ``fail`` at its cutoff.
5. The plan found is then simulated afresh (new seed, more runs) for the ``predicted`` fields,
   so the prediction carries no optimization bias from the search's own draws.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tailkit.simulate import (
    Draws,
    RouteSample,
    RunOutcome,
    SampleKey,
    StepModel,
    WorkflowModel,
    run_workflow,
)


QUANTILES = (0.80, 0.85, 0.90, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995)
MAX_PASSES = 4
_P99_WEIGHT = 1e-3  # score per deadline of p99: breaks ties between equal miss rates
_EXTRA_WEIGHT = 1e-4  # score per extra attempt per first attempt: then prefer the cheaper


@dataclass(frozen=True, slots=True)
class Choice:
    """
    One candidate setting of a step.

    Args:
        action: ``wait``, ``hedge``, ``retry``, ``downgrade`` or ``fail``.
        signal: ``total`` or ``ttft``.
        quantile: Cutoff as a quantile of the step's own latency on that signal (None: wait).
        cutoff_s: The cutoff in seconds (``math.inf``: wait).
        route: The route of the extra attempt (hedge or downgrade), else ``None``.
    """

    action: str = "wait"
    signal: str = "total"
    quantile: float | None = None
    cutoff_s: float = math.inf
    route: str | None = None


WAIT = Choice()


@dataclass(frozen=True, slots=True)
class StepOptions:
    """
    What the search may do with one step.

    Args:
        hedge_routes: Independent routes it may hedge on.
        downgrade_route: Route it may downgrade to, if any.
        may_repeat: The step is idempotent (hedge, retry and downgrade allowed: each sends
            the call again).
        may_fail: The step is optional (``fail`` allowed).
        fresh_attempts: A fresh attempt on the same model may escape the step's tail (hedge
            and retry allowed); False when the route's tail is work-driven, where it would
            be just as slow (a downgrade, a different model, is still tried).
    """

    hedge_routes: tuple[str, ...] = ()
    downgrade_route: str | None = None
    may_repeat: bool = True
    may_fail: bool = False
    fresh_attempts: bool = True


def budget_quantiles(budget: float, steps: int) -> tuple[float, ...]:
    """
    The quantiles the budget affords, beside the fixed grid.

    The cutoffs at which one step alone spends 90 % of the budget (its share of a one-step
    plan, or of all the steps' first attempts), so that the search can spend what it may on a
    tail the grid's points straddle.
    """
    out = []
    for share in (0.9 * budget, 0.9 * budget * steps):
        q = round(1.0 - share, 4)
        if 0.5 < q < QUANTILES[-1] and q not in QUANTILES and q not in out:
            out.append(q)
    return tuple(out)


def candidates(
    sample: RouteSample,
    options: StepOptions,
    *,
    deadline_s: float = math.inf,
    extra_quantiles: tuple[float, ...] = (),
) -> list[Choice]:
    """
    Every choice the search tries for a step (``wait`` first).

    Cutoffs at or past the deadline are left out: they could never act in time (and a plan
    with one does not load). ``extra_quantiles`` join the grid (`budget_quantiles`).
    """
    actions: list[tuple[str, str | None]] = []
    if options.may_repeat and options.fresh_attempts:
        actions += [("hedge", r) for r in options.hedge_routes]
        actions.append(("retry", None))
    if options.downgrade_route is not None and options.may_repeat:  # re-sends, like a retry
        actions.append(("downgrade", options.downgrade_route))
    if options.may_fail:
        actions.append(("fail", None))
    signals = ["total"]
    if sample.streamed >= 0.5:  # a TTFT cutoff needs calls that stream
        signals.append("ttft")
    out = [WAIT]
    for signal in signals:
        for q in sorted((*QUANTILES, *extra_quantiles)):
            cutoff = sample.quantile(q, signal=signal)
            if cutoff < deadline_s:
                out += [Choice(a, signal, q, cutoff, r) for a, r in actions]
    return out


def _apply(step: StepModel, choice: Choice, samples: Mapping[SampleKey, RouteSample]) -> StepModel:
    second = None if choice.route is None else samples[(step.name, choice.route)]
    return dataclasses.replace(
        step, action=choice.action, signal=choice.signal, cutoff_s=choice.cutoff_s, second=second
    )


@dataclass(frozen=True, slots=True)
class Score:
    """
    How a plan did on the search's runs.
    """

    miss_rate: float
    p99_s: float
    extra_attempts: float
    value: float
    feasible: bool


def score(model: WorkflowModel, outcome: RunOutcome, budget: float) -> Score:
    """
    The search's score of one simulated plan (lower is better).

    A plan is feasible when the extra attempts it spends the budget on stay within ``budget``
    less two Monte Carlo standard errors, so that the plan still keeps its budget on fresh
    runs. The executor's budget also pays for recoveries (error retries, upgrades), so they
    count here too; a plan that never acts on a cutoff is always feasible.
    """
    missed = ~outcome.ok | (outcome.end_s > model.deadline_s)
    miss = float(missed.mean())
    p99 = float(np.quantile(outcome.end_s, 0.99))
    steps = len(outcome.steps)
    extra = sum(float(o.extra.mean()) for o in outcome.steps) / steps
    recovery = sum(float(o.recovery.mean()) for o in outcome.steps) / steps
    scale = model.deadline_s if math.isfinite(model.deadline_s) else max(p99, 1e-9)
    value = miss + _P99_WEIGHT * p99 / scale + _EXTRA_WEIGHT * extra
    margin = 2.0 * math.sqrt(budget / (outcome.end_s.size * steps))
    feasible = extra == 0.0 or extra + recovery <= budget - margin + 1e-12
    return Score(miss, p99, extra, value, feasible)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """
    The best choice per step, its score, and how much searching it took.
    """

    choices: dict[str, Choice]
    score: Score
    evaluated: int
    passes: int


def search(
    model: WorkflowModel,
    samples: Mapping[SampleKey, RouteSample],
    options: Mapping[str, StepOptions],
    *,
    budget: float,
    runs: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """
    Coordinate descent over the steps' choices on common random numbers (see module doc).

    Args:
        model: The workflow with every step waiting.
        samples: Route samples, including every candidate route.
        options: Per step name, what the search may do.
        budget: Most extra attempts per first attempt.
        runs: Simulated runs per candidate.
        seed: Seed of the shared draws.
        progress: Called with (candidates done, candidates per pass).
    """
    draws = Draws(runs, seed=seed, keep=True)
    steps = list(model.steps)
    extra = budget_quantiles(budget, len(steps))
    choice_lists = [
        candidates(s.primary, options[s.name], deadline_s=model.deadline_s, extra_quantiles=extra)
        for s in steps
    ]
    current = run_workflow(model, draws)
    best = score(model, current, budget)
    chosen = [WAIT] * len(steps)
    order = _exposure_order(model)
    per_pass = sum(len(c) for c in choice_lists)
    evaluated, passes = 0, 0
    for passes in range(1, MAX_PASSES + 1):  # noqa: B007 - the count is reported
        changed = False
        for i in order:
            for choice in choice_lists[i]:
                evaluated += 1
                if progress is not None:
                    progress(evaluated, per_pass)
                if choice == chosen[i]:
                    continue
                trial_steps = [*steps]
                trial_steps[i] = _apply(steps[i], choice, samples)
                trial = dataclasses.replace(model, steps=tuple(trial_steps))
                outcome = run_workflow(trial, draws, reuse=current, changed=i)
                s = score(trial, outcome, budget)
                if s.feasible and (s.value < best.value - 1e-12 or not best.feasible):
                    steps, chosen[i], current, best, changed = trial_steps, choice, outcome, s, True
        if not changed:
            break
    names = [s.name for s in model.steps]
    return SearchResult(dict(zip(names, chosen, strict=True)), best, evaluated, passes)


def _exposure_order(model: WorkflowModel) -> list[int]:
    """
    Steps by how much tail they expose: (p99 - p50) of their route, required ones first.
    """

    def exposure(i: int) -> float:
        step = model.steps[i]
        tail = step.primary.quantile(0.99) - step.primary.quantile(0.5)
        return tail * (1.0 if step.required else 0.5)

    return sorted(range(len(model.steps)), key=exposure, reverse=True)
