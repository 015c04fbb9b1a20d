"""
What `refresh` reports: the check's verdict, what it did about it, the old plan beside the new.
"""

from __future__ import annotations

import json
import math

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailkit.config import Plan, Step
from tailkit.text import Advice


if TYPE_CHECKING:
    from tailkit.calibration import Calibration
    from tailkit.check import CheckReport
    from tailkit.errors import TailkitError
    from tailkit.ingest import IngestReport


KEPT = "kept"
"""Nothing drifted (and no ``force``): the running plan stays, nothing was ingested."""

UNCHANGED = "unchanged"
"""The recalibrated plan is the running plan, word for word: nothing was written."""

WRITTEN = "written"
"""A new plan replaced the plan file; the old one was kept beside it."""

WOULD_WRITE = "would write"
"""``dry_run``: a new plan was found, and nothing was written."""

NOT_RECALIBRATED = "not recalibrated"
"""The plan drifted (or ``force``), but the recalibration could not run: the old plan stays."""

OUTCOMES: tuple[str, ...] = (KEPT, UNCHANGED, WRITTEN, WOULD_WRITE, NOT_RECALIBRATED)
"""What a refresh can come to."""

BAD_INPUT = 2
"""The exit code of a refresh that could not start: a plan, workflow, ledger or store unread."""

EXIT_CODES: dict[str, int] = {
    KEPT: 0,
    UNCHANGED: 0,
    WRITTEN: 1,
    WOULD_WRITE: 1,
    NOT_RECALIBRATED: 3,
}
"""Per outcome, the exit code a scheduled job sees (2 is `BAD_INPUT`)."""

PLAN_FIGURES: tuple[str, ...] = ("p50_s", "p99_s", "miss_rate", "extra_attempts")
"""The workflow's predictions set side by side, in order."""

STEP_FIGURES: tuple[str, ...] = (
    "route",
    "signal",
    "cutoff_s",
    "on_cutoff",
    "hedge_route",
    "live",
    "p50_s",
    "p99_s",
    "hedge_rate",
)
"""A step's decisions and predictions set side by side, in order (`step_figures`)."""


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def plan_figures(plan: Plan) -> dict[str, float | None]:
    """
    The workflow's predicted ``p50_s``, ``p99_s``, ``miss_rate``, ``extra_attempts``.

    ``None`` for a figure the plan does not predict (or predicts unbounded).
    """
    p = plan.predicted
    return {f: None if p is None else _finite(getattr(p, f)) for f in PLAN_FIGURES}


def step_figures(step: Step) -> dict[str, Any]:
    """
    A step's decisions and predictions: `STEP_FIGURES`, by name.

    Its first route, the clock its cutoff watches and that cutoff, its action, its hedge route
    (when it hedges), whether it routes live, and its predicted ``p50_s``, ``p99_s`` and
    ``hedge_rate``. ``cutoff_s`` is the cutoff on the watched clock (``ttft_cutoff_s`` for
    ``signal: ttft``), in seconds, ``None`` when the step waits.
    """
    watched = step.ttft_cutoff_s if step.signal == "ttft" else step.cutoff_s
    p = step.predicted
    return {
        "route": step.route,
        "signal": step.signal,
        "cutoff_s": watched,
        "on_cutoff": step.on_cutoff,
        "hedge_route": step.hedge_route if step.on_cutoff == "hedge" else None,
        "live": step.live is not None,
        "p50_s": None if p is None else _finite(p.p50_s),
        "p99_s": None if p is None else _finite(p.p99_s),
        "hedge_rate": None if p is None else p.hedge_rate,
    }


