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
2. Stall guards first (`_stall_seeds`), then coordinate descent: step by step, most
   tail-exposed first, every candidate for that step is simulated with the other steps held
   fixed, and the best feasible one (extra attempts within the budget) is kept. Passes
   repeat until nothing changes. A change in one step re-plays only it and the steps after
   it; earlier steps are reused.
3. All candidates see the same random numbers (common random numbers): differences between
   candidates are paired, so the search is not fooled by Monte Carlo noise the way independent
   runs would be.
4. The score is the miss rate, then the p99 (as a small fraction of the deadline), then the
   extra attempts: among plans that miss equally often, the faster and cheaper wins. Required
   steps and steps that much of the run waits on matter through the miss rate itself; an
   optional step is free to ``fail`` at its cutoff.
5. Then the two clocks together are tried on top of the plan found, step by step, kept only
   if the simulated plan scores better within the budget (`refinements`): a *total cutoff
   beside a TTFT cutoff*, where a step watched on its TTFT has a route whose generation
   (``total - ttft``) has a heavy upper tail (`GENERATION_TAIL`): a stream that started in
   time and then crawls is cut at a grid quantile of the total, with the same action; and a
   TTFT cutoff beside a step's total cutoff, so that a stuck start is cut early. The *stall
   cutoff*, where the route's streams stall mid-way (`tailkit.simulation._stall`), is a
   candidate from point 1 on: every acting candidate is tried again with the stall cutoff the
   calls propose, so the search weighs its extra attempts against the others' within the
   budget. The simulator models both as the executor runs them: the earliest cutoff that
   passes on the watched attempt acts (a stall cutoff where the sample says each outcome's
   stall is cut, `tailkit.simulation.RouteSample.stall_cut`), and its attempt counts as the
   step's action, an extra attempt.
6. The plan found is then simulated afresh (new seed, more runs) for the ``predicted`` fields,
   so the prediction carries no optimization bias from the search's own draws.

