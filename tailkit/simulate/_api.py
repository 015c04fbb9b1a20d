"""
Simulate a plan: many runs in chunks, reduced to the numbers a plan is judged by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tailkit.config import Plan
from tailkit.simulate._build import POLICIES, SampleKey, policy_model, workflow_model
from tailkit.simulate._engine import Draws, RunOutcome, StepOutcome, WorkflowModel, run_workflow
from tailkit.simulate._result import SimResult, summarize
from tailkit.simulate._sample import RouteSample


CHUNK_RUNS = 250_000  # runs simulated at once: bounds memory (~50 MB per step and chunk)


def simulate_model(model: WorkflowModel, *, runs: int = 100_000, seed: int = 0) -> SimResult:
    """
    Simulate ``runs`` runs of a workflow model (in chunks of at most 250,000 runs).

    Args:
        model: The workflow, as `workflow_model` or `policy_model` built it.
        runs: Number of runs.
        seed: Seed; the same seed gives the same result.
    """
    if runs < 1:
        msg = f"runs must be at least 1, got {runs}"
        raise ValueError(msg)
    outcomes = []
    for chunk, first in enumerate(range(0, runs, CHUNK_RUNS)):
        size = min(CHUNK_RUNS, runs - first)
        outcomes.append(run_workflow(model, Draws(size, seed=seed * 1_000_003 + chunk)))
    return summarize(model, _concat(outcomes))


def _concat(outcomes: Sequence[RunOutcome]) -> RunOutcome:
    if len(outcomes) == 1:
        return outcomes[0]
    steps = []
    for parts in zip(*(o.steps for o in outcomes), strict=True):
        steps.append(
            StepOutcome(
                *(np.concatenate([getattr(p, f) for p in parts]) for f in StepOutcome.__slots__)
            )
        )
    starts = tuple(np.concatenate(s) for s in zip(*(o.starts for o in outcomes), strict=True))
    return RunOutcome(
        np.concatenate([o.end_s for o in outcomes]),
        np.concatenate([o.ok for o in outcomes]),
        starts,
        tuple(steps),
    )


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
