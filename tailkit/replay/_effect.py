"""
Does the plan help? A test over the replay's two sides, never two point estimates.

A replay runs the workflow without and with the plan; with a few hundred runs a side their miss
rates differ by chance as much as by the plan (6.5 % -> 7.0 % at one seed, the opposite at
another). So "the plan helps" is said only when a test says the difference is real (its p
below ``1 - LEVEL``); otherwise "can't tell", with the runs per side that would settle it.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailkit.estimate import LEVEL
from tailkit.text import percent


if TYPE_CHECKING:
    from tailkit.replay._replay import ReplayResult


__all__ = ["PlanEffect", "compare_sides", "plan_effect"]

POWER = 0.8  # "runs that would settle it": the runs a side needs to tell the difference 80 %
MAX_RUNS_NEEDED = 10_000_000  # beyond this, "more than" (a difference too small to chase)


@dataclass(frozen=True, slots=True)
class PlanEffect:
    """
    Whether the plan helps, by a test over the two sides' runs, not two point estimates.

    Returned by `compare_sides` -- do not instantiate directly.

    Args:
        verdict: ``helps``, ``hurts`` or ``can't tell``.
        misses: Runs that missed the deadline, without and with the plan.
        runs: Runs per side, without and with the plan.
        p_value: Fisher's exact test, two-sided, of the two miss counts.
        p99: ``lower`` or ``higher`` when the with-plan p99's interval lies wholly below or
            above the without-plan one, else ``None`` (they overlap, or one is unbounded).
        runs_needed: Runs per side that would tell a difference in miss rate of the size
            seen (or, when the sides missed equally often, the size predicted) with 80 %
            power at the test's level; ``None`` when the verdict is settled, or no difference
            is seen or predicted.
        level: Confidence level of the test and the intervals.
        reason: Why the verdict is what it is, in words.
    """

    verdict: str
    misses: tuple[int, int]
    runs: tuple[int, int]
    p_value: float
    p99: str | None
    runs_needed: int | None
    level: float
    reason: str

    def sentence(self) -> str:
        """
        The demo's line: ``the plan helps: …``, ``the plan hurts: …`` or ``can't tell …``.
        """
        if self.verdict == "can't tell":
            return f"can't tell whether the plan helps: {self.reason}"
        return f"the plan {self.verdict}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """
        The ``plan_effect`` of the replay's JSON document (`ReplayResult.to_json`).
        """
        return {
            "verdict": self.verdict,
            "misses": list(self.misses),
            "runs": list(self.runs),
            "p_value": self.p_value,
            "p99": self.p99,
            "runs_needed": self.runs_needed,
            "level": self.level,
            "sentence": self.sentence(),
        }


def compare_sides(
    misses: tuple[int, int],
    runs: tuple[int, int],
    *,
    p99_s: tuple[tuple[float, float], tuple[float, float]] | None = None,
    predicted_miss_rates: tuple[float, float] | None = None,
    level: float = LEVEL,
) -> PlanEffect:
    """
    Does the plan help? An exact test of the two sides' misses, and their p99 intervals.

    The two sides are independent samples of runs (the server draws each request's outcome
    in arrival order, so run *i* of one side shares nothing with run *i* of the other): the
    miss counts are compared by Fisher's exact test, two-sided. The plan helps when its
    misses are significantly fewer (p < 1 - ``level``) and its p99's interval does not lie
    wholly above the baseline's, or when the misses do not differ and its p99's interval
    lies wholly below; it hurts in the mirror cases. Otherwise the sides cannot tell, and
    `PlanEffect.runs_needed` says how many runs per side would: the two-proportion sample
    size for 80 % power at that level, for the difference seen (or predicted, when the
    sides missed equally often).

    Args:
        misses: Runs that missed the deadline, without and with the plan.
        runs: Runs per side, without and with the plan.
        p99_s: Each side's p99 interval ``(low, high)`` in seconds (``inf``: unbounded), or
            ``None`` to judge by misses alone.
        predicted_miss_rates: The predicted miss rates of both sides, for ``runs_needed``
            when the observed ones are equal.
        level: Confidence level of the test.

    Raises:
        ValueError: A count is negative, or misses exceed runs.
    """
    from scipy import stats

    for m, n in zip(misses, runs, strict=True):
        if n < 1 or not 0 <= m <= n:
            msg = f"misses must lie in 0..runs and runs be positive, got {m} of {n} runs"
            raise ValueError(msg)
    (m0, m1), (n0, n1) = misses, runs
    p_value = float(stats.fisher_exact([[m0, n0 - m0], [m1, n1 - m1]]).pvalue)
    rates = m0 / n0, m1 / n1
    alpha = 1.0 - level
    went = None if p_value >= alpha else ("down" if rates[1] < rates[0] else "up")
    p99 = _apart(*p99_s) if p99_s is not None else None
    seen = (
        f"misses {percent(rates[0])} → {percent(rates[1])} ({m0} of {n0} runs, {m1} of {n1}; "
        f"exact test p = {p_value:.2g})"
    )
    tail = {"lower": "p99 lower", "higher": "p99 higher", None: ""}[p99]
    if (went == "down" and p99 != "higher") or (went is None and p99 == "lower"):
        verdict = "helps"
    elif (went == "up" and p99 != "lower") or (went is None and p99 == "higher"):
        verdict = "hurts"
    else:
        verdict = "can't tell"
    needed = None
    if verdict != "can't tell":
        reason = f"{seen}{'; ' + tail + ', the intervals apart' if p99 else ''}"
    elif went is not None:  # significant both ways: fewer misses, a slower p99, or the reverse
        reason = f"{seen}, but {tail}, the intervals apart"
    else:
        needed = _runs_needed(rates, predicted_miss_rates, alpha=alpha)
        reason = f"{seen}, p99 intervals not apart; {_settle(needed, rates, predicted_miss_rates)}"
    return PlanEffect(verdict, (m0, m1), (n0, n1), p_value, p99, needed, level, reason)


def plan_effect(replay: ReplayResult, *, level: float = LEVEL) -> PlanEffect:
    """
    `compare_sides` on a replay's two sides (their observed misses and p99 intervals).
    """
    before, after = replay.sides
    misses = tuple(round(s.observed["miss_rate"].value * s.runs) for s in replay.sides)
    p99 = tuple((s.observed["p99_s"].low, s.observed["p99_s"].high) for s in replay.sides)
    return compare_sides(
        (misses[0], misses[1]), (before.runs, after.runs), p99_s=(p99[0], p99[1]),
        predicted_miss_rates=(before.predicted["miss_rate"], after.predicted["miss_rate"]),
        level=level,
    )  # fmt: skip


def _apart(before: tuple[float, float], after: tuple[float, float]) -> str | None:
    if math.isfinite(after[1]) and after[1] < before[0]:
        return "lower"
    if math.isfinite(before[1]) and after[0] > before[1]:
        return "higher"
    return None


def _runs_needed(
    rates: tuple[float, float], predicted: tuple[float, float] | None, *, alpha: float
) -> int | None:
    """
    Runs per side for a two-sided test at ``alpha`` to tell the rates apart with 80 % power.
    """
    from scipy import stats

    p0, p1 = rates if rates[0] != rates[1] else (predicted or rates)
    if not (math.isfinite(p0) and math.isfinite(p1)) or p0 == p1:
        return None
    z_a, z_b = float(stats.norm.ppf(1 - alpha / 2)), float(stats.norm.ppf(POWER))
    mean = (p0 + p1) / 2
    spread = z_a * math.sqrt(2 * mean * (1 - mean)) + z_b * math.sqrt(p0 * (1 - p0) + p1 * (1 - p1))
    return min(math.ceil((spread / (p0 - p1)) ** 2), MAX_RUNS_NEEDED)


def _settle(
    needed: int | None, rates: tuple[float, float], predicted: tuple[float, float] | None
) -> str:
    if needed is None:
        return "no difference seen or predicted, so no number of runs to name"
    size = "seen" if rates[0] != rates[1] else "predicted"
    if size == "predicted" and predicted is not None:
        size = f"predicted ({percent(predicted[0])} → {percent(predicted[1])})"
    more = "more than " if needed >= MAX_RUNS_NEEDED else "about "
    return f"{more}{needed:,} runs per side would tell a difference the size {size}"
