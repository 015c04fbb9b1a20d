"""
Judge a plan's predictions against an observation: holds, drifted (and why), or can't tell.

A line holds when the prediction lies inside the observed 95 % interval, or within the
tolerance of the observed value: ``|pred - obs| <= tolerance * max(|pred|, |obs|)`` (the
interval alone would flag differences too small to act on once there are many runs). It can't
tell when there are fewer than ``min_runs`` runs (or step calls), or, for a p99, fewer than the
runs an order-statistic interval needs to bound it from above (368 at 95 %); it then neither
holds nor drifts, and says what is missing. Otherwise it drifted, and the causes are looked up
in the ledger, in the direction of the drift:

- a route got slower (or faster): the step's first attempts alone, which no hedge helped, have
  a median off the step's predicted median - the route's body moved;
- budget denials: the hedge budget or a provider throttle refused extra attempts, so the tail
  the plan meant to cut was waited out (latency, misses up; hedges, extra attempts down);
- a thin basis: the step was calibrated on few calls, or the prediction's own interval (when
  the plan has one) holds the observed value or is wider than half the predicted value.
"""

from __future__ import annotations

import math
import os

from typing import Any

from tailkit.check._estimate import LEVEL, Estimate
from tailkit.check._observation import Observation, StepObservation
from tailkit.check._observe import Ledgers, observe, resolve_plan
from tailkit.check._report import (
    CANT_TELL,
    DRIFTED,
    HOLDS,
    STEP_FIGURES,
    WORKFLOW,
    WORKFLOW_FIGURES,
    Cause,
    CheckLine,
    CheckReport,
)
from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.formats import ScanOptions


TOLERANCE = 0.15
"""A prediction within this relative difference of the observed value holds."""

MIN_RUNS = 30
"""Fewer runs (or step calls) than this: can't tell."""

THIN_BASIS_CALLS = 1000
"""A step calibrated on fewer calls than this has a thin basis."""

_UP = ("p50_s", "p99_s", "miss_rate")  # figures that get worse upwards
_ROUTES_SHOWN = 3  # a workflow line names the routes that moved most
_WIDE = 0.5  # a predicted interval wider than this share of its value is a thin basis


def _denials_matter(figure: str, pred: float, est: Estimate, denied: int) -> bool:
    """
    Whether refused extra attempts are enough to move a figure.

    A refused hedge leaves one call (or run) in the tail it was meant to cut. A quantile q can
    move when such calls are at least a quarter of the ``1 - q`` share above it; a rate or
    ratio, when they are at least a quarter of the gap between prediction and observation.
    """
    if denied <= 0 or est.n <= 0:
        return False
    share = denied / est.n
    quantile = {"p50_s": 0.5, "p99_s": 0.99}.get(figure)
    room = 1.0 - quantile if quantile is not None else abs(est.value - pred)
    return share >= room / 4.0


def figure_text(figure: str, value: float) -> str:
    """
    A figure for people: ``12.31 s`` for seconds, ``3.0%`` for rates, ``0.049`` for ratios.
    """
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞"
    if figure.endswith("_s"):
        return f"{value:.2f} s"
    return f"{value:.1%}" if figure in ("miss_rate", "hedge_rate") else f"{value:.3f}"


def observed_text(figure: str, est: Estimate) -> str:
    """
    ``12.31 s [11.90–12.80]``, or ``more than 88.00 s`` when unfinished runs hide the value.
    """
    if math.isinf(est.value):
        return f"more than {figure_text(figure, est.low)}"
    low, high = (figure_text(figure, x).removesuffix(" s") for x in (est.low, est.high))
    return f"{figure_text(figure, est.value)} [{low}–{high}]"


def _agreement(pred: float, est: Estimate, tolerance: float) -> str | None:
    if est.low <= pred <= est.high:
        return "inside the observed interval"
    obs = est.value
    close = math.isfinite(pred) and math.isfinite(obs)
    if close and abs(pred - obs) <= tolerance * max(abs(pred), abs(obs)):
        return f"within {tolerance:.0%} of the observed value"
    return None


def _missing(figure: str, n: int, noun: str, min_runs: int, level: float) -> str | None:
    from tailkit.fit import min_calls_for_quantile

    if n == 0:
        return f"no {noun} in the ledger"
    if n < min_runs:
        return f"only {n} {noun}; a verdict needs at least {min_runs}"
    if figure == "p99_s":
        needed = min_calls_for_quantile(0.99, level=level)
        if n < needed:
            return f"only {n} {noun}; a p99 needs at least {needed} to be bounded above"
    return None


