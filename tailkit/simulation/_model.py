"""
What the simulator runs: a workflow's steps as it models them, and what each run did.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailkit.simulation._sample import Array, RouteSample


Bools = npt.NDArray[np.bool_]
ACTING = ("hedge", "retry", "downgrade")  # actions that start an extra attempt
# Draws per step and run, one per attempt it may make: the first attempt, the attempt a cutoff
# or an error starts, the upgrade, and the cutoff's attempt when slot 1 went to an error's
# retry (`tailkit.simulation._couple`). Each slot is its own stream: adding one moves no other.
SLOTS = 4
# An extra attempt due this close to the run deadline, or later, never starts (the executor's
# rule too: tailkit.executor._step.NO_TIME_S); it is not counted against the budget.
NO_TIME_S = 1e-6


@dataclass(frozen=True, slots=True, eq=False)
class StepModel:
    """
    One step as the simulator runs it.

    Args:
        name: Step name.
        deps: Indexes (in `WorkflowModel.steps`) of the steps it waits for.
        required: Whether a run fails when this step fails.
        primary: Latency of the step's route.
        signal: ``"total"`` or ``"ttft"``: which age ``cutoff_s`` watches.
        cutoff_s: Age in seconds at which the step acts, on the ``signal`` clock, tightened to
            the deadline (see `acts_at`); ``math.inf``: never.
        action: ``hedge``, ``retry``, ``downgrade``, ``fail`` or ``wait``.
        second: Route of the attempt the action starts (``None``: the primary route).
        upgrade: Route that re-does a result that failed validation (``None``: primary).
        hedge: The step's hedge route whatever its action (``None``: none), for policies.
        failover: Where an error's retry goes: the step's hedge route when it is on another
            provider than the step's route (``None``: the retry stays on the primary route).
        idempotent: Whether an attempt may be repeated (hedged, retried, also after an error).
        reserve_s: Seconds the steps still waiting on this one need (their median path).
        tokens: Tokens billed per attempt (expected input + output), for extra tokens.
        ttft_cutoff_s: The plan's TTFT cutoff in seconds, which acts as set (not tightened to
            the deadline, as in the executor) when ``signal`` is ``total``; ``math.inf``: none.
        total_cutoff_s: The plan's total-age cutoff, which acts as set when ``signal`` is
            ``ttft`` (a plan may set both clocks); ``math.inf``: none.
        stall_cutoff_s: The plan's stall cutoff: seconds without a chunk mid-stream after
            which the step acts, as set (`RouteSample.stall_cut` says where each outcome of a
            watched attempt is cut); ``math.inf``: none.
        shares: Per route the step may repeat an attempt on (its own included), the
            correlation of a repeat's latency rank with the first attempt's
            (`tailkit.simulation._couple`); a route not listed: 0, an independent draw.
        back: Where a hedge of an attempt on the ``second`` route goes (``None``: the
            primary route): the executor's hedge target of an attempt on the hedge route,
            which differs from the primary when live routing chose another candidate.
        live: The step's live routing (``None``: its first attempt always goes to
            ``primary``, cut at ``cutoff_s``); the simulator plays it by batches of runs
            (`tailkit.simulation._live`).
        cutoffs_s: Per run of the block being played, the cutoff on the ``signal`` clock
            (live routing's), in place of ``cutoff_s``; ``None``: ``cutoff_s`` in every run.
            ``cutoff_s`` then only says that the signal clock has a cutoff (it is finite).
    """

    name: str
    deps: tuple[int, ...]
    required: bool
    primary: RouteSample
    signal: str = "total"
    cutoff_s: float = math.inf
    action: str = "wait"
    second: RouteSample | None = None
    upgrade: RouteSample | None = None
    hedge: RouteSample | None = None
    failover: RouteSample | None = None
    idempotent: bool = True
    reserve_s: float = 0.0
    tokens: float = 0.0
    ttft_cutoff_s: float = math.inf
    total_cutoff_s: float = math.inf
    stall_cutoff_s: float = math.inf
    shares: tuple[tuple[RouteSample, float], ...] = ()
    back: RouteSample | None = None
    live: LiveModel | None = None
    cutoffs_s: Array | None = field(default=None, repr=False)

    def rho(self, route: RouteSample | None) -> float:
        """
        The correlation of a repeat on ``route`` (``None``: the step's own) with the first.
        """
        route = route or self.primary
        return next((rho for r, rho in self.shares if r is route), 0.0)

    @property
    def other_cutoff_s(self) -> float:
        """
        The cutoff on the clock ``signal`` does not watch (``math.inf``: none).
        """
        return self.total_cutoff_s if self.signal == "ttft" else self.ttft_cutoff_s

    @property
    def acting(self) -> bool:
        """
        Whether a cutoff can make the step act (its action is not ``wait``, a cutoff is set).
        """
        return self.action != "wait" and (
            math.isfinite(self.cutoff_s)
            or math.isfinite(self.other_cutoff_s)
            or math.isfinite(self.stall_cutoff_s)
        )

    @property
    def as_set(self) -> bool:
        """
        Whether a cutoff not tightened to the deadline may act (the other clock's, a stall).

        Each acts as the plan sets it, as in the executor.
        """
        return math.isfinite(self.other_cutoff_s) or math.isfinite(self.stall_cutoff_s)


@dataclass(frozen=True, slots=True, eq=False)
class LiveModel:
    """
    A step's live routing, as the simulator plays it (`tailkit.config.LiveRouting`).

    Args:
        routes: The candidate routes, in plan order (`tailkit.config.Step.first_routes`).
        variants: Per candidate, the step with that route as its first route: its hedge
            target, failover, sharing and hedge-back route as the executor picks them for a
            first attempt there (`tailkit.simulation._build.live_model`).
        prior_s: Per candidate, its value while its window is thin (seconds).
        quantile: The quantile of a window that is the route's value, in (0, 1).
        low_s: The live cutoff's lower bound (seconds).
        high_s: Its upper bound (seconds).
        window: Latest observations a route's value is taken over.
        min_calls: Fewer observations: the prior stands.
        explore_every: Every n-th first attempt goes to another candidate (0: never).
        sets_cutoff: Whether the plan sets a cutoff on the step's signal clock (else live
            routing only routes).
    """

    routes: tuple[str, ...]
    variants: tuple[StepModel, ...]
    prior_s: tuple[float, ...]
    quantile: float
    low_s: float
    high_s: float
    window: int
    min_calls: int
    explore_every: int
    sets_cutoff: bool


@dataclass(frozen=True, slots=True, eq=False)
class WorkflowModel:
    """
    A workflow as the simulator runs it: steps in dependency order, and the deadline.

    Args:
        steps: Steps, every step after the steps it depends on.
        deadline_s: End-to-end deadline in seconds; ``math.inf``: none.
        error_retries: Immediate retries of a first attempt that failed before its cutoff,
            for idempotent steps (0 or 1).
    """

    steps: tuple[StepModel, ...]
    deadline_s: float = math.inf
    error_retries: int = 1


def needs_slots(step: StepModel, model: WorkflowModel) -> tuple[bool, bool, bool]:
    """
    Whether the step may draw slots 1 (a cutoff's or an error's attempt), 2 and 3.

    Slot 2 is the upgrade, slot 3 the cutoff's attempt after an error's retry (watched too).

    Every block of runs reads the same slots, so the streams stay aligned block by block.
    """
    acts = step.acting and step.action in ACTING
    retries = retries_errors(step, model)
    routes = (
        step.primary, step.second or step.primary, step.upgrade or step.primary,
        step.failover or step.primary,
    )  # fmt: skip
    return acts or retries, any(r.invalid_rate > 0.0 for r in routes), acts and retries


def retries_errors(step: StepModel, model: WorkflowModel) -> bool:
    """
    Whether a failed first attempt is retried at once (only idempotent steps, as the executor).
    """
    return bool(model.error_retries) and step.idempotent and step.primary.fails


def cut_at(step: StepModel, start_s: Array, model: WorkflowModel) -> Array | float:
    """
    The age at which the step acts on its signal clock: its cutoff, earlier when the run is late.

    ``min(cutoff, max(deadline - reserve - start, 0))``, as the executor computes it; the
    cutoff is each run's own where live routing set one (``step.cutoffs_s``).
    """
    cutoff = step.cutoff_s if step.cutoffs_s is None else step.cutoffs_s
    if not math.isfinite(model.deadline_s):
        return cutoff
    room = np.subtract(model.deadline_s - step.reserve_s, start_s)
    return np.clip(room, 0.0, cutoff, out=room)


def acts_at(
    step: StepModel,
    start_s: Array,
    model: WorkflowModel,
    end_s: Array,
    ttft_s: Array,
    *,
    stall_s: Array | None = None,
) -> tuple[Bools, Array]:
    """
    Where the step acts on its first attempt, and the age it acts at (``inf`` where it does not).

    The first attempt must still be running at a cutoff: the signal clock's, tightened to the
    deadline (`cut_at`), the other clock's or the stall cutoff, which are not; the step acts at
    the earliest one that passes. ``stall_s`` is the age at which the stall cutoff cuts each
    attempt (`RouteSample.stall_cut`: ``inf`` where it does not; ``None``: nowhere), always
    before the attempt's end, as the executor's stall cutoff passes mid-stream. An extra
    attempt due too close to the deadline never starts (`in_time`): there the step goes on
    waiting.
    """
    inf = np.full(start_s.size, np.inf)
    if step.acting and math.isfinite(step.cutoff_s):
        cut = cut_at(step, start_s, model)
        watch = ttft_s if step.signal == "ttft" else end_s
        act = np.where(watch > cut, cut, inf)
    else:
        act = inf
    if step.acting and math.isfinite(step.other_cutoff_s):
        watch = end_s if step.signal == "ttft" else ttft_s
        act = np.minimum(act, np.where(watch > step.other_cutoff_s, step.other_cutoff_s, inf))
    if step.acting and stall_s is not None:
        act = np.minimum(act, stall_s)
    if step.action in ACTING:
        act = np.where(in_time(step, start_s, act, model), act, inf)
    return act < np.inf, act


def in_time(step: StepModel, start_s: Array, act_s: Array | float, model: WorkflowModel) -> Bools:
    """
    Where an extra attempt due at age ``act_s`` may still start (before the deadline).

    It must be due earlier than `NO_TIME_S` before the deadline, as in the executor.
    """
    if not math.isfinite(model.deadline_s):
        return np.ones(start_s.size, dtype=np.bool_)
    due = np.add(start_s, act_s)
    return due < model.deadline_s - NO_TIME_S


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """
    One step in every run: when it ended, whether it failed, the attempts it added.

    Args:
        duration_s: Seconds from the step's start to its result (or to giving up); 0 for a
            skipped step.
        failed: It produced no valid result (skipped steps included).
        fired: Its cutoff fired (it acted).
        extra: Attempts its action started (hedge, retry, downgrade) before the deadline:
            the attempts the hedge budget pays for.
        recovery: Attempts started to recover from an error or invalid output.
        skipped: It never started, as a required step it waits for failed (``None``: none
            skipped).
        live: What live routing decided in each run (``None``: the step routes fixed).
    """

    duration_s: Array
    failed: Bools
    fired: Bools
    extra: Bools
    recovery: npt.NDArray[np.int8]
    skipped: Bools | None = None
    live: LiveOutcome | None = None


@dataclass(frozen=True, slots=True)
class LiveOutcome:
    """
    Live routing's decisions for one step, in every run.

    Args:
        route: Index of the chosen candidate (`LiveModel.routes`); -1 where the step never
            started.
        cutoff_s: The live cutoff on the signal clock; NaN where the step never started or
            sets no cutoff on it.
        explored: The decision was an explore turn (not the best route).
    """

    route: npt.NDArray[np.int8]
    cutoff_s: Array
    explored: Bools


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """
    Every run: when each step started and ended, and what each step did.

    Args:
        end_s: Seconds from the run's start to its end (its last step's end; an optional step
            still running at the deadline counts as ending there, as the executor cuts it).
        ok: Every required step produced a valid result (deadline not yet applied).
        starts: Start of each step, in seconds into the run.
        steps: Each step's outcome.
    """

    end_s: Array
    ok: Bools
    starts: tuple[Array, ...]
    steps: tuple[StepOutcome, ...]
