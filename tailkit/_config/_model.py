"""
The plan model: frozen dataclasses with the plan's names, units and defaults.

Nothing here validates: a `Plan` from `parse_plan` or `load_plan` is valid, one built by hand is
whatever its builder made it. Only the DAG methods refuse what they cannot answer.
"""

from __future__ import annotations

import heapq

from dataclasses import KW_ONLY, dataclass

from tailkit.errors import ConfigError


PLAN_VERSION = 1
"""The ``tailkit_plan`` version this tailkit reads and writes."""

SIGNALS: tuple[str, ...] = ("total", "ttft")
"""Which clock a step's cutoff watches: the attempt's total age, or its time to first token."""

ACTIONS: tuple[str, ...] = ("hedge", "retry", "downgrade", "fail", "wait")
"""What a step does when its cutoff passes (``wait``: nothing, the run deadline still applies)."""


@dataclass(frozen=True, slots=True)
class Route:
    """
    Where a route's latency sample comes from.

    Args:
        provider: Serving path, as in the call record (``openai``, ``bedrock``, …).
        model: Model id, as in the call record.
    """

    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class Tokens:
    """
    The tokens a step expects; they pick the bucket its latency sample comes from.

    Args:
        input: Expected input tokens, or ``None`` when unknown (any bucket).
        output: Expected output tokens, or ``None`` when unknown (any bucket).
    """

    input: int | None = None
    output: int | None = None


