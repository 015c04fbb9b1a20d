"""
Live routing, simulated: runs in flight decide from what the runs before them observed.

A step with a ``live`` block (`tailkit.config.LiveRouting`) sends each first attempt to the
candidate route whose recent latency is best and cuts it at that route's recent quantile,
within the plan's bounds; the executor learns from every first attempt as it ends
(`tailkit.executor`'s live router). The simulator plays the same rule on the same numbers, by
batches: runs are taken in order, ``concurrency`` at a time (the runs in flight at once);
every run of a batch decides from the state at the batch's start -- the decision counter,
which sets the explore turns, still advances run by run -- and the batch's observations join
the windows, in run order, after the batch. With ``concurrency=1`` the runs go one after
another, as an executor running them one after another does: the same decisions, run for run
(``tests/test_twin.py``).

Only the first attempt of a live step is observed, so a step's state depends on that step
alone: steps are still played one at a time over every run of a block (`simulate_runs`), and
a live step's decisions are taken in a loop over its batches before the engine plays it. That
loop must know, for each run and candidate, what the first attempt would tell at any cutoff
the live rule may set. It tells its value (its age on the signal clock: the total when it
completed with a result, the time to its first token) unless something ended it first: the
step's action at a cutoff (a retry, a downgrade or a fail cancels it; a hedge that returns a
valid result first beats it), a cutoff that acts as set (the other clock's, a stall) or the
run deadline; then it tells ``inf`` (censored). A failure that ends it by itself tells
nothing. A later cutoff only moves the action later, so each run and candidate has a
threshold: from that cutoff up the first attempt tells its value, below it ``inf``
(`_Told`). The loop over batches is then a comparison and a window update per batch; the
engine plays the step once per chosen route, each run with its own cutoff
(`StepModel.cutoffs_s`).

The draws stay the simulator's: one stream per (step, slot), read for every run whatever
route it chose (every slot any candidate may use is read, so the streams stay aligned block
by block), and a repeat is coupled to the first attempt on the route the first attempt went
to (`tailkit.simulation._couple`). What is assumed: each route's latency is the same
distribution throughout the simulated runs (the tails the plan was calibrated on); the
executor's breaker and throttle, which may reroute a first attempt after the decision, are
not modelled, as for fixed routing.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailkit.simulation._couple import SlotSource, action_route, couple, repeat_route
from tailkit.simulation._model import (
    ACTING,
    NO_TIME_S,
    SLOTS,
    Bools,
    LiveModel,
    LiveOutcome,
    StepModel,
    StepOutcome,
    WorkflowModel,
    in_time,
    needs_slots,
)
from tailkit.simulation._sample import Array, Index


__all__ = ["DEFAULT_CONCURRENCY", "LiveState", "order_index", "told"]

DEFAULT_CONCURRENCY = 16
"""Runs in flight at once when a live plan is simulated (`LiveState`)."""

StepRunner = Callable[[StepModel, Array, SlotSource, WorkflowModel], StepOutcome]


def order_index(quantile: float, calls: int) -> int:
    """
    The 0-based index of the order statistic at ``quantile`` among ``calls`` sorted values.

    ``ceil(quantile * calls) - 1``, at least 0 (numpy's ``inverted_cdf``), as the executor.
    """
    return max(math.ceil(quantile * calls) - 1, 0)


class _Rows:
    """
    Strictly private: a step's raw slot draws, for some rows of the block (`SlotSource`).
    """

    __slots__ = ("_raw", "_rows")

    def __init__(self, raw: dict[int, Index], rows: npt.NDArray[np.intp] | None) -> None:
        self._raw, self._rows = raw, rows

    def slot(self, name: str, k: int) -> Index:
        raw = self._raw[k]
        return raw if self._rows is None else raw[self._rows]


@dataclass(frozen=True, slots=True)
class _Told:
    """
    Strictly private: what one candidate's first attempt tells, in every run of the block.

    ``value``: its value on the signal clock (NaN: a failure that tells nothing);
    ``threshold``: the least cutoff at which it tells it (``inf``: never; below it, it
    tells ``inf``).
    """

    value: Array
    threshold: Array


def told(step: StepModel, start_s: Array, first: Index, raw: dict[int, Index],
         model: WorkflowModel, *, sets_cutoff: bool) -> tuple[Array, Array]:  # fmt: skip
    """
    What a first attempt on ``step``'s primary route tells live routing, at any cutoff.

    Args:
        step: The step with the candidate as its first route (a `LiveModel` variant).
        start_s: Each run's start of the step, seconds into the run.
        first: The first attempt's draws (slot 0), one per run.
        raw: The step's other raw slot draws (1 and 2 where the step may read them).
        model: The workflow (its deadline).
        sets_cutoff: Whether live routing sets the cutoff on the signal clock.

    Returns:
        ``(value, threshold)``: the first attempt's value on the signal clock (NaN where it
        fails before it has one: it tells nothing), and the least live cutoff at which it
        tells it rather than ``inf`` (``inf``: at none, ``-inf``: at every one).
    """
    route = step.primary
    end = route.end_table[first]
    ttft = route.ttft_table[first]
    failed = first >= route.ok_entries
    if step.signal == "ttft":
        watch = ttft
        value = np.where(failed & ~(ttft < end), np.nan, ttft)  # a first token came, or not
    else:
        watch = end
        value = np.where(failed, np.nan, end)
    age = np.where(np.isnan(value), end, value)  # what must come before anything ends it
    deadline = model.deadline_s
    room = np.full(start_s.size, np.inf) if math.isinf(deadline) else deadline - start_s
    hedge = _hedge_after(step, first, raw) if step.action == "hedge" else None
    fixed = np.full(start_s.size, np.inf)  # the first cutoff that acts as set
    if step.acting:
        other = step.other_cutoff_s
        if math.isfinite(other):
            seen = end if step.signal == "ttft" else ttft
            fixed = np.where(seen > other, other, fixed)
        stall = route.stall_cut(first, step.stall_cutoff_s)
        if stall is not None:
            fixed = np.minimum(fixed, stall)
        if step.action in ACTING:
            fixed = np.where(in_time(step, start_s, fixed, model), fixed, np.inf)
    if step.action in ACTING and hedge is not None:
        fixed = fixed + hedge  # a hedge ends the first attempt when it returns a valid result
    free = (age <= room) & (age <= fixed)
    if not (step.acting and sets_cutoff and math.isfinite(step.cutoff_s)):
        return value, np.where(free, -np.inf, np.inf)
    # the signal clock's cutoff c acts at min(c, reach) if the watched age passes it; the
    # first attempt still tells its value when min(c, reach) >= least (each reason below)
    reach = np.inf if math.isinf(deadline) else np.maximum(deadline - step.reserve_s - start_s, 0)
    least = watch.copy()  # the cutoff never passes
    if step.action in ACTING and math.isfinite(deadline):
        least = np.minimum(least, deadline - NO_TIME_S - start_s)  # too late to act
    least = np.minimum(least, age if hedge is None else age - hedge)  # it ends before
    threshold = np.where(least <= reach, least, np.inf)
    return value, np.where(free, threshold, np.inf)


def _hedge_after(step: StepModel, first: Index, raw: dict[int, Index]) -> Array:
    """
    Seconds from a hedge's start to the step's first valid result on the hedge's side.

    The hedge itself, or, when it returns invalid output, the upgrade that redoes it
    (``inf``: neither returns a valid result).
    """
    head = step.primary
    route = repeat_route(step, 1)
    index = couple(first, raw[1], step.rho(route), head, route)
    hedge = action_route(step, head)
    good = hedge.good_table[index]
    if hedge.invalid_rate > 0.0 and 2 in raw:
        upgrade = step.upgrade or head
        redo = couple(first, raw[2], step.rho(upgrade), head, upgrade)
        later = np.where(upgrade.invalid_table[redo], np.inf, upgrade.good_table[redo])
        good = np.where(hedge.invalid_table[index], hedge.end_table[index] + later, good)
    return good


class _Routes:
    """
    Strictly private: one live step's state: a window per candidate, the decision counter.

    A window is a ring of the route's latest ``window`` observations (their order does not
    matter to an order statistic, only which are the latest); a batch's observations go in
    at once, and the value of a window that changed is taken again (one partial sort).
    """

    __slots__ = (
        "_held", "_next", "_rings", "batch", "cuts", "live", "pending", "seen", "shares", "turn",
        "values",
    )  # fmt: skip

    def __init__(self, live: LiveModel) -> None:
        self.live = live
        count = len(live.routes)
        self._rings = [np.empty(live.window) for _ in range(count)]
        self._held = [0] * count  # observations in each ring
        self._next = [0] * count  # where each ring's next observation goes
        self.pending: list[list[float]] = [[] for _ in range(count)]
        self.values = list(live.prior_s)
        self.shares = [0.0] * count  # each window's share of inf (cut) observations
        low, high = live.low_s, live.high_s
        self.cuts = [min(max(v, low), high) for v in self.values]
        self.turn = 0  # decisions taken (the counter n of the rule)
        self.seen = 0  # runs played (batches are counted in runs, started or not)
        self.batch: int | None = None  # the best candidate of the batch in flight

    def window(self, r: int) -> Array:
        """
        Candidate ``r``'s window, oldest first.
        """
        ring, held, at = self._rings[r], self._held[r], self._next[r]
        if held < ring.size:
            return ring[:held].copy()
        return np.concatenate([ring[at:], ring[:at]])

    def _let_in(self, r: int, new: list[float]) -> None:
        """
        Candidate ``r``'s new observations join its window; its value is taken again.
        """
        ring = self._rings[r]
        size, m, at = ring.size, len(new), self._next[r]
        if at + m <= size:  # most batches: one slice
            ring[at : at + m] = new
            self._next[r] = at + m if at + m < size else 0
        elif m >= size:
            ring[:] = new[m - size :]
            self._next[r] = 0
        else:
            first = size - at
            ring[at:] = new[:first]
            ring[: m - first] = new[first:]
            self._next[r] = m - first
        held = self._held[r]
        if held < size:
            held = self._held[r] = min(held + m, size)
        new.clear()
        live = self.live
        if held < live.min_calls:
            return  # the prior stands
        ranked = ring.copy() if held == size else ring[:held].copy()
        self.shares[r] = int(np.count_nonzero(np.isinf(ranked))) / held
        i = order_index(live.quantile, held)
        ranked.partition(i)
        value = self.values[r] = float(ranked[i])
        self.cuts[r] = (
            value
            if live.low_s <= value <= live.high_s
            else min(max(value, live.low_s), live.high_s)
        )

    def start_batch(self) -> int:
        """
        Let the last batch's observations in; the best candidate the next batch decides by.
        """
        for r, new in enumerate(self.pending):
            if new:
                self._let_in(r, new)
        values, shares = self.values, self.shares
        # lowest value; between cut values, the window cut least often; then plan order
        self.batch = min(
            range(len(values)),
            key=lambda r: (values[r], shares[r] if values[r] == math.inf else 0.0, r),
        )
        return self.batch


class LiveState:
    """
    Live routing's state over the runs of one simulation, and the rule that plays it.

    Keyed by step name: the windows, the decision counter and the batch in progress carry
    from one block of runs to the next (`simulate_runs` with the same state), so a
    simulation in blocks decides as one in a single block.

    Args:
        concurrency: Runs in flight at once: each batch of that many runs decides from the
            state at its start (1: runs one after another).

    Raises:
        ValueError: ``concurrency`` is below 1.
    """

    __slots__ = ("_steps", "concurrency")

    def __init__(self, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        if concurrency < 1:
            msg = f"concurrency must be at least 1 (runs in flight at once), got {concurrency}"
            raise ValueError(msg)
        self.concurrency = concurrency
        self._steps: dict[str, _Routes] = {}

    def windows(self, step: str) -> dict[str, Array]:
        """
        Each candidate route's window of step ``step`` (oldest first), as it stands now.

        The observations of a batch still in flight are not in it yet.
        """
        state = self._steps.get(step)
        if state is None:
            return {}
        return {route: state.window(r) for r, route in enumerate(state.live.routes)}

    def play(
        self,
        step: StepModel,
        start_s: Array,
        *,
        skipped: Bools | None,
        draws: SlotSource,
        model: WorkflowModel,
        run: StepRunner,
    ) -> StepOutcome:
        """
        Play a live step in every run of the block: decide, batch by batch, then run it.

        Args:
            step: The step (its ``live`` set).
            start_s: Each run's start of the step.
            skipped: Runs in which it never starts (``None``: none). Nor does it start, and
                decide, in a run that reaches it at or after the deadline (the executor has
                cut the run by then).
            draws: The block's draws.
            model: The workflow.
            run: The engine's step (`tailkit.simulation._engine.run_step`).
        """
        live = step.live
        assert live is not None  # noqa: S101 - only live steps come here
        state = self._steps.get(step.name)
        if state is None or state.live is not live:
            state = self._steps[step.name] = _Routes(live)
        used = {0}
        for variant in live.variants:
            one, two, three = needs_slots(variant, model)
            used |= {k for k, u in ((1, one), (2, two), (3, three)) if u}
        raw = {k: draws.slot(step.name, k) for k in range(SLOTS) if k in used}
        # a step due at or after the deadline never starts in the executor: no decision
        started = start_s < model.deadline_s
        if skipped is not None:
            started &= ~skipped
        tells = [
            _Told(*told(v, start_s, raw[0], raw, model, sets_cutoff=live.sets_cutoff))
            for v in live.variants
        ]
        route, cutoff, explored = self._decide(state, started, tells)
        return _run(
            step, start_s=start_s, raw=raw, model=model, run=run,
            decided=(route, cutoff, explored), started=started,
        )  # fmt: skip

    def _decide(
        self, state: _Routes, started: Bools, tells: list[_Told]
    ) -> tuple[npt.NDArray[np.int8], Array, Bools]:
        """
        Each run's candidate, cutoff and whether it explored; the observations are kept.

        A loop over the batches in plain Python: a batch is a few runs, and numpy's cost per
        call would exceed the work. The explore turns are known beforehand (the counter
        advances with every run that starts); only the route they go to waits for the batch.
        """
        live = state.live
        n, size = started.size, self.concurrency
        count = len(live.routes)
        every = live.explore_every if count > 1 else 0
        turns = state.turn + np.cumsum(started) - 1  # each run's decision counter
        turn = started & (turns % every == every - 1) if every else np.zeros(n, np.bool_)
        plain = started & ~turn
        # a run that does not decide here tells nothing: no value, whatever the cutoff
        values = [np.where(plain, t.value, np.nan).tolist() for t in tells]
        thresholds = [np.where(plain, t.threshold, -np.inf).tolist() for t in tells]
        explores = np.flatnonzero(turn).tolist()
        pending = state.pending
        first = (-state.seen) % size  # the first run of the block that starts a batch
        edges = [0, *range(first, n, size), n] if first else [*range(0, n, size), n]
        edges = sorted(set(edges))
        bests, cuts_of = [], []
        chosen = np.full(n, -1, dtype=np.int8)
        cutoff = np.full(n, np.nan)
        inf = math.inf
        e = 0
        for lo, hi in itertools.pairwise(edges):
            if state.batch is None or (state.seen + lo) % size == 0:
                state.start_batch()
            best = state.batch
            assert best is not None  # noqa: S101 - set just above
            cuts = state.cuts
            c = cuts[best]
            bests.append(best)
            cuts_of.append(c)
            # NaN: the run did not decide here, or failed by itself, telling nothing
            pending[best].extend([
                v if c >= t else inf
                for v, t in zip(values[best][lo:hi], thresholds[best][lo:hi])  # noqa: B905 - slices of one block, equal lengths
                if c < t or v == v  # noqa: PLR0124 - NaN test
            ])  # fmt: skip
            while e < len(explores) and explores[e] < hi:
                j = explores[e]
                others = [k for k in range(count) if k != best]
                r = others[(int(turns[j]) // every) % len(others)]
                chosen[j], cutoff[j] = r, cuts[r]
                value = float(tells[r].value[j]) if cuts[r] >= tells[r].threshold[j] else inf
                if value == value:  # noqa: PLR0124 - NaN: failed by itself, telling nothing
                    pending[r].append(value)
                e += 1
        lengths = np.diff(edges)
        chosen = np.where(plain, np.repeat(np.array(bests, dtype=np.int8), lengths), chosen)
        cutoff = np.where(plain, np.repeat(cuts_of, lengths), cutoff)
        state.turn += int(np.count_nonzero(started))
        state.seen += n
        if not live.sets_cutoff:
            cutoff[:] = np.nan
        return chosen.astype(np.int8), cutoff, turn


def _run(
    step: StepModel,
    *,
    start_s: Array,
    raw: dict[int, Index],
    model: WorkflowModel,
    run: StepRunner,
    decided: tuple[npt.NDArray[np.int8], Array, Bools],
    started: Bools,
) -> StepOutcome:
    """
    The engine's play of the step, each run on its chosen route with its own cutoff.

    Runs in which the step never starts are played on the step's own route (their outcome
    is written over as skipped).
    """
    live = step.live
    assert live is not None  # noqa: S101 - only live steps come here
    route, cutoff, explored = decided
    own = live.routes.index(next(r for r, v in zip(live.routes, live.variants, strict=True)
                                 if v.primary is step.primary))  # fmt: skip
    group = np.where(started, route, own)
    decision = LiveOutcome(route, cutoff, explored)
    parts: list[tuple[npt.NDArray[np.intp] | None, StepOutcome]] = []
    present = np.unique(group)
    for r in present.tolist():
        rows = None if present.size == 1 else np.flatnonzero(group == r)
        variant = live.variants[r]
        if live.sets_cutoff:
            cuts = cutoff if rows is None else cutoff[rows]
            cuts = np.where(np.isnan(cuts), variant.cutoff_s, cuts)
            variant = dataclasses.replace(variant, cutoffs_s=cuts)
        starts = start_s if rows is None else start_s[rows]
        parts.append((rows, run(variant, starts, _Rows(raw, rows), model)))
    if len(parts) == 1:
        return dataclasses.replace(parts[0][1], live=decision)
    n = start_s.size
    duration = np.empty(n)
    failed = np.empty(n, dtype=np.bool_)
    fired = np.empty(n, dtype=np.bool_)
    extra = np.empty(n, dtype=np.bool_)
    recovery = np.empty(n, dtype=np.int8)
    for rows, part in parts:
        duration[rows], failed[rows], fired[rows] = part.duration_s, part.failed, part.fired
        extra[rows], recovery[rows] = part.extra, part.recovery
    return StepOutcome(duration, failed, fired, extra, recovery, live=decision)
