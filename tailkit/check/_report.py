"""
What `check_plan` reports: one line per predicted figure, its verdict, and a JSON form.
"""

from __future__ import annotations

import json
import math

from dataclasses import dataclass
from typing import Any

from tailkit import text
from tailkit.check._estimate import estimate_json
from tailkit.check._observation import Observation
from tailkit.check._rule import SHARES
from tailkit.estimate import LEVEL, Estimate


HOLDS = "holds"
DRIFTED = "drifted"
CANT_TELL = "can't tell"
VERDICTS: tuple[str, ...] = (HOLDS, DRIFTED, CANT_TELL)
"""A line's verdict: the prediction agrees with the ledger, it does not, or too little data."""

WORKFLOW_FIGURES: tuple[str, ...] = ("p50_s", "p99_s", "miss_rate", "extra_attempts")
"""The workflow's predicted figures, in report order."""

STEP_FIGURES: tuple[str, ...] = ("p50_s", "p99_s", "hedge_rate")
"""Each step's predicted figures, in report order."""

LIVE_LINES: tuple[str, ...] = ("explore_share", "route_share", "off_bounds", "off_candidates")
"""A live step's lines after its figures, in report order: its explore share, its share of
first attempts per candidate route, then its findings (live cutoffs outside the plan's bounds,
first attempts on routes that are not candidates)."""

WORKFLOW = "workflow"
"""`CheckLine.scope` of the workflow's lines (a step's lines carry the step's name)."""


CAUSES: tuple[str, ...] = (
    "slower route",
    "faster route",
    "outage",
    "failed calls",
    "budget denials",
    "throttle refusals",
    "thin basis",
    "executor off plan",
    "unexplained",
)
"""The kinds of cause a drifted line can name, in the order they are looked for."""


def figure_text(figure: str, value: float) -> str:
    """
    A figure for people: ``12.31 s`` for seconds, ``3.0%`` for rates, ``0.049`` for ratios.

    Infinite is ``∞`` and missing ``-``, as `tailkit.text` writes them. The digits are fixed
    rather than `tailkit.text.seconds`' and `tailkit.text.percent`'s "as many as a reader
    needs": a line puts a value beside its interval's two ends, and ``17.39 s [17.11–17.74]``
    would read ``17 s [17–18]``.
    """
    if not math.isfinite(value):
        return text.number(value)
    if figure.endswith("_s"):
        return f"{text.number(value, 2)} s"
    return f"{value:.1%}" if figure in SHARES else text.number(value, 3)


def observed_text(figure: str, est: Estimate) -> str:
    """
    ``12.31 s [11.90–12.80]``, or ``more than 88.00 s`` when unfinished runs hide the value.
    """
    if math.isinf(est.value):
        return f"more than {figure_text(figure, est.low)}"
    low, high = (figure_text(figure, x).removesuffix(" s") for x in (est.low, est.high))
    return f"{figure_text(figure, est.value)} [{low}–{high}]"


def interval_text(figure: str, low: float, high: float) -> str:
    """
    ``[11.90–12.80 s]``, ``[1.2%–3.4%]``: an interval for people.
    """
    unit = " s" if figure.endswith("_s") else ""
    ends = (figure_text(figure, x).removesuffix(" s") for x in (low, high))
    return "[{}–{}{}]".format(*ends, unit)


@dataclass(frozen=True, slots=True)
class Judged:
    """
    How a line that could tell was judged: both intervals at the line's level.

    Args:
        level: The level each interval was read at (the family's level, corrected for the
            number of lines that could tell).
        observed: The observed figure with its interval at that level.
        low: Lower end of the plan's interval at that level.
        high: Upper end of the plan's interval at that level.
        source: Where the plan's interval came from: ``the plan's interval``, ``from its
            basis of N calls (the plan has no interval)``, or ``taken as exact …``.
    """

    level: float
    observed: Estimate
    low: float
    high: float
    source: str

    def as_dict(self) -> dict[str, Any]:
        """
        ``{"level", "observed": {…}, "predicted": [low, high], "predicted_from"}``.
        """
        ends = [x if math.isfinite(x) else None for x in (self.low, self.high)]
        return {
            "level": self.level,
            "observed": estimate_json(self.observed),
            "predicted": ends,
            "predicted_from": self.source,
        }


