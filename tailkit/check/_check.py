"""
Judge a plan's predictions against an observation: holds, drifted (and why), or can't tell.

A line can't tell when there are fewer than ``min_runs`` runs (or step calls), or, for a
p99, fewer than the runs an order-statistic interval needs to bound it from above at the level
the line is judged at; it then neither holds nor drifts, and says what is missing.

The other lines form one family, judged so that one exit code has one error rate
(`tailkit.check._rule`): each line's observed interval and the plan's own interval are read at
``1 - (1 - level) / (2 m)`` for the ``m`` lines that can tell, and a line drifts only when the
two are apart and the values differ by more than the tolerance. A plan that still holds then
reads drifted on any line with probability at most ``1 - level``. Where the plan has no
interval, the prediction is judged as an estimate from its basis (or as exact without one),
and the line says so. A drifted line's causes are looked up in the ledger, in the direction
of the drift (`tailkit.check._causes`).

A step the plan routes live adds its decisions (`tailkit.check._live`): the share of its
decisions that explored, against ``1 / explore_every``, and the share of its first attempts
per candidate route, against a prediction of it where one is given (``route_shares``; the
plan file holds none, so without one each can't tell), both in the family; then two
findings outside it, which need no statistics: a live cutoff outside the plan's bounds, or a
first attempt on a route that is not a candidate, drifts on its own.
"""

from __future__ import annotations

import functools
import math
import os

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tailkit import text
from tailkit.check._causes import Causes
from tailkit.check._estimate import rate
from tailkit.check._live import (
    EXPLORE_SHARE,
    OFF_BOUNDS,
    OFF_CANDIDATES,
    ROUTE_SHARE,
    expected_explore_share,
    finding_cause,
    share_cause,
)
from tailkit.check._observation import LiveObservation, Observation, StepObservation
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
    Judged,
    figure_text,
    interval_text,
    observed_text,
)
from tailkit.check._rule import apart, close, line_level, plan_bounds, plan_interval
from tailkit.check._screen import not_of
from tailkit.config import Plan, Step
from tailkit.errors import ConfigError
from tailkit.estimate import LEVEL, Estimate
from tailkit.formats import ScanOptions


__all__ = [
    "MIN_RUNS",
    "THIN_BASIS_CALLS",
    "TOLERANCE",
    "check_observation",
    "check_plan",
]

TOLERANCE = 0.15
"""A prediction within this relative difference of the observed value holds."""

MIN_RUNS = 30
"""Fewer runs (or step calls) than this: can't tell."""

THIN_BASIS_CALLS = 1000
"""A step calibrated on fewer calls than this has a thin basis."""


class _Source(Protocol):
    def estimate(self, figure: str, level: float) -> Estimate: ...


@dataclass(frozen=True, slots=True)
class _Share:
    """
    A live share's count, read again at another level (a `_Source`).
    """

    k: int
    n: int

    def estimate(self, figure: str, level: float) -> Estimate:
        return rate(self.k, self.n, level=level)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """
    One predicted figure before it is judged: where it comes from and what it is judged on.
    """

    scope: str
    figure: str
    predicted: float
    observed: Estimate
    steps: list[StepObservation]
    owner: Any  # the plan's or the step's ``predicted``
    basis_calls: int | None
    units: int
    source: _Source  # reads the figure again at another level
    route: str | None = None  # a route share's route
    live: Step | None = None  # a live figure's step (its causes are the live ones)
    noun: str | None = None  # what ``units`` counts, when not runs or calls of the step


def _missing(n: int, noun: str, min_runs: int) -> str | None:
    if n == 0:
        return f"no {noun} in the ledger"
    if n < min_runs:
        return f"only {n} {noun}; a verdict needs at least {min_runs}"
    return None


def _p99_needs(level: float) -> int:
    from tailkit.fit import min_calls_for_quantile

    return min_calls_for_quantile(0.99, level=level)