def predicted_interval(prediction: Any, figure: str) -> tuple[float, float] | None:
    """
    The prediction's own interval for a figure, when the plan carries one.

    Reads ``prediction.interval`` as a mapping or an object with the figure's ``[low, high]``;
    ``None`` when the plan has no such interval.
    """
    interval = getattr(prediction, "interval", None)
    if interval is None:
        return None
    pair = interval.get(figure) if isinstance(interval, dict) else getattr(interval, figure, None)
    try:
        low, high = pair  # type: ignore[misc]
        return float(low), float(high)
    except (TypeError, ValueError):
        return None


class _Judge:
    def __init__(
        self, plan: Plan, obs: Observation, tolerance: float, min_runs: int, thin_calls: int
    ) -> None:
        self.plan, self.obs = plan, obs
        self.tolerance, self.min_runs, self.thin_calls = tolerance, min_runs, thin_calls

    def line(
        self,
        scope: str,
        figure: str,
        pred: float,
        est: Estimate,
        steps: list[StepObservation],
        *,
        units: int,
    ) -> CheckLine:
        noun = "runs" if scope == WORKFLOW else "calls of the step"
        missing = _missing(figure, units, noun, self.min_runs, self.obs.level)
        if missing is None and math.isnan(est.value):
            missing = f"no {figure} observed"
        if missing is not None:
            return CheckLine(scope, figure, pred, est, CANT_TELL, missing)
        agree = _agreement(pred, est, self.tolerance)
        if agree is not None:
            return CheckLine(scope, figure, pred, est, HOLDS, agree)
        up = est.low > pred
        reason = (
            f"observed {observed_text(figure, est)} is {'above' if up else 'below'} the "
            f"predicted {figure_text(figure, pred)}"
        )
        causes = self.causes(scope, figure, pred, est, steps, up=up)
        return CheckLine(scope, figure, pred, est, DRIFTED, reason, causes)

    def causes(
        self,
        scope: str,
        figure: str,
        pred: float,
        est: Estimate,
        steps: list[StepObservation],
        *,
        up: bool,
    ) -> tuple[Cause, ...]:
        out: list[Cause] = []
        # A slower body raises latency and misses, and more calls pass their cutoffs: every
        # figure moves up. Refused hedges raise latency and misses but lower hedges.
        moved = self._routes(steps, slower=up)
        if moved:
            shown = "; ".join(moved[:_ROUTES_SHOWN])
            more = len(moved) - _ROUTES_SHOWN
            shown += f"; and {more} more" if more > 0 else ""
            out.append(Cause("slower route" if up else "faster route", shown))
        budget = sum(s.denied_budget for s in steps)
        throttle = sum(s.denied_throttle for s in steps)
        if up == (figure in _UP) and _denials_matter(figure, pred, est, budget + throttle):
            out.append(
                Cause(
                    "budget denials",
                    f"the hedge budget refused {budget:,} extra attempts and provider "
                    f"throttles {throttle:,} (attrs.hedge_denied); raise hedge_budget, or "
                    "hedge fewer steps",
                )
            )
        out.extend(self._thin(scope, figure, est, steps))
        if not out:
            out.append(
                Cause(
                    "unexplained",
                    "no route moved, no hedge was refused and the basis is thick: production "
                    "no longer matches the calibration; re-calibrate on recent calls",
                )
            )
        return tuple(out)

    def _routes(self, steps: list[StepObservation], *, slower: bool) -> list[str]:
        found: list[tuple[float, str]] = []
        for s in steps:
            predicted = self.plan.steps[s.name].predicted
            first = s.first_attempt_p50_s
            if predicted is None or first.n < self.min_runs:
                continue
            body = predicted.p50_s
            if _agreement(body, first, self.tolerance) is not None:
                continue
            if (first.low > body) == slower:
                text = (
                    f"{s.route} ({s.name}): first attempts' p50 "
                    f"{observed_text('p50_s', first)} against {figure_text('p50_s', body)} "
                    "predicted"
                )
                found.append(
                    (abs(math.log(max(first.low if slower else first.high, 1e-9) / body)), text)
                )
        # the routes that moved most first
        return [text for _, text in sorted(found, key=lambda f: -f[0])]

    def _thin(
        self, scope: str, figure: str, est: Estimate, steps: list[StepObservation]
    ) -> list[Cause]:
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
        interval = predicted_interval(owner, figure)
        if interval is None:
            return out
        low, high = interval
        shown = f"[{figure_text(figure, low)}–{figure_text(figure, high)}]"
        predicted = getattr(owner, figure)
        if low <= est.value <= high:
            why = "holds the observed value"
        elif high - low > _WIDE * abs(predicted):
            why = f"is wide (more than {_WIDE:.0%} of the predicted value)"
        else:
            return out
        out.append(Cause("thin basis", f"the prediction's own interval {shown} {why}"))
        return out


