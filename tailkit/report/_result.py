"""
What `write_report_result` returns: the files written and the page's headline findings.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailkit.report._common import PNG_PREFIX, Section


def _number(value: Any) -> float | None:
    """
    A JSON number, or ``None`` for a missing, NaN or infinite one (JSON has neither).
    """
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True, slots=True)
class RouteFinding:
    """
    One route as the headline reads it.

    Args:
        route: Its label (``provider/model`` for the default ``by``).
        calls: Its calls (finished, cut and failed).
        finished: Its finished calls.
        p50_s: Median latency, seconds (``None``: unknown).
        p99_s: p99 latency, seconds (``None``: unknown, or past the cap: more than 1% cut).
        p99_p50: p99 over p50 (``None`` as for ``p99_s``).
        drawn: Whether the per-route figures draw it.
        why: Why it is not drawn (``None`` when drawn).
        p99_unbounded: More than 1% of its calls were cut: its p99 is past the cap, and
            ``p99_s`` and ``p99_p50`` are ``None``.
    """

    route: str
    calls: int
    finished: int
    p50_s: float | None
    p99_s: float | None
    p99_p50: float | None
    drawn: bool
    why: str | None = None
    p99_unbounded: bool = False

    @classmethod
    def of(cls, route: str, row: dict[str, Any], why: str | None) -> RouteFinding:
        """
        The finding for a tail-table ``row``; ``why`` is the reason it is left out, if it is.
        """
        return cls(
            route=route,
            calls=int(row["n"]),
            finished=int(row["n_ok"]),
            p50_s=_number(row.get("p50_s")),
            p99_s=_number(row.get("p99_s")),
            p99_p50=_number(row.get("p99_p50")),
            drawn=why is None,
            why=why,
            p99_unbounded=row.get("p99_p50") is not None and math.isinf(float(row["p99_p50"])),
        )

    def to_json(self) -> dict[str, Any]:
        """
        The finding as a JSON object (the field names above).
        """
        return {
            "route": self.route, "calls": self.calls, "finished": self.finished,
            "p50_s": self.p50_s, "p99_s": self.p99_s, "p99_p50": self.p99_p50,
            "p99_unbounded": self.p99_unbounded, "drawn": self.drawn, "why": self.why,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class PlanFinding:
    """
    The plan's simulated outcome, next to no cutoffs.

    Args:
        workflow: The plan's workflow name.
        deadline_s: Its deadline, seconds (``None``: none).
        runs: Simulated runs per policy.
        miss_rate: Share of runs the plan has miss the deadline.
        p99_s: The plan's end-to-end p99, seconds (``None``: unbounded).
        baseline_miss_rate: The same share with no cutoffs (``None``: not simulated).
    """

    workflow: str
    deadline_s: float | None
    runs: int
    miss_rate: float
    p99_s: float | None
    baseline_miss_rate: float | None

    def to_json(self) -> dict[str, Any]:
        """
        The finding as a JSON object (the field names above).
        """
        return {
            "workflow": self.workflow, "deadline_s": self.deadline_s, "runs": self.runs,
            "miss_rate": self.miss_rate, "p99_s": self.p99_s,
            "baseline_miss_rate": self.baseline_miss_rate,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReportResult:
    """
    A written report: its files and the findings its page leads with.

    Args:
        index: The path of ``index.html``.
        figures: The PNGs written beside it, sorted by name.
        headline: The page's line under its title (calls, routes, what is left out).
        calls: Calls in the routes drawn.
        routes: Routes in the store (after ``where``), drawn or not.
        heaviest: The route with the heaviest tail (largest p99/p50) over every route.
        left_out: The routes not drawn, each with why.
        plan: The plan's simulated outcome (``None``: no plan, or no comparison).
        sections: The page's sections (title, figures, note).
    """

    index: Path
    figures: tuple[Path, ...]
    headline: str
    calls: int
    routes: int
    heaviest: RouteFinding | None
    left_out: tuple[RouteFinding, ...]
    plan: PlanFinding | None
    sections: tuple[Section, ...]

    def findings(self) -> list[str]:
        """
        The page's findings in words: every figure's title, then every section's note.
        """
        titles = [f.title for s in self.sections for f in s.figures]
        return titles + [f"{s.title}: {s.note}" for s in self.sections if s.note]

    def to_json(self) -> dict[str, Any]:
        """
        Everything above as one JSON document (what ``tailkit report`` prints as JSON).
        """
        return {
            "index": str(self.index),
            "figures": [str(p) for p in self.figures],
            "headline": self.headline,
            "calls": self.calls,
            "routes": self.routes,
            "heaviest_tail": self.heaviest.to_json() if self.heaviest else None,
            "left_out": [r.to_json() for r in self.left_out],
            "plan": self.plan.to_json() if self.plan else None,
            "sections": [
                {
                    "title": s.title,
                    "note": s.note,
                    "figures": [
                        {
                            "name": f.name,
                            "title": f.title,
                            "png": str(self.index.parent / f"{PNG_PREFIX}{f.name}.png"),
                        }
                        for f in s.figures
                    ],
                }
                for s in self.sections
            ],
        }
