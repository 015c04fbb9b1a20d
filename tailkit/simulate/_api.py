"""
Simulate a plan: many runs in chunks, reduced to the numbers a plan is judged by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tailkit.config import Plan
from tailkit.simulate._build import POLICIES, SampleKey, policy_model, workflow_model
from tailkit.simulate._engine import Draws, WorkflowModel, run_workflow
from tailkit.simulate._result import SimResult, Tally
from tailkit.simulate._sample import RouteSample


CHUNK_RUNS = 32_768  # runs simulated at once: each step's arrays stay in the CPU cache


def simulate_model(model: WorkflowModel, *, runs: int = 100_000, seed: int = 0) -> SimResult:
    """
    Simulate ``runs`` runs of a workflow model, 32,768 runs at a time.

    Args:
        model: The workflow, as `workflow_model` or `policy_model` built it.
        runs: Number of runs.
        seed: Seed; the same seed gives the same result.
    """
    if runs < 1:
        msg = f"runs must be at least 1, got {runs}"
        raise ValueError(msg)
    tally = Tally(model)
    draws = Draws(min(CHUNK_RUNS, runs), seed=seed)
    for first in range(0, runs, CHUNK_RUNS):
        draws.runs = min(CHUNK_RUNS, runs - first)  # each slot's stream goes on where it was
        tally.add(run_workflow(model, draws))
    return tally.result()


def simulate(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    runs: int = 100_000,
    seed: int = 0,
    policy: str = "plan",
    error_retries: int = 1,
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

    Returns:
        Miss rate, end-to-end quantiles, extra attempts and tokens, per step and in total.
    """
    model = policy_model(workflow_model(plan, samples, error_retries=error_retries), policy)
    return simulate_model(model, runs=runs, seed=seed)


def compare_policies(
    plan: Plan,
    samples: Mapping[SampleKey, RouteSample],
    *,
    runs: int = 100_000,
    seed: int = 0,
    policies: Sequence[str] = POLICIES,
) -> dict[str, SimResult]:
    """
    The plan next to the reference policies, on the same random numbers.
    """
    base = workflow_model(plan, samples)
    return {p: simulate_model(policy_model(base, p), runs=runs, seed=seed) for p in policies}
