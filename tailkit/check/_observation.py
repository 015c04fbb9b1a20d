"""
What a ledger shows a plan did: per run and per step, each figure with its interval.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any

from tailkit.check._estimate import Durations, at_level, estimate_json
from tailkit.estimate import Estimate


_QUANTILE = {"p50_s": 0.5, "p99_s": 0.99}

CLOCK = "clock"
"""`LeftOut.reason` of a run whose times cannot be true."""

ROUTE = "route"
"""`LeftOut.reason` of a run with an attempt on a route the plan does not have for its step."""

REFUSED = "refused"
"""`LeftOut.reason` of a run a line of which ingest refused (it would read as a lost step)."""

PARTIAL = "partial"
"""`LeftOut.reason` of a run without a required step that its dependencies would have started."""


@dataclass(frozen=True, slots=True)
class LeftOut:
    """
    A run left out of every figure, and why.

    Args:
        run_id: The run.
        reason: `CLOCK` (its times cannot be true), `ROUTE` (an attempt on a route the plan
            does not have for its step), `REFUSED` (ingest refused a line of it: a status
            or value it cannot read, a call id another line holds with other values) or
            `PARTIAL` (a required step never started though the steps it waits on won in
            time: another workflow's run, or lines lost).
        detail: Which line and what about it, e.g. ``ledger.jsonl line 12: total_s is
            negative: -5.0``.
    """

    run_id: str
    reason: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """
        ``{"run_id", "reason", "detail"}``.
        """
        return {"run_id": self.run_id, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class RouteAttempts:
    """
    What one route did for a step: its attempts, how many failed, how many it refused.

    Args:
        route: ``provider/model``.
        attempts: Attempts sent to it for the step.
        failed: Attempts that failed: ``error``, a ``timeout`` the provider gave (not a
            deadline's cut), or an HTTP 5xx.
        rate_limited: Attempts it refused: ``rate_limited`` or HTTP 429.
    """

    route: str
    attempts: int
    failed: int = 0
    rate_limited: int = 0

    @property
    def failed_share(self) -> float:
        """
        Share of its attempts that failed (0 without attempts).
        """
        return self.failed / self.attempts if self.attempts else 0.0


@dataclass(frozen=True, slots=True)
class RouteShare:
    """
    Where a live step's first attempts went: one route's count and share of the decisions.

    Args:
        route: The plan's name for the route (``provider/model`` for a route the plan lacks).
        first_attempts: First attempts with a live decision that ran on it.
        share: ``first_attempts`` of the step's decisions, with its Clopper-Pearson interval.
        candidate: Whether the route is one of the step's candidates.
    """

    route: str
    first_attempts: int
    share: Estimate
    candidate: bool = True


@dataclass(frozen=True, slots=True)
class LiveObservation:
    """
    A live step's decisions as the ledger shows them: where its first attempts went, and why.

    The executor writes its decision on each first attempt of a step the plan routes live
    (``attrs.live``: ``best`` or ``explore``, ``live_value_s``, ``live_calls`` and, when the
    step has a cutoff on its signal clock, ``live_cutoff_s``).

    Args:
        decisions: First attempts whose line carries a decision (``attrs.live``).
        explored: Of those, the ones sent to another candidate to explore.
        explore_share: ``explored`` of ``decisions``, with its Clopper-Pearson interval.
        undecided: First attempts of the step without a decision (an executor that routed the
            step as fixed, or a ledger older than live routing).
        routes: Per route, the decided first attempts that ran on it: the step's candidates
            in the plan's order (those with none too), then any other route.
        rerouted: Decided first attempts a breaker or a provider's rest after a 429 moved to
            another route (``attrs.rerouted``): each counts on the route it ran on.
        off_candidates: First attempts, not rerouted, on a route that is not a candidate.
        cutoffs: Decided first attempts with a live cutoff (``attrs.live_cutoff_s``).
        off_bounds: Of those, the ones outside the plan's ``cutoff_bounds_s``.
        cutoff_range_s: The smallest and largest live cutoff seen (NaN without one).
        first_off_candidates: The first line with a first attempt off the candidates (or "").
        first_off_bounds: The first line with a live cutoff off its bounds (or "").
    """

    decisions: int
    explored: int
    explore_share: Estimate
    undecided: int = 0
    routes: tuple[RouteShare, ...] = ()
    rerouted: int = 0
    off_candidates: int = 0
    cutoffs: int = 0
    off_bounds: int = 0
    cutoff_range_s: tuple[float, float] = (math.nan, math.nan)
    first_off_candidates: str = ""
    first_off_bounds: str = ""

    def route(self, name: str) -> RouteShare:
        """
        The share of one route.

        Raises:
            KeyError: No first attempt went there and it is no candidate.
        """
        for r in self.routes:
            if r.route == name:
                return r
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """
        The decisions as JSON-ready values (shares as ``value``, ``low``, ``high``, ``n``).
        """
        low, high = self.cutoff_range_s
        return {
            "decisions": self.decisions,
            "explored": self.explored,
            "undecided": self.undecided,
            "rerouted": self.rerouted,
            "routes": [
                {
                    "route": r.route,
                    "first_attempts": r.first_attempts,
                    "share": estimate_json(r.share),
                    "candidate": r.candidate,
                }
                for r in self.routes
            ],
            "off_candidates": self.off_candidates,
            "cutoffs": self.cutoffs,
            "off_bounds": self.off_bounds,
            "cutoff_range_s": [x if math.isfinite(x) else None for x in (low, high)],
        }


@dataclass(frozen=True, slots=True)
class StepObservation:
    """
    One step of the plan over the observed runs.

    A step call is the step in one run: its attempts share the run and the step. Its latency
    runs from its first attempt's start to its winner's end. A call without a winner (it gave
    up, every attempt failed, or the run deadline cut it) never delivered: it is
    right-censored at the last instant it was seen, its latency "more than" that, never a fast
    call.

    Args:
        name: Step name.
        route: The step's route in the plan (where its first attempts go).
        calls: Step calls observed.
        p50_s: Median step latency in seconds.
        p99_s: 99th percentile step latency in seconds.
        hedge_rate: Share of step calls that started an extra attempt at a cutoff (a hedge,
            a downgrade, or a retry after the first attempt was cut).
        first_attempt_p50_s: Median latency of the first attempts alone (attempts cut before
            they finished are right-censored): the route's body, with no hedge to help.
        first_attempts: Attempts with ``attempt == 0``.
        extra_attempts: Attempts with ``attempt > 0`` (hedge, retry, downgrade, upgrade).
        cutoff_attempts: Of those, the ones started at a cutoff.
        denied_budget: Extra attempts the hedge budget refused (``attrs.hedge_denied``,
            ``retry_denied``, ``upgrade_denied``).
        denied_throttle: Extra attempts a provider throttle refused (the same attrs).
        failed_calls: Step calls without a winner (every attempt failed, gave up, or cut).
        rate_limited: Attempts a provider refused (``rate_limited`` or HTTP 429).
        routes: Per route the step's attempts went to, its attempts, failures and refusals.
        durations: The step calls' durations behind ``p50_s`` and ``p99_s``.
        first_durations: The first attempts' durations behind ``first_attempt_p50_s``.
        live: For a step the plan routes live, its decisions (``None``: a fixed step).
    """

    name: str
    route: str
    calls: int
    p50_s: Estimate
    p99_s: Estimate
    hedge_rate: Estimate
    first_attempt_p50_s: Estimate
    first_attempts: int = 0
    extra_attempts: int = 0
    cutoff_attempts: int = 0
    denied_budget: int = 0
    denied_throttle: int = 0
    failed_calls: int = 0
    rate_limited: int = 0
    routes: tuple[RouteAttempts, ...] = ()
    durations: Durations = field(default=Durations(), compare=False, repr=False)
    first_durations: Durations = field(default=Durations(), compare=False, repr=False)
    live: LiveObservation | None = None

    def estimate(self, figure: str, level: float) -> Estimate:
        """
        A figure (``p50_s``, ``p99_s``, ``hedge_rate``) with its interval at ``level``.
        """
        return at_level(getattr(self, figure), level, self.durations, _QUANTILE.get(figure, 0.5))

    @property
    def recovery_attempts(self) -> int:
        """
        Extra attempts not started at a cutoff: after errors, or upgrades after bad output.
        """
        return self.extra_attempts - self.cutoff_attempts

    @property
    def denied(self) -> int:
        """
        Extra attempts refused by the hedge budget or a provider throttle.
        """
        return self.denied_budget + self.denied_throttle


@dataclass(frozen=True, slots=True)
class Observation:
    """
    A plan's workflow as the ledgers show it.

    A run is the attempts that share a ``run_id`` and a step of the plan. It starts at its
    earliest attempt's start and ends at the latest winner's end among its required steps; it
    misses when a required step has no winner or it ends more than ``deadline_s`` after its
    start. A run that lost a required step never delivered: for the latency quantiles it is
    right-censored at the last instant one of its attempts was seen (more than that), never
    a fast run.

    Args:
        workflow: The plan's workflow name.
        deadline_s: The plan's deadline in seconds.
        ledgers: The files read.
        runs: Runs observed.
        level: Confidence level of every interval.
        missed_late: Runs with every required winner that ended after the deadline.
        missed_failed: Runs in which a required step had no winner.
        miss_rate: Share of runs that missed (Clopper-Pearson interval).
        p50_s: Median run latency in seconds.
        p99_s: 99th percentile run latency in seconds.
        extra_attempts: Attempts with ``attempt > 0`` per first attempt, all steps together
            (exact Poisson interval on the count).
        cutoff_attempts: The same, counting only attempts started at a cutoff (what the
            simulator's ``extra_attempts`` counts).
        steps: One per step of the plan, in the plan's order.
        rejected: Ledger lines ingest refused (see ``tailkit ingest`` on the ledger).
        untimed: Lines of plan steps without a ``started_at``, left out.
        notes: Sentences about what was left out or assumed.
        left_out_clock: Runs left out of every figure because their times cannot be true (a
            line refused for an impossible time, an attempt or a spread of attempts far
            longer than the deadline, a start years from the other runs): never misses.
        left_out_route: Runs left out because an attempt went to a route the plan does not
            have for its step (the ledger is refused when they are more than a tenth).
        left_out_partial: Runs left out because a required step has no line although the
            steps it waits on won in time (another workflow's runs, or lines lost).
        left_out_refused: Runs left out because ingest refused a line of theirs (a value it
            cannot read, a call id another line holds with other values): read without it,
            each would be a run that lost a step.
        left_out: The first 100 runs left out, each with its reason and the line that shows it.
        warnings: Sentences naming the runs left out and why.
        durations: The runs' durations behind ``p50_s`` and ``p99_s`` (a failed run is
            unfinished: more than its last instant).
    """

    workflow: str
    deadline_s: float
    ledgers: tuple[str, ...]
    runs: int
    level: float
    missed_late: int
    missed_failed: int
    miss_rate: Estimate
    p50_s: Estimate
    p99_s: Estimate
    extra_attempts: Estimate
    cutoff_attempts: Estimate
    steps: tuple[StepObservation, ...]
    rejected: int = 0
    untimed: int = 0
    notes: tuple[str, ...] = field(default=())
    left_out_clock: int = 0
    left_out_route: int = 0
    left_out_partial: int = 0
    left_out_refused: int = 0
    left_out: tuple[LeftOut, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    durations: Durations = field(default=Durations(), compare=False, repr=False)

    def estimate(self, figure: str, level: float) -> Estimate:
        """
        A workflow figure with its interval at ``level``.

        ``extra_attempts`` counts those a cutoff started, as the plan's prediction does.
        """
        est = self.cutoff_attempts if figure == "extra_attempts" else getattr(self, figure)
        return at_level(est, level, self.durations, _QUANTILE.get(figure, 0.5))

    @property
    def rate_limited(self) -> int:
        """
        Attempts a provider refused (``rate_limited`` or HTTP 429), all steps together.
        """
        return sum(s.rate_limited for s in self.steps)

    @property
    def denied_budget(self) -> int:
        """
        Extra attempts the hedge budget refused, all steps together.
        """
        return sum(s.denied_budget for s in self.steps)

    @property
    def denied_throttle(self) -> int:
        """
        Extra attempts a provider throttle refused, all steps together.
        """
        return sum(s.denied_throttle for s in self.steps)

    @property
    def first_attempts(self) -> int:
        """
        First attempts, all steps together.
        """
        return sum(s.first_attempts for s in self.steps)

    def step(self, name: str) -> StepObservation:
        """
        The observation of one step.

        Raises:
            KeyError: The plan has no step of that name.
        """
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)