def _iso(instant: datetime | None) -> str | None:
    if instant is None:
        return None
    return instant.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Refresh:
    """
    One turn of the drift loop: the running plan checked, recalibrated if it drifted, replaced.

    Args:
        plan: The plan file.
        outcome: One of `OUTCOMES`; ``exit_code`` follows from it.
        check: The running plan checked against the ledgers (`tailkit.check.check_plan`).
        old: The running plan, as the file held it.
        new: The recalibrated plan (``None``: not recalibrated).
        backup: Where the old plan was kept (``None``: nothing was written).
        forced: Recalibrated although nothing drifted (``force``).
        dry_run: Nothing was written: not the store, not the plan, not the backup.
        since: The instant from which the recalibration read calls (``None``: it did not run,
            or read them all).
        ingested: What ingesting the ledgers into the store did (``None``: not ingested).
        calibration: The recalibration (``None``: it did not run, or could not).
        problem: Why the recalibration could not run (too few recent calls: how many, and
            how many it needs), for `NOT_RECALIBRATED`.
    """

    plan: Path
    outcome: str
    check: CheckReport
    old: Plan
    new: Plan | None = None
    backup: Path | None = None
    forced: bool = False
    dry_run: bool = False
    since: datetime | None = None
    ingested: IngestReport | None = None
    calibration: Calibration | None = None
    problem: TailkitError | None = None

    @property
    def exit_code(self) -> int:
        """
        The exit code a scheduled job sees (`EXIT_CODES`).

        0 the plan stays (nothing drifted, or nothing changed), 1 a new plan (written, or it
        would be with ``dry_run``), 3 it drifted but the recalibration could not run.
        """
        return EXIT_CODES[self.outcome]

    @property
    def drifted(self) -> bool:
        """
        Whether the check found any line drifted.
        """
        return self.check.exit_code == 1

    @property
    def written(self) -> bool:
        """
        Whether the plan file now holds the new plan.
        """
        return self.outcome == WRITTEN

    def problem_text(self, name: Callable[[str], str] | None = None) -> str | None:
        """
        Why the recalibration could not run (``None``: nothing stopped it).

        Its parameters are spelt by ``name`` (default: as the library names them).
        """
        return None if self.problem is None else self.problem.render(name)

    def warnings(self, name: Callable[[str], str] | None = None) -> list[str]:
        """
        The recalibration's warnings, their parameters spelt by ``name``.
        """
        if self.calibration is None:
            return []
        return [
            w.render(name) if isinstance(w, Advice) else str(w) for w in self.calibration.warnings
        ]

    def summary(self, name: Callable[[str], str] | None = None) -> str:
        """
        One sentence: what the check said and what was done.

        ``name`` spells the parameters a problem names (default: as the library names them).
        """
        said = self.check.summary()
        if self.outcome == KEPT:
            return f"{said}; the plan stays ({self.plan})"
        why = "forced" if self.forced and not self.drifted else "drifted"
        if self.outcome == UNCHANGED:
            return f"{said}; recalibrated ({why}): the same plan, nothing written"
        if self.outcome == WRITTEN:
            kept = f"the old one kept as {self.backup}" if self.backup else "nothing kept"
            return f"{said}; recalibrated ({why}): wrote {self.plan} ({kept})"
        if self.outcome == WOULD_WRITE:
            return f"{said}; recalibrated ({why}): a new plan, not written (dry run)"
        return f"{said}; not recalibrated, the plan stays: {self.problem_text(name)}"

    def steps(self) -> list[dict[str, Any]]:
        """
        Per step of the running plan: ``{"step", "old": {...}, "new": {...} | None}``.

        Each side holds `STEP_FIGURES`; ``changed`` lists the figures that differ.
        """
        out = []
        for name in self.old.order():
            old = step_figures(self.old.steps[name])
            new = None
            if self.new is not None and name in self.new.steps:
                new = step_figures(self.new.steps[name])
            changed = [] if new is None else [f for f in STEP_FIGURES if old[f] != new[f]]
            out.append({"step": name, "old": old, "new": new, "changed": changed})
        return out

    def as_dict(self, name: Callable[[str], str] | None = None) -> dict[str, Any]:
        """
        The refresh as JSON-ready values.

        The outcome, the check's verdict and drifted lines, the ingest, the recalibration, and
        the old plan's predictions beside the new one's. ``name`` spells the
        parameters a problem or a warning names (default: as the library names them).
        """
        report = self.check
        drifted = [
            {"scope": line.scope, "figure": line.figure, "route": line.route, **line.as_dict()}
            for line in report.drifted
        ]
        ingested = None
        if self.ingested is not None:
            ingested = {"files": len(self.ingested.files), **self.ingested.totals()}
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "summary": self.summary(name),
            "plan": str(self.plan),
            "written": self.written,
            "backup": None if self.backup is None else str(self.backup),
            "dry_run": self.dry_run,
            "forced": self.forced,
            "check": {
                "verdict": report.verdict,
                "summary": report.summary(),
                "counts": report.counts(),
                "runs": report.observation.runs,
                "drifted": drifted,
            },
            "ingested": ingested,
            "recalibration": {
                "ran": self.calibration is not None,
                "since": _iso(self.since),
                "problem": self.problem_text(name),
                "warnings": self.warnings(name),
            },
            "workflow": {
                "old": plan_figures(self.old),
                "new": None if self.new is None else plan_figures(self.new),
            },
            "steps": self.steps(),
        }

    def to_json(self, name: Callable[[str], str] | None = None, *, indent: int | None = 2) -> str:
        """
        `as_dict` as JSON text (unbounded figures are ``null``).
        """
        return json.dumps(self.as_dict(name), indent=indent, allow_nan=False)
