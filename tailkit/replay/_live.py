"""
A live plan in the rehearsal: where its first attempts went, simulated against observed.

A step the plan routes live sends each first attempt to the candidate whose recent latency is
best (`tailkit.config.LiveRouting`). The executor learns from the attempts it has seen end;
the runs still in flight when a decision is made have not told it anything yet. The simulator
models that by batches: ``concurrency`` runs decide from the state at the batch's start, and
their observations land after it. So the prediction is simulated with the rehearsal's own
concurrency: the runs in flight at a run's start, measured on the side's ledger
(`runs_in_flight`), and the comparison adds, per live step and candidate route, the share of
first attempts that went there, simulated against observed (`RouteShareLine`), read from the
ledger exactly as ``tailkit check`` reads it (`tailkit.check.observe`).
"""

from __future__ import annotations

import bisect
import json
import math

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tailkit.check import Observation
from tailkit.check.lowlevel import rate
from tailkit.config import Plan
from tailkit.estimate import Estimate
from tailkit.replay._compare import agrees
from tailkit.simulation import SimResult, WorkflowModel, simulate_model


__all__ = [
    "MAX_REPLICATES",
    "Replicated",
    "RouteShareLine",
    "live_steps",
    "replicated",
    "route_shares",
    "runs_in_flight",
    "share_lines",
]


MAX_REPLICATES = 1000
"""The most rehearsals of a live plan the prediction simulates (`replicated`)."""


def route_shares(result: SimResult) -> dict[str, dict[str, float]]:
    """
    Per live step, per candidate route, the simulated share of its first attempts.
    """
    return {step.name: dict(step.route_share) for step in result.live}


@dataclass(frozen=True, slots=True)
class Replicated:
    """
    A live plan simulated as many rehearsals of the replay's length, each from a fresh start.

    Args:
        figures: ``miss_rate``, ``p50_s``, ``p99_s``, ``extra_attempts`` over every
            simulated run together.
        miss_rate_se: The Monte Carlo standard error of the pooled miss rate.
        shares: Per live step and candidate route, the mean share of first attempts.
        spread: The same shares' 2.5 % and 97.5 % quantiles over the rehearsals: where one
            rehearsal's share falls (the path it took included).
        replicates: Rehearsals simulated.
    """

    figures: dict[str, float]
    miss_rate_se: float
    shares: dict[str, dict[str, float]]
    spread: dict[str, dict[str, tuple[float, float]]]
    replicates: int


def replicated(
    model: WorkflowModel, *, runs: int, replicates: int, seed: int, concurrency: int
) -> Replicated:
    """
    Simulate ``replicates`` rehearsals of ``runs`` runs, each live step starting from its priors.

    Why not one long simulation: a live step learns as it goes, so a rehearsal of a few
    hundred runs is a start (priors first, windows filling), not the steady state a long
    simulation reaches, and where its first attempts go depends on the path its windows took.
    Each simulated rehearsal starts afresh, as the replay's executor does; the figures pool
    them, and each route's share comes with its spread over them.

    Args:
        model: The plan's workflow model (`tailkit.simulation.workflow_model`).
        runs: Runs per rehearsal (the replay's runs per side).
        replicates: Rehearsals.
        seed: Seed of the first rehearsal (the others follow it).
        concurrency: Runs in flight at once (the rehearsal's).
    """
    import numpy as np

    from tailkit.fit import quantile

    ends, misses, extras = [], 0.0, 0.0
    per: dict[str, dict[str, list[float]]] = {}
    for k in range(replicates):
        result = simulate_model(model, runs=runs, seed=seed + k, concurrency=concurrency)
        ends.append(result.end_s)
        misses += result.miss_rate
        extras += result.extra_attempts
        for step, by_route in route_shares(result).items():
            for route, share in by_route.items():
                per.setdefault(step, {}).setdefault(route, []).append(share)
    end = np.concatenate(ends)
    miss = misses / replicates
    total = runs * replicates
    figures = {
        "miss_rate": miss,
        "p50_s": float(quantile(end, 0.5)),
        "p99_s": float(quantile(end, 0.99)),
        "extra_attempts": extras / replicates,
    }
    shares = {s: {r: float(np.mean(v)) for r, v in by.items()} for s, by in per.items()}
    spread = {
        s: {r: (float(quantile(v, 0.025)), float(quantile(v, 0.975))) for r, v in by.items()}
        for s, by in per.items()
    }
    se = math.sqrt(max(miss * (1.0 - miss), 1.0 / total) / total)
    return Replicated(figures, se, shares, spread, replicates)