def _judgeable(cands: list[_Candidate], min_runs: int, level: float) -> dict[int, str]:
    """
    What each line that can't tell is missing, by its index (the rest form the family).

    The p99s are judged at the level of the family without them beyond their sample size: a
    family chosen by sample sizes alone keeps Bonferroni's guarantee.
    """
    missing: dict[int, str] = {}
    for i, c in enumerate(cands):
        noun = c.noun or ("runs" if c.scope == WORKFLOW else "calls of the step")
        why = _missing(c.units, noun, min_runs)
        if why is None and math.isnan(c.observed.value):
            why = f"no {c.figure} observed"
        if why is not None:
            missing[i] = why
    m = len(cands) - len(missing)
    needed = _p99_needs(line_level(level, m))
    for i, c in enumerate(cands):
        if i not in missing and c.figure == "p99_s" and c.units < needed:
            noun = "runs" if c.scope == WORKFLOW else "calls of the step"
            missing[i] = (
                f"only {c.units} {noun}; a p99 needs at least {needed} to be bounded above at "
                f"the {line_level(level, m):.2%} each of {m} lines is judged at"
            )
    return missing


def _judge(c: _Candidate, at: float, tolerance: float, causes: Causes) -> CheckLine:
    """
    One line that can tell, judged at level ``at`` (see the module doc).
    """
    obs = c.source.estimate(c.figure, at)
    bounds = plan_bounds(
        c.figure,
        c.predicted,
        plan_interval(c.owner, c.figure),
        obs,
        basis_calls=c.basis_calls,
        level=at,
    )
    judged = Judged(at, obs, bounds.low, bounds.high, bounds.how)
    side = apart(obs, bounds)
    pred_text = interval_text(c.figure, bounds.low, bounds.high)
    obs_text = interval_text(c.figure, obs.low, obs.high)
    both = f"at {at:.2%}, observed {obs_text} and predicted {pred_text} ({bounds.how})"
    line = functools.partial(
        CheckLine, c.scope, c.figure, c.predicted, c.observed, judged=judged, route=c.route
    )
    if side == 0:
        return line(HOLDS, f"the intervals overlap {both}")
    if close(c.predicted, c.observed.value, tolerance):
        return line(HOLDS, f"within {text.percent(tolerance)} of the observed value")
    up = side > 0
    reason = (
        f"observed {observed_text(c.figure, c.observed)} is {'above' if up else 'below'} the "
        f"predicted {figure_text(c.figure, c.predicted)}: {both} are apart"
    )
    if c.live is not None:
        found: tuple[Cause, ...] = (
            share_cause(c.live, c.figure, c.route, c.predicted, c.observed.value, up=up),
        )
    else:
        found = causes.of(c.scope, c.figure, c.predicted, obs, c.steps, up=up)
    return line(DRIFTED, reason, found)


def _live_entries(
    step: Step,
    s: StepObservation,
    shares: Mapping[str, float] | None,
) -> list[_Candidate | CheckLine]:
    """
    A live step's lines: its explore share and route shares to judge, then its findings.

    A route share without a prediction can't tell; a finding holds when nothing off the plan
    was seen, and drifts on one line that was.
    """
    live = s.live
    assert live is not None  # noqa: S101 - called for live steps
    calls = step.basis.calls if step.basis is not None else None
    noun = "first attempts with a live decision"
    out: list[_Candidate | CheckLine] = [
        _Candidate(
            s.name,
            EXPLORE_SHARE,
            expected_explore_share(step),
            live.explore_share,
            [s],
            None,
            None,  # exact by design: every explore_every-th decision explores
            live.decisions,
            _Share(live.explored, live.decisions),
            live=step,
            noun=noun,
        )
    ]
    for r in live.routes:
        if not r.candidate:
            continue
        predicted = (shares or {}).get(r.route)
        if predicted is None:
            out.append(
                CheckLine(
                    s.name,
                    ROUTE_SHARE,
                    math.nan,
                    r.share,
                    CANT_TELL,
                    "the plan states no prediction of it (tailkit replay compares it with "
                    "the simulation)",
                    route=r.route,
                )
            )
            continue
        out.append(
            _Candidate(
                s.name,
                ROUTE_SHARE,
                predicted,
                r.share,
                [s],
                None,
                calls,
                live.decisions,
                _Share(r.first_attempts, live.decisions),
                route=r.route,
                live=step,
                noun=noun,
            )
        )
    out.extend(_findings(step, s.name, live))
    return out


