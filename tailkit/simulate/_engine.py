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

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailkit.simulate._sample import Array, Index, RouteSample


Bools = npt.NDArray[np.bool_]
ACTING = ("hedge", "retry", "downgrade")  # actions that start an extra attempt
SLOTS = 3  # draws per step and run: one per attempt it may make


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
    Draws for every step and run, one stream per step name and slot (common random numbers).

    A step has three slots, one per attempt it may make: its first attempt, the attempt its
    cutoff or an error starts, and the attempt that re-does invalid output. A draw is a
    uniform 16-bit index into the route's outcome table (`RouteSample`). Each slot is its own
    seeded stream, read ``runs`` draws at a time, so a slot a plan does not use is never
    drawn, and two plans that use different slots still share the draws of the slots they
    both use. `run_step` reads the same slots for every block of runs, so the streams stay
    aligned block by block.

    Args:
        runs: Runs per block: each `slot` call returns the next ``runs`` draws.
        seed: Base seed.
        keep: Draw each slot once and return the same draws every time (for the
            calibrator, which replays one block of runs for every candidate).
    """

    runs: int
    seed: int = 0
    keep: bool = False
    _streams: dict[tuple[str, int], np.random.Generator] = field(default_factory=dict)
    _cache: dict[tuple[str, int], Index] = field(default_factory=dict)

    def slot(self, name: str, k: int) -> Index:
        """
        The next block of draws of slot ``k`` (0-2) of step ``name``, one per run.
        """
        key = (name, k)
        if key in self._cache:
            return self._cache[key]
        stream = self._streams.get(key)
        if stream is None:
            stream = np.random.default_rng([self.seed, zlib.crc32(name.encode()), k])
            self._streams[key] = stream
        # the raw 64-bit output read as four 16-bit draws: one per entry of a 2**16 table
        u = stream.bit_generator.random_raw((self.runs + 3) // 4).view(np.uint16)[: self.runs]
        if self.keep:
            self._cache[key] = u
        return u

    def stack(self, name: str) -> Index:
        """
        All three slots of step ``name`` as a ``(3, runs)`` array (kept draws, if any).
        """
        return np.stack([self.slot(name, k) for k in range(SLOTS)])


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


@dataclass(frozen=True, slots=True)
class _Attempts:
    """
    Strictly private: one attempt per run. ``None`` flags are all false (saves the work).
    """

    index: Index
    end_s: Array  # when it ends: with its result, or failed
    err: Bools | None  # it failed
    invalid: Bools | None  # its result fails validation


def _attempt(route: RouteSample, index: Index) -> _Attempts:
    return _Attempts(
        index,
        route.end_table[index],
        index >= route.ok_entries if route.fails else None,
        route.invalid_table[index] if route.invalid_rate > 0.0 else None,
    )


def _pick(cond: Bools, a: Bools | None, b: Bools | None) -> Bools | None:
    """
    ``where(cond, a, b)`` for flags where ``None`` means all false.
    """
    if a is None and b is None:
        return None
    if a is None:
        return b & ~cond  # type: ignore[operator]
    if b is None:
        return a & cond
    return np.where(cond, a, b)


def _cut(step: StepModel, start_s: Array, model: WorkflowModel) -> Array | float:
    """
    The age at which the step acts: its cutoff, earlier when the run is late (DESIGN.md §3).
    """
    if not math.isfinite(model.deadline_s):
        return step.cutoff_s
    room = np.subtract(model.deadline_s - step.reserve_s, start_s)
    return np.clip(room, 0.0, step.cutoff_s, out=room)


def run_step(step: StepModel, start_s: Array, draws: Draws, model: WorkflowModel) -> StepOutcome:
    """
    Play one step in every run, starting at ``start_s`` (seconds into each run).

    Most attempts neither fail nor return invalid output, so every run is first played as if
    none did, in a few whole-array operations; the runs where some attempt did fail or was
    invalid are then played again in full by `general_step` and written over. Both paths
    agree exactly on the runs they share (a test checks every run against a plain-Python
    reference).
    """
    name, primary = step.name, step.primary
    held: dict[int, Index] = {}

    def slot(k: int) -> Index:
        if k not in held:
            held[k] = draws.slot(name, k)
        return held[k]

    # Read every slot this step may need, needed in this block or not: streams stay aligned.
    first = slot(0)
    acting = step.action != "wait" and math.isfinite(step.cutoff_s)
    if (acting and step.action != "fail") or (primary.fails and model.error_retries):
        slot(1)
    routes = (primary, step.second or primary, step.upgrade or primary)
    if any(r.invalid_rate > 0.0 for r in routes):
        slot(2)
    end1 = primary.end_table[first]
    by_total = step.signal == "total"
    fired = np.zeros(start_s.size, dtype=np.bool_)
    failed = np.zeros(start_s.size, dtype=np.bool_)
    duration, second = end1, None
    route = step.second or primary
    if acting:
        cut = _cut(step, start_s, model)
        fired = (end1 if by_total else primary.ttft_table[first]) > cut
        if step.action == "fail":
            duration = np.minimum(end1, cut) if by_total else np.where(fired, cut, end1)
            failed |= fired
        else:
            second = slot(1)
            start2 = route.end_table[second]
            start2 += cut
            if step.action != "hedge":
                duration = np.where(fired, start2, end1)
            elif by_total:  # an attempt that did not fire ended before the hedge could start
                duration = np.minimum(end1, start2, out=start2)
            else:
                duration = np.where(fired, np.minimum(end1, start2), end1)
    special = _special(step, first, second, fired)
    recovery = np.zeros(start_s.size, dtype=np.int8)
    if special is not None:
        rows = np.flatnonzero(special)
        if rows.size:
            sub = general_step(step, start_s[rows], lambda k: slot(k)[rows], model)
            duration[rows], failed[rows], recovery[rows] = sub.duration_s, sub.failed, sub.recovery
    extra = fired if step.action in ACTING else np.zeros(start_s.size, dtype=np.bool_)
    return StepOutcome(duration, failed, fired, extra, recovery)


def _special(step: StepModel, first: Index, second: Index | None, fired: Bools) -> Bools | None:
    """
    Runs in which an attempt the step used failed or returned invalid output (None: none).
    """
    primary, route = step.primary, step.second or step.primary
    special = None
    if primary.fails:
        special = first >= primary.ok_entries
    if primary.invalid_rate > 0.0:
        bad = primary.invalid_table[first]
        special = bad if special is None else special | bad
    if second is not None:
        if route.fails:
            bad = fired & (second >= route.ok_entries)
            special = bad if special is None else special | bad
        if route.invalid_rate > 0.0:
            bad = fired & route.invalid_table[second]
            special = bad if special is None else special | bad
    return special


def general_step(
    step: StepModel, start_s: Array, slot: Callable[[int], Index], model: WorkflowModel
) -> StepOutcome:
    """
    Play one step in the runs ``slot`` draws for, every outcome considered (errors, invalid).
    """
    one = _attempt(step.primary, slot(0))
    none = np.zeros(start_s.size, dtype=np.bool_)
    fired, duration, failed, invalid = none, one.end_s, one.err, one.invalid
    if step.action != "wait" and math.isfinite(step.cutoff_s):
        cut = _cut(step, start_s, model)
        watch = step.primary.ttft_table[one.index] if step.signal == "ttft" else one.end_s
        fired = watch > cut
        duration, failed, invalid = _act(step, cut, one, fired, slot)
    recovery = np.zeros(start_s.size, dtype=np.int8)
    if one.err is not None and model.error_retries:
        # failed before any cutoff fired: retry at once on the same route
        retry = one.err & ~fired
        two = _attempt(step.primary, slot(1))
        duration = np.where(retry, one.end_s + two.end_s, duration)
        failed = _pick(retry, two.err, failed)
        invalid = _pick(retry, two.invalid, invalid)
        recovery += retry
    if invalid is not None:
        redo = invalid if failed is None else invalid & ~failed
        three = _attempt(step.upgrade or step.primary, slot(2))
        bad = (
            _pick(redo, three.err, None)
            if three.invalid is None
            else redo & (three.invalid if three.err is None else three.err | three.invalid)
        )
        duration = np.where(redo, duration + three.end_s, duration)
        failed = bad if failed is None else failed if bad is None else failed | bad
        recovery += redo
    extra = fired if step.action in ACTING else none
    return StepOutcome(duration, none if failed is None else failed, fired, extra, recovery)


def _act(
    step: StepModel, cut: Array | float, one: _Attempts, fired: Bools, slot: Callable[[int], Index]
) -> tuple[Array, Bools | None, Bools | None]:
    """
    Duration, failure and invalid output once the step's action has run where it fired.
    """
    if step.action == "fail":
        gave_up = fired if one.err is None else fired | one.err
        return np.where(fired, cut, one.end_s), gave_up, one.invalid
    route = step.second or step.primary
    two = _attempt(route, slot(1))
    start2 = cut + two.end_s
    if step.action != "hedge":
        # retry / downgrade: the first attempt is cancelled at the cut, a fresh one starts
        duration = np.where(fired, start2, one.end_s)
        return duration, _pick(fired, two.err, one.err), _pick(fired, two.invalid, one.invalid)
    # hedge: the first good result wins; when both fail, the step ends with the later failure
    good1 = one.end_s if one.err is None else step.primary.good_table[one.index]
    good2 = start2 if two.err is None else cut + route.good_table[two.index]
    won = np.minimum(good1, good2)
    if step.signal == "total" and one.err is None:
        duration = won  # an attempt that did not fire ended before the hedge could start
    else:
        duration = np.where(fired, won, one.end_s)
    failed: Bools | None = None
    if one.err is not None:
        failed = one.err & ~fired  # failed before the cut: the error retry takes over
        if two.err is not None:
            both = one.err & fired & two.err
            duration = np.where(both, np.maximum(one.end_s, start2), duration)
            failed |= both
    second_won = fired & (good2 < good1)
    return duration, failed, _pick(second_won, two.invalid, one.invalid)


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
            start = ends[step.deps[0]] if step.deps else zero
            for d in step.deps[1:]:
                start = np.maximum(start, ends[d])
            outcome = run_step(step, start, draws, model)
        starts.append(start)
        outcomes.append(outcome)
        ends.append(start + outcome.duration_s)
    # a step ends after the steps it waits for: the run ends with the last of its sinks
    waited = {d for step in model.steps for d in step.deps}
    sinks = [e for i, e in enumerate(ends) if i not in waited]
    end = np.maximum.reduce(sinks) if len(sinks) > 1 else sinks[0]
    bad = np.zeros(runs, dtype=np.bool_)
    for step, outcome in zip(model.steps, outcomes, strict=True):
        if step.required:
            bad |= outcome.failed
    return RunOutcome(end, ~bad, tuple(starts), tuple(outcomes))
