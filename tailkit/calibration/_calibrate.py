"""
`calibrate`: from a workflow and the store's measured tails to a plan with cutoffs.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tailkit.calibration._live import with_live
from tailkit.calibration._notes import cutoff_note
from tailkit.calibration._predict import REPLICATE_RUNS, REPLICATES, Prediction, predict
from tailkit.calibration._routes import (
    RouteChoice,
    WaitingModels,
    first_candidates,
    hedge_routes,
    route_choice,
)
from tailkit.calibration._search import (
    WAIT,
    Choice,
    FirstRoutes,
    SearchResult,
    StepOptions,
    search,
)
from tailkit.calibration._since import since_instant
from tailkit.calibration._warn import evidence_warnings, prediction_warnings
from tailkit.config import Basis, Plan, Shared, Step
from tailkit.fit import TailKind
from tailkit.record import Buckets
from tailkit.simulation import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MIN_CALLS,
    RouteSample,
    SimResult,
    ThinSampleError,
    estimate_sharing,
    load_samples,
    workflow_model,
)
from tailkit.simulation.lowlevel import (
    SampleKey,
    check_run_count,
    route_tail_kinds,
    with_overrides,
)
from tailkit.store import Store


@dataclass(frozen=True, slots=True, eq=False)
class Calibration:
    """
    A calibrated plan and how it was found.

    Args:
        plan: The workflow with every step's signal, cutoffs and action filled in, and the
            ``predicted`` (with intervals) and ``basis`` fields.
        result: The plan simulated on fresh runs (the source of ``predicted``).
        search: The search's choices, score and effort.
        samples: The route samples it was calibrated on.
        prediction: The plan's predictions with their intervals (``result`` is its
            simulation).
        warnings: What the user should know about the plan: a work-driven route (no hedge
            or retry planned) or one whose tail kind is unknown under a hedge or retry, a
            hopeless deadline, a plan over its hedge budget, thin samples behind a wide
            interval (see `prediction_warnings`).
        tail_kinds: Per step, its route's tail kind (``transient``, ``work``, ``mixed`` or
            ``unknown``; see `tailkit.fit.tail_kind`).
        notes: One line per step: the total cutoff beside its TTFT cutoff and its stall
            cutoff, set or not, and why (where the calls cannot tell, it says so).
        route_choices: Per step with candidate routes, why its first route was chosen: each
            candidate's figures and the rule (also the plan's ``basis.route_choice``).
        since: The instant from which calls were read (``None``: all of them).
    """

    plan: Plan
    result: SimResult
    search: SearchResult
    samples: dict[SampleKey, RouteSample]
    prediction: Prediction
    warnings: tuple[str, ...] = ()
    tail_kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    route_choices: dict[str, RouteChoice] = dataclasses.field(default_factory=dict)
    since: datetime | None = None


def workflow_of(plan: Plan) -> Plan:
    """
    The plan with every calibrated field cleared: each step waits, nothing is predicted.
    """
    steps = {
        name: dataclasses.replace(
            step,
            signal="total",
            ttft_cutoff_s=None,
            stall_cutoff_s=None,
            cutoff_s=None,
            on_cutoff="wait",
            live=None,
            predicted=None,
            basis=None,
        )
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps, predicted=None)


def calibrate(
    store: Store,
    plan: Plan,
    *,
    budget: float | None = None,
    deadline_s: float | None = None,
    runs: int = 20_000,
    check_runs: int = 100_000,
    seed: int = 0,
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    latency: str = "empirical",
    replicates: int = REPLICATES,
    replicate_runs: int = REPLICATE_RUNS,
    progress: Callable[[int, int], None] | None = None,
    sharing: Mapping[str, Shared] | None = None,
    live: bool = False,
    since: datetime | timedelta | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Calibration:
    """
    Choose each step's signal, cutoffs and action; fill in the plan's predictions.

    A step that lists ``candidates`` also has its first route chosen among them, jointly with
    the rest (``basis.route_choice`` says why).

    Args:
        store: An open store with calls of the plan's routes.
        plan: The workflow (calibrated fields, if any, are recomputed).
        budget: Extra attempts per first attempt allowed (``None``: the plan's hedge_budget).
        deadline_s: End-to-end deadline in seconds (``None``: the plan's deadline_s).
        runs: Simulated runs per candidate in the search.
        check_runs: Fresh runs that check the plan found (its ``predicted`` fields).
        seed: Seed; the same seed and store give the same plan.
        buckets: Token bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls a step's route needs in its bucket (a candidate route with
            fewer is left out of the choice, and said so).
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (fitted).
        replicates: Bootstrap replicates behind the predictions' intervals (0: none).
        replicate_runs: Simulated runs per replicate.
        progress: Called with (candidates tried, candidates per pass).
        sharing: Per step, what a repeat attempt shares with the first (``None``: estimated
            from the store by `tailkit.simulation.estimate_sharing`, per candidate route);
            written into each step's ``basis.shared``.
        live: Write a ``live`` block on each step with candidates, and on each step with a
            cutoff on its signal clock (`tailkit.calibration._live`): the executor then
            routes each first attempt to the candidate with the best recent latency and
            lets the cutoff follow it; ``predicted`` is then the simulator's live model.
        since: Calibrate on calls that started at or after this instant (UTC when naive),
            or within this duration back from the newest call in the store (``None``: all).
            The route samples, tail kinds and sharing are all read from those calls.
        concurrency: Runs in flight at once when a live plan is predicted (the simulator's
            live model decides a batch of runs from what the runs before it observed).

    Raises:
        ThinSampleError: A step's route has too few calls in its bucket (with ``live``, a
            candidate route too).
        ConfigError: An override is out of range, a number of runs above `MAX_RUNS`, or no
            call is as recent as ``since``.
    """
    check_run_count(runs, name="runs")
    check_run_count(check_runs, name="check_runs")
    check_run_count(replicate_runs, name="replicate_runs")
    plan = with_overrides(workflow_of(plan), deadline_s=deadline_s, budget=budget)
    start = None if since is None else since_instant(store, since)
    firsts = {name: first_candidates(step) for name, step in plan.steps.items()}
    hedges = {
        name: {r: hedge_routes(plan, step, r) for r in firsts[name] or (step.route,)}
        for name, step in plan.steps.items()
    }
    extra = {
        name: tuple(dict.fromkeys(r for found in by.values() for r in (*found, *firsts[name])))
        for name, by in hedges.items()
    }
    samples = load_samples(
        store, plan, buckets=buckets, min_calls=min_calls, candidates=extra, seed=seed,
        latency=latency, since=start,
    )  # fmt: skip
    firsts = {n: tuple(r for r in rs if (n, r) in samples) for n, rs in firsts.items()}
    if live:
        _check_live_samples(plan, samples, min_calls)
    routes = dict.fromkeys(r for n, s in plan.steps.items() for r in (s.route, *firsts[n]))
    kinds = route_tail_kinds(store, plan, routes, since=start)

    def options_for(name: str, first: str) -> StepOptions:
        step = plan.steps[name]
        return StepOptions(
            hedge_routes=tuple(r for r in hedges[name][first] if (name, r) in samples),
            downgrade_route=step.downgrade_route if step.downgrade_route != first else None,
            may_repeat=step.idempotent,
            may_fail=not step.required,
            fresh_attempts=kinds[first].kind != "work",
        )

    options = {name: options_for(name, step.route) for name, step in plan.steps.items()}
    if sharing is None:
        sharing = estimate_sharing(store, plan, buckets=buckets, since=start)
        sharing_by = _sharing_by_route(store, plan, firsts, buckets, since=start)
    else:
        sharing_by = {}
    waiting = WaitingModels(plan, samples, sharing, sharing_by)
    others = {
        name: {r: options_for(name, r) for r in rs if r != plan.steps[name].route}
        for name, rs in firsts.items()
        if any(r != plan.steps[name].route for r in rs)
    }
    base = workflow_model(plan, samples, sharing=sharing)
    found = search(
        base, samples, options, budget=plan.hedge_budget, runs=runs, seed=seed, progress=progress,
        firsts=FirstRoutes(others, waiting) if others else None,
    )  # fmt: skip
    choices = {n: found.choices.get(n, WAIT) for n in plan.steps}
    moved = {n: c.first for n, c in choices.items() if c.first is not None}
    sharing = waiting.sharing_for(moved)
    chosen = dataclasses.replace(
        plan, steps={n: _with_choice(s, choices[n]) for n, s in plan.steps.items()}
    )
    why = {
        name: route_choice(
            step,
            chosen.steps[name].route,
            found.routes.get(name, {None: found.score}),  # only its own route had the calls
            samples,
            min_calls=min_calls,
            runs=runs,
        )
        for name, step in plan.steps.items()
        if first_candidates(step)
    }
    chosen = _with_basis(chosen, found, samples, sharing, why)
    if live:
        chosen = with_live(chosen, samples)
    prediction = predict(
        None, chosen, samples=samples, runs=check_runs, seed=seed + 1, replicates=replicates,
        replicate_runs=replicate_runs, sharing=sharing, concurrency=concurrency,
    )  # fmt: skip
    final = _predicted(chosen, prediction)
    return Calibration(
        plan=final,
        result=prediction.result,
        search=found,
        samples=samples,
        prediction=prediction,
        warnings=(
            *_kind_warnings(chosen, kinds),
            *evidence_warnings(final, kinds),
            *prediction_warnings(chosen, prediction),
            *prediction.interval_notes,
        ),
        tail_kinds={name: kinds[step.route].kind for name, step in chosen.steps.items()},
        notes=tuple(
            cutoff_note(
                name,
                samples[(name, step.route)],
                choices[name],
                idempotent=step.idempotent,
            )
            for name, step in chosen.steps.items()
        ),
        route_choices=why,
        since=start,
    )


def _sharing_by_route(
    store: Store,
    plan: Plan,
    firsts: Mapping[str, tuple[str, ...]],
    buckets: Buckets | None,
    *,
    since: datetime | None,
) -> dict[str, dict[str, Shared]]:
    """
    Per step with candidates, per candidate other than its route, what a repeat shares there.
    """
    out: dict[str, dict[str, Shared]] = {}
    for name, routes in firsts.items():
        for route in routes:
            if route == plan.steps[name].route:
                continue
            step = dataclasses.replace(plan.steps[name], route=route, depends_on=())
            alone = dataclasses.replace(plan, steps={name: step})
            found = estimate_sharing(store, alone, buckets=buckets, since=since)
            out.setdefault(name, {})[route] = found[name]
    return out


def _check_live_samples(
    plan: Plan, samples: Mapping[SampleKey, RouteSample], min_calls: int
) -> None:
    """
    Refuse a live plan with a candidate route too thin to give its prior (``ThinSampleError``).
    """
    for name, step in plan.steps.items():
        for route in first_candidates(step):
            if (name, route) not in samples:
                msg = (
                    f"step {name!r}: candidate route {route} has fewer than {min_calls} calls "
                    "in the step's bucket, and a live plan needs each candidate's latency for "
                    "its prior. Ingest more calls of it, lower {min_calls}, or drop it from "
                    "the step's candidates"
                )
                raise ThinSampleError(msg, field="min_calls", value=min_calls)


def _kind_warnings(plan: Plan, kinds: dict[str, TailKind]) -> tuple[str, ...]:
    """
    Steps whose route's tail a fresh attempt does not escape, or may not.

    On a work-driven route a fresh attempt repeats the work, so calibrate plans no hedge or
    retry there; on a route whose kind it cannot tell, a plan that hedges or retries rests on
    what the store says a repeat shares (``basis.shared``), which may be a default.
    """
    out = []
    for name, step in plan.steps.items():
        verdict = kinds[step.route]
        if verdict.kind == "work":
            out.append(
                f"step {name!r}: route {step.route}'s tail is work-driven, so no hedge or retry "
                f"is planned there ({verdict.sentence})"
            )
        elif verdict.kind == "unknown" and step.on_cutoff in ("hedge", "retry"):
            out.append(
                f"step {name!r}: the plan's {step.on_cutoff} assumes a fresh attempt on route "
                f"{step.route} is as fast as any other call, which the store cannot confirm "
                f"({verdict.sentence}); check it with tailkit check once the plan has run"
            )
    return tuple(out)


def _with_choice(step: Step, choice: Choice) -> Step:
    if choice.first is not None:  # another candidate goes first: the hedge route may not be it
        hedge = step.route if step.hedge_route == choice.first else step.hedge_route
        step = dataclasses.replace(step, route=choice.first, hedge_route=hedge)
    if choice.action == "wait":
        return step
    ttft = choice.signal == "ttft"
    total = choice.total_cutoff_s if ttft else choice.cutoff_s
    return dataclasses.replace(
        step,
        signal=choice.signal,
        ttft_cutoff_s=round(choice.cutoff_s, 3) if ttft else None,
        stall_cutoff_s=_rounded(choice.stall_cutoff_s),
        cutoff_s=_rounded(total),
        on_cutoff=choice.action,
        hedge_route=choice.route if choice.action == "hedge" else step.hedge_route,
    )


def _rounded(seconds: float) -> float | None:
    return round(seconds, 3) if math.isfinite(seconds) else None


def _with_basis(
    plan: Plan,
    found: SearchResult,
    samples: Mapping[SampleKey, RouteSample],
    sharing: Mapping[str, Shared],
    why: Mapping[str, RouteChoice],
) -> Plan:
    """
    Each step's ``basis``: its route's sample, its cutoff's quantile, its sharing, its choice.
    """
    steps = {}
    for name, step in plan.steps.items():
        sample = samples[(name, step.route)]
        reason = why.get(name)
        steps[name] = dataclasses.replace(
            step,
            basis=Basis(
                calls=sample.calls,
                bucket=sample.bucket,
                quantile=found.choices[name].quantile,
                censored=round(sample.censored, 4),
                shared=sharing.get(name),
                route_choice=None if reason is None else reason.sentence(),
            ),
        )
    return dataclasses.replace(plan, steps=steps)


def _predicted(plan: Plan, prediction: Prediction) -> Plan:
    steps = {
        name: dataclasses.replace(step, predicted=prediction.step_prediction(name))
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps, predicted=prediction.plan_prediction())
