"""
`calibrate`: from a workflow and the store's measured tails to a plan with cutoffs.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tailkit.calibration._notes import cutoff_note
from tailkit.calibration._predict import REPLICATE_RUNS, REPLICATES, Prediction, predict
from tailkit.calibration._search import WAIT, Choice, SearchResult, StepOptions, search
from tailkit.calibration._warn import evidence_warnings, prediction_warnings
from tailkit.config import Basis, Plan, Shared, Step
from tailkit.fit import TailKind
from tailkit.record import Buckets
from tailkit.simulation import (
    DEFAULT_MIN_CALLS,
    RouteSample,
    SimResult,
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
    """

    plan: Plan
    result: SimResult
    search: SearchResult
    samples: dict[SampleKey, RouteSample]
    prediction: Prediction
    warnings: tuple[str, ...] = ()
    tail_kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()


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
            predicted=None,
            basis=None,
        )
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps, predicted=None)


def hedge_candidates(plan: Plan, step: Step) -> tuple[str, ...]:
    """
    Routes a step may hedge on.

    Its declared ``hedge_route``, else every route serving the same model through another
    provider (an independent rate-limit pool).
    """
    if step.hedge_route is not None:
        return (step.hedge_route,)
    own = plan.routes[step.route]
    return tuple(
        name
        for name, route in plan.routes.items()
        if route.model == own.model and route.provider != own.provider
    )


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
) -> Calibration:
    """
    Choose each step's signal, cutoffs and action; fill in the plan's predictions.

    Args:
        store: An open store with calls of the plan's routes.
        plan: The workflow (calibrated fields, if any, are recomputed).
        budget: Extra attempts per first attempt allowed (``None``: the plan's hedge_budget).
        deadline_s: End-to-end deadline in seconds (``None``: the plan's deadline_s).
        runs: Simulated runs per candidate in the search.
        check_runs: Fresh runs that check the plan found (its ``predicted`` fields).
        seed: Seed; the same seed and store give the same plan.
        buckets: Token bucket edges (the defaults of `tailkit.record.Buckets` when ``None``).
        min_calls: Fewest calls a step's route needs in its bucket.
        latency: ``empirical`` (resample the measured calls) or ``lognormal`` (fitted).
        replicates: Bootstrap replicates behind the predictions' intervals (0: none).
        replicate_runs: Simulated runs per replicate.
        progress: Called with (candidates tried, candidates per pass).
        sharing: Per step, what a repeat attempt shares with the first (``None``: estimated
            from the store by `tailkit.simulation.estimate_sharing`); written into each step's
            ``basis.shared``.

    Raises:
        ThinSampleError: A step's route has too few calls in its bucket.
        ConfigError: An override is out of range, or a number of runs above `MAX_RUNS`.
    """
    check_run_count(runs, name="runs")
    check_run_count(check_runs, name="check_runs")
    check_run_count(replicate_runs, name="replicate_runs")
    plan = with_overrides(workflow_of(plan), deadline_s=deadline_s, budget=budget)
    hedges = {
        name: hedge_candidates(plan, step) if step.idempotent else ()
        for name, step in plan.steps.items()
    }
    samples = load_samples(
        store, plan, buckets=buckets, min_calls=min_calls, candidates=hedges, seed=seed,
        latency=latency,
    )  # fmt: skip
    kinds = route_tail_kinds(store, plan, (s.route for s in plan.steps.values()))
    options = {
        name: StepOptions(
            hedge_routes=tuple(r for r in hedges[name] if (name, r) in samples),
            downgrade_route=step.downgrade_route,
            may_repeat=step.idempotent,
            may_fail=not step.required,
            fresh_attempts=kinds[step.route].kind != "work",
        )
        for name, step in plan.steps.items()
    }
    if sharing is None:
        sharing = estimate_sharing(store, plan, buckets=buckets)
    base = workflow_model(plan, samples, sharing=sharing)
    found = search(
        base, samples, options, budget=plan.hedge_budget, runs=runs, seed=seed, progress=progress
    )
    chosen = dataclasses.replace(
        plan,
        steps={n: _with_choice(s, found.choices.get(n, WAIT)) for n, s in plan.steps.items()},
    )
    prediction = predict(
        None, chosen, samples=samples, runs=check_runs, seed=seed + 1, replicates=replicates,
        replicate_runs=replicate_runs, sharing=sharing,
    )  # fmt: skip
    final = _predicted(chosen, prediction, found, samples, sharing)
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
        tail_kinds={name: kinds[step.route].kind for name, step in plan.steps.items()},
        notes=tuple(
            cutoff_note(
                name,
                samples[(name, step.route)],
                found.choices.get(name, WAIT),
                idempotent=step.idempotent,
            )
            for name, step in plan.steps.items()
        ),
    )


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


def _predicted(
    plan: Plan,
    prediction: Prediction,
    found: SearchResult,
    samples: dict[SampleKey, RouteSample],
    sharing: Mapping[str, Shared],
) -> Plan:
    steps = {}
    for name, step in plan.steps.items():
        sample = samples[(name, step.route)]
        steps[name] = dataclasses.replace(
            step,
            predicted=prediction.step_prediction(name),
            basis=Basis(
                calls=sample.calls,
                bucket=sample.bucket,
                quantile=found.choices[name].quantile,
                censored=round(sample.censored, 4),
                shared=sharing.get(name),
            ),
        )
    return dataclasses.replace(plan, steps=steps, predicted=prediction.plan_prediction())
