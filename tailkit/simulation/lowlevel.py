"""
The simulator's building blocks, for the calibrator, replay, extensions and tests; they may change.

The vectorised engine (`simulate_runs` over `Draws`, the `StepModel`s of a `WorkflowModel`, the
`RunOutcome` it returns and `sim_result`, which reduces it to a `SimResult`; live routing's
`LiveState`, which `simulate_runs` plays a plan's live steps with, `live_model` and `told`), the
one-run reference simulator the engine is tested against (`reference_run`, `reference_step`,
`reference_trace`, `reference_live`), the pieces of the model's build (routes, overrides, tail
kinds, sharing defaults) and the SQL predicates of a finished, cut and failed call that route
samples and replay's pool count by. Code written against `tailkit.simulation` needs none of
them.
"""

from tailkit.simulation._api import check_run_count, live_state, with_overrides
from tailkit.simulation._build import SampleKey, hedge_target, live_model, step_routes
from tailkit.simulation._engine import Draws, RunOutcome, StepModel, StepOutcome, simulate_runs
from tailkit.simulation._fetch import CUT, FAILED, OK
from tailkit.simulation._kinds import route_tail_kinds
from tailkit.simulation._live import LiveState, order_index, told
from tailkit.simulation._load import widen_fixes
from tailkit.simulation._model import SLOTS, LiveModel, LiveOutcome
from tailkit.simulation._reference import RunTrace, reference_run, reference_step, reference_trace
from tailkit.simulation._reference_live import LiveDecision, reference_live
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
    "SLOTS",
    "Draws",
    "LiveDecision",
    "LiveModel",
    "LiveOutcome",
    "LiveState",
    "RunOutcome",
    "RunTrace",
    "SampleKey",
    "StepModel",
    "StepOutcome",
    "check_run_count",
    "default_as_independent",
    "hedge_target",
    "independent_sharing",
    "live_model",
    "live_state",
    "order_index",
    "paired_tail_correlation",
    "reference_live",
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
    "told",
    "widen_fixes",
    "with_overrides",
]