def _findings(step: Step, name: str, live: LiveObservation) -> list[CheckLine]:
    """
    The findings of a live step: live cutoffs off their bounds, first attempts off candidates.
    """
    assert step.live is not None  # noqa: S101 - called for live steps
    out = []
    watched = step.cutoff_s if step.signal == "total" else step.ttft_cutoff_s
    if watched is not None:
        observed = rate(live.off_bounds, live.cutoffs)
        low, high = step.live.cutoff_bounds_s
        bounds = f"[{figure_text('cutoff_s', low)}–{figure_text('cutoff_s', high)}]"
        found: tuple[Cause, ...] = ()
        if not live.cutoffs:
            verdict, reason = CANT_TELL, "no live cutoff in the ledger"
        elif live.off_bounds:
            verdict, found = DRIFTED, (finding_cause(step, OFF_BOUNDS, live),)
            reason = f"{live.off_bounds:,} of {live.cutoffs:,} live cutoffs outside {bounds}"
        else:
            seen_low, seen_high = live.cutoff_range_s
            verdict = HOLDS
            reason = (
                f"all {live.cutoffs:,} live cutoffs within {bounds} (from "
                f"{figure_text('cutoff_s', seen_low)} to {figure_text('cutoff_s', seen_high)})"
            )
        out.append(CheckLine(name, OFF_BOUNDS, 0.0, observed, verdict, reason, found))
    firsts = live.decisions + live.undecided
    observed = rate(live.off_candidates, firsts)
    found = ()
    if not firsts:
        verdict, reason = CANT_TELL, "no first attempt in the ledger"
    elif live.off_candidates:
        verdict, found = DRIFTED, (finding_cause(step, OFF_CANDIDATES, live),)
        reason = (
            f"{live.off_candidates:,} of {firsts:,} first attempts on routes that are not "
            "candidates"
        )
    else:
        verdict = HOLDS
        reason = f"all {firsts:,} first attempts on candidates (or moved by a breaker or a 429)"
    out.append(CheckLine(name, OFF_CANDIDATES, 0.0, observed, verdict, reason, found))
    return out