def live_steps(plan: Plan) -> tuple[str, ...]:
    """
    The steps the plan routes live, in the plan's order.
    """
    return tuple(name for name, step in plan.steps.items() if step.live is not None)


@dataclass(frozen=True, slots=True)
class RouteShareLine:
    """
    One live step's share of first attempts on one candidate route: simulated and observed.

    Args:
        step: The live step.
        route: The candidate route.
        predicted: The simulation's share of the step's first attempts on the route.
        interval: Where a simulated rehearsal's share falls (2.5 % to 97.5 % over the
            simulated rehearsals; ``None``: not simulated as rehearsals).
        observed: The share of the side's first attempts with a live decision that ran on it,
            with its 95 % interval (Clopper-Pearson).
        agrees: Whether the two agree, judged with every figure of the replay together (see
            `tailkit.replay.lowlevel.FAMILY_LEVEL`).
        borderline: It agrees only at that family level, not at its own 95 %.
    """

    step: str
    route: str
    predicted: float
    interval: tuple[float, float] | None
    observed: Estimate
    agrees: bool
    borderline: bool = False

    def to_json(self) -> dict[str, Any]:
        """
        The line as the replay's JSON document shows it.
        """
        return {
            "step": self.step,
            "route": self.route,
            "predicted": self.predicted if math.isfinite(self.predicted) else None,
            "predicted_interval": None if self.interval is None else list(self.interval),
            "observed": self.observed.value if math.isfinite(self.observed.value) else None,
            "observed_interval": [self.observed.low, self.observed.high],
            "first_attempts": self.observed.n,
            "agrees": self.agrees,
            "borderline": self.borderline,
        }


def share_lines(
    plan: Plan,
    seen: Observation,
    predicted: Mapping[str, Mapping[str, float]],
    spread: Mapping[str, Mapping[str, tuple[float, float]]],
    *,
    family_level: float,
) -> tuple[RouteShareLine, ...]:
    """
    Per live step and candidate route, the simulated share against the observed one.

    A share agrees as a figure does (`tailkit.replay.lowlevel.agrees`): inside the observed
    interval, within 15 % of it, or its spread over simulated rehearsals overlapping it.

    Args:
        plan: The plan rehearsed.
        seen: The side's ledger as `tailkit.check.observe` read it (at 95 %).
        predicted: Per live step, per candidate route, the simulation's share of first
            attempts (a route it does not list: 0).
        spread: The same, where a simulated rehearsal's share falls (`Replicated.spread`).
        family_level: The level each comparison is judged at, for the replay's figures
            together.
    """
    out: list[RouteShareLine] = []
    for name in live_steps(plan):
        live = seen.step(name).live
        if live is None:
            continue
        shares, spreads = predicted.get(name, {}), spread.get(name, {})
        for r in live.routes:
            if not r.candidate:
                continue
            share, interval = float(shares.get(r.route, 0.0)), spreads.get(r.route)
            wide = rate(r.first_attempts, live.decisions, level=family_level)
            ok = agrees(share, wide, interval)
            strict = agrees(share, r.share, interval)
            out.append(
                RouteShareLine(name, r.route, share, interval, r.share, ok, ok and not strict)
            )
    return tuple(out)


def _instant(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def runs_in_flight(ledger: Path) -> float:
    """
    The mean number of a side's runs in flight when one of them starts, itself included.

    A run is in flight from its first attempt's start to the last instant one of its
    attempts was seen (an end, or a cut). Steady arrivals every ``d`` seconds of runs that
    last ``t`` keep about ``t / d`` in flight (Little's law); 1 is runs one after another.

    Args:
        ledger: The side's ledger (JSON lines, as the executor writes them).

    Returns:
        The mean, at least 1 (1 for an empty ledger).
    """
    spans: dict[str, list[float]] = {}
    with ledger.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("started_at") is None:
                continue
            start = _instant(str(record["started_at"]))
            took = record.get("total_s") or record.get("censored_at_s") or 0.0
            span = spans.setdefault(str(record.get("run_id")), [start, start])
            span[0], span[1] = min(span[0], start), max(span[1], start + float(took))
    if not spans:
        return 1.0
    ends = sorted(e for _, e in spans.values())
    starts = sorted(s for s, _ in spans.values())
    # a run that ended by another's start started before it: of the runs started by then
    # (itself included), those not yet ended are in flight
    flying = [max(i + 1 - bisect.bisect_right(ends, s), 1) for i, s in enumerate(starts)]
    return sum(flying) / len(flying)
