"""
What a ledger shows a plan did: per run and per step, each figure with its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailkit.check._estimate import Estimate


@dataclass(frozen=True, slots=True)
class StepObservation:
    """
    One step of the plan over the observed runs.

    A step call is the step in one run: its attempts share the run and the step. Its latency
    runs from its first attempt's start to its winner's end. A call without a winner lasts
    until it gave up (action ``fail``, or every attempt failed), as the simulator counts it;
    one the run deadline cut is right-censored there: it would have taken longer.

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
        denied_budget: Extra attempts the hedge budget refused (``attrs.hedge_denied``).
        denied_throttle: Extra attempts a provider throttle refused.
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
    start. A run that lost a required step lasts, for the latency quantiles, until the last
    instant one of its attempts was seen, right-censored there when the deadline cut it.

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
