"""
What a simulation says: the end-to-end distribution, the miss rate and what each step cost.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

import numpy as np

from tailkit.fit import quantile
from tailkit.simulation._engine import RunOutcome, StepOutcome, WorkflowModel
from tailkit.simulation._model import LiveOutcome


STEP_QUANTILE_RUNS = 65_536
STEP_QUANTILE_VALUES = 1 << 23
"""Step durations kept for the steps' quantiles, all steps together (64 MB): a plan of up to
128 steps keeps `STEP_QUANTILE_RUNS` runs of each, a longer one fewer (`step_quantile_runs`)."""
MIN_STEP_QUANTILE_RUNS = 4_096


def step_quantile_runs(steps: int) -> int:
    """
    The runs whose durations make each step's p50 and p99, in a workflow of ``steps`` steps.

    65,536 for up to 128 steps; fewer for a longer plan, so the durations kept follow the
    budget, not the steps (at least 4,096: 40 runs beyond a step's p99).
    """
    return max(
        MIN_STEP_QUANTILE_RUNS, min(STEP_QUANTILE_RUNS, STEP_QUANTILE_VALUES // max(steps, 1))
    )


@dataclass(frozen=True, slots=True)
class StepSummary:
    """
    One step over every run.

    Args:
        name: Step name.
        p50_s: Median seconds from the step's start to its result (over at most the first
            65,536 runs: 655 beyond its p99, fewer in a plan of more than 128 steps,
            `step_quantile_runs`; the end-to-end quantiles use every run).
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
class LiveSummary:
    """
    One live step over every run: where its first attempts went, and the cutoffs they got.

    Args:
        name: Step name.
        first_attempts: Runs in which the step started (one live decision each).
        route_share: Candidate route -> share of those first attempts sent to it.
        explore_rate: Share of them that were explore turns (not the best route).
        cutoff_mean_s: Mean live cutoff on the step's signal clock, in seconds (``None``:
            the step sets no cutoff on it, or never started).
        cutoff_min_s: The smallest live cutoff.
        cutoff_max_s: The largest.
    """

    name: str
    first_attempts: int
    route_share: dict[str, float]
    explore_rate: float
    cutoff_mean_s: float | None
    cutoff_min_s: float | None
    cutoff_max_s: float | None

    def as_dict(self) -> dict[str, Any]:
        """
        Plain data for JSON.
        """
        return {k: getattr(self, k) for k in LiveSummary.__slots__ if k != "name"}


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
        extra_attempts: Extra attempts started at cutoffs per first attempt, a run's steps being
            its first attempts (what the executor's hedge budget counts).
        recovery_attempts: Attempts started after errors or invalid output, per first attempt.
        extra_tokens: Tokens per run billed to extra attempts.
        steps: Per step.
        end_s: End-to-end seconds of every run (for plots and tests).
        live: Per step that routed live, in plan order (empty: none did).
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
    live: tuple[LiveSummary, ...] = ()

    def as_dict(self, *, runs: bool = False) -> dict[str, Any]:
        """
        Plain data for JSON (``runs``: include every run's end-to-end seconds).

        A simulation that routed live adds ``live``: per live step, its `LiveSummary`.
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
        if self.live:
            out["live"] = {s.name: s.as_dict() for s in self.live}
        if runs:
            out["end_s"] = self.end_s.tolist()
        return out


class Tally:
    """
    Adds up runs chunk by chunk (`simulate_runs` outcomes) into a `SimResult`.

    Keeps every run's end-to-end time (for exact quantiles), each step's durations over the
    first 65,536 runs (`step_quantile_runs`), and running counts of everything else.
    """

    def __init__(self, model: WorkflowModel) -> None:
        self._model = model
        self._room = step_quantile_runs(len(model.steps))
        self._ends: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        self._durations: list[list[np.ndarray[Any, np.dtype[np.float64]]]] = [
            [] for _ in model.steps
        ]
        self._counts = np.zeros((len(model.steps), 4))  # fired, extra, recovery, failed
        self._runs = self._missed = 0
        self._live: dict[int, _LiveCount] = {}

    def add(self, outcome: RunOutcome) -> Tally:
        """
        Count one chunk of runs.
        """
        for i, step in enumerate(outcome.steps):
            self.add_step(i, step)
        return self.add_runs(outcome)

    def add_step(self, i: int, step: StepOutcome) -> None:
        """
        Count step ``i`` of the chunk being played (before `add_runs` counts its runs).
        """
        fired = np.count_nonzero(step.fired)
        self._counts[i] += (
            fired,
            fired if step.extra is step.fired else np.count_nonzero(step.extra),
            int(step.recovery.sum()),
            np.count_nonzero(step.failed),
        )
        if step.live is not None:
            self._live.setdefault(i, _LiveCount()).add(step.live)
        room = self._room - self._runs
        if room > 0:
            kept = step.duration_s[:room]
            # a slice would hold the whole chunk's array: copy the part kept
            self._durations[i].append(kept if kept.size == step.duration_s.size else kept.copy())

    def add_runs(self, outcome: RunOutcome) -> Tally:
        """
        Count the chunk's runs (their ends and misses), after its steps.
        """
        self._ends.append(outcome.end_s)
        self._missed += int(
            np.count_nonzero(~outcome.ok | (outcome.end_s > self._model.deadline_s))
        )
        self._runs += outcome.end_s.size
        return self

    def result(self) -> SimResult:
        """
        The numbers a plan is judged by, over every run added.
        """
        runs = self._runs
        rates = self._counts / runs
        steps = []
        for i, step in enumerate(self._model.steps):
            durations = np.concatenate(self._durations[i])
            p50, p99 = (quantile(durations, q) for q in (0.5, 0.99))
            fired, extra, recovery, failed = (float(x) for x in rates[i])
            steps.append(
                StepSummary(
                    name=step.name,
                    p50_s=float(p50),
                    p99_s=float(p99),
                    action_rate=fired,
                    hedge_rate=extra,
                    recovery_rate=recovery,
                    failure_rate=failed,
                    extra_tokens=extra * step.tokens,
                )
            )
        end = np.concatenate(self._ends) if len(self._ends) > 1 else self._ends[0]
        p50, p90, p99 = (quantile(end, q) for q in (0.5, 0.9, 0.99))
        first = max(len(steps), 1)
        miss = self._missed / runs
        live = []
        for i, count in sorted(self._live.items()):
            step = self._model.steps[i]
            assert step.live is not None  # noqa: S101 - only live steps are counted
            live.append(count.summary(step.name, step.live.routes))
        return SimResult(
            live=tuple(live),
            runs=runs,
            deadline_s=self._model.deadline_s,
            miss_rate=miss,
            miss_rate_se=math.sqrt(max(miss * (1.0 - miss), 1.0 / runs) / runs),
            p50_s=float(p50),
            p90_s=float(p90),
            p99_s=float(p99),
            extra_attempts=sum(s.hedge_rate for s in steps) / first,
            recovery_attempts=sum(s.recovery_rate for s in steps) / first,
            extra_tokens=sum(s.extra_tokens for s in steps),
            steps=tuple(steps),
            end_s=end,
        )


def sim_result(model: WorkflowModel, outcome: RunOutcome) -> SimResult:
    """
    Reduce the runs of one `simulate_runs` to the numbers a plan is judged by.
    """
    return Tally(model).add(outcome).result()


class _LiveCount:
    """
    Strictly private: a live step's decisions, added up block by block.
    """

    __slots__ = ("cut_max", "cut_min", "cut_runs", "cut_sum", "explored", "routes")

    def __init__(self) -> None:
        self.routes = np.zeros(0, dtype=np.int64)
        self.explored = self.cut_runs = 0
        self.cut_sum = 0.0
        self.cut_min, self.cut_max = math.inf, -math.inf

    def add(self, live: LiveOutcome) -> None:
        chosen = live.route[live.route >= 0]
        counts = np.bincount(chosen, minlength=self.routes.size)
        if counts.size > self.routes.size:
            counts[: self.routes.size] += self.routes
            self.routes = counts
        else:
            self.routes = self.routes + counts
        self.explored += int(np.count_nonzero(live.explored))
        cuts = live.cutoff_s[np.isfinite(live.cutoff_s)]
        if cuts.size:
            self.cut_runs += cuts.size
            self.cut_sum += float(cuts.sum())
            self.cut_min = min(self.cut_min, float(cuts.min()))
            self.cut_max = max(self.cut_max, float(cuts.max()))

    def summary(self, name: str, routes: tuple[str, ...]) -> LiveSummary:
        firsts = int(self.routes.sum())
        counts = np.zeros(len(routes), dtype=np.int64)
        counts[: self.routes.size] = self.routes
        some = self.cut_runs > 0
        return LiveSummary(
            name=name,
            first_attempts=firsts,
            route_share={r: float(c) / max(firsts, 1) for r, c in zip(routes, counts, strict=True)},
            explore_rate=self.explored / max(firsts, 1),
            cutoff_mean_s=self.cut_sum / self.cut_runs if some else None,
            cutoff_min_s=self.cut_min if some else None,
            cutoff_max_s=self.cut_max if some else None,
        )