Bounds = tuple[float, float]
"""An interval ``(low, high)`` around a predicted value, in the value's unit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInterval:
    """
    How far each of a step's predictions may be off: ``(low, high)`` per predicted value.

    The interval covers the true value with probability ``level``: it includes the uncertainty
    of the measured calls the prediction was simulated from, not only the simulation's noise.

    Args:
        level: The intervals' coverage, e.g. ``0.95``, in (0, 1).
        p50_s: Interval of the median step latency, in seconds.
        p99_s: Interval of the 99th percentile step latency, in seconds.
        hedge_rate: Interval of the share of runs that started an extra attempt.
    """

    level: float
    p50_s: Bounds
    p99_s: Bounds
    hedge_rate: Bounds


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPrediction:
    """
    What the simulation predicts for one step under the plan.

    Args:
        p50_s: Median step latency in seconds, hedges and retries included.
        p99_s: 99th percentile step latency in seconds (``math.inf`` when the step may never
            finish).
        hedge_rate: Share of runs in which this step started an extra attempt at its cutoff.
        interval: Each value's interval, or ``None`` (plans written before intervals).
    """

    p50_s: float
    p99_s: float
    hedge_rate: float
    interval: StepInterval | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Basis:
    """
    The sample a step was calibrated on.

    Args:
        calls: Calls in the sample.
        bucket: Token bucket of the sample, e.g. ``"in 4k-16k / out 600-1200"``.
        quantile: The cutoff's quantile of the step's own latency, or ``None`` when the step has
            no cutoff.
        censored: Censored share of the sample, in [0, 1].
        shared: What a repeat attempt shares with the first (``None``: not stated, as in a
            plan from before it was measured).
        route_choice: Why calibrate chose ``route`` among the step's candidates: one
            sentence with each candidate's predicted miss rate and extra attempts (``None``:
            the step has one route).
    """

    calls: int
    bucket: str
    quantile: float | None
    censored: float
    shared: Shared | None = None
    route_choice: str | None = None


@dataclass(frozen=True, slots=True)
class Shared:
    """
    What a repeat attempt of a step shares with the attempt it repeats, and on what evidence.

    A hedge, retry, downgrade or upgrade does the same job: its latency rank is correlated
    with the first attempt's (a Gaussian copula of the two ranks; 0 is an independent draw).

    Args:
        other_provider: Correlation of a repeat on another provider (the job's work), in
            [0, 1).
        same_provider: Correlation of a repeat on the same provider (work and moment), in
            [0, 1).
        source: The work part's evidence: ``job keys``, ``size regression``, ``default``
            or ``assumed``.
        evidence: One sentence: what was measured, on how many calls.
        pairs: Slow first attempts whose repeat (or paired call) the estimate rests on: its
            sampling error, which the prediction's interval carries (0: not measured from
            pairs, a regression or a default).
    """

    other_provider: float
    same_provider: float
    source: str
    evidence: str
    pairs: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRouting:
    """
    Live routing of a step: first route and cutoff follow each route's recent latency.

    The step's first attempt goes to the candidate route whose recent latency is best, and its
    cutoff follows that route's recent latency, within stated bounds. The executor keeps, per
    step and candidate route, the step's last ``window`` first attempts on that route (their
    latency on the step's ``signal`` clock; an attempt cut before it ended counts as slower
    than any value). A route's value is the ``quantile`` of its window, or its ``prior_s``
    while the window holds fewer than ``min_calls``. The first attempt goes to the candidate
    with the lowest value (all ``inf``: the window cut least often; ties in candidate order),
    except that every ``explore_every``-th first attempt goes to another candidate in turn;
    its cutoff on the step's signal clock is the chosen route's value, clamped into
    ``cutoff_bounds_s``.

    Args:
        quantile: The percentile of recent latency the cutoff follows and routes are compared
            at, in (0, 1): calibrate writes the cutoff's own quantile (``basis.quantile``).
        cutoff_bounds_s: ``(low, high)``: the live cutoff never leaves them; 0 < low <= high,
            high below ``deadline_s``.
        prior_s: Candidate route -> its calibrated value at ``quantile``, in seconds: the value
            while its window is thin. Every candidate has one.
        window: Latest first attempts per route that the value is taken over, >= 1.
        min_calls: Fewer first attempts in a route's window: its prior stands; in [1, window].
        explore_every: Every n-th first attempt tries another candidate (0: never), so a
            route that was slow is seen again once it recovers.
    """

    quantile: float
    cutoff_bounds_s: Bounds
    prior_s: dict[str, float]
    window: int = 200
    min_calls: int = 20
    explore_every: int = 50


@dataclass(frozen=True, slots=True)
class Step:
    """
    One step of the workflow: what it calls, what it waits on, and what it does at its cutoff.

    The first five fields after ``route`` are the user's; the rest are filled in by calibrate.
    Every time is in seconds from the start of the step's attempt; ``None`` means no such cutoff.

    Args:
        name: Step name; equal to its key in `Plan.steps`.
        route: Key of `Plan.routes` that the first attempt goes to.
        depends_on: Steps that must finish before this one starts.
        required: False when the run may succeed without this step.
        expected_tokens: Expected tokens; they pick the bucket.
        idempotent: False when the step must never be hedged or retried blindly.
        tool: True for a step that calls no model (a plain coroutine: a search, a database):
            the file names no route for it; its route is `tool_route` of its name (provider
            ``tool``, model the step's name), which names its ledger lines and, once those are
            ingested, its latency sample. It has no other route to hedge, downgrade or upgrade
            to.
        signal: Which clock the cutoff watches, one of `SIGNALS`.
        ttft_cutoff_s: No first token by then: the attempt is stuck.
        stall_cutoff_s: No chunk for this long mid-stream: the attempt is stuck.
        cutoff_s: Total attempt age at which the step acts.
        on_cutoff: What the step does at its cutoff, one of `ACTIONS`.
        hedge_route: Route of the extra attempt for ``on_cutoff: hedge``; never ``route``.
        downgrade_route: Route to switch to when streaming but projected to overrun.
        upgrade_route: Route to retry on when the output fails validation.
        candidates: Routes the first attempt may go to, ``route`` among them (empty: only
            ``route``). Calibrate chooses ``route`` among them; a ``live`` step chooses per
            call.
        live: Live routing of the first attempt and its cutoff, or ``None`` (the plan's fixed
            route and cutoffs).
        predicted: The simulation's prediction for this step, or ``None`` before calibration.
        basis: The sample behind the cutoffs, or ``None`` before calibration.
    """

    name: str
    route: str
    _: KW_ONLY
    depends_on: tuple[str, ...] = ()
    required: bool = True
    expected_tokens: Tokens = Tokens()
    idempotent: bool = True
    tool: bool = False
    signal: str = "total"
    ttft_cutoff_s: float | None = None
    stall_cutoff_s: float | None = None
    cutoff_s: float | None = None
    on_cutoff: str = "wait"
    hedge_route: str | None = None
    downgrade_route: str | None = None
    upgrade_route: str | None = None
    candidates: tuple[str, ...] = ()
    live: LiveRouting | None = None
    predicted: StepPrediction | None = None
    basis: Basis | None = None

    def first_routes(self) -> tuple[str, ...]:
        """
        The routes this step's first attempt may go to: its candidates, or its one route.
        """
        return self.candidates or (self.route,)


TOOL_PROVIDER = "tool"
"""The provider of a tool step's route."""


def tool_route(step: str) -> str:
    """
    The route of tool step ``step``: ``tool/<step>`` (provider ``tool``, model the step name).
    """
    return f"{TOOL_PROVIDER}/{step}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanPrediction:
    """
    What the simulation predicts for whole runs under the plan.

    Args:
        p50_s: Median run latency in seconds.
        p99_s: 99th percentile run latency in seconds (``math.inf`` when runs may never finish).
        miss_rate: Share of runs that miss the deadline.
        extra_attempts: Extra attempts (hedges, retries) per first attempt, all steps together.
        interval: Each value's interval, or ``None`` (plans written before intervals).
    """

    p50_s: float
    p99_s: float
    miss_rate: float
    extra_attempts: float
    interval: PlanInterval | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInterval:
    """
    How far each of the plan's predictions may be off: ``(low, high)`` per predicted value.

    The interval covers the true value with probability ``level``: it includes the uncertainty
    of the measured calls the prediction was simulated from, not only the simulation's noise.

    Args:
        level: The intervals' coverage, e.g. ``0.95``, in (0, 1).
        p50_s: Interval of the median run latency, in seconds.
        p99_s: Interval of the 99th percentile run latency, in seconds.
        miss_rate: Interval of the share of runs that miss the deadline.
        extra_attempts: Interval of the extra attempts per first attempt.
    """

    level: float
    p50_s: Bounds
    p99_s: Bounds
    miss_rate: Bounds
    extra_attempts: Bounds


@dataclass(frozen=True, slots=True)
class Plan:
    """
    A workflow and, once calibrated, the cutoffs and actions that keep it inside its deadline.

    Plans compare equal field by field; they hold dicts, so they are not hashable.

    Args:
        workflow: Workflow name.
        deadline_s: End-to-end budget in seconds that the caller gives a run.
        routes: Route name -> `Route`, in file order.
        steps: Step name -> `Step`, in file order; each key equals its step's ``name``.
        hedge_budget: Extra attempts per first attempt, all steps together, in [0, 1].
        predicted: The simulation's prediction for whole runs, or ``None`` before calibration.
    """

    workflow: str
    deadline_s: float
    routes: dict[str, Route]
    steps: dict[str, Step]
    _: KW_ONLY
    hedge_budget: float = 0.05
    predicted: PlanPrediction | None = None

    def order(self) -> tuple[str, ...]:
        """
        Step names in a topological order: dependencies first, ties in file order.

        Returns:
            Every step name once.

        Raises:
            ConfigError: A step depends on a step that is not in the plan, or steps form a
                cycle (possible only in a plan built by hand; loaded plans are checked).
        """
        position = {name: i for i, name in enumerate(self.steps)}
        waiting = {}
        for name, step in self.steps.items():
            unknown = [d for d in step.depends_on if d not in position]
            if unknown:
                msg = f"step {name!r} depends on {unknown[0]!r}, which is not a step of the plan"
                raise ConfigError(msg)
            waiting[name] = len(set(step.depends_on))
        ready = [position[name] for name, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        names = list(self.steps)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for dependent in self.dependents(name):
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    heapq.heappush(ready, position[dependent])
        if len(order) < len(names):
            stuck = ", ".join(n for n in names if n not in order)
            msg = f"steps {stuck} wait on each other in a cycle: break it in depends_on"
            raise ConfigError(msg)
        return tuple(order)

    def dependents(self, name: str) -> tuple[str, ...]:
        """
        The steps that list a step in their ``depends_on``, in file order.

        Args:
            name: A step name.

        Returns:
            The dependent step names; empty for a sink.

        Raises:
            KeyError: No step has this name.
        """
        if name not in self.steps:
            raise KeyError(name)
        return tuple(n for n, step in self.steps.items() if name in step.depends_on)

    def sinks(self) -> tuple[str, ...]:
        """
        The steps that nothing depends on, in file order: a run is done when these are.

        Returns:
            The sink step names.
        """
        needed = {d for step in self.steps.values() for d in step.depends_on}
        return tuple(name for name in self.steps if name not in needed)
