"""
From a plan to the simulator's model, and the policies a calibrated plan is compared with.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Iterable, Mapping

from tailkit.config import Plan, Shared, Step
from tailkit.errors import ConfigError
from tailkit.simulation._model import ACTING, LiveModel, StepModel, WorkflowModel
from tailkit.simulation._sample import RouteSample


SampleKey = tuple[str, str]  # (step name, route name): a route's sample in that step's bucket
POLICIES = ("none", "retry_p95", "hedge_p95", "plan")
POLICY_TITLES = {
    "none": "no cutoffs",
    "retry_p95": "sequential retry at p95",
    "hedge_p95": "hedge at p95 everywhere",
    "plan": "the plan",
}


def step_routes(step: Step) -> tuple[str, ...]:
    """
    Every route a step may send an attempt to, its own first.

    A step that routes live (``live``) may send its first attempt to any of its candidates:
    they come last.
    """
    routes = [step.route]
    later = step.first_routes() if step.live is not None else ()
    for name in (step.hedge_route, step.downgrade_route, step.upgrade_route, *later):
        if name is not None and name not in routes:
            routes.append(name)
    return tuple(routes)


def _sample(
    samples: Mapping[SampleKey, RouteSample], step: str, route: str | None
) -> RouteSample | None:
    if route is None:
        return None
    try:
        return samples[(step, route)]
    except KeyError:
        msg = f"no latency sample for route {route!r} of step {step!r}"
        raise ConfigError(msg) from None


def workflow_model(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    error_retries: int = 1,
    sharing: Mapping[str, Shared] | None = None,
) -> WorkflowModel:
    """
    The simulator's model of ``plan``, each route drawn from its sample.

    Args:
        plan: A loaded plan (a workflow without cutoffs is a plan whose steps all wait).
        samples: Latency per (step, route) for every route the steps use.
        error_retries: Immediate retries after an attempt fails before its cutoff.
        sharing: Per step, what a repeat attempt shares with the first
            (`tailkit.simulation.estimate_sharing`); a step not in it reads its plan's
            ``basis.shared``, and with neither its repeats are independent draws.

    Raises:
        ConfigError: A route of a step has no sample.
    """
    order = plan.order()
    index = {name: i for i, name in enumerate(order)}
    medians = {name: step_median(samples, plan.steps[name]) for name in order}
    reserve = _reserves(plan, order, medians)
    by_step: dict[str, list[tuple[str, RouteSample]]] = {}
    for (name, route), sample in samples.items():  # once: not once per step
        by_step.setdefault(name, []).append((route, sample))
    steps = []
    for name in order:
        step = plan.steps[name]
        # the executor never re-sends a step that is not idempotent: its action is a wait
        action = step.on_cutoff if step.idempotent or step.on_cutoff not in ACTING else "wait"
        second = {"hedge": step.hedge_route, "downgrade": step.downgrade_route}.get(action)
        cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
        model = StepModel(
            name=name,
            deps=tuple(index[d] for d in step.depends_on),
            required=step.required,
            primary=_sample(samples, name, step.route),  # type: ignore[arg-type]
            signal=step.signal,
            cutoff_s=math.inf if cutoff is None else cutoff,
            action=action,
            second=_sample(samples, name, second),
            upgrade=_sample(samples, name, step.upgrade_route),
            hedge=_sample(samples, name, step.hedge_route),
            idempotent=step.idempotent,
            reserve_s=reserve[name],
            tokens=float((step.expected_tokens.input or 0) + (step.expected_tokens.output or 0)),
            ttft_cutoff_s=_or_inf(step.ttft_cutoff_s),
            total_cutoff_s=_or_inf(step.cutoff_s),
            stall_cutoff_s=_or_inf(step.stall_cutoff_s),
            shares=_shares(plan, name, by_step.get(name, ()), sharing),
            failover=_sample(samples, name, failover_route(plan, step)),
        )
        if step.live is not None:
            model = dataclasses.replace(
                model,
                live=live_model(
                    plan,
                    step,
                    model=model,
                    samples=samples,
                    pairs=by_step.get(name, ()),
                    sharing=sharing,
                ),
            )
        steps.append(model)
    return WorkflowModel(tuple(steps), deadline_s=plan.deadline_s, error_retries=error_retries)


def hedge_target(step: Step, first: str) -> str | None:
    """
    Where the hedge of an attempt on ``first`` goes, as the executor sends it.

    The step's hedge route, unless ``first`` is that route: then the step's route, or, when
    that is ``first`` too, the first other candidate (``None``: the step names no hedge).
    """
    other = step.hedge_route
    if other is None or first != other:
        return other
    others = [r for r in (step.route, *step.first_routes()) if r != first]
    return others[0] if others else first


def live_model(
    plan: Plan,
    step: Step,
    *,
    model: StepModel,
    samples: Mapping[SampleKey, RouteSample],
    pairs: Iterable[tuple[str, RouteSample]],
    sharing: Mapping[str, Shared] | None,
) -> LiveModel:
    """
    The simulator's model of a step's live routing: the step once per candidate route.

    Each variant sends its first attempt to one candidate, its hedge where the executor
    sends the hedge of an attempt there (`hedge_target`), an error's retry to the hedge
    route when that is on another provider than the candidate's (a failover), the redo of
    invalid output to the upgrade route or else the step's own route (as the executor), and
    couples its repeats by what they share with a first attempt on that candidate's provider. The
    variant of the step's own route is ``model`` itself: fixed routing's model.

    Args:
        plan: The plan.
        step: The step (its ``live`` set).
        model: The step's model on its own route.
        samples: The route samples (every candidate's included).
        pairs: The step's (route, sample) pairs.
        sharing: What each step's repeats share, as `workflow_model` takes it.

    Raises:
        ConfigError: A candidate has no sample.
    """
    live = step.live
    assert live is not None  # noqa: S101 - only asked for a live step
    pairs = tuple(pairs)
    variants = []
    for route in step.first_routes():
        if route == step.route:
            variants.append(model)
            continue
        primary = _sample(samples, step.name, route)
        assert primary is not None  # noqa: S101 - a route name always gives a sample or raises
        target = hedge_target(step, route)
        second = {"hedge": target, "downgrade": step.downgrade_route}.get(model.action)
        other = step.hedge_route
        moves = other is not None and other != route
        failover = other if moves and _provider(plan, other) != _provider(plan, route) else None
        back = hedge_target(step, other) if other is not None and second == other else None
        variants.append(
            dataclasses.replace(
                model,
                primary=primary,
                second=_sample(samples, step.name, second),
                failover=_sample(samples, step.name, failover),
                # invalid output is redone on the upgrade route, else the step's own route
                upgrade=_sample(samples, step.name, step.upgrade_route or step.route),
                back=None if back == route else _sample(samples, step.name, back),
                shares=_shares(plan, step.name, pairs, sharing, own=route),
            )
        )
    low, high = live.cutoff_bounds_s
    signal_cutoff = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
    return LiveModel(
        routes=step.first_routes(),
        variants=tuple(variants),
        prior_s=tuple(live.prior_s[r] for r in step.first_routes()),
        quantile=live.quantile,
        low_s=low,
        high_s=high,
        window=live.window,
        min_calls=live.min_calls,
        explore_every=live.explore_every,
        sets_cutoff=signal_cutoff is not None,
    )


def failover_route(plan: Plan, step: Step) -> str | None:
    """
    Where the executor sends an error's retry (``None``: it stays on the step's route).

    The step's hedge route when it is on another provider than the step's route: another
    pool, which the executor fails over to (`tailkit.simulation._couple.repeat_route`).
    """
    other = step.hedge_route
    if other is None or plan.routes[other].provider == plan.routes[step.route].provider:
        return None
    return other


def _shares(
    plan: Plan,
    name: str,
    samples: Iterable[tuple[str, RouteSample]],
    sharing: Mapping[str, Shared] | None,
    *,
    own: str | None = None,
) -> tuple[tuple[RouteSample, float], ...]:
    """
    The correlation of a repeat on each route the step may use (candidates included).

    Args:
        plan: The plan.
        name: The step.
        samples: The step's (route, sample) pairs.
        sharing: What each step's repeats share, as `workflow_model` takes it.
        own: The first attempt's route (``None``: the step's route): a repeat on its
            provider shares the moment too.
    """
    shared = shared_of(plan, name, sharing)
    if shared is None:
        return ()
    own = plan.routes[own or plan.steps[name].route].provider
    return tuple(
        (
            sample,
            shared.same_provider if plan.routes[route].provider == own else shared.other_provider,
        )
        for route, sample in samples
        if route in plan.routes
    )


def shared_of(plan: Plan, name: str, sharing: Mapping[str, Shared] | None) -> Shared | None:
    """
    A step's sharing: from ``sharing``, else its plan's ``basis`` (``None``: neither says).
    """
    if sharing is not None and name in sharing:
        return sharing[name]
    basis = plan.steps[name].basis
    return None if basis is None else basis.shared


def _provider(plan: Plan, route: str | None) -> str | None:
    return None if route is None else plan.routes[route].provider


def _or_inf(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def step_median(samples: Mapping[SampleKey, RouteSample], step: Step) -> float:
    """
    A step's median seconds, for the deadline reserve of the steps before it.

    The plan's prediction, as the executor reads it (``predicted.p50_s``); before calibration,
    the median of the step's route sample.
    """
    if step.predicted is not None:
        return step.predicted.p50_s
    sample = _sample(samples, step.name, step.route)
    assert sample is not None  # noqa: S101 - a step always has a route
    return sample.quantile(0.5)


def _reserves(plan: Plan, order: tuple[str, ...], medians: Mapping[str, float]) -> dict[str, float]:
    """
    Per step, the median seconds of the longest chain of steps still waiting on it.

    The same sum, in the same order, as the executor's ``reserves``: the two agree to the bit.
    """
    dependents: dict[str, list[str]] = {name: [] for name in plan.steps}
    for name, step in plan.steps.items():  # file order, as `Plan.dependents`; once, not per step
        for dep in dict.fromkeys(step.depends_on):
            dependents[dep].append(name)
    reserve: dict[str, float] = {}
    for name in reversed(order):
        after = [medians[d] + reserve[d] for d in dependents[name]]
        reserve[name] = max(after, default=0.0)
    return reserve


def _one_clock(
    step: StepModel,
    *,
    action: str,
    cutoff_s: float,
    signal: str | None = None,
    second: RouteSample | None = None,
) -> StepModel:
    """
    ``step`` under a reference policy: one cutoff, on one clock, and no other (no stall).
    """
    return dataclasses.replace(
        step, signal=signal or step.signal, cutoff_s=cutoff_s, action=action, second=second,
        ttft_cutoff_s=math.inf, total_cutoff_s=math.inf, stall_cutoff_s=math.inf, live=None,
    )  # fmt: skip


def policy_model(model: WorkflowModel, policy: str, *, quantile: float = 0.95) -> WorkflowModel:
    """
    The same workflow under a reference policy.

    Args:
        model: The workflow (as planned).
        policy: ``none`` (no cutoffs), ``retry_p95`` (sequential retry on the same route at
            each step's p95), ``hedge_p95`` (hedge at each step's p95, on its hedge route or
            else its own), ``plan`` (as given). The reference policies route fixed: each
            step's first attempt on its own route (a live step's too).
        quantile: The cutoff quantile of the two fixed policies.
    """
    if policy == "plan":
        return model
    if policy not in POLICIES:
        msg = f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}"
        raise ConfigError(msg)
    steps = []
    for step in model.steps:
        if policy == "none" or not step.idempotent:
            steps.append(_one_clock(step, action="wait", cutoff_s=math.inf, second=step.second))
            continue
        cutoff = step.primary.quantile(quantile)
        action = "retry" if policy == "retry_p95" else "hedge"
        second = step.hedge if action == "hedge" else None
        steps.append(
            _one_clock(step, signal="total", cutoff_s=cutoff, action=action, second=second)
        )
    return dataclasses.replace(model, steps=tuple(steps))
