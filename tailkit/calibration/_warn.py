"""
What a prediction and a plan say the user should know before trusting them.

A hopeless deadline, a busted budget, thin data (`prediction_warnings`); and what a plan's
repeat attempts rest on (`evidence_warnings`): an escape no repeat attempt or paired call has
confirmed, or a retry on the provider of a route whose slow calls come in spells.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tailkit.fit import quantile
from tailkit.simulation import workflow_model
from tailkit.simulation.lowlevel import Draws, simulate_runs, widen_fixes
from tailkit.text import Advice, percent, percent_span


if TYPE_CHECKING:
    from tailkit.calibration._predict import Prediction
    from tailkit.config import Plan, Step
    from tailkit.fit import TailKind


HOPELESS_MISS_RATE = 0.5  # most runs miss even with the plan
TARGET_MISS_RATE = 0.05  # the miss rate a suggested deadline aims for
THIN_CALLS = 1_000  # fewer calls leave fewer than 10 beyond a route's p99
_WIDE_SHARE, _WIDE_FLOOR = 0.5, 0.01  # a miss-rate interval wider than half its value, >= 1 pt
_DEADLINE_RUNS = 32_768


def prediction_warnings(plan: Plan, prediction: Prediction) -> tuple[str, ...]:
    """
    Warnings about a plan's prediction, each with what to do about it.

    - the deadline is hopeless: most runs miss it even with the plan (it says the median run
      and the deadline that would miss 5 %);
    - the plan spends more than its hedge budget, or its interval reaches past it;
    - the miss rate's interval is wide and some route samples are thin (fewer than 1,000
      calls: under 10 beyond their p99); it names them, their steps and their calls.

    Args:
        plan: The plan that was predicted.
        prediction: Its `predict` result.

    Returns:
        One sentence or two per warning; empty when there is nothing to say.
    """
    out = []
    if prediction.miss_rate.value > HOPELESS_MISS_RATE:
        out.append(_hopeless(plan, prediction))
    budget_warning = _over_budget(plan, prediction)
    if budget_warning:
        out.append(budget_warning)
    thin_warning = _thin(plan, prediction)
    if thin_warning:
        out.append(thin_warning)
    return tuple(Advice(warning) for warning in out)


_REPEATS = ("hedge", "retry", "downgrade")  # actions that start a fresh attempt of the step
CONFIRM = (
    "repeat attempts (hedges or retries of its slow calls, linked by idempotency key: ingest "
    "an executor ledger in the trace format, {format} trace) or paired calls (the same job on "
    "other routes: a job_key column, or {map} job_key=<your prompt id field>)"
)


def evidence_warnings(plan: Plan, kinds: Mapping[str, TailKind]) -> tuple[str, ...]:
    """
    Warnings about what a plan's hedges and retries assume of their route's tail.

    The simulator lets a fresh attempt escape the tail of the attempt it repeats as far as
    the step's ``basis.shared`` says it does not share it; where that rests on the size
    regression or a default, not on repeats or paired calls, it may be too hopeful. Single
    calls only show that a tail looks transient: hidden work bound to the request (uncounted
    reasoning, a slow tool behind the model) looks the same and is met again. So:

    - a step that hedges, retries or downgrades on cutoff, on a route whose tail is transient
      or mixed with no repeat attempts or paired calls confirming the escape
      (`TailKind.escape_confirmed_by`), and whose plan did not measure what its repeats share
      from such pairs (``basis.shared.pairs``), is named with the evidence that would confirm it
      (``unknown`` routes are warned about where the kinds are read: calibrate's own
      warnings);
    - a step whose route's slow calls come in spells (`TailKind.spells`) and whose fresh
      attempt goes to the same provider (a retry, or a hedge or downgrade route there) meets
      the same spell: it is named with the routes of another provider serving its model.

    Args:
        plan: The calibrated plan (its steps' ``on_cutoff`` and routes).
        kinds: Each route's tail kind, by route name
            (`tailkit.simulation.lowlevel.route_tail_kinds`); routes without one are not judged.

    Returns:
        One sentence per finding; empty when the plan repeats nothing on such a route.
    """
    out = []
    for name, step in plan.steps.items():
        verdict = kinds.get(step.route)
        if verdict is None or step.on_cutoff not in _REPEATS:
            continue
        action = _action(step)
        if (
            verdict.kind in ("transient", "mixed")
            and verdict.escape_confirmed_by is None
            and not _measured(step)
        ):
            out.append(
                f"step {name!r}: the plan's {action} assumes a fresh attempt escapes the tail "
                f"of route {step.route}, but single calls only show that it looks "
                f"{verdict.kind}; hidden work bound to the request (uncounted reasoning, a "
                f"slow tool) would look the same and be met again{_assumed(step)}: {CONFIRM} "
                "would confirm it"
            )
        target = _target(step)
        same = target is not None and plan.routes[target].provider == _provider(plan, step)
        if verdict.spells and same:
            provider = _provider(plan, step)
            others = _other_providers(plan, step)
            fix = (
                f"hedge or fail over to another provider ({', '.join(others)}: set hedge_route)"
                if others
                else f"add a route of another provider serving {plan.routes[step.route].model}"
            )
            out.append(
                f"step {name!r}: route {step.route}'s slow calls come in spells, and the "
                f"plan's {action} goes to the same provider ({provider}): a retry on the same "
                f"provider does not escape a spell; {fix}"
            )
    return tuple(Advice(warning) for warning in out)


def _measured(step: Step) -> bool:
    """
    Whether the plan models what the step's repeats share as measured from pairs.

    Then the prediction rests on the repeats or paired calls themselves, with their sampling
    error in its interval, not on the hope that a fresh attempt escapes: no warning is due.
    """
    shared = None if step.basis is None else step.basis.shared
    return shared is not None and shared.pairs > 0


def _assumed(step: Step) -> str:
    """
    What the plan assumed a repeat shares, as a clause (empty when the plan does not say).
    """
    shared = None if step.basis is None else step.basis.shared
    if shared is None:
        return ""
    return (
        f" (the plan assumed a repeat's correlation with the first of {shared.other_provider:.2f}"
        f" on another provider, {shared.same_provider:.2f} on the same, from {shared.source})"
    )


def _action(step: Step) -> str:
    target = _target(step)
    where = "" if step.on_cutoff == "retry" else f" to {target}"
    return f"{step.on_cutoff}{where}"


def _target(step: Step) -> str | None:
    """
    The route a step's fresh attempt goes to on cutoff (``None``: none named).
    """
    return {"retry": step.route, "hedge": step.hedge_route,
            "downgrade": step.downgrade_route}.get(step.on_cutoff)  # fmt: skip


def _provider(plan: Plan, step: Step) -> str:
    return plan.routes[step.route].provider


def _other_providers(plan: Plan, step: Step) -> list[str]:
    own = plan.routes[step.route]
    return [
        n for n, r in plan.routes.items() if r.model == own.model and r.provider != own.provider
    ]


def _hopeless(plan: Plan, prediction: Prediction) -> str:
    miss = prediction.miss_rate
    text = (
        f"the deadline is out of reach: {percent(miss.value)} of runs miss {plan.deadline_s:g} s "
        f"even with the plan (95% interval {percent_span(miss.low, miss.high)}); the median "
        f"run takes {prediction.p50_s.value:.1f} s. "
    )
    # the same plan without a deadline: how long its runs take when nothing cuts them short
    model = dataclasses.replace(
        workflow_model(plan, prediction.samples, sharing=prediction.sharing), deadline_s=math.inf
    )
    seed = zlib.crc32(b"deadline needed")
    outcome = simulate_runs(model, Draws(_DEADLINE_RUNS, seed=seed))
    ends = np.where(outcome.ok, outcome.end_s, np.inf)
    needed = quantile(ends, 1.0 - TARGET_MISS_RATE, method="higher")
    if not math.isfinite(needed):
        failed = 1.0 - float(outcome.ok.mean())
        return text + (
            f"Even without a deadline {percent(failed)} of runs fail (errors or invalid output): "
            "no deadline brings misses down to 5%; give the failing steps an upgrade_route "
            "or make them optional"
        )
    return text + (
        f"A deadline of about {math.ceil(needed):d} s would miss {TARGET_MISS_RATE:.0%} with "
        f"these cutoffs: raise the plan's deadline_s (or calibrate with {{deadline_s}} "
        f"{math.ceil(needed):d}), or shorten "
        "the workflow's longest chain of steps"
    )


def _over_budget(plan: Plan, prediction: Prediction) -> str | None:
    extra, budget = prediction.extra_attempts, plan.hedge_budget
    if extra.high <= budget + 1e-12:
        return None
    spent = (
        f"{percent(extra.value)} extra attempts per first attempt (95% interval "
        f"{percent_span(extra.low, extra.high)}) against a hedge budget of {percent(budget)}"
    )
    margin = math.floor(max(budget - (extra.high - extra.value), 0.0) * 1000) / 1000
    fix = (
        f"raise hedge_budget, or calibrate with {{budget}} {margin:g} to keep a margin "
        "(or move cutoffs later)"
    )
    if extra.value > budget + 1e-12:
        return f"the plan spends more than its hedge budget: {spent}: {fix}"
    return f"the plan may spend more than its hedge budget: {spent}: {fix}"


def _thin(plan: Plan, prediction: Prediction) -> str | None:
    miss = prediction.miss_rate
    if not prediction.replicates or miss.high - miss.low <= max(
        _WIDE_SHARE * miss.value, _WIDE_FLOOR
    ):
        return None
    steps_of: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    for name, step in plan.steps.items():
        for route in dict.fromkeys((step.route, step.hedge_route, step.downgrade_route,
                                    step.upgrade_route)):  # fmt: skip
            sample = prediction.samples.get((name, route)) if route else None
            if route and sample is not None and sample.calls < THIN_CALLS:
                steps_of[(route, sample.bucket, sample.calls)].append(name)
    if not steps_of:
        return None
    thin = sorted(steps_of.items(), key=lambda item: item[0][2])
    named = "; ".join(
        f"{route} (step{'s' if len(steps) > 1 else ''} {', '.join(steps)}) has {calls:,} "
        f"calls in bucket {bucket}"
        for (route, bucket, calls), steps in thin
    )
    thin_steps = dict.fromkeys(name for _, steps in thin for name in steps)
    widen = widen_fixes(plan.steps[name] for name in thin_steps)
    fix = f"Ingest more calls of these routes, or {widen[:-2]}" if widen else "Ingest more calls"
    return (
        f"the miss rate's 95% interval is wide, {percent_span(miss.low, miss.high)} around "
        f"{percent(miss.value)}, because the samples are thin: {named} (under {THIN_CALLS:,} "
        f"calls, fewer than 10 lie beyond a p99). {fix}"
    )
