"""
Simulate a plan: many runs in chunks, reduced to the numbers a plan is judged by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tailkit.config import Plan
from tailkit.errors import ConfigError
from tailkit.simulation._build import POLICIES, SampleKey, policy_model, workflow_model
from tailkit.simulation._engine import Draws, WorkflowModel, live_steps, simulate_runs
from tailkit.simulation._live import DEFAULT_CONCURRENCY, LiveState
from tailkit.simulation._result import SimResult, Tally
from tailkit.simulation._sample import RouteSample


CHUNK_RUNS = 32_768  # runs simulated at once: each step's arrays stay in the CPU cache
CHUNK_STEP_RUNS = 1 << 21
"""Step-runs held at once: the arrays of the steps a chunk holds side by side (about 16 bytes a
step and run) stay near 32 MB however wide the plan; up to 64 such steps run `CHUNK_RUNS`."""
MIN_CHUNK_RUNS = 1024
MAX_RUNS = 10_000_000
"""Most runs one simulation takes: each run's end-to-end seconds are kept for exact quantiles.

That is 8 bytes a run for each policy, kept, and about as much again while its quantiles are
computed: 10M runs are under 1 GB for the four policies of `compare_policies`. And 10M runs
already pin a 1% miss rate to ±0.006 percentage points (95%).
"""


def check_run_count(runs: int, *, name: str = "runs") -> None:
    """
    Refuse a number of simulated runs above `MAX_RUNS`, which would not fit in memory.

    Args:
        runs: The number asked for.
        name: The parameter it was given as (``runs``, ``check_runs``): the error's field.

    Raises:
        ConfigError: ``runs`` is above `MAX_RUNS`.
    """
    if runs > MAX_RUNS:
        msg = (
            f"{{field}} must be at most {MAX_RUNS:,}, got {runs:,}: every run's end-to-end time "
            f"is kept for exact quantiles (8 bytes a run, per policy); {MAX_RUNS:,} runs already "
            "give a 1% miss rate to ±0.006 percentage points."
        )
        raise ConfigError(msg, field=name, value=runs, fix=f"Pass {MAX_RUNS:,} runs or fewer.")


def with_overrides(plan: Plan, *, deadline_s: float | None, budget: float | None) -> Plan:
    """
    ``plan`` with the deadline and hedge budget given on the command line, if any.

    Args:
        plan: The plan (or workflow) as loaded.
        deadline_s: End-to-end seconds (``None``: the plan's).
        budget: Extra attempts per first attempt, in [0, 1] (``None``: the plan's).

    Raises:
        ConfigError: A value out of range, with the parameter as its field.
    """
    import dataclasses

    if budget is not None and not 0.0 <= budget <= 1.0:
        msg = f"{{field}} must be between 0 and 1 (extra attempts per first attempt), got {budget}."
        raise ConfigError(
            msg,
            field="budget",
            value=budget,
            fix="Pass a share such as 0.05 (5 extra attempts per 100 first attempts).",
        )
    if deadline_s is not None and not deadline_s > 0.0:
        msg = f"{{field}} must be a positive number of seconds, got {deadline_s}."
        raise ConfigError(
            msg,
            field="deadline_s",
            value=deadline_s,
            fix="Pass the workflow's end-to-end deadline in seconds, such as 60.",
        )
    return dataclasses.replace(
        plan,
        hedge_budget=plan.hedge_budget if budget is None else budget,
        deadline_s=plan.deadline_s if deadline_s is None else deadline_s,
    )


def simulate_model(
    model: WorkflowModel,
    *,
    runs: int = 100_000,
    seed: int = 0,
    concurrency: int = DEFAULT_CONCURRENCY,
    live: bool = True,
) -> SimResult:
    """
    Simulate ``runs`` runs of a workflow model, 32,768 runs at a time.

    Each step is counted as it is played and let go; a plan of more than 64 steps side by
    side runs fewer at a time (`chunk_runs`), with the same result.

    Args:
        model: The workflow, as `workflow_model` or `policy_model` built it.
        runs: Number of runs.
        seed: Seed; the same seed gives the same result.
        concurrency: Runs in flight at once, for the steps that route live: each batch of
            that many runs decides from what the runs before it observed (1: one after
            another). Fixed routing does not depend on it.
        live: Route the steps that have a ``live`` block live; ``False``: every step on its
            own route at its plan's cutoff (fixed routing), as if it had none.

    Raises:
        ValueError: ``runs`` or ``concurrency`` is below 1.
        ConfigError: ``runs`` is above `MAX_RUNS`.
    """
    if runs < 1:
        msg = f"runs must be at least 1, got {runs}"
        raise ValueError(msg)
    check_run_count(runs)
    state = live_state(model, concurrency=concurrency, live=live)
    tally = Tally(model)
    chunk = chunk_runs(live_steps(model))
    draws = Draws(min(chunk, runs), seed=seed)
    for first in range(0, runs, chunk):
        draws.runs = min(chunk, runs - first)  # each slot's stream goes on where it was
        # each step is counted as it is played and let go: memory follows the steps that
        # run side by side, not the plan
        tally.add_runs(simulate_runs(model, draws, on_step=tally.add_step, live=state))
    return tally.result()


def live_state(
    model: WorkflowModel, *, concurrency: int = DEFAULT_CONCURRENCY, live: bool = True
) -> LiveState | None:
    """
    A fresh live-routing state for simulating ``model`` (``None``: nothing routes live).

    Pass it to every block of one simulation (`simulate_runs`'s ``live``).

    Args:
        model: The workflow.
        concurrency: Runs in flight at once (see `simulate_model`).
        live: ``False``: fixed routing (``None`` whatever the model).

    Raises:
        ValueError: ``concurrency`` is below 1.
    """
    state = LiveState(concurrency)  # checks the concurrency even for a fixed plan
    if not live or all(step.live is None for step in model.steps):
        return None
    return state


def chunk_runs(steps: int) -> int:
    """
    Runs simulated at once when ``steps`` steps' arrays are held at once (`live_steps`).

    A multiple of 4 (a slot's stream is read 4 draws to a 64-bit word), so the runs see the
    same draws whatever the chunk: the result does not depend on it.
    """
    fit = CHUNK_STEP_RUNS // max(steps, 1) // MIN_CHUNK_RUNS * MIN_CHUNK_RUNS
    return max(4, min(CHUNK_RUNS, max(MIN_CHUNK_RUNS, fit)) // 4 * 4)


def simulate(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    runs: int = 100_000,
    seed: int = 0,
    policy: str = "plan",
    error_retries: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
    live: bool = True,
) -> SimResult:
    """
    Simulate a plan (or a reference policy on its workflow) against measured route samples.

    Args:
        plan: The plan (or a workflow: steps without cutoffs just wait).
        samples: Latency per (step, route), e.g. from `load_samples`.
        runs: Number of simulated runs.
        seed: Seed; the same seed gives the same numbers.
        policy: ``plan`` or a reference policy (see `policy_model`).
        error_retries: Immediate retries of an attempt that fails before its cutoff.
        concurrency: Runs in flight at once, for the steps that route live (see
            `simulate_model`).
        live: Route the steps that have a ``live`` block live (``False``: fixed routing).

    Returns:
        Miss rate, end-to-end quantiles, extra attempts and tokens, per step and in total.

    Raises:
        ConfigError: ``runs`` is above `MAX_RUNS`.
    """
    check_run_count(runs)
    model = policy_model(workflow_model(plan, samples, error_retries=error_retries), policy)
    return simulate_model(model, runs=runs, seed=seed, concurrency=concurrency, live=live)


def compare_policies(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    runs: int = 100_000,
    seed: int = 0,
    policies: Sequence[str] = POLICIES,
    concurrency: int = DEFAULT_CONCURRENCY,
    live: bool = True,
) -> dict[str, SimResult]:
    """
    The plan next to the reference policies, on the same random numbers.

    The plan's live steps route live (``live``, by batches of ``concurrency`` runs, see
    `simulate_model`); the reference policies route fixed.

    Raises:
        ConfigError: ``runs`` is above `MAX_RUNS`.
    """
    check_run_count(runs)
    base = workflow_model(plan, samples)
    return {
        p: simulate_model(
            policy_model(base, p), runs=runs, seed=seed, concurrency=concurrency, live=live
        )
        for p in policies
    }
