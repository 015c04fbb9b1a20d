"""
Monte Carlo of a workflow DAG against measured latency tails.

Each step draws its latency from its route's sample in the store (the bucket of its expected
tokens; cut calls filled in from the censoring-aware fit) or from a fitted model; the policies
are none, sequential retry, hedge, downgrade and fail at a (deadline-aware) cutoff. A repeat
attempt (hedge, retry, downgrade, upgrade) does the same job as the first: its rank is coupled
to the first attempt's by what the store shows they share (`estimate_sharing`). Every run
is simulated at once with numpy; only steps are looped over.
"""

from tailkit.simulate._api import MAX_RUNS as MAX_RUNS
from tailkit.simulate._api import check_run_count as check_run_count
from tailkit.simulate._api import compare_policies as compare_policies
from tailkit.simulate._api import simulate as simulate
from tailkit.simulate._api import simulate_model as simulate_model
from tailkit.simulate._api import with_overrides as with_overrides
from tailkit.simulate._build import POLICIES as POLICIES
from tailkit.simulate._build import POLICY_TITLES as POLICY_TITLES
from tailkit.simulate._build import SampleKey as SampleKey
from tailkit.simulate._build import policy_model as policy_model
from tailkit.simulate._build import step_routes as step_routes
from tailkit.simulate._build import workflow_model as workflow_model
from tailkit.simulate._engine import Draws as Draws
from tailkit.simulate._engine import RunOutcome as RunOutcome
from tailkit.simulate._engine import StepModel as StepModel
from tailkit.simulate._engine import StepOutcome as StepOutcome
from tailkit.simulate._engine import WorkflowModel as WorkflowModel
from tailkit.simulate._engine import run_workflow as run_workflow
from tailkit.simulate._kinds import route_tail_kinds as route_tail_kinds
from tailkit.simulate._load import DEFAULT_MIN_CALLS as DEFAULT_MIN_CALLS
from tailkit.simulate._load import ThinSampleError as ThinSampleError
from tailkit.simulate._load import load_samples as load_samples
from tailkit.simulate._load import route_sample as route_sample
from tailkit.simulate._load import widen_fixes as widen_fixes
from tailkit.simulate._result import SimResult as SimResult
from tailkit.simulate._result import StepSummary as StepSummary
from tailkit.simulate._result import summarize as summarize
from tailkit.simulate._sample import RouteSample as RouteSample
from tailkit.simulate._sharing import DEFAULT_MOMENT as DEFAULT_MOMENT
from tailkit.simulate._sharing import DEFAULT_SOURCE as DEFAULT_SOURCE
from tailkit.simulate._sharing import DEFAULT_WORK as DEFAULT_WORK
from tailkit.simulate._sharing import default_as_independent as default_as_independent
from tailkit.simulate._sharing import estimate_sharing as estimate_sharing
from tailkit.simulate._sharing import independent_sharing as independent_sharing
from tailkit.simulate._sharing import resample_sharing as resample_sharing


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
