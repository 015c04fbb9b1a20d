"""
The simulator's building blocks, for the calibrator, replay, extensions and tests; they may change.

The vectorised engine (`simulate_runs` over `Draws`, the `StepModel`s of a `WorkflowModel`,
the `RunOutcome` it returns and `sim_result`, which reduces it to a `SimResult`), the one-run
reference simulator the engine is tested against (`reference_run`, `reference_step`,
`reference_trace`), the pieces of the model's build (routes, overrides, tail kinds, sharing
defaults) and the SQL predicates of a finished, cut and failed call that route samples and
replay's pool count by. Code written against `tailkit.simulation` needs none of them.
"""

from tailkit.simulation._api import check_run_count, with_overrides
from tailkit.simulation._build import SampleKey, step_routes
from tailkit.simulation._engine import Draws, RunOutcome, StepModel, StepOutcome, simulate_runs
from tailkit.simulation._fetch import CUT, FAILED, OK
from tailkit.simulation._kinds import route_tail_kinds
from tailkit.simulation._load import widen_fixes
from tailkit.simulation._reference import RunTrace, reference_run, reference_step, reference_trace
from tailkit.simulation._result import sim_result, step_quantile_runs
from tailkit.simulation._sharing import (
    DEFAULT_MOMENT,
    DEFAULT_SOURCE,
    DEFAULT_WORK,
    default_as_independent,
    independent_sharing,
    paired_tail_correlation,
    resample_sharing,
    tail_correlation,
)
from tailkit.simulation._stall import stall_gaps


__all__ = [
    "CUT",
    "DEFAULT_MOMENT",
    "DEFAULT_SOURCE",
    "DEFAULT_WORK",
    "FAILED",
    "OK",
    "Draws",
    "RunOutcome",
    "RunTrace",
    "SampleKey",
    "StepModel",
    "StepOutcome",
    "check_run_count",
    "default_as_independent",
    "independent_sharing",
    "paired_tail_correlation",
    "reference_run",
    "reference_step",
    "reference_trace",
    "resample_sharing",
    "route_tail_kinds",
    "sim_result",
    "simulate_runs",
    "stall_gaps",
    "step_quantile_runs",
    "step_routes",
    "tail_correlation",
    "widen_fixes",
    "with_overrides",
]
