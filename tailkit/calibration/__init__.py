"""
The cutoff optimizer: measured tails in, a plan with cutoffs and honest predictions out.

`calibrate` loads each step's route samples from the store, searches every step's signal,
cutoff and action by simulating the whole workflow on common random numbers, and returns the
plan with its ``predicted`` and ``basis`` fields filled in. Where the calls show streams that
stall mid-way it sets a stall cutoff, and where a TTFT-watched step's generation has a heavy
tail a total cutoff beside it; ``Calibration.notes`` says, step by step, what it set and why.

`predict` simulates any plan (a calibrated one, or a workflow whose steps all wait) and gives
each predicted number a 95 % interval that includes the uncertainty of the measured calls
(a bootstrap over them), not only the simulation's noise; `prediction_warnings` says when a
prediction calls for action. The search and the other pieces the optimizer is made of are in
`tailkit.calibration.lowlevel`; every interval is a `tailkit.estimate.Estimate`.

A step that lists candidate routes has its first route chosen too (`RouteChoice` says why,
with each candidate's `CandidateFigures`); ``calibrate(live=True)`` writes the ``live`` blocks
the executor routes by (a step without a cutoff routes at its `ROUTING_QUANTILE`), and
``since`` (see `parse_since`) calibrates on recent calls only.
"""

from tailkit.calibration._calibrate import Calibration as Calibration
from tailkit.calibration._calibrate import calibrate as calibrate
from tailkit.calibration._calibrate import workflow_of as workflow_of
from tailkit.calibration._live import ROUTING_QUANTILE as ROUTING_QUANTILE
from tailkit.calibration._predict import REPLICATE_RUNS as REPLICATE_RUNS
from tailkit.calibration._predict import REPLICATES as REPLICATES
from tailkit.calibration._predict import Prediction as Prediction
from tailkit.calibration._predict import StepEstimate as StepEstimate
from tailkit.calibration._predict import predict as predict
from tailkit.calibration._routes import CandidateFigures as CandidateFigures
from tailkit.calibration._routes import RouteChoice as RouteChoice
from tailkit.calibration._since import parse_since as parse_since
from tailkit.calibration._warn import prediction_warnings as prediction_warnings


__all__ = [
    "REPLICATES",
    "REPLICATE_RUNS",
    "ROUTING_QUANTILE",
    "Calibration",
    "CandidateFigures",
    "Prediction",
    "RouteChoice",
    "StepEstimate",
    "calibrate",
    "parse_since",
    "predict",
    "prediction_warnings",
    "workflow_of",
]