def check_observation(
    plan: Plan | str | os.PathLike[str],
    observation: Observation,
    *,
    tolerance: float = TOLERANCE,
    min_runs: int = MIN_RUNS,
    thin_basis_calls: int = THIN_BASIS_CALLS,
    route_shares: Mapping[str, Mapping[str, float]] | None = None,
) -> CheckReport:
    """
    Judge each of the plan's predictions against an observation already made.

    Args:
        plan: A calibrated plan, or the path of its YAML file.
        observation: What `observe` returned for this plan.
        tolerance: Relative difference too small to drift, whatever the intervals.
        min_runs: Fewer runs (or step calls) than this: can't tell.
        thin_basis_calls: A step calibrated on fewer calls has a thin basis.
        route_shares: Per live step, per candidate route, the predicted share of its first
            attempts (a simulation's, `tailkit.simulation`); ``None``: the plan states none,
            and each route's share can't tell.

    Returns:
        The workflow's lines, then each step's (a live step's decisions after its figures),
        with verdicts and causes; the family's level is the observation's
        (``observation.level``).

    Raises:
        ConfigError: The plan cannot be read or has no predictions, an argument is out of
            range, or the observation is of other steps or routes than the plan's.
    """
    loaded, name = resolve_plan(plan)
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):
        msg = f"{{field}} must be a share in [0, 1), e.g. 0.15, got {tolerance!r}."
        raise ConfigError(
            msg,
            field="tolerance",
            value=tolerance,
            fix="Pass the relative difference too small to drift as a share (0.15 is 15%).",
        )
    if min_runs < 1:
        msg = f"{{field}} must be at least 1, got {min_runs!r}."
        raise ConfigError(
            msg,
            field="min_runs",
            value=min_runs,
            fix="Pass the fewest runs a line is judged on (30 by default).",
        )
    elsewhere = not_of(loaded, observation)
    if elsewhere is not None:
        msg = f"{name}: {elsewhere}: these are not the runs this plan made."
        raise ConfigError(
            msg,
            field="observation",
            value=observation.workflow,
            fix="Observe the ledgers with this plan: observe(plan, ledgers).",
        )
    assert loaded.predicted is not None  # noqa: S101 - resolve_plan refuses a plan without
    bases = [s.basis.calls for s in loaded.steps.values() if s.basis is not None]
    every = list(observation.steps)
    # The plan's extra attempts are those started at cutoffs (its hedge budget); attempts
    # after errors or invalid output are recovery, which the prediction leaves out.
    observed = {f: getattr(observation, f) for f in WORKFLOW_FIGURES}
    observed["extra_attempts"] = observation.cutoff_attempts
    cands = [
        _Candidate(
            WORKFLOW,
            f,
            getattr(loaded.predicted, f),
            observed[f],
            every,
            loaded.predicted,
            min(bases) if bases else None,
            observation.runs,
            observation,
        )
        for f in WORKFLOW_FIGURES
    ]
    entries: list[_Candidate | CheckLine] = list(cands)
    for s in observation.steps:
        step = loaded.steps[s.name]
        assert step.predicted is not None  # noqa: S101 - resolve_plan refuses a plan without
        calls = step.basis.calls if step.basis is not None else None
        entries.extend(
            _Candidate(
                s.name,
                f,
                getattr(step.predicted, f),
                getattr(s, f),
                [s],
                step.predicted,
                calls,
                s.calls,
                s,
            )
            for f in STEP_FIGURES
        )
        if step.live is not None and s.live is not None:
            entries.extend(_live_entries(step, s, (route_shares or {}).get(s.name)))
    family = [e for e in entries if isinstance(e, _Candidate)]
    level = observation.level
    missing = _judgeable(family, min_runs, level)
    at = line_level(level, len(family) - len(missing))
    causes = Causes(
        loaded, tolerance=tolerance, min_runs=min_runs, thin_calls=thin_basis_calls, level=at
    )
    judged = {
        id(c): CheckLine(
            c.scope, c.figure, c.predicted, c.observed, CANT_TELL, missing[i], route=c.route
        )
        if i in missing
        else _judge(c, at, tolerance, causes)
        for i, c in enumerate(family)
    }
    lines = [judged[id(e)] if isinstance(e, _Candidate) else e for e in entries]
    return CheckReport(name, observation, tuple(lines), tolerance, level, at)


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
    route_shares: Mapping[str, Mapping[str, float]] | None = None,
) -> CheckReport:
    """
    Check a calibrated plan's predictions against the ledgers of its production runs.

    Args:
        plan: A calibrated plan, or the path of its YAML file.
        ledgers: The executor's JSON-lines ledger(s), or any log ``tailkit ingest`` reads.
        format: ``auto`` or a format name, as for ``tailkit ingest``.
        options: How to read the ledgers' columns (`ScanOptions`: ``mapping``, ``sets``,
            ``unit``); ``None``: the columns as they are.
        tolerance: Relative difference too small to drift, whatever the intervals (0.15).
        min_runs: Fewer runs (or step calls) than this: can't tell (30).
        thin_basis_calls: A step calibrated on fewer calls has a thin basis (1,000).
        level: The family's confidence level (0.95): the observed intervals shown are at this
            level, and a plan that still holds reads drifted on any line with probability at
            most ``1 - level`` (each line is judged at ``1 - (1 - level) / (2 m)`` for the
            ``m`` lines that can tell).
        route_shares: Per live step, per candidate route, the predicted share of its first
            attempts (``None``: the plan states none; each route's share can't tell).

    Returns:
        One line per predicted figure: the workflow's p50, p99, miss rate and extra attempts,
        then each step's p50, p99 and hedge rate, and for a step the plan routes live, its
        explore share, its route shares and its findings (live cutoffs outside the plan's
        bounds, first attempts off the candidates); ``exit_code`` is 1 when any drifted.

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
        route_shares=route_shares,
    )
    return CheckReport(
        name, report.observation, report.lines, report.tolerance, report.level, report.line_level
    )
