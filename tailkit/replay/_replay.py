"""
`replay`: a dress rehearsal of a plan against the calls it was calibrated on.

Why a rehearsal: a plan's predicted miss rate is a claim about the future, and the executor, the
HTTP adapter and the clock all stand between the simulator's arithmetic and a real run. The
replay serves every step's routes from exactly what the simulator draws from (the measured calls
of the route in the step's token bucket: TTFT, total, failures, invalid outputs; see
`served_models`), in a server process of its own, and runs the workflow through the real
executor and adapter N times without cutoffs and N times with the plan. Each side is compared
with its prediction, simulated on the same samples.

Time is scaled so a rehearsal takes minutes, not hours, and that is where a replay can lie: a
busy machine makes every served latency late. So the replay measures its own timing error
(`tailkit.replay._fidelity`) and, unless the caller fixed the time scale, first probes the
machine with a short run and picks the scale that keeps the error under 2 % of the plan's
smallest cutoff; if the full run still exceeds it, it runs again slower, once, and if that
fails too it says so: its verdict is "can't tell", never a silent number.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import tempfile
import time

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from tailkit.calibration import workflow_of
from tailkit.check import Observation, observe
from tailkit.check.lowlevel import rate
from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.estimate import LEVEL, Estimate
from tailkit.record import Buckets
from tailkit.replay._aligned import served_routes
from tailkit.replay._compare import FIGURES, verdicts
from tailkit.replay._effect import PlanEffect, plan_effect
from tailkit.replay._fidelity import MAX_ERROR_SHARE, Fidelity, LagMonitor, fidelity, timing_errors
from tailkit.replay._live import (
    MAX_REPLICATES,
    RouteShareLine,
    live_steps,
    replicated,
    runs_in_flight,
    share_lines,
)
from tailkit.replay._process import ServerProcess
from tailkit.replay._sides import SideRun, run_side
from tailkit.replay._tables import ServedModels, served_models
from tailkit.serve.lowlevel import dump_outcomes
from tailkit.simulation import (
    DEFAULT_MIN_CALLS,
    RouteSample,
    SimResult,
    ThinSampleError,
    load_samples,
    simulate,
    simulate_model,
    workflow_model,
)
from tailkit.simulation.lowlevel import DEFAULT_SOURCE, SampleKey, default_as_independent
from tailkit.store import Store
from tailkit.text import Advice


__all__ = ["ReplayResult", "ReplaySide", "replay"]

LABELS = ("without plan", "with plan")
FAMILY_LEVEL = 1.0 - (1.0 - LEVEL) / (len(LABELS) * len(FIGURES))
"""Each figure's interval level for the verdict: the eight comparisons of a replay together
miss a true prediction with at most 5 % probability (Bonferroni), where eight separate 95 %
intervals would flag about one replay in three by chance alone. A plan that routes live adds
one comparison per live step and candidate route (`family_level`)."""


def family_level(comparisons: int) -> float:
    """
    The level each of ``comparisons`` comparisons is judged at, for 95 % over all of them.
    """
    return 1.0 - (1.0 - LEVEL) / max(comparisons, 1)


DEFAULT_RUNS = 400
PREDICT_RUNS = 100_000
_PROBE_SCALE = 0.1
_MAX_SCALE = 1.0
_MARGIN = 1.5  # the chosen scale leaves the error at two thirds of the allowance
_BUSY = 0.25  # share of the client's CPU the runs may use: a quiet loop keeps time
_PROBE_CPU_S = 0.008  # CPU seconds per step before the probe has measured it


@dataclass(frozen=True, slots=True)
class ReplaySide:
    """
    One side of the rehearsal: predicted against observed.

    Args:
        label: ``without plan`` or ``with plan``.
        runs: Runs replayed.
        predicted: ``miss_rate``, ``p50_s``, ``p99_s``, ``extra_attempts`` as simulated (run
            quantiles cut at the deadline, as the executor ends runs).
        intervals: 95 % intervals of the predictions that have one.
        observed: The same figures observed, each with its 95 % interval.
        agrees: Per figure, whether prediction and observation agree, judged for all the
            figures of both sides together (see `FAMILY_LEVEL`).
        borderline: Figures that agree only at that family level: outside their own 95 %
            interval, as about one figure in three replays is by chance alone.
        denials: Cutoffs whose hedge the executor's budget or throttle denied.
        ledger: The side's ledger (profile seconds).
        errors: Runs that ended in an exception instead of a result (counted as misses).
        shares: For a plan that routes live, per live step and candidate route, the share of
            first attempts that went there, simulated against observed.
        concurrency: For a plan that routes live, the runs per batch the simulation decided
            in: the rehearsal's runs in flight (``None``: no live step).
    """

    label: str
    runs: int
    predicted: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    observed: dict[str, Estimate]
    agrees: dict[str, bool]
    borderline: tuple[str, ...]
    denials: int
    ledger: Path
    errors: int = 0
    shares: tuple[RouteShareLine, ...] = ()
    concurrency: int | None = None

    @property
    def verdict(self) -> str:
        """
        ``agrees`` when every figure (and every live route's share) does, else ``differs``.
        """
        every = all(self.agrees.values()) and all(line.agrees for line in self.shares)
        return "agrees" if every else "differs"

    def to_json(self) -> dict[str, Any]:
        """
        The side as the replay's JSON document shows it.
        """

        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "label": self.label,
            "runs": self.runs,
            "predicted": {k: finite(v) for k, v in self.predicted.items()},
            "predicted_interval": {k: list(v) for k, v in self.intervals.items()},
            "observed": {k: finite(v.value) for k, v in self.observed.items()},
            "observed_interval": {
                k: [finite(v.low), finite(v.high)] for k, v in self.observed.items()
            },
            "agrees": dict(self.agrees),
            "borderline": list(self.borderline),
            "verdict": self.verdict,
            "budget_denials": self.denials,
            "runs_ended_in_error": self.errors,
            "ledger": str(self.ledger),
            "route_shares": [line.to_json() for line in self.shares],
            "concurrency": self.concurrency,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """
    What the rehearsal found.

    Args:
        plan: The plan replayed (profile seconds).
        sides: Without the plan, then with it.
        fidelity: The replay's own timing error, measured on the final run.
        attempts: Time scales tried, in order (more than one when the first was too fast).
        out_dir: Where the ledgers, the outcome tables and the access log are.
        notes: Plain-language findings (timing, budget denials), for a person; advice that
            names a parameter of `replay` is a `tailkit.text.Advice`, which the command line
            renders with its flags.
    """

    plan: Plan
    sides: tuple[ReplaySide, ReplaySide]
    fidelity: Fidelity
    attempts: tuple[float, ...]
    out_dir: Path
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> str:
        """
        ``agrees``, ``differs``, or ``can't tell`` (timing error too large to mean anything).
        """
        if not self.fidelity.ok:
            return "can't tell"
        return "agrees" if all(s.verdict == "agrees" for s in self.sides) else "differs"

    @property
    def effect(self) -> PlanEffect:
        """
        Whether the plan helps, by a test over the two sides (`plan_effect`).
        """
        return plan_effect(self)

    @property
    def plan_helps(self) -> bool:
        """
        A test over the two sides says the plan helps (not two point estimates: `effect`).
        """
        return self.effect.verdict == "helps"

    def to_json(self) -> dict[str, Any]:
        """
        The replay as one JSON document, as ``tailkit replay`` prints it: sides, verdict.
        """
        return {
            "workflow": self.plan.workflow,
            "deadline_s": self.plan.deadline_s,
            "verdict": self.verdict,
            "plan_helps": self.plan_helps,
            "plan_effect": self.effect.to_json(),
            "sides": [side.to_json() for side in self.sides],
            "fidelity": self.fidelity.to_json(),
            "time_scales_tried": list(self.attempts),
            "notes": list(self.notes),
            "out_dir": str(self.out_dir),
        }


def smallest_cutoff_s(plan: Plan) -> float:
    """
    The plan's smallest cutoff in seconds (``inf`` when no step has one).
    """
    cutoffs = [
        value
        for step in plan.steps.values()
        if step.on_cutoff != "wait"
        for value in (step.ttft_cutoff_s, step.stall_cutoff_s, step.cutoff_s)
        if value is not None
    ]
    return min(cutoffs, default=math.inf)


def _stated(baseline: Plan, plan: Plan) -> Plan:
    """
    The plan's workflow without cutoffs, keeping what its steps' repeats share (``basis``).

    Without cutoffs only an error's retry or an upgrade repeats an attempt; they do the same
    job as under the plan.
    """
    steps = {
        name: dataclasses.replace(step, basis=plan.steps[name].basis)
        for name, step in baseline.steps.items()
    }
    return dataclasses.replace(baseline, steps=steps)


class _Predicted(NamedTuple):
    """
    A side's prediction: its figures, their intervals, and a live plan's route shares.

    A tuple, so that ``(point, intervals)`` alone is a fixed plan's prediction too.
    """

    point: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    shares: Mapping[str, Mapping[str, float]] = MappingProxyType({})
    spread: Mapping[str, Mapping[str, tuple[float, float]]] = MappingProxyType({})


def _prediction(plan: Plan, samples: Mapping[SampleKey, RouteSample], *, seed: int) -> _Predicted:
    """
    The side's predicted figures and their intervals (Monte Carlo error for the miss rate).

    Not `tailkit.calibration.predict`'s bootstrap interval: the replay serves the measured
    sample itself, so the sample's own uncertainty is not part of what it can disagree with.
    A step whose sharing is a default (no evidence) is a range: each figure's interval spans
    the prediction with its repeats independent too, so the served data, which has nothing to
    pair either, cannot disagree with a guess the plan said it made.
    """
    result = simulate(plan, samples, runs=PREDICT_RUNS, seed=seed)
    predicted = _predicted(result)
    spread = 1.96 * result.miss_rate_se
    intervals = {"miss_rate": (max(result.miss_rate - spread, 0.0), result.miss_rate + spread)}
    low_end = default_as_independent(plan)
    if low_end is None:
        return _Predicted(predicted, intervals)
    model = workflow_model(plan, samples, sharing=low_end)
    _widen(intervals, predicted, simulate_model(model, runs=PREDICT_RUNS, seed=seed))
    return _Predicted(predicted, intervals)


def _live_prediction(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    seed: int,
    runs: int,
    concurrency: int,
) -> _Predicted:
    """
    A live plan's prediction: rehearsals of ``runs`` runs simulated, each from a fresh start.

    In batches of ``concurrency`` runs (the rehearsal's runs in flight), as many rehearsals as
    make `PREDICT_RUNS` runs (at most `MAX_REPLICATES`, `replicated`): the figures pool them,
    each route's share has its spread over them. The default sharing widens every interval as
    for a fixed plan (`_prediction`).
    """
    reps = max(1, min(PREDICT_RUNS // runs, MAX_REPLICATES))
    found = replicated(
        workflow_model(plan, samples), runs=runs, replicates=reps, seed=seed,
        concurrency=concurrency,
    )  # fmt: skip
    predicted = dict(found.figures)
    spread = 1.96 * found.miss_rate_se
    miss = predicted["miss_rate"]
    intervals = {"miss_rate": (max(miss - spread, 0.0), miss + spread)}
    shares = {s: dict(by) for s, by in found.spread.items()}
    low_end = default_as_independent(plan)
    if low_end is not None:
        other = replicated(
            workflow_model(plan, samples, sharing=low_end), runs=runs, replicates=reps,
            seed=seed, concurrency=concurrency,
        )  # fmt: skip
        _widen(intervals, predicted, other.figures, other.miss_rate_se)
        for step, by in other.spread.items():
            for route, (low, high) in by.items():
                was = shares.setdefault(step, {}).get(route, (low, high))
                shares[step][route] = (min(was[0], low), max(was[1], high))
    return _Predicted(predicted, intervals, found.shares, shares)


def _widen(
    intervals: dict[str, tuple[float, float]],
    predicted: Mapping[str, float],
    other: SimResult | Mapping[str, float],
    miss_rate_se: float | None = None,
) -> None:
    """
    Each figure's interval stretched to span ``other``'s prediction too (and its MC error).
    """
    figures = _predicted(other) if isinstance(other, SimResult) else other
    se = other.miss_rate_se if isinstance(other, SimResult) else (miss_rate_se or 0.0)
    for name, value in figures.items():
        low, high = intervals.get(name, (predicted[name], predicted[name]))
        reach = 1.96 * se if name == "miss_rate" else 0.0
        intervals[name] = (min(low, max(value - reach, 0.0)), max(high, value + reach))


def _predicted(result: SimResult) -> dict[str, float]:
    return {
        "miss_rate": result.miss_rate,
        "p50_s": result.p50_s,
        "p99_s": result.p99_s,
        "extra_attempts": result.extra_attempts,
    }


def _figures(
    plan: Plan, ledger: Path, level: float, *, unseen: int = 0
) -> tuple[dict[str, Estimate], Observation]:
    # read exactly as `tailkit check` reads a production ledger: one definition of a run's
    # end, a miss and an extra attempt (one a cutoff started) for both; ``unseen`` runs that
    # ended in an error without a ledger line are misses too
    seen = observe(plan, [ledger], level=level)
    misses = seen.missed_late + seen.missed_failed + unseen
    return {
        "miss_rate": rate(misses, seen.runs + unseen, level=level) if unseen else seen.miss_rate,
        "p50_s": seen.p50_s,
        "p99_s": seen.p99_s,
        "extra_attempts": seen.cutoff_attempts,
    }, seen


def _side(
    plan: Plan,
    run: SideRun,
    predicted: _Predicted | tuple[dict[str, float], dict[str, tuple[float, float]]],
    *,
    level: float = FAMILY_LEVEL,
    concurrency: int | None = None,
) -> ReplaySide:
    point, intervals = predicted[0], predicted[1]
    live = predicted if isinstance(predicted, _Predicted) else _Predicted(point, intervals)
    unseen = _unseen_runs(run)
    observed, seen = _figures(plan, run.ledger, LEVEL, unseen=unseen)
    strict = verdicts(point, observed, intervals)
    family = verdicts(point, _figures(plan, run.ledger, level, unseen=unseen)[0], intervals)
    shares = (
        share_lines(plan, seen, live.shares, live.spread, family_level=level) if concurrency else ()
    )
    return ReplaySide(
        label=run.label,
        runs=run.runs,
        predicted=point,
        intervals=intervals,
        observed=observed,
        agrees=family,
        borderline=tuple(k for k in FIGURES if family[k] and not strict[k]),
        denials=run.denials,
        ledger=run.ledger,
        errors=len(run.errors),
        shares=shares,
        concurrency=concurrency,
    )


def _unseen_runs(run: SideRun) -> int:
    """
    Runs that ended in an error and left no line in the ledger (``check`` cannot see them).

    A run that left lines is read from them: its required steps did not all finish, so it is
    a miss already.
    """
    if not run.errors:
        return 0
    seen: set[str] = set()
    with run.ledger.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                seen.add(str(json.loads(line).get("run_id")))
    return sum(1 for run_id, _ in run.errors if run_id not in seen)


async def _rehearse(
    plans: tuple[Plan, Plan],
    *,
    url: str,
    out: Path,
    ids: Mapping[SampleKey, str],
    runs: int,
    scale: float,
    pace_s: float,
    progress: Callable[[str, int, int], None] | None,
) -> tuple[list[SideRun], list[float]]:
    # The two sides run interleaved, one run of each in turn: the same machine, the same
    # moments, so that a busy spell cannot favour one side.
    counts = dict.fromkeys(LABELS, 0)

    def tick(label: str) -> None:
        counts[label] += 1
        if progress is not None:
            progress(label, counts[label], runs)

    async with LagMonitor() as lag:
        sides = list(
            await asyncio.gather(
                *(
                    run_side(
                        plan,
                        url=url,
                        model_ids=ids,
                        runs=runs,
                        factor=scale,
                        ledger_path=out / f"ledger-{label.replace(' ', '-')}.jsonl",
                        label=label,
                        pace_s=2 * pace_s,
                        offset_s=k * pace_s,
                        progress=functools.partial(tick, label),
                    )
                    for k, (label, plan) in enumerate(zip(LABELS, plans, strict=True))
                )
            )
        )
    return sides, lag.samples_s


def replay(
    store: Store,
    plan: Plan,
    *,
    runs: int = DEFAULT_RUNS,
    time_scale: float | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    buckets: Buckets | None = None,
    min_calls: int = DEFAULT_MIN_CALLS,
    progress: Callable[[str, int, int], None] | None = None,
) -> ReplayResult:
    """
    Rehearse a calibrated plan against the calls it was calibrated on; compare with predictions.

    Args:
        store: The store the plan was calibrated on.
        plan: A calibrated plan (its steps' cutoffs and actions).
        runs: Workflow runs per side.
        time_scale: Real seconds per profile second (``None``: chosen by a short probe so the
            replay's timing error stays under 2 % of the smallest cutoff).
        seed: Seed of the predictions' simulation and of the server's draws.
        out_dir: Where the ledgers (``ledger-without-plan.jsonl``, ``ledger-with-plan.jsonl``),
            the outcome tables and the server's access log go (``None``: a temporary folder).
        buckets: Token bucket edges, as calibrate used them (``None``: the defaults).
        min_calls: Fewest calls a step's route needs in its bucket, as for calibrate.
        progress: Called with (phase, done, total): ``probe``, ``without plan``, ``with plan``.

    Raises:
        ConfigError: The plan has no cutoffs (and routes nothing live), or an argument is out
            of range.
        ThinSampleError: A step's route has too few calls in its bucket.
        TailkitError: The replay server did not start.
    """
    if runs < 1:
        msg = f"{{field}} must be at least 1, got {runs}."
        raise ConfigError(msg, field="runs", value=runs, fix="Pass the runs per side (400).")
    if time_scale is not None and not 0.0 < time_scale <= 10.0:
        msg = f"{{field}} must be in (0, 10] real seconds per profile second, got {time_scale}."
        raise ConfigError(
            msg,
            field="time_scale",
            value=time_scale,
            fix="Pass 1 for real time, less to rehearse faster; leave it out to have it chosen.",
        )
    if all(step.on_cutoff == "wait" and step.live is None for step in plan.steps.values()):
        msg = "the plan has no cutoffs to rehearse: calibrate it first (tailkit calibrate)."
        fix = "Calibrating the workflow writes a plan with cutoffs (tailkit.calibrate)."
        raise ConfigError(msg, field="plan", value=plan.workflow, fix=fix)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="tailkit-replay-"))
    out.mkdir(parents=True, exist_ok=True)
    samples = _samples(store, plan, buckets=buckets, min_calls=min_calls, seed=seed)
    baseline = _stated(workflow_of(plan), plan)
    live = live_steps(plan)
    # a live plan's prediction waits for the rehearsal: it is simulated in batches of the
    # rehearsal's own runs in flight
    predictions = (
        _prediction(baseline, samples, seed=seed),
        None if live else _prediction(plan, samples, seed=seed),
    )
    # every attempt of one call does one job: served from the data's own pairs (job keys, or
    # the same size and moment), not the simulator's copula, so the two can disagree
    served = served_models(plan, samples, store=store, buckets=buckets, seed=seed)
    rehearsal = _Rehearsal(
        (baseline, plan), served, out, smallest_cutoff_s(plan), seed, progress,
    )  # fmt: skip
    sides, found, tried, notes = rehearsal.run(runs, time_scale)
    notes.extend(
        f"step {name!r}, what a repeat was served: {said}" for name, said in served.basis.items()
    )
    guessed = [
        name
        for name, step in plan.steps.items()
        if step.basis is not None
        and step.basis.shared is not None
        and step.basis.shared.source == DEFAULT_SOURCE
    ]
    if guessed:
        notes.append(
            f"what a repeat shares is the plan's default (no evidence) for step(s) "
            f"{', '.join(map(repr, guessed))}: each predicted interval spans independent repeats "
            "up to the default"
        )
    concurrency, level, with_plan = None, FAMILY_LEVEL, predictions[1]
    if with_plan is None:
        flying = runs_in_flight(sides[1].ledger)
        concurrency = max(1, round(flying))
        with_plan = _live_prediction(plan, samples, seed=seed, runs=runs, concurrency=concurrency)
        level = family_level(
            len(LABELS) * len(FIGURES) + sum(len(plan.steps[n].first_routes()) for n in live)
        )
        notes.append(
            f"live routing of step(s) {', '.join(map(repr, live))}: predicted by rehearsals of "
            f"{runs} runs simulated from a fresh start, in batches of {concurrency} run(s), "
            f"the rehearsal's runs in flight ({flying:.1f} on average when a run started)"
        )
    result_sides = (
        _side(plan, sides[0], predictions[0], level=level),
        _side(plan, sides[1], with_plan, level=level, concurrency=concurrency),
    )
    for side, run in zip(result_sides, sides, strict=True):
        if run.errors:
            notes.append(
                f"{len(run.errors)} run(s) {side.label} ended in an error, counted as misses "
                f"(first: {run.errors[0][1]})"
            )
    denied = result_sides[1].denials
    if denied:
        notes.append(
            f"the executor's hedge budget or throttle denied {denied} hedge(s) the plan called for"
        )
    return ReplayResult(plan, result_sides, found, tuple(tried), out, tuple(notes))


def _samples(
    store: Store, plan: Plan, *, buckets: Buckets | None, min_calls: int, seed: int
) -> dict[SampleKey, RouteSample]:
    """
    The route samples of every route the replay serves, candidates included.

    Raises:
        ThinSampleError: A route a step may send an attempt to has too few calls.
    """
    # a step with one first route is refused by load_samples itself, naming its bucket
    candidates = {
        name: step.first_routes()
        for name, step in plan.steps.items()
        if len(step.first_routes()) > 1
    }
    samples = load_samples(
        store, plan, buckets=buckets, min_calls=min_calls, seed=seed, candidates=candidates
    )
    for name, step in plan.steps.items():
        for route in served_routes(step):
            if (name, route) not in samples:
                msg = (
                    f"step {name!r}: candidate route {route} has fewer than {{field}} "
                    f"({min_calls}) calls in the step's bucket: the replay cannot serve it."
                )
                raise ThinSampleError(
                    msg,
                    field="min_calls",
                    value=min_calls,
                    fix="Ingest more calls of the route, or drop it from the step's candidates.",
                )
    return samples


@dataclass(slots=True)
class _Rehearsal:
    """
    Runs both sides against a fresh server, and picks the time scale and the lead.
    """

    plans: tuple[Plan, Plan]
    served: ServedModels
    out: Path
    smallest_s: float
    seed: int
    progress: Callable[[str, int, int], None] | None
    cpu_per_run_s: float = 0.0

    def once(
        self, scale: float, runs: int, lead_s: float, *, phase: str = ""
    ) -> tuple[list[SideRun], Fidelity]:
        path = self.out / "outcomes.json"
        text = dump_outcomes(self.served.tables, time_scale=scale, seed=self.seed, lead_s=lead_s)
        path.write_text(text, "utf-8")
        access = self.out / "access.jsonl"
        access.unlink(missing_ok=True)
        report = self.progress

        def progress(label: str, done: int, total: int) -> None:
            if report is not None:
                report(f"{phase}{label}", done, total)

        # Runs arrive at a steady pace, as production traffic does, rather than all at once
        # (a burst that measures the client's CPU, not the plan). The pace keeps the client's
        # loop mostly idle whatever the time scale: its CPU per run does not depend on it.
        per_run = self.cpu_per_run_s or _PROBE_CPU_S * len(self.plans[1].steps)
        pace_s = per_run / _BUSY
        cpu = time.process_time()
        with ServerProcess(path, access) as server:
            sides, lag = asyncio.run(
                _rehearse(self.plans, url=server.url, out=self.out, ids=self.served.ids,
                          runs=runs, scale=scale, pace_s=pace_s, progress=progress)
            )  # fmt: skip
        self.cpu_per_run_s = (time.process_time() - cpu) / (2 * runs)
        errors = timing_errors([side.ledger for side in sides], access, factor=scale)
        found = fidelity(time_scale=scale, smallest_cutoff_s=self.smallest_s, lead_s=lead_s,
                         errors_s=errors, loop_lag_s=lag)  # fmt: skip
        return sides, found

    def run(
        self, runs: int, time_scale: float | None
    ) -> tuple[list[SideRun], Fidelity, list[float], list[str]]:
        notes: list[str] = []
        tried: list[float] = []
        scale = time_scale if time_scale is not None else _PROBE_SCALE
        # the probe measures the constant part of the timing error (the lead) and the jitter
        _, probed = self.once(scale, min(runs, max(24, runs // 8)), 0.0, phase="probe, ")
        tried.append(scale)
        lead = max(probed.bias_s * scale, 0.0)
        if time_scale is None:
            scale = _chosen_scale(scale, probed.jitter_s / self.smallest_s)
        sides, found = self.once(scale, runs, lead)
        tried.append(scale)
        if not found.ok and time_scale is None and scale < _MAX_SCALE:
            notes.append(f"{found.describe()}: ran again slower")
            lead = max(lead + found.bias_s * scale, 0.0)
            scale = _chosen_scale(scale, found.error_share)
            sides, found = self.once(scale, runs, lead, phase="again, ")
            tried.append(scale)
        if not found.ok:
            notes.append(
                Advice(
                    f"{found.describe()}: this machine was too busy for the figures to mean "
                    f"anything; rerun on a quieter machine or with a larger {{time_scale}} (e.g. "
                    f"{_chosen_scale(scale, found.error_share, cap=10.0):.2g})"
                )
            )
        return sides, found, tried, notes


def _chosen_scale(scale: float, share: float, *, cap: float = _MAX_SCALE) -> float:
    """
    The time scale that brings a timing error (a share of the smallest cutoff) under the limit.

    The error is mostly real seconds of jitter, so it shrinks as the scale grows; the margin
    leaves room for a busier moment.
    """
    needed = scale * share / MAX_ERROR_SHARE * _MARGIN
    # faster than a quarter of the measured scale is a guess: lateness grows with the pace
    return float(min(max(needed, scale / 4, 0.01), cap))
