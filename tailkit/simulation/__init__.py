"""
Monte Carlo of a workflow DAG against measured latency tails.

Each step draws its latency from its route's sample in the store (the bucket of its expected
tokens; cut calls filled in from the censoring-aware fit) or from a fitted model; the policies
are none, sequential retry, hedge, downgrade and fail at a (deadline-aware) cutoff. A repeat
attempt (hedge, retry, downgrade, upgrade) does the same job as the first: its rank is coupled
to the first attempt's by what the store shows they share (`estimate_sharing`). Every run
is simulated at once with numpy; only steps are looped over. A step with a ``live`` block
routes each first attempt by the recent latency of its candidates, as the executor does, the
runs taken in batches of those in flight at once (``concurrency``). The engine and the other pieces
the simulator is made of are in `tailkit.simulation.lowlevel`.
"""

from tailkit.simulation._api import MAX_RUNS as MAX_RUNS
from tailkit.simulation._api import compare_policies as compare_policies
from tailkit.simulation._api import simulate as simulate
from tailkit.simulation._api import simulate_model as simulate_model
from tailkit.simulation._build import POLICIES as POLICIES
from tailkit.simulation._build import POLICY_TITLES as POLICY_TITLES
from tailkit.simulation._build import policy_model as policy_model
from tailkit.simulation._build import workflow_model as workflow_model
from tailkit.simulation._engine import WorkflowModel as WorkflowModel
from tailkit.simulation._live import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from tailkit.simulation._load import DEFAULT_MIN_CALLS as DEFAULT_MIN_CALLS
from tailkit.simulation._load import ThinSampleError as ThinSampleError
from tailkit.simulation._load import load_samples as load_samples
from tailkit.simulation._load import route_sample as route_sample
from tailkit.simulation._result import LiveSummary as LiveSummary
from tailkit.simulation._result import SimResult as SimResult
from tailkit.simulation._result import StepSummary as StepSummary
from tailkit.simulation._sample import RouteSample as RouteSample
from tailkit.simulation._sharing import estimate_sharing as estimate_sharing


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MIN_CALLS",
    "MAX_RUNS",
    "POLICIES",
    "POLICY_TITLES",
    "LiveSummary",
    "RouteSample",
    "SimResult",
    "StepSummary",
    "ThinSampleError",
    "WorkflowModel",
    "compare_policies",
    "estimate_sharing",
    "load_samples",
    "policy_model",
    "route_sample",
    "simulate",
    "simulate_model",
    "workflow_model",
]
