"""
The vectorized Monte Carlo of a workflow: every run at once, one step at a time.

How a step plays out, in each run (all runs are numpy arrays; the only Python loop is over
steps). The first attempt goes to the step's route. If the signal it is watched on -- total
age, or time to first token -- passes the cutoff while it still runs, the step acts:

- ``hedge``: a second attempt starts on the hedge route; the first good result wins, and the
  loser is still billed (it counts as an extra attempt whoever wins);
- ``retry`` / ``downgrade``: the first attempt is cancelled and a fresh one starts on the same
  route (retry) or the downgrade route;
- ``fail``: the step gives up (a run survives that only for optional steps);
- ``wait``: nothing; the step takes as long as it takes.

The cutoff is deadline aware (DESIGN.md §3): a step acts at ``min(cutoff, deadline - reserve -
start)``, where the reserve is what the steps still waiting on it need at their median, so a
late run acts early rather than overrun. An attempt that fails before the cutoff is retried at
once on the same route; a result that fails validation goes to the upgrade route (or again to
the same route). Attempts are independent draws: the tail this models is the transient one,
which a fresh attempt escapes (the tail table says whether a route's tail is transient).

Every draw comes from `Draws`, seeded per step name, so two plans that differ in one step see
the same luck in every other step: comparisons between candidates are paired (common random
numbers) and their differences far more precise than either estimate alone.
"""

from __future__ import annotations

import math
import zlib

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailkit.simulate._sample import Array, RouteSample


Bools = npt.NDArray[np.bool_]
ACTING = ("hedge", "retry", "downgrade")  # actions that start an extra attempt
SLOTS = 6  # uniforms per step and run: (latency rank, outcome coin) x three attempts