@dataclass(frozen=True, slots=True)
class Cause:
    """
    A likely cause of a drift.

    Args:
        kind: One of `CAUSES`.
        detail: What in the ledger or the plan points to it, and what to do.
    """

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class CheckLine:
    """
    One predicted figure against what the ledgers show.

    Args:
        scope: ``workflow``, or the step's name.
        figure: ``p50_s``, ``p99_s``, ``miss_rate``, ``extra_attempts`` or ``hedge_rate``;
            for a live step also one of `LIVE_LINES`.
        predicted: The plan's value (seconds for ``*_s``, else a share or a ratio; NaN: the
            plan states none).
        observed: The observed value with its interval and sample size.
        verdict: One of `VERDICTS`.
        reason: Why: how it agrees, how far it drifted, or what is missing to tell.
        causes: For a drifted line, the likely causes, in the order of `CAUSES`.
        judged: For a line judged by the rule (`tailkit.check._rule`), both intervals at the
            level it was judged at (``None`` for a finding: it needs no statistics).
        route: For a ``route_share`` line, its route.
    """

    scope: str
    figure: str
    predicted: float
    observed: Estimate
    verdict: str
    reason: str
    causes: tuple[Cause, ...] = ()
    judged: Judged | None = None
    route: str | None = None

    @property
    def cause(self) -> str | None:
        """
        The causes in one sentence (``None`` unless the line drifted).
        """
        return "; ".join(str(c) for c in self.causes) if self.causes else None

    def as_dict(self) -> dict[str, Any]:
        """
        The line as JSON-ready values.

        Keys: ``predicted``, ``observed`` (``value``, ``low``, ``high``, ``n``, ``method``),
        ``verdict``, ``reason``, ``judged`` (``level``, ``observed``, ``predicted`` as
        ``[low, high]`` and ``predicted_from``) when it could tell, and, when drifted,
        ``cause`` (one sentence) and ``causes`` (``kind``, ``detail``).
        """
        out: dict[str, Any] = {
            "predicted": self.predicted if math.isfinite(self.predicted) else None,
            "observed": estimate_json(self.observed),
            "verdict": self.verdict,
            "reason": self.reason,
        }
        if self.judged is not None:
            out["judged"] = self.judged.as_dict()
        if self.verdict == DRIFTED:
            out["cause"] = self.cause
            out["causes"] = [{"kind": c.kind, "detail": c.detail} for c in self.causes]
        return out


def _left_out(obs: Observation) -> str:
    """
    ``; 4 runs left out (times that cannot be true)``, or nothing when none was.
    """
    why = []
    if obs.left_out_clock:
        why.append(f"{obs.left_out_clock:,} for times that cannot be true")
    if obs.left_out_route:
        why.append(f"{obs.left_out_route:,} on routes the plan does not have")
    if obs.left_out_refused:
        why.append(f"{obs.left_out_refused:,} with a line ingest refused")
    if obs.left_out_partial:
        why.append(f"{obs.left_out_partial:,} without a required step")
    if not why:
        return ""
    total = obs.left_out_clock + obs.left_out_route + obs.left_out_refused + obs.left_out_partial
    said = why[0].split(" ", 1)[1] if len(why) == 1 else ", ".join(why)
    return f"; {total:,} run{'' if total == 1 else 's'} left out ({said})"


