"""
Why a line drifted: the causes a ledger and a plan point to, in the direction of the drift.

- a slower (or faster) route: the step's first attempts alone, which no hedge helped, have a
  median apart from the step's predicted median by the same rule as the lines (intervals at
  the line's level, beyond the tolerance) - the route's body moved;
- an outage: a route the step sent attempts to failed most of them (errors, timeouts the
  provider gave, 5xx); or, without one, failed calls: enough step calls ended with no winner
  to move the figure (each is censored, "more than" it was seen, and a miss);
- budget denials: the hedge budget refused extra attempts (hedges, retries, upgrades), so the
  tail the plan meant to cut was waited out;
- throttle refusals: a provider throttle refused extra attempts, or providers answered with
  rate limits (429);
- a thin basis: the step was calibrated on few calls, or the prediction's own interval is wide;
- else unexplained.
"""

from __future__ import annotations

import math

from tailkit import text
from tailkit.check._observation import StepObservation
from tailkit.check._report import WORKFLOW, Cause, figure_text, observed_text
from tailkit.check._rule import apart, close, plan_bounds, plan_interval
from tailkit.config import Plan
from tailkit.estimate import Estimate


_UP = ("p50_s", "p99_s", "miss_rate")  # figures that get worse upwards
_ROUTES_SHOWN = 3  # a line names the routes that moved most
_WIDE = 0.5  # a predicted interval wider than this share of its value is a thin basis
OUTAGE_SHARE = 0.5
"""A route that failed at least this share of a step's attempts had an outage."""
OUTAGE_ATTEMPTS = 10
"""Fewer attempts than this on a route: too few to call an outage."""


def _matters(figure: str, pred: float, est: Estimate, count: int) -> bool:
    """
    Whether ``count`` calls (or runs) gone wrong are enough to move a figure.

    A refused hedge or a failed call leaves one call (or run) in the tail the plan meant to
    cut. A quantile q can move when such calls are at least a quarter of the ``1 - q`` share
    above it; a rate or ratio, when they are at least a quarter of the gap between prediction
    and observation.
    """
    if count <= 0 or est.n <= 0:
        return False
    quantile = {"p50_s": 0.5, "p99_s": 0.99}.get(figure)
    value = est.value if math.isfinite(est.value) else est.low
    room = 1.0 - quantile if quantile is not None else abs(value - pred)
    return count / est.n >= room / 4.0