def check_observation(
    plan: Plan | str | os.PathLike[str],
    observation: Observation,
    *,
    tolerance: float = TOLERANCE,
    min_runs: int = MIN_RUNS,
    thin_basis_calls: int = THIN_BASIS_CALLS,
) -> CheckReport:
    """
    Judge each of the plan's predictions against an observation already made.

    Args:
        plan: A calibrated plan, or the path of its YAML file.
        observation: What `observe` returned for this plan.
        tolerance: Relative difference within which a prediction holds.
        min_runs: Fewer runs (or step calls) than this: can't tell.
        thin_basis_calls: A step calibrated on fewer calls has a thin basis.

    Returns:
        The workflow's lines, then each step's, with verdicts and causes.

    Raises:
        ConfigError: The plan cannot be read or has no predictions, or an argument is out of
            range.
    """
    loaded, name = resolve_plan(plan)
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):
        msg = f"tolerance must be a share in [0, 1), e.g. 0.15, got {tolerance!r}"
        raise ConfigError(msg)
    if min_runs < 1:
        msg = f"min_runs must be at least 1, got {min_runs!r}"
        raise ConfigError(msg)
    judge = _Judge(loaded, observation, tolerance, min_runs, thin_basis_calls)
    assert loaded.predicted is not None  # noqa: S101 - resolve_plan refuses a plan without
    every = list(observation.steps)
    runs = observation.runs
    # The plan's extra attempts are those started at cutoffs (its hedge budget); attempts
    # after errors or invalid output are recovery, which the prediction leaves out.
    observed = {f: getattr(observation, f) for f in WORKFLOW_FIGURES}
    observed["extra_attempts"] = observation.cutoff_attempts
    lines = [
        judge.line(WORKFLOW, f, getattr(loaded.predicted, f), observed[f], every, units=runs)
        for f in WORKFLOW_FIGURES
    ]
    for s in observation.steps:
        predicted = loaded.steps[s.name].predicted
        assert predicted is not None  # noqa: S101 - resolve_plan refuses a plan without
        lines.extend(
            judge.line(s.name, f, getattr(predicted, f), getattr(s, f), [s], units=s.calls)
            for f in STEP_FIGURES
        )
    return CheckReport(plan=name, observation=observation, lines=tuple(lines), tolerance=tolerance)


def check_plan(
    plan: Plan | str | os.PathLike[str],
    ledgers: Ledgers,
    *,
    format: str = "auto",
    options: ScanOptions | None = None,
    tolerance: float = TOLERANCE,
    min_runs: int = MIN_RUNS,
    thin_basis_calls: int = THIN_BASIS_CALLS,
    level: float = LEVEL,
) -> CheckReport:
    """
    Check a calibrated plan's predictions against the ledgers of its production runs.

    Args:
        plan: A calibrated plan, or the path of its YAML file.
        ledgers: The executor's JSON-lines ledger(s), or any log ``tailkit ingest`` reads.
        format: ``auto`` or a format name, as for ``tailkit ingest``.
        options: ``--map`` / ``--set`` / ``--unit``; ``None``: the columns as they are.
        tolerance: Relative difference within which a prediction holds (0.15).
        min_runs: Fewer runs (or step calls) than this: can't tell (30).
        thin_basis_calls: A step calibrated on fewer calls has a thin basis (1,000).
        level: Confidence level of the observed intervals (0.95). Each line is judged on its
            own, so with 25 lines some fall outside their 95 % interval by chance now and then;
            a job that alerts on drift may want 0.99.

    Returns:
        One line per predicted figure: the workflow's p50, p99, miss rate and extra attempts,
        then each step's p50, p99 and hedge rate; ``exit_code`` is 1 when any drifted.

    Raises:
        ConfigError: The plan cannot be read or has no predictions ("calibrate it first").
        IngestError: A ledger cannot be read, or holds no run of the plan's steps.
    """
    loaded, name = resolve_plan(plan)
    observation = observe(loaded, ledgers, format=format, options=options, level=level)
    report = check_observation(
        loaded,
        observation,
        tolerance=tolerance,
        min_runs=min_runs,
        thin_basis_calls=thin_basis_calls,
    )
    return CheckReport(name, report.observation, report.lines, report.tolerance)