@dataclass(frozen=True, slots=True, eq=False)
class StepModel:
    """
    One step as the simulator runs it.

    Args:
        name: Step name.
        deps: Indexes (in `WorkflowModel.steps`) of the steps it waits for.
        required: Whether a run fails when this step fails.
        primary: Latency of the step's route.
        signal: ``"total"`` or ``"ttft"``: which age the cutoff watches.
        cutoff_s: Age in seconds at which the step acts; ``math.inf``: never.
        action: ``hedge``, ``retry``, ``downgrade``, ``fail`` or ``wait``.
        second: Route of the attempt the action starts (``None``: the primary route).
        upgrade: Route that re-does a result that failed validation (``None``: primary).
        hedge: The step's hedge route whatever its action (``None``: none), for policies.
        idempotent: Whether an attempt may be repeated (hedged, retried).
        reserve_s: Seconds the steps still waiting on this one need (their median path).
        tokens: Tokens billed per attempt (expected input + output), for extra tokens.
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
    idempotent: bool = True
    reserve_s: float = 0.0
    tokens: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class WorkflowModel:
    """
    A workflow as the simulator runs it: steps in dependency order, and the deadline.

    Args:
        steps: Steps, every step after the steps it depends on.
        deadline_s: End-to-end deadline in seconds; ``math.inf``: none.
        error_retries: Immediate retries of an attempt that failed before its cutoff (0 or 1).
    """

    steps: tuple[StepModel, ...]
    deadline_s: float = math.inf
    error_retries: int = 1


@dataclass(slots=True)
class Draws:
    """
    Uniforms for every step and run, seeded per step name and slot (common random numbers).

    A step has six slots: (latency rank, outcome coin) for its first attempt, for the attempt
    its cutoff or an error starts, and for the attempt that re-does invalid output. Each slot
    has its own seed, so a slot a plan does not use is never drawn, and two plans that use
    different slots still share the draws of the slots they both use.

    Args:
        runs: Number of runs.
        seed: Base seed.
        keep: Keep draws after first use (for the calibrator's many passes).
    """

    runs: int
    seed: int = 0
    keep: bool = False
    _cache: dict[tuple[str, int], npt.NDArray[np.float32]] = field(default_factory=dict)

    def slot(self, name: str, k: int) -> npt.NDArray[np.float32]:
        """
        The uniforms of slot ``k`` (0-5) of step ``name``, one per run.
        """
        key = (name, k)
        if key in self._cache:
            return self._cache[key]
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode()), k])
        u = rng.random(self.runs, dtype=np.float32)
        if self.keep:
            self._cache[key] = u
        return u

    def step(self, name: str) -> StepDraws:
        """
        The slots of step ``name``, drawn when first read.
        """
        return StepDraws(self, name)

    def stack(self, name: str) -> npt.NDArray[np.float32]:
        """
        All six slots of step ``name`` as a ``(6, runs)`` array.
        """
        return np.stack([self.slot(name, k) for k in range(SLOTS)])


class StepDraws:
    """
    One step's slots, drawn on first use and held for the step's simulation.
    """

    __slots__ = ("_draws", "_held", "_name")

    def __init__(self, draws: Draws, name: str) -> None:
        self._draws, self._name = draws, name
        self._held: dict[int, npt.NDArray[np.float32]] = {}

    def __getitem__(self, k: int) -> npt.NDArray[np.float32]:
        if k not in self._held:
            self._held[k] = self._draws.slot(self._name, k)
        return self._held[k]


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """
    One step in every run: when it ended, whether it failed, the attempts it added.

    Args:
        duration_s: Seconds from the step's start to its result (or to giving up).
        failed: It produced no valid result.
        fired: Its cutoff fired (it acted).
        extra: Attempts its action started (hedge, retry, downgrade).
        recovery: Attempts started to recover from an error or invalid output.
    """

    duration_s: Array
    failed: Bools
    fired: Bools
    extra: Bools
    recovery: npt.NDArray[np.int8]


def _attempt(
    route: RouteSample, u: StepDraws, k: int, *, ttft: bool = False
) -> tuple[Array, Array | None, Bools, Bools | None]:
    """
    Draw attempts from slots ``k`` (rank) and ``k + 1`` (coin).

    Returns seconds to their end, seconds to first token (when ``ttft``), whether they
    failed, and whether their output is invalid (``None`` when the route never is). A failing
    attempt ends after the route's error time; an invalid one ends as a good one.
    """
    rank = u[k]
    total, first = route.draw(rank, ttft=ttft)
    if route.error_rate <= 0.0 and route.invalid_rate <= 0.0:
        return total, first, np.zeros(total.shape, dtype=np.bool_), None
    coin = u[k + 1]
    err = coin < np.float64(route.error_rate)  # compared in float64, as the reference does
    if route.error_rate > 0.0:
        spent = route.draw_error(rank)
        total = np.where(err, spent, total)
        if first is not None:
            first = np.where(err, spent, first)
    invalid = None
    if route.invalid_rate > 0.0:
        low, high = np.float64(route.error_rate), np.float64(route.error_rate + route.invalid_rate)
        invalid = (coin >= low) & (coin < high)
    return total, first, err, invalid


def run_step(step: StepModel, start_s: Array, u: StepDraws, model: WorkflowModel) -> StepOutcome:
    """
    Play one step in every run, starting at ``start_s`` (seconds into each run).
    """
    n = start_s.size
    end1, first1, err1, inv1 = _attempt(step.primary, u, 0, ttft=step.signal == "ttft")
    none = np.zeros(n, dtype=np.bool_)
    acts = step.action != "wait" and math.isfinite(step.cutoff_s)
    fired, duration, failed, invalid = none, end1, err1, inv1
    if acts:
        cut: Array | float = step.cutoff_s
        if math.isfinite(model.deadline_s):
            cut = np.minimum(
                step.cutoff_s, np.maximum(model.deadline_s - step.reserve_s - start_s, 0.0)
            )
        watch = first1 if first1 is not None else end1
        fired = watch > cut
        duration, failed, invalid = _act(step, cut, end1, err1, inv1, u, fired)
    recovery = np.zeros(n, dtype=np.int8)
    if model.error_retries and step.primary.error_rate > 0.0:
        # failed before any cutoff fired: retry at once on the same route
        retry = err1 & ~fired
        end2, _, err2, inv2 = _attempt(step.primary, u, 2)
        duration = np.where(retry, end1 + end2, duration)
        failed = np.where(retry, err2, failed)
        if inv2 is not None:
            invalid = np.where(retry, inv2, False if invalid is None else invalid)
        recovery += retry
    if invalid is not None:
        duration, failed, upgraded = _upgrade(step, duration, failed, invalid, u)
        recovery += upgraded
    extra = fired if step.action in ACTING else none
    return StepOutcome(duration, failed, fired, extra, recovery)


def _act(  # noqa: PLR0917 - private; one call site passes the first attempt through
    step: StepModel,
    cut: Array | float,
    end1: Array,
    err1: Bools,
    inv1: Bools | None,
    u: StepDraws,
    fired: Bools,
) -> tuple[Array, Bools, Bools | None]:
    """
    Duration, failure and invalid output once the step's action has run where it fired.
    """
    if step.action == "fail":
        return np.where(fired, cut, end1), err1 | fired, inv1
    route = step.second or step.primary
    end2, _, err2, inv2 = _attempt(route, u, 2)
    started = cut + end2
    if step.action == "hedge":
        # first good result wins; when both fail the step ends with the later failure
        good1 = np.where(err1, np.inf, end1)
        good2 = np.where(err2, np.inf, started)
        won = np.minimum(good1, good2)
        both_failed = err1 & err2
        hedged = np.where(both_failed, np.maximum(end1, started), won)
        duration = np.where(fired, hedged, end1)
        failed = np.where(fired, both_failed, err1)
        if inv1 is None and inv2 is None:
            return duration, failed, None
        winner_invalid = np.where(good1 <= good2, _or_none(inv1, end1), _or_none(inv2, end1))
        return duration, failed, np.where(fired, winner_invalid, _or_none(inv1, end1))
    # retry / downgrade: the first attempt is cancelled at the cut, a fresh one starts
    duration = np.where(fired, started, end1)
    failed = np.where(fired, err2, err1)
    if inv1 is None and inv2 is None:
        return duration, failed, None
    return duration, failed, np.where(fired, _or_none(inv2, end1), _or_none(inv1, end1))


def _or_none(flags: Bools | None, like: Array) -> Bools:
    return np.zeros(like.shape, dtype=np.bool_) if flags is None else flags


def _upgrade(
    step: StepModel, duration: Array, failed: Bools, invalid: Bools, u: StepDraws
) -> tuple[Array, Bools, Bools]:
    """
    Re-do invalid results on the upgrade route; a second failure fails the step.
    """
    redo = invalid & ~failed
    end3, _, err3, inv3 = _attempt(step.upgrade or step.primary, u, 4)
    bad = err3 if inv3 is None else err3 | inv3
    return np.where(redo, duration + end3, duration), failed | (redo & bad), redo


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """
    Every run: when each step started and ended, and what each step did.

    Args:
        end_s: Seconds from the run's start to its end (its last step's end).
        ok: Every required step produced a valid result (deadline not yet applied).
        starts: Start of each step, in seconds into the run.
        steps: Each step's outcome.
    """

    end_s: Array
    ok: Bools
    starts: tuple[Array, ...]
    steps: tuple[StepOutcome, ...]


def run_workflow(
    model: WorkflowModel,
    draws: Draws,
    *,
    reuse: RunOutcome | None = None,
    changed: int = 0,
) -> RunOutcome:
    """
    Play every run of the workflow.

    Args:
        model: The workflow.
        draws: Uniforms for every step (``draws.runs`` runs).
        reuse: A previous outcome whose steps before ``changed`` are still valid (the
            calibrator changes one step at a time; earlier steps do not move).
        changed: Index of the first step that differs from ``reuse``.
    """
    runs = draws.runs
    starts: list[Array] = []
    outcomes: list[StepOutcome] = []
    ends: list[Array] = []
    zero = np.zeros(runs)
    for i, step in enumerate(model.steps):
        if reuse is not None and i < changed:
            start, outcome = reuse.starts[i], reuse.steps[i]
        else:
            start = zero
            for d in step.deps:
                start = np.maximum(start, ends[d])
            outcome = run_step(step, start, draws.step(step.name), model)
        starts.append(start)
        outcomes.append(outcome)
        ends.append(start + outcome.duration_s)
    end = np.maximum.reduce(ends) if len(ends) > 1 else ends[0]
    ok = np.ones(runs, dtype=np.bool_)
    for step, outcome in zip(model.steps, outcomes, strict=True):
        if step.required:
            ok &= ~outcome.failed
    return RunOutcome(end, ok, tuple(starts), tuple(outcomes))
