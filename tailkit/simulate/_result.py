"""
What a simulation says: the end-to-end distribution, the miss rate and what each step cost.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

import numpy as np

from tailkit.simulate._engine import RunOutcome, WorkflowModel


@dataclass(frozen=True, slots=True)
class StepSummary:
    """
    One step over every run.

    Args:
        name: Step name.
        p50_s: Median seconds from the step's start to its result.
        p99_s: 99th percentile of the same.
        action_rate: Share of runs in which its cutoff fired.
        hedge_rate: Share of runs in which it started an extra attempt at its cutoff.
        recovery_rate: Attempts per run started to recover from errors or invalid output.
        failure_rate: Share of runs in which it produced no valid result.
        extra_tokens: Tokens per run billed to its extra attempts.
    """

    name: str
    p50_s: float
    p99_s: float
    action_rate: float
    hedge_rate: float
    recovery_rate: float
    failure_rate: float
    extra_tokens: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """
    A workflow over many simulated runs.

    Args:
        runs: Number of runs.
        deadline_s: The deadline in seconds (``math.inf``: none).
        miss_rate: Share of runs that failed or ended after the deadline.
        miss_rate_se: Monte Carlo standard error of ``miss_rate``.
        p50_s: Median end-to-end seconds.
        p90_s: 90th percentile.
        p99_s: 99th percentile.
        extra_attempts: Extra attempts started at cutoffs per first attempt (the hedge budget).
        recovery_attempts: Attempts started after errors or invalid output, per first attempt.
        extra_tokens: Tokens per run billed to extra attempts.
        steps: Per step.
        end_s: End-to-end seconds of every run (for plots and tests).
    """

    runs: int
    deadline_s: float
    miss_rate: float
    miss_rate_se: float
    p50_s: float
    p90_s: float
    p99_s: float
    extra_attempts: float
    recovery_attempts: float
    extra_tokens: float
    steps: tuple[StepSummary, ...]
    end_s: np.ndarray[Any, np.dtype[np.float64]]

    def as_dict(self, *, runs: bool = False) -> dict[str, Any]:
        """
        Plain data for JSON (``runs``: include every run's end-to-end seconds).
        """
        out: dict[str, Any] = {
            "runs": self.runs,
            "deadline_s": None if math.isinf(self.deadline_s) else self.deadline_s,
            "miss_rate": self.miss_rate,
            "miss_rate_se": self.miss_rate_se,
            "p50_s": self.p50_s,
            "p90_s": self.p90_s,
            "p99_s": self.p99_s,
            "extra_attempts": self.extra_attempts,
            "recovery_attempts": self.recovery_attempts,
            "extra_tokens": self.extra_tokens,
            "steps": [{k: getattr(s, k) for k in StepSummary.__slots__} for s in self.steps],
        }
        if runs:
            out["end_s"] = self.end_s.tolist()
        return out


def summarize(model: WorkflowModel, outcome: RunOutcome) -> SimResult:
    """
    Reduce the runs of `run_workflow` to the numbers a plan is judged by.
    """
    runs = outcome.end_s.size
    missed = ~outcome.ok | (outcome.end_s > model.deadline_s)
    miss = float(missed.mean())
    steps = []
    extra = recovery = tokens = 0.0
    for step, o in zip(model.steps, outcome.steps, strict=True):
        p50, p99 = np.quantile(o.duration_s, [0.5, 0.99])
        hedge_rate = float(o.extra.mean())
        recovery_rate = float(o.recovery.mean())
        step_tokens = hedge_rate * step.tokens
        steps.append(
            StepSummary(
                name=step.name,
                p50_s=float(p50),
                p99_s=float(p99),
                action_rate=float(o.fired.mean()),
                hedge_rate=hedge_rate,
                recovery_rate=recovery_rate,
                failure_rate=float(o.failed.mean()),
                extra_tokens=step_tokens,
            )
        )
        extra += hedge_rate
        recovery += recovery_rate
        tokens += step_tokens
    p50, p90, p99 = np.quantile(outcome.end_s, [0.5, 0.9, 0.99])
    first = max(len(model.steps), 1)
    return SimResult(
        runs=runs,
        deadline_s=model.deadline_s,
        miss_rate=miss,
        miss_rate_se=math.sqrt(max(miss * (1.0 - miss), 1.0 / runs) / runs),
        p50_s=float(p50),
        p90_s=float(p90),
        p99_s=float(p99),
        extra_attempts=extra / first,
        recovery_attempts=recovery / first,
        extra_tokens=tokens,
        steps=tuple(steps),
        end_s=outcome.end_s,
    )
