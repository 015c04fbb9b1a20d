"""
A known world of jobs served on several routes: the ground truth for predictions about repeats.

The simulator couples a repeat's rank to the first attempt's with a Gaussian copula whose
correlation it estimates; this world is built differently on purpose, so that a prediction
checked against it is checked against something other than its own assumption. Each job has
a size (output tokens) and hidden work (reasoning or a slow tool that no token count shows);
an attempt of job ``j`` on route ``r`` takes

    base_r * (tokens_j / 400) ** size_exp_r * hidden_j ** hidden_exp_r * spell * noise

where ``noise`` is the attempt's own (lognormal, and with a small chance a transient stall
of 3-8x: the tail a fresh attempt escapes), and ``spell`` the provider's moment: a run meets
each provider in a slow spell with a small probability, and every attempt of that run on that
provider is slowed alike (a retry on the same provider does not escape it; another provider
may). Nothing fails, so a plan's outcome is its latency alone.

`benchmark_calls` writes what a team would log from a benchmark that ran the same jobs on
every route (with ``job_key``): the evidence. `truth_runs` plays a plan in the world, every
attempt of a step the same job, with the simulator's engine but with the world's draws.
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailkit.config import Plan
from tailkit.simulation import RouteSample, SimResult, WorkflowModel, workflow_model
from tailkit.simulation.lowlevel import (
    Draws,
    RunOutcome,
    StepModel,
    independent_sharing,
    step_routes,
)
from tailkit.simulation.lowlevel import (
    sim_result as summarize,
)
from tailkit.simulation.lowlevel import (
    simulate_runs as run_workflow,
)


__all__ = [
    "PairedRoute",
    "PairedWorld",
    "benchmark_calls",
    "truth_miss_rate",
    "truth_result",
    "truth_runs",
]

Array = npt.NDArray[np.float64]
_TABLE = 1 << 16  # the simulator's outcome table: one entry per 16-bit draw
_TABLE_DRAWS = 400_000  # attempts drawn for each route's table of its marginal


@dataclass(frozen=True, slots=True)
class PairedRoute:
    """
    One route of the world.

    Args:
        provider: Its provider (attempts on one provider share its spells).
        model: Its model id.
        base_s: Seconds an attempt of a 400-token job with unit hidden work takes.
        size_exp: Exponent of the size: how much longer a longer answer takes.
        hidden_exp: Exponent of the hidden work.
        noise: Log-sd of an attempt's own noise.
    """

    provider: str
    model: str
    base_s: float
    size_exp: float = 0.8
    hidden_exp: float = 1.0
    noise: float = 0.25


@dataclass(frozen=True, slots=True)
class PairedWorld:
    """
    Jobs with a size and hidden work, served on routes with noise, stalls and spells.

    Args:
        routes: Route name -> route.
        size_sigma: Log-sd of a job's output tokens (median 400).
        hidden_sigma: Log-sd of a job's hidden work (median 1).
        stall_rate: Chance an attempt stalls (a transient 3-8x slowdown).
        spell_rate: Chance a run meets a provider in a slow spell.
        spell_factor: How much slower a spell makes every attempt on the provider.
    """

    routes: Mapping[str, PairedRoute]
    size_sigma: float = 0.6
    hidden_sigma: float = 0.4
    stall_rate: float = 0.04
    spell_rate: float = 0.02
    spell_factor: float = 2.5
    _tables: dict[str, Array] = field(default_factory=dict, compare=False, repr=False)

    def jobs(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        """
        ``n`` jobs: their output tokens and hidden work.
        """
        tokens = np.maximum(np.round(400.0 * np.exp(self.size_sigma * rng.standard_normal(n))), 1)
        hidden = np.exp(self.hidden_sigma * rng.standard_normal(n))
        return tokens, hidden

    def spells(self, rng: np.random.Generator, n: int) -> dict[str, Array]:
        """
        Per provider, the slowdown each of ``n`` runs meets (1: none).
        """
        providers = sorted({r.provider for r in self.routes.values()})
        return {
            p: np.where(rng.random(n) < self.spell_rate, self.spell_factor, 1.0) for p in providers
        }

    def attempt_s(
        self, route: str, tokens: Array, hidden: Array, spell: Array, rng: np.random.Generator
    ) -> Array:
        """
        Seconds each attempt of these jobs takes on ``route`` (its own noise and stall drawn).
        """
        r = self.routes[route]
        n = tokens.size
        own = np.exp(r.noise * rng.standard_normal(n))
        stall = np.where(rng.random(n) < self.stall_rate, rng.uniform(3.0, 8.0, n), 1.0)
        work = (tokens / 400.0) ** r.size_exp * hidden**r.hidden_exp
        out: Array = r.base_s * work * spell * own * stall
        return out

    def table(self, route: str) -> Array:
        """
        The route's marginal latency as the simulator's sorted 65,536-entry table.
        """
        if route not in self._tables:
            rng = np.random.default_rng([hash_of(route), 7])
            tokens, hidden = self.jobs(rng, _TABLE_DRAWS)
            spell = self.spells(rng, _TABLE_DRAWS)[self.routes[route].provider]
            draws = np.sort(self.attempt_s(route, tokens, hidden, spell, rng))
            grid = ((np.arange(_TABLE) + 0.5) / _TABLE * _TABLE_DRAWS).astype(np.intp)
            self._tables[route] = draws[grid]
        return self._tables[route]


def hash_of(text: str) -> int:
    """
    A stable seed from a name.
    """
    import zlib

    return zlib.crc32(text.encode())


def benchmark_calls(world: PairedWorld, *, jobs: int, seed: int = 0) -> list[dict[str, object]]:
    """
    Call records of a benchmark that ran ``jobs`` jobs on every route, keyed by job.

    Each job runs once per route, at its own moment (a benchmark runs routes one after
    another), so pairs share the work but not a spell. Start times are spread a minute apart
    per job and route.
    """
    rng = np.random.default_rng([seed, 11])
    tokens, hidden = world.jobs(rng, jobs)
    rows: list[dict[str, object]] = []
    for k, (name, route) in enumerate(sorted(world.routes.items())):
        spell = world.spells(rng, jobs)[route.provider]
        seconds = world.attempt_s(name, tokens, hidden, spell, rng)
        for j in range(jobs):
            start = 1_767_225_600 + 86_400 * k + 60 * j
            rows.append({
                "call_id": f"{name}-{j}",
                "job_key": f"job-{j}",
                "provider": route.provider,
                "model": route.model,
                "started_at": _iso(start),
                "total_s": round(float(seconds[j]), 4),
                "output_tokens": int(tokens[j]),
                "status": "ok",
            })  # fmt: skip
    return rows


def _iso(epoch_s: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch_s, tz=datetime.UTC).isoformat()


class _WorldDraws(Draws):
    """
    The world's draws in the simulator's terms: each attempt's rank on its route's table.

    Every step of a run draws a job; every attempt of the step does that job, and meets the
    run's spell of its provider. Slot 1 is the cutoff's attempt (on the step's second route,
    else its own), slot 2 the upgrade.
    """

    def __init__(
        self, world: PairedWorld, plan: Plan, steps: tuple[StepModel, ...], runs: int, seed: int
    ) -> None:
        super().__init__(runs, seed=seed, keep=True)
        self.world, self.plan = world, plan
        self.routes = {s.name: _step_routes(plan, s.name) for s in steps}
        self.rng = np.random.default_rng([seed, 13])
        self.spell = world.spells(self.rng, runs)

    def slot(self, name: str, k: int) -> npt.NDArray[np.uint16]:
        if (name, k) not in self._cache:
            self._job(name)
        return self._cache[(name, k)]

    def _job(self, name: str) -> None:
        tokens, hidden = self.world.jobs(self.rng, self.runs)
        for k, route in enumerate(self.routes[name]):
            provider = self.world.routes[route].provider
            seconds = self.world.attempt_s(route, tokens, hidden, self.spell[provider], self.rng)
            table = self.world.table(route)
            index = np.minimum(np.searchsorted(table, seconds), _TABLE - 1)
            self._cache[(name, k)] = index.astype(np.uint16)


def _step_routes(plan: Plan, name: str) -> tuple[str, str, str]:
    step = plan.steps[name]
    second = {"hedge": step.hedge_route, "downgrade": step.downgrade_route}.get(step.on_cutoff)
    return step.route, second or step.route, step.upgrade_route or step.route


def truth_result(
    world: PairedWorld, plan: Plan, *, runs: int = 200_000, seed: int = 0
) -> SimResult:
    """
    The plan played in the world: every figure the simulator reports, true.

    The simulator's engine plays the plan's rules; the world supplies every attempt's
    latency, the same job for every attempt of a step (no copula: the world's own sharing).
    """
    model, outcome = _played(world, plan, runs=runs, seed=seed)
    return summarize(model, outcome)


def truth_runs(
    world: PairedWorld, plan: Plan, *, runs: int = 200_000, seed: int = 0
) -> tuple[Array, npt.NDArray[np.bool_]]:
    """
    The plan played in the world: each run's end (seconds) and whether it met its deadline.
    """
    _, outcome = _played(world, plan, runs=runs, seed=seed)
    met = outcome.ok & (outcome.end_s <= plan.deadline_s)
    return outcome.end_s, met


def _played(
    world: PairedWorld, plan: Plan, *, runs: int, seed: int
) -> tuple[WorkflowModel, RunOutcome]:
    samples = {
        (name, route): RouteSample.from_grid(world.table(route))
        for name, step in plan.steps.items()
        for route in {*_step_routes(plan, name), *step_routes(step)}
    }
    # the world's draws already share what they share: no copula on top
    model = workflow_model(plan, samples, sharing=independent_sharing(plan))
    draws = _WorldDraws(world, plan, model.steps, runs, seed)
    return model, run_workflow(model, draws)


def truth_miss_rate(world: PairedWorld, plan: Plan, *, runs: int = 200_000, seed: int = 0) -> float:
    """
    The share of runs that miss the plan's deadline in the world.
    """
    _, met = truth_runs(world, plan, runs=runs, seed=seed)
    return float(1.0 - met.mean()) if met.size else math.nan
