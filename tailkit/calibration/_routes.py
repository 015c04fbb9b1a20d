"""
Calibrated first routes: a step's candidate routes, the search's view of them, and why one won.

A step that lists ``candidates`` has its first route chosen by the search together with its
signal, cutoff, action and hedge route (`tailkit.calibration._search`). What each candidate
brings is that route's own: its latency sample in the step's bucket, its tail kind (a
work-driven route is not hedged or retried), its hedge routes (the step's declared
``hedge_route``, else the routes serving the same model through another provider, and the
step's other candidates) and what a repeat shares with a first attempt there (issue 21: a
repeat on the first route's provider shares more than one elsewhere), so that a hedge on the
other provider can win where the same provider's slow spells would meet the hedge too.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailkit.text import percent, seconds


if TYPE_CHECKING:
    from tailkit.calibration._search import Score
    from tailkit.config import Plan, Shared, Step
    from tailkit.simulation import RouteSample, WorkflowModel
    from tailkit.simulation.lowlevel import SampleKey


RULE = "fewest misses, then lower p99, then fewer extra attempts"
"""How the search's score ranks the candidates (`tailkit.calibration._search.score`), each with
its best cutoff and action within the hedge budget; a tie keeps the route as written."""


def first_candidates(step: Step) -> tuple[str, ...]:
    """
    The routes the search chooses a step's first route among (empty: it keeps its route).

    A step with fewer than two candidates, or a tool step, has no choice to make.
    """
    if step.tool or len(step.candidates) < 2:
        return ()
    return step.candidates


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


def hedge_routes(plan: Plan, step: Step, first: str) -> tuple[str, ...]:
    """
    Routes a step may hedge on when ``first`` is its first route (none if not idempotent).

    `hedge_candidates` with ``first`` as the step's route, then its other candidates; never
    ``first`` itself. For a step without candidates, `hedge_candidates` as it always was.
    """
    if not step.idempotent:
        return ()
    found = hedge_candidates(plan, dataclasses.replace(step, route=first))
    return tuple(r for r in dict.fromkeys((*found, *step.candidates)) if r != first)


def moved_plan(plan: Plan, moved: Mapping[str, str]) -> Plan:
    """
    ``plan`` with the first route of the steps named in ``moved`` replaced.
    """
    if not moved:
        return plan
    steps = {
        name: dataclasses.replace(step, route=moved[name]) if name in moved else step
        for name, step in plan.steps.items()
    }
    return dataclasses.replace(plan, steps=steps)


class WaitingModels:
    """
    The workflow with every step waiting, for any choice of first routes (for the search).

    Each step's sharing is the one measured with its first route (``sharing_by``, per step
    and route; a route not there: the step's ``sharing``).
    """

    def __init__(
        self,
        plan: Plan,
        samples: Mapping[SampleKey, RouteSample],
        sharing: Mapping[str, Shared],
        sharing_by: Mapping[str, Mapping[str, Shared]],
    ) -> None:
        self.plan, self.samples = plan, samples
        self.sharing, self.sharing_by = sharing, sharing_by

    def sharing_for(self, moved: Mapping[str, str]) -> dict[str, Shared]:
        """
        Per step, what a repeat shares with its first attempt on its (moved) first route.
        """
        out = dict(self.sharing)
        for name, route in moved.items():
            found = self.sharing_by.get(name, {}).get(route)
            if found is not None:
                out[name] = found
        return out

    def __call__(self, moved: Mapping[str, str]) -> WorkflowModel:
        """
        The waiting model with the first routes ``moved``.
        """
        from tailkit.simulation import workflow_model

        return workflow_model(
            moved_plan(self.plan, moved), self.samples, sharing=self.sharing_for(moved)
        )


@dataclass(frozen=True, slots=True)
class CandidateFigures:
    """
    One candidate first route of a step, as the search saw it.

    Args:
        route: The route.
        calls: Its calls in the step's bucket (``None``: too few to count, left out).
        miss_rate: The workflow's miss rate on the search's runs with this route first (and
            its best cutoff and action, the other steps as planned); ``None``: left out.
        p99_s: The workflow's p99 seconds, likewise.
        extra_attempts: Extra attempts per first attempt, likewise.
        left_out: Why the route was not tried (too few calls), else ``None``.
    """

    route: str
    calls: int | None
    miss_rate: float | None = None
    p99_s: float | None = None
    extra_attempts: float | None = None
    left_out: str | None = None

    def phrase(self) -> str:
        """
        ``a/m: miss 0.30%, p99 52 s, extra 4.1%`` (or why it was left out).
        """
        if self.left_out is not None:
            return f"{self.route}: left out, {self.left_out}"
        return (
            f"{self.route}: miss {percent(self.miss_rate)}, p99 {seconds(self.p99_s)}, "
            f"extra {percent(self.extra_attempts)}"
        )


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """
    Why calibrate chose a step's first route among its candidates.

    Args:
        step: The step.
        written: The route the workflow gave it.
        chosen: The route the plan gives it.
        candidates: Each candidate, in the workflow's order, with its figures.
        runs: The search's runs behind the figures.
    """

    step: str
    written: str
    chosen: str
    candidates: tuple[CandidateFigures, ...]
    runs: int

    def sentence(self) -> str:
        """
        The plan's ``basis.route_choice``: every candidate's figures and the rule that chose.
        """
        figures = "; ".join(c.phrase() for c in self.candidates)
        kept = ", as written" if self.chosen == self.written else ""
        return f"{figures} (chosen: {self.chosen}{kept}: {RULE}; {self.runs:,} search runs)"

    def as_dict(self) -> dict[str, Any]:
        """
        Plain data for JSON: the candidates with their figures, the chosen one, the rule.
        """
        return {
            "written": self.written,
            "chosen": self.chosen,
            "rule": f"{RULE}, each with its best cutoff and action within the hedge budget; "
            "a tie keeps the route as written",
            "runs": self.runs,
            "candidates": [dataclasses.asdict(c) for c in self.candidates],
        }


def route_choice(
    step: Step,
    chosen: str,
    scores: Mapping[str | None, Score],
    samples: Mapping[SampleKey, RouteSample],
    *,
    min_calls: int,
    runs: int,
) -> RouteChoice:
    """
    A step's `RouteChoice` from the search's scores per first route (``None``: as written).
    """
    figures = []
    for route in step.candidates:
        found = scores.get(None if route == step.route else route)
        sample = samples.get((step.name, route))
        if found is None or sample is None:
            why = f"fewer than {min_calls:,} calls in the step's bucket"
            figures.append(CandidateFigures(route, None, left_out=why))
            continue
        figures.append(
            CandidateFigures(
                route,
                sample.calls,
                miss_rate=round(found.miss_rate, 5),
                p99_s=round(found.p99_s, 3),
                extra_attempts=round(found.extra_attempts, 4),
            )
        )
    return RouteChoice(step.name, step.route, chosen, tuple(figures), runs)