@dataclass(frozen=True, slots=True)
class CheckReport:
    """
    A plan's predictions checked against its ledgers.

    Args:
        plan: How the plan was named (its file, or ``plan 'NAME'``).
        observation: What the ledgers show (`observe`).
        lines: The workflow's lines (`WORKFLOW_FIGURES`), then each step's (`STEP_FIGURES`),
            in the plan's order.
        tolerance: The relative difference too small to drift, whatever the intervals.
        level: The family's level: a plan that still holds reads drifted on any line with
            probability at most ``1 - level``.
        line_level: The level each line that could tell was judged at.
    """

    plan: str
    observation: Observation
    lines: tuple[CheckLine, ...]
    tolerance: float
    level: float = LEVEL
    line_level: float = LEVEL

    @property
    def judged(self) -> int:
        """
        Lines judged by the rule (held or drifted): the family the level holds for.

        A live step's findings hold or drift without statistics, outside the family.
        """
        return sum(1 for line in self.lines if line.judged is not None)

    @property
    def verdict(self) -> str:
        """
        ``drifted`` when any line drifted, else ``holds`` (lines that can't tell included).
        """
        return DRIFTED if any(line.verdict == DRIFTED for line in self.lines) else HOLDS

    @property
    def exit_code(self) -> int:
        """
        0 when every line holds or can't tell, 1 when any drifted (for scheduled jobs).
        """
        return 1 if self.verdict == DRIFTED else 0

    @property
    def drifted(self) -> tuple[CheckLine, ...]:
        """
        The lines that drifted, in report order.
        """
        return tuple(line for line in self.lines if line.verdict == DRIFTED)

    def counts(self) -> dict[str, int]:
        """
        Lines per verdict, every verdict present.
        """
        return {v: sum(1 for line in self.lines if line.verdict == v) for v in VERDICTS}

    def line(self, scope: str, figure: str, route: str | None = None) -> CheckLine:
        """
        The line of one figure of the workflow (``scope="workflow"``) or of a step.

        ``route`` names the route of a ``route_share`` line.

        Raises:
            KeyError: No such line.
        """
        for line in self.lines:
            if line.scope == scope and line.figure == figure and line.route == route:
                return line
        raise KeyError((scope, figure, route) if route is not None else (scope, figure))

    def summary(self) -> str:
        """
        One sentence, e.g. ``drifted: 2 of 25 lines (3 can't tell), over 412 runs``.
        """
        c = self.counts()
        obs = self.observation
        tail = f" ({c[CANT_TELL]} can't tell)" if c[CANT_TELL] else ""
        over = f"over {obs.runs:,} runs{_left_out(obs)}"
        if self.verdict == DRIFTED:
            return f"drifted: {c[DRIFTED]} of {len(self.lines)} lines{tail}, {over}"
        return f"holds: {c[HOLDS]} of {len(self.lines)} lines hold{tail}, {over}"

    def as_dict(self) -> dict[str, Any]:
        """
        ``{"verdict", "workflow": {…}, "steps": [...], …}``: each figure's line under its name.
        """
        obs = self.observation
        workflow: dict[str, Any] = {
            "name": obs.workflow,
            "deadline_s": obs.deadline_s if math.isfinite(obs.deadline_s) else None,
            "runs": obs.runs,
            "missed_late": obs.missed_late,
            "missed_failed": obs.missed_failed,
            "cutoff_attempts": estimate_json(obs.cutoff_attempts),
            "denied": {"budget": obs.denied_budget, "throttle": obs.denied_throttle},
            "rate_limited": obs.rate_limited,
        }
        for line in self.lines:
            if line.scope == WORKFLOW:
                workflow[line.figure] = line.as_dict()
        steps = []
        for s in obs.steps:
            entry: dict[str, Any] = {
                "step": s.name,
                "route": s.route,
                "calls": s.calls,
                "first_attempt_p50_s": estimate_json(s.first_attempt_p50_s),
                "extra_attempts": s.extra_attempts,
                "cutoff_attempts": s.cutoff_attempts,
                "denied": {"budget": s.denied_budget, "throttle": s.denied_throttle},
                "rate_limited": s.rate_limited,
                "failed_calls": s.failed_calls,
                "routes": [
                    {
                        "route": r.route,
                        "attempts": r.attempts,
                        "failed": r.failed,
                        "rate_limited": r.rate_limited,
                    }
                    for r in s.routes
                ],
            }
            if s.live is not None:
                entry["live"] = s.live.as_dict()
            for line in self.lines:
                if line.scope != s.name:
                    continue
                if line.route is not None:
                    entry.setdefault(line.figure, {})[line.route] = line.as_dict()
                else:
                    entry[line.figure] = line.as_dict()
            steps.append(entry)
        return {
            "verdict": self.verdict,
            "summary": self.summary(),
            "plan": self.plan,
            "ledgers": list(obs.ledgers),
            "tolerance": self.tolerance,
            "level": self.level,
            "line_level": self.line_level,
            "counts": self.counts(),
            "workflow": workflow,
            "steps": steps,
            "left_out": {
                "clock": obs.left_out_clock,
                "route": obs.left_out_route,
                "refused": obs.left_out_refused,
                "partial": obs.left_out_partial,
                "runs": [entry.as_dict() for entry in obs.left_out],
            },
            "warnings": list(obs.warnings),
            "notes": list(obs.notes),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """
        `as_dict` as JSON text (every number finite: unbounded ends are ``null``).
        """
        return json.dumps(self.as_dict(), indent=indent, allow_nan=False)