A step that lists candidate routes (`FirstRoutes`) has its first route searched as one more
coordinate of its choice: its candidates are every choice above on each candidate route (that
route's own quantiles, hedge routes and tail kind), so the route, the signal, the cutoff, the
action and the hedge route are chosen together, under the same budget, by the same score, with
the other steps held fixed, pass after pass. The work grows with the number of candidates,
not with their combinations across steps. A route changed in one step changes what the steps
before it reserve for it (their deadline-aware cutoffs), so the trial re-plays from the first
step whose reserve moved. After the descent, each candidate is scored once more with the
other steps as chosen (`SearchResult.routes`): the figures behind the plan's ``route_choice``.
"""

from __future__ import annotations

import dataclasses
import math

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tailkit.fit import quantile
from tailkit.simulation import RouteSample, WorkflowModel
from tailkit.simulation.lowlevel import Draws, RunOutcome, SampleKey, StepModel, simulate_runs


QUANTILES = (0.80, 0.85, 0.90, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995)
MAX_PASSES = 4
_P99_WEIGHT = 1e-3  # score per deadline of p99: breaks ties between equal miss rates
_EXTRA_WEIGHT = 1e-4  # score per extra attempt per first attempt: then prefer the cheaper
# A generation (total - ttft) whose p99 is this many times its median has a tail of its own
# that a TTFT cutoff never sees: a total cutoff beside it is tried.
GENERATION_TAIL = 2.0
_ACTING = ("hedge", "retry", "downgrade")
_MS = 1e-3  # the plan's resolution: a cutoff below another stays below it once rounded
# The onset of a second mode in a route's tail (stalls): two neighbours in the sorted calls
# above its p80, up to its p99.5, this many times apart. A cutoff just past the lower one cuts
# the whole mode and fires on nothing else, where the grid's quantiles may straddle it.
GAP_RATIO = 1.5
_GAP_FROM, _GAP_TO = 0.80, 0.995
_GAP_PAST = 1.1  # the cutoff: this far past the mode's last call below (at most midway)


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
        total_cutoff_s: Beside a TTFT cutoff, a cutoff on the total age with the same action
            (``math.inf``: none).
        total_quantile: That cutoff as a quantile of the step's total latency.
        stall_cutoff_s: Seconds without a chunk mid-stream at which the step acts
            (``math.inf``: none).
        first: The route of the step's first attempt, where it is one of its candidates other
            than the route the search's model gives it (``None``: that route).
    """

    action: str = "wait"
    signal: str = "total"
    quantile: float | None = None
    cutoff_s: float = math.inf
    route: str | None = None
    total_cutoff_s: float = math.inf
    total_quantile: float | None = None
    stall_cutoff_s: float = math.inf
    first: str | None = None


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

    The cutoffs at which one step alone spends 90 % or 75 % of the budget (its share of a
    one-step plan, or of all the steps' first attempts), so that the search can spend what it
    may on a tail the grid's points straddle. Two shares, because a cutoff fires a little more
    often than its quantile says (the retries and hedges it sends fire too, and the plan must
    keep its budget less the search's noise): on a route whose stalls are 2.3 % of its calls
    and a budget of 2.8 %, the cutoff at 90 % of it spent 2.7 % and was refused.
    """
    out = []
    for share in (0.9 * budget, 0.75 * budget, 0.9 * budget * steps, 0.75 * budget * steps):
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
        at = [(q, sample.quantile(q, signal=signal)) for q in (*QUANTILES, *extra_quantiles)]
        for q, cutoff in sorted((*at, *tail_gap(sample, signal))):
            if cutoff < deadline_s:
                out += [Choice(a, signal, q, cutoff, r) for a, r in actions]
    return out + with_stalls(sample, out, deadline_s)


def tail_gap(sample: RouteSample, signal: str) -> list[tuple[float, float]]:
    """
    The cutoff just past the onset of a second mode in the route's tail, with its quantile.

    Where the sorted calls between the route's p80 and p99.5 jump by `GAP_RATIO` or more
    (stalled calls, a cold start: a mode of their own), the widest such jump: the cutoff
    `_GAP_PAST` times its lower call (at most midway, geometrically), and the share of calls
    at or below that call. Nothing where the tail is one smooth mode.
    """
    values = sample.total_s if signal == "total" else np.sort(sample.ttft_s)
    values = values[np.isfinite(values)]
    n = values.size
    first, last = int(_GAP_FROM * n), int(_GAP_TO * n)
    if last - first < 2 or values[first] <= 0.0:
        return []
    tail = values[first : last + 1]
    ratios = tail[1:] / tail[:-1]
    i = int(np.argmax(ratios))
    if ratios[i] < GAP_RATIO:
        return []
    below, above = float(tail[i]), float(tail[i + 1])
    return [(round((first + i + 1) / n, 4), min(_GAP_PAST * below, math.sqrt(below * above)))]


def with_stalls(sample: RouteSample, choices: list[Choice], deadline_s: float) -> list[Choice]:
    """
    Each acting choice again with the stall cutoff the route's calls propose, if any.

    Only where the sample carries its calls' stall gaps (the simulator needs them), and only
    below the choice's total cutoff, as the plan requires.
    """
    stall = None if sample.stalls is None else sample.stalls.cutoff_s
    if stall is None or sample.gap_s is None or stall >= deadline_s:
        return []
    out = []
    for choice in choices:
        total = choice.cutoff_s if choice.signal == "total" else choice.total_cutoff_s
        if choice.action in _ACTING and stall + _MS < total and choice.stall_cutoff_s != stall:
            out.append(dataclasses.replace(choice, stall_cutoff_s=stall))
    return out


def _apply(step: StepModel, choice: Choice, samples: Mapping[SampleKey, RouteSample]) -> StepModel:
    """
    ``step`` (as the base model has it: waiting, no cutoff) with ``choice`` applied.
    """
    second = None if choice.route is None else samples[(step.name, choice.route)]
    beside = choice.total_cutoff_s if choice.signal == "ttft" else math.inf
    applied = dataclasses.replace(
        step, action=choice.action, signal=choice.signal, cutoff_s=choice.cutoff_s,
        second=second, ttft_cutoff_s=math.inf, total_cutoff_s=beside,
    )  # fmt: skip
    return dataclasses.replace(applied, stall_cutoff_s=choice.stall_cutoff_s)


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
    p99 = quantile(outcome.end_s, 0.99)
    steps = len(outcome.steps)
    extra = sum(float(o.extra.mean()) for o in outcome.steps) / steps
    recovery = sum(float(o.recovery.mean()) for o in outcome.steps) / steps
    scale = model.deadline_s if math.isfinite(model.deadline_s) else max(p99, 1e-9)
    value = miss + _P99_WEIGHT * p99 / scale + _EXTRA_WEIGHT * extra
    margin = 2.0 * math.sqrt(budget / (outcome.end_s.size * steps))
    feasible = extra == 0.0 or extra + recovery <= budget - margin + 1e-12
    return Score(miss, p99, extra, value, feasible)


@dataclass(frozen=True, slots=True, eq=False)
class FirstRoutes:
    """
    The first routes the search may choose among, per step (a step's ``candidates``).

    Args:
        options: Per step name, per candidate route other than the one the search's model
            gives the step, what the search may do with that route first (its hedge routes
            and tail kind are that route's).
        model: The workflow with every step waiting, given the first route of the steps
            named (step name -> route; a step not named keeps the model's own route).
    """

    options: Mapping[str, Mapping[str, StepOptions]]
    model: Callable[[Mapping[str, str]], WorkflowModel]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """
    The best choice per step, its score, and how much searching it took.

    Args:
        choices: Per step name, its choice (``Choice.first``: its first route, where the
            search moved it to another candidate).
        score: The plan's score on the search's runs.
        evaluated: Candidates simulated.
        passes: Passes of the descent.
        routes: Per step with candidate routes, per first route (``None``: the model's own),
            the best score the search found with that route first and the other steps as
            chosen.
    """

    choices: dict[str, Choice]
    score: Score
    evaluated: int
    passes: int
    routes: dict[str, dict[str | None, Score]] = dataclasses.field(default_factory=dict)


def search(
    model: WorkflowModel,
    samples: Mapping[SampleKey, RouteSample],
    options: Mapping[str, StepOptions],
    *,
    budget: float,
    runs: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    firsts: FirstRoutes | None = None,
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
        firsts: Other first routes the search may choose for some steps (``None``: none;
            every step keeps the model's route).
    """
    draws = Draws(runs, seed=seed, keep=True)
    base = list(model.steps)
    extra = budget_quantiles(budget, len(base))
    others = {} if firsts is None else firsts.options
    choice_lists = [
        [
            dataclasses.replace(c, first=route) if route is not None else c
            for route, sample, step_options in (
                (None, s.primary, options[s.name]),
                *((r, samples[(s.name, r)], o) for r, o in others.get(s.name, {}).items()),
            )
            for c in candidates(
                sample, step_options, deadline_s=model.deadline_s, extra_quantiles=extra
            )
        ]
        for s in base
    ]
    state = _State(model, samples, draws, budget, base, firsts=firsts)
    order = _exposure_order(model)
    per_pass = sum(len(c) for c in choice_lists)
    evaluated, passes = 0, 0
    for i in order:  # stall guards first: the descent then spends what they leave
        for choice in _stall_seeds([c for c in choice_lists[i] if c.first is None]):
            evaluated += 1
            state.try_choice(i, choice)
    for passes in range(1, MAX_PASSES + 1):  # noqa: B007 - the count is reported
        changed = False
        for i in order:
            for choice in choice_lists[i]:
                evaluated += 1
                if progress is not None:
                    progress(evaluated, per_pass)
                changed |= state.try_choice(i, choice)
        if not changed:
            break
    for i in order:
        chosen = state.chosen[i]
        same = [c for c in choice_lists[i] if c.first == chosen.first]
        trials = refinements(state.base[i].primary, chosen, same, model.deadline_s)
        for choice in trials:
            evaluated += 1
            state.try_choice(i, choice)
    routes: dict[str, dict[str | None, Score]] = {}
    for i in order:
        if base[i].name in others:
            routes[base[i].name], done = _route_scores(state, i, choice_lists[i])
            evaluated += done
    names = [s.name for s in model.steps]
    return SearchResult(
        dict(zip(names, state.chosen, strict=True)), state.best, evaluated, passes, routes
    )


def _route_scores(
    state: _State, i: int, choices: list[Choice]
) -> tuple[dict[str | None, Score], int]:
    """
    Per first route of step ``i``, the best score with that route first, the others as chosen.

    Every choice on every other candidate route is scored against the same plan of the other
    steps, so the figures compare. Should one beat the plan (a descent cut short by
    `MAX_PASSES`), the step takes it: the figures still hold, and the plan is the best of them.
    Also returns how many choices were simulated.
    """
    own = state.chosen[i].first
    scores: dict[str | None, Score] = {own: state.best}
    best: dict[str | None, tuple[Score, Choice]] = {}
    done = 0
    for choice in choices:
        if choice.first == own:
            continue
        done += 1
        s = state.score_of(i, choice)
        kept = best.get(choice.first)
        if s.feasible and (kept is None or s.value < kept[0].value - 1e-12):
            best[choice.first] = (s, choice)
    for first, (s, _) in best.items():
        scores[first] = s
    winner = min(best.values(), key=lambda pair: pair[0].value, default=None)
    if winner is not None and winner[0].value < state.best.value - 1e-12:
        state.try_choice(i, winner[1])
    return scores, done


class _State:
    """
    Strictly private: the search's current plan, its outcome and its score.
    """

    def __init__(
        self,
        model: WorkflowModel,
        samples: Mapping[SampleKey, RouteSample],
        draws: Draws,
        budget: float,
        base: list[StepModel],
        *,
        firsts: FirstRoutes | None = None,
    ) -> None:
        self.model, self.samples, self.draws, self.budget = model, samples, draws, budget
        self.base = base
        self.steps = list(base)
        self.current = simulate_runs(model, draws)
        self.best = score(model, self.current, budget)
        self.chosen = [WAIT] * len(base)
        self.firsts = firsts
        self.moved: dict[str, str] = {}  # step name -> first route, where not the model's
        self.bases: dict[frozenset[tuple[str, str]], list[StepModel]] = {frozenset(): base}

    def try_choice(self, i: int, choice: Choice) -> bool:
        """
        Simulate step ``i`` set to ``choice``; keep it if it scores better. Whether it did.
        """
        if choice == self.chosen[i]:
            return False
        base, moved, trial_steps, outcome, s = self._trial(i, choice)
        if s.feasible and (s.value < self.best.value - 1e-12 or not self.best.feasible):
            self.steps, self.chosen[i], self.current, self.best = trial_steps, choice, outcome, s
            self.base, self.moved = base, moved
            return True
        return False

    def score_of(self, i: int, choice: Choice) -> Score:
        """
        The score of the plan with step ``i`` set to ``choice``, kept or not.
        """
        return self._trial(i, choice)[4]

    def _trial(
        self, i: int, choice: Choice
    ) -> tuple[list[StepModel], dict[str, str], list[StepModel], RunOutcome, Score]:
        """
        Step ``i`` set to ``choice``: its base, first routes moved, steps, runs and score.
        """
        name = self.base[i].name
        moved = dict(self.moved)
        if choice.first is None:
            moved.pop(name, None)
        else:
            moved[name] = choice.first
        base, changed = self.base, i
        if moved != self.moved:
            base = self._base(moved)
            trial_steps = [
                b if c == WAIT else _apply(b, c, self.samples)
                for b, c in zip(base, self.chosen, strict=True)
            ]
            # a route's median is what the steps before it reserve: re-play from the first
            # step whose reserve moved
            changed = next((j for j in range(i) if base[j].reserve_s != self.base[j].reserve_s), i)
        else:
            trial_steps = [*self.steps]
        trial_steps[i] = _apply(base[i], choice, self.samples)
        trial = dataclasses.replace(self.model, steps=tuple(trial_steps))
        outcome = simulate_runs(trial, self.draws, reuse=self.current, changed=changed)
        return base, moved, trial_steps, outcome, score(trial, outcome, self.budget)

    def _base(self, moved: dict[str, str]) -> list[StepModel]:
        """
        The steps waiting, with the first routes ``moved`` (built once per set of routes).
        """
        key = frozenset(moved.items())
        if key not in self.bases:
            assert self.firsts is not None  # noqa: S101 - only candidates move a route
            self.bases[key] = list(self.firsts.model(moved).steps)
        return self.bases[key]


def _stall_seeds(choices: list[Choice]) -> list[Choice]:
    """
    A step's stall guards alone: its stall candidates with the latest total cutoff.

    Tried before the descent. A stall is cut for a few extra attempts where a cutoff on the
    total spends many, but a descent that starts from every step waiting lets the first step
    it visits spend the whole budget on its own tail before a later step's stalls are seen.
    """
    stalled = [c for c in choices if math.isfinite(c.stall_cutoff_s) and c.signal == "total"]
    latest = max((c.quantile or 0.0 for c in stalled), default=None)
    return [c for c in stalled if c.quantile == latest]


def refinements(
    sample: RouteSample, chosen: Choice, choices: list[Choice], deadline_s: float
) -> list[Choice]:
    """
    The two clocks together, tried on top of a step's choice (module doc, point 5), in order.

    A step watched on its TTFT whose route's generation has a heavy tail
    (`RouteSample.generation_tail` at least `GENERATION_TAIL`) gets a total cutoff beside:
    the grid quantiles of the total latency above its TTFT (and stall) cutoff and below the
    deadline, each also with the route's stall cutoff (`with_stalls`). A step watched on its
    total gets a TTFT cutoff beside it: its TTFT candidates with the same action, below the
    total cutoff (a stuck start is then cut early, the total still watched).
    """
    out = []
    if chosen.signal == "total" and chosen.action != "wait":
        for c in choices:
            if (
                c.signal == "ttft"
                and (c.action, c.route, c.stall_cutoff_s)
                == (chosen.action, chosen.route, chosen.stall_cutoff_s)
                and c.cutoff_s + _MS < chosen.cutoff_s
            ):
                out.append(
                    dataclasses.replace(
                        c, total_cutoff_s=chosen.cutoff_s, total_quantile=chosen.quantile
                    )
                )
        return out
    below = chosen.cutoff_s  # a total cutoff is above the TTFT (and stall) cutoff
    if math.isfinite(chosen.stall_cutoff_s):
        below = max(below, chosen.stall_cutoff_s)
    if (
        chosen.signal == "ttft"
        and chosen.action != "wait"
        and sample.generation_tail() >= GENERATION_TAIL
    ):
        for q in QUANTILES:
            total = sample.quantile(q)
            if below + _MS < total < deadline_s:
                out.append(dataclasses.replace(chosen, total_cutoff_s=total, total_quantile=q))
    return out + with_stalls(sample, out, deadline_s)


def _exposure_order(model: WorkflowModel) -> list[int]:
    """
    Steps by how much tail they expose: (p99 - p50) of their route, required ones first.
    """

    def exposure(i: int) -> float:
        step = model.steps[i]
        tail = step.primary.quantile(0.99) - step.primary.quantile(0.5)
        return tail * (1.0 if step.required else 0.5)

    return sorted(range(len(model.steps)), key=exposure, reverse=True)
