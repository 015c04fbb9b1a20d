"""
Monte Carlo of a workflow DAG against measured latency tails.

Each step draws its latency from its route's sample in the store (the bucket of its expected
tokens; cut calls filled in from the censoring-aware fit) or from a fitted model; the policies
are none, sequential retry, hedge, downgrade and fail at a (deadline-aware) cutoff. A repeat
attempt (hedge, retry, downgrade, upgrade) does the same job as the first: its rank is coupled
to the first attempt's by what the store shows they share (`estimate_sharing`). Every run
is simulated at once with numpy; only steps are looped over.
"""

from tailkit.simulation._api import MAX_RUNS as MAX_RUNS
from tailkit.simulation._api import check_run_count as check_run_count
from tailkit.simulation._api import compare_policies as compare_policies
from tailkit.simulation._api import simulate as simulate
from tailkit.simulation._api import simulate_model as simulate_model
from tailkit.simulation._api import with_overrides as with_overrides
from tailkit.simulation._build import POLICIES as POLICIES
from tailkit.simulation._build import POLICY_TITLES as POLICY_TITLES
from tailkit.simulation._build import SampleKey as SampleKey
from tailkit.simulation._build import policy_model as policy_model
from tailkit.simulation._build import step_routes as step_routes
from tailkit.simulation._build import workflow_model as workflow_model
from tailkit.simulation._engine import Draws as Draws
from tailkit.simulation._engine import RunOutcome as RunOutcome
from tailkit.simulation._engine import StepModel as StepModel
from tailkit.simulation._engine import StepOutcome as StepOutcome
from tailkit.simulation._engine import WorkflowModel as WorkflowModel
from tailkit.simulation._engine import run_workflow as run_workflow
from tailkit.simulation._kinds import route_tail_kinds as route_tail_kinds
from tailkit.simulation._load import DEFAULT_MIN_CALLS as DEFAULT_MIN_CALLS
from tailkit.simulation._load import ThinSampleError as ThinSampleError
from tailkit.simulation._load import load_samples as load_samples
from tailkit.simulation._load import route_sample as route_sample
from tailkit.simulation._load import widen_fixes as widen_fixes
from tailkit.simulation._result import SimResult as SimResult
from tailkit.simulation._result import StepSummary as StepSummary
from tailkit.simulation._result import summarize as summarize
from tailkit.simulation._sample import RouteSample as RouteSample
from tailkit.simulation._sharing import DEFAULT_MOMENT as DEFAULT_MOMENT
from tailkit.simulation._sharing import DEFAULT_SOURCE as DEFAULT_SOURCE
from tailkit.simulation._sharing import DEFAULT_WORK as DEFAULT_WORK
from tailkit.simulation._sharing import default_as_independent as default_as_independent
from tailkit.simulation._sharing import estimate_sharing as estimate_sharing
from tailkit.simulation._sharing import independent_sharing as independent_sharing
from tailkit.simulation._sharing import resample_sharing as resample_sharing


__all__ = [
    "DEFAULT_MIN_CALLS",
    "DEFAULT_MOMENT",
    "DEFAULT_SOURCE",
    "DEFAULT_WORK",
    "MAX_RUNS",
    "POLICIES",
    "POLICY_TITLES",
    "Draws",
    "RouteSample",
    "RunOutcome",
    "SampleKey",
    "SimResult",
    "StepModel",
    "StepOutcome",
    "StepSummary",
    "ThinSampleError",
    "WorkflowModel",
    "check_run_count",
    "compare_policies",
    "default_as_independent",
    "estimate_sharing",
    "independent_sharing",
    "load_samples",
    "policy_model",
    "resample_sharing",
    "route_sample",
    "route_tail_kinds",
    "run_workflow",
    "simulate",
    "simulate_model",
    "step_routes",
    "summarize",
    "widen_fixes",
    "with_overrides",
    "workflow_model",
]
