"""
What `check_plan` reports: one line per predicted figure, its verdict, and a JSON form.
"""

from __future__ import annotations

import json
import math

from dataclasses import dataclass
from typing import Any

from tailkit.check._estimate import Estimate
from tailkit.check._observation import Observation


HOLDS = "holds"
DRIFTED = "drifted"
CANT_TELL = "can't tell"
VERDICTS: tuple[str, ...] = (HOLDS, DRIFTED, CANT_TELL)
"""A line's verdict: the prediction agrees with the ledger, it does not, or too little data."""

WORKFLOW_FIGURES: tuple[str, ...] = ("p50_s", "p99_s", "miss_rate", "extra_attempts")
"""The workflow's predicted figures, in report order."""

STEP_FIGURES: tuple[str, ...] = ("p50_s", "p99_s", "hedge_rate")
"""Each step's predicted figures, in report order."""

WORKFLOW = "workflow"
"""`CheckLine.scope` of the workflow's lines (a step's lines carry the step's name)."""


CAUSES: tuple[str, ...] = (
    "slower route",
    "faster route",
    "budget denials",
    "thin basis",
    "unexplained",
)
"""The kinds of cause a drifted line can name, in the order they are looked for."""


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
        figure: ``p50_s``, ``p99_s``, ``miss_rate``, ``extra_attempts`` or ``hedge_rate``.
        predicted: The plan's value (seconds for ``*_s``, else a share or a ratio).
        observed: The observed value with its interval and sample size.
        verdict: One of `VERDICTS`.
        reason: Why: how it agrees, how far it drifted, or what is missing to tell.
        causes: For a drifted line, the likely causes, in the order of `CAUSES`.
    """

    scope: str
    figure: str
    predicted: float
    observed: Estimate
    verdict: str
    reason: str
    causes: tuple[Cause, ...] = ()

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
        ``verdict``, ``reason`` and, when drifted, ``cause`` (one sentence) and ``causes``
        (``kind``, ``detail``).
        """
        out: dict[str, Any] = {
            "predicted": self.predicted if math.isfinite(self.predicted) else None,
            "observed": self.observed.as_dict(),
            "verdict": self.verdict,
            "reason": self.reason,
        }
        if self.verdict == DRIFTED:
            out["cause"] = self.cause
            out["causes"] = [{"kind": c.kind, "detail": c.detail} for c in self.causes]
        return out


@dataclass(frozen=True, slots=True)
class CheckReport:
    """
    A plan's predictions checked against its ledgers.

    Args:
        plan: How the plan was named (its file, or ``plan 'NAME'``).
        observation: What the ledgers show (`observe`).
        lines: The workflow's lines (`WORKFLOW_FIGURES`), then each step's (`STEP_FIGURES`),
            in the plan's order.
        tolerance: The relative difference within which a prediction holds even outside the
            observed interval.
    """

    plan: str
    observation: Observation
    lines: tuple[CheckLine, ...]
    tolerance: float

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

    def line(self, scope: str, figure: str) -> CheckLine:
        """
        The line of one figure of the workflow (``scope="workflow"``) or of a step.

        Raises:
            KeyError: No such line.
        """
        for line in self.lines:
            if line.scope == scope and line.figure == figure:
                return line
        raise KeyError((scope, figure))

    def summary(self) -> str:
        """
        One sentence, e.g. ``drifted: 2 of 25 lines (3 can't tell), over 412 runs``.
        """
        c = self.counts()
        runs = self.observation.runs
        tail = f" ({c[CANT_TELL]} can't tell)" if c[CANT_TELL] else ""
        if self.verdict == DRIFTED:
            return f"drifted: {c[DRIFTED]} of {len(self.lines)} lines{tail}, over {runs:,} runs"
        return f"holds: {c[HOLDS]} of {len(self.lines)} lines hold{tail}, over {runs:,} runs"

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
            "cutoff_attempts": obs.cutoff_attempts.as_dict(),
            "denied": {"budget": obs.denied_budget, "throttle": obs.denied_throttle},
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
                "first_attempt_p50_s": s.first_attempt_p50_s.as_dict(),
                "extra_attempts": s.extra_attempts,
                "cutoff_attempts": s.cutoff_attempts,
                "denied": {"budget": s.denied_budget, "throttle": s.denied_throttle},
            }
            for line in self.lines:
                if line.scope == s.name:
                    entry[line.figure] = line.as_dict()
            steps.append(entry)
        return {
            "verdict": self.verdict,
            "summary": self.summary(),
            "plan": self.plan,
            "ledgers": list(obs.ledgers),
            "tolerance": self.tolerance,
            "counts": self.counts(),
            "workflow": workflow,
            "steps": steps,
            "notes": list(obs.notes),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """
        `as_dict` as JSON text (every number finite: unbounded ends are ``null``).
        """
        return json.dumps(self.as_dict(), indent=indent, allow_nan=False)