class Causes:
    """
    Looks up the causes of drifted lines in one plan and observation.

    Args:
        plan: The calibrated plan.
        tolerance: Relative difference too small to name a route as moved.
        min_runs: Fewest first attempts a route's median is judged on.
        thin_calls: A step calibrated on fewer calls has a thin basis.
        level: The level each line is judged at (the routes are judged at it too).
    """

    def __init__(
        self, plan: Plan, *, tolerance: float, min_runs: int, thin_calls: int, level: float
    ) -> None:
        self.plan, self.tolerance, self.min_runs = plan, tolerance, min_runs
        self.thin_calls, self.level = thin_calls, level

    def of(
        self,
        scope: str,
        figure: str,
        pred: float,
        est: Estimate,
        steps: list[StepObservation],
        *,
        up: bool,
    ) -> tuple[Cause, ...]:
        """
        The causes of one drifted line, most telling first (see the module doc).
        """
        out: list[Cause] = []
        worse = up == (figure in _UP)  # latency or misses up, or hedges down
        moved = self.routes(steps, slower=up)
        if moved:
            shown = "; ".join(moved[:_ROUTES_SHOWN])
            more = len(moved) - _ROUTES_SHOWN
            shown += f"; and {more} more" if more > 0 else ""
            out.append(Cause("slower route" if up else "faster route", shown))
        out.extend(self._failures(figure, pred, est, steps))
        budget = sum(s.denied_budget for s in steps)
        if worse and _matters(figure, pred, est, budget):
            out.append(
                Cause(
                    "budget denials",
                    f"the hedge budget refused {budget:,} extra attempts (attrs.hedge_denied, "
                    "retry_denied, upgrade_denied: budget); raise hedge_budget, or hedge "
                    "fewer steps",
                )
            )
        throttled = sum(s.denied_throttle for s in steps)
        refused = sum(s.rate_limited for s in steps)
        if worse and _matters(figure, pred, est, throttled + refused):
            where = [
                f"{r.route} ({s.name}) {r.rate_limited:,}"
                for s in steps
                for r in s.routes
                if r.rate_limited
            ]
            shown = f": {', '.join(where[:_ROUTES_SHOWN])}" if where else ""
            out.append(
                Cause(
                    "throttle refusals",
                    f"provider throttles refused {throttled:,} extra attempts (attrs.*_denied: "
                    f"throttle) and providers rate limited {refused:,} attempts (429){shown}; "
                    "hedge to a route with its own rate-limit pool, or raise the provider's "
                    "limits",
                )
            )
        out.extend(self._thin(scope, figure, steps))
        if not out:
            out.append(
                Cause(
                    "unexplained",
                    "no route moved or failed, no extra attempt was refused and the basis is "
                    "thick: production no longer matches the calibration; re-calibrate on "
                    "recent calls",
                )
            )
        return tuple(out)

    def routes(self, steps: list[StepObservation], *, slower: bool) -> list[str]:
        """
        The steps' routes whose first attempts' median moved, the most moved first.
        """
        found: list[tuple[float, str]] = []
        for s in steps:
            step = self.plan.steps[s.name]
            predicted = step.predicted
            if predicted is None or s.first_attempt_p50_s.n < self.min_runs:
                continue
            first = s.first_durations.quantile(0.5, level=self.level)
            if not s.first_durations.finished_s and not s.first_durations.unfinished_s:
                first = s.first_attempt_p50_s
            body = predicted.p50_s
            calls = step.basis.calls if step.basis is not None else None
            bounds = plan_bounds(
                "p50_s",
                body,
                plan_interval(predicted, "p50_s"),
                first,
                basis_calls=calls,
                level=self.level,
            )
            side = apart(first, bounds)
            if side == 0 or (side > 0) != slower or close(body, first.value, self.tolerance):
                continue
            text = (
                f"{s.route} ({s.name}): first attempts' p50 "
                f"{observed_text('p50_s', s.first_attempt_p50_s)} against "
                f"{figure_text('p50_s', body)} predicted"
            )
            edge = first.low if slower else first.high
            found.append((abs(math.log(max(edge, 1e-9) / max(body, 1e-9))), text))
        return [text for _, text in sorted(found, key=lambda f: -f[0])]

    def _failures(
        self, figure: str, pred: float, est: Estimate, steps: list[StepObservation]
    ) -> list[Cause]:
        down = [
            (
                r.failed_share,
                f"{r.route} ({s.name}) failed {r.failed:,} of {r.attempts:,} "
                f"attempts ({text.percent(r.failed_share)})",
            )
            for s in steps
            for r in s.routes
            if r.attempts >= OUTAGE_ATTEMPTS and r.failed_share >= OUTAGE_SHARE
        ]
        if down:
            shown = "; ".join(text for _, text in sorted(down, key=lambda d: -d[0]))
            return [
                Cause(
                    "outage",
                    f"{shown} (errors, provider timeouts, 5xx); its calls without a winner "
                    "count as misses and as more than they ran; fail over to another provider, "
                    "or wait it out and check again",
                )
            ]
        failed = sum(s.failed_calls for s in steps)
        if _matters(figure, pred, est, failed):
            calls = sum(s.calls for s in steps)
            return [
                Cause(
                    "failed calls",
                    f"{failed:,} of {calls:,} step calls ended without a winner (every attempt "
                    "failed, or the step gave up or was cut); see their errors with tailkit "
                    "ingest LEDGER and tailkit stats",
                )
            ]
        return []

    def _thin(self, scope: str, figure: str, steps: list[StepObservation]) -> list[Cause]:
        thin = []
        for s in steps:
            basis = self.plan.steps[s.name].basis
            if basis is not None and basis.calls < self.thin_calls:
                thin.append(f"{s.name} on {basis.calls:,} calls")
        out = []
        if thin:
            out.append(
                Cause(
                    "thin basis",
                    f"calibrated on fewer than {self.thin_calls:,} calls ({', '.join(thin)}); "
                    "calibrate on more logs or a wider bucket",
                )
            )
        owner = self.plan.predicted if scope == WORKFLOW else self.plan.steps[scope].predicted
        own = plan_interval(owner, figure)
        predicted = getattr(owner, figure)
        if own is not None and own[1] - own[0] > _WIDE * abs(predicted):
            shown = f"[{figure_text(figure, own[0])}–{figure_text(figure, own[1])}]"
            out.append(
                Cause(
                    "thin basis",
                    f"the prediction's own interval {shown} is wide (more than "
                    f"{text.percent(_WIDE)} of the predicted value)",
                )
            )
        return out
