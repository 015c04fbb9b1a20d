"""
The cutoff optimizer (DESIGN.md §5 ``calibrate``): measured tails in, a plan with cutoffs out.

`calibrate` loads each step's route samples from the store, searches every step's signal,
cutoff and action by simulating the whole workflow on common random numbers, and returns the
plan with its ``predicted`` and ``basis`` fields filled in.
"""

from tailkit.calibrate._calibrate import Calibration as Calibration
from tailkit.calibrate._calibrate import calibrate as calibrate
from tailkit.calibrate._calibrate import hedge_candidates as hedge_candidates
from tailkit.calibrate._calibrate import workflow_of as workflow_of
from tailkit.calibrate._search import QUANTILES as QUANTILES
from tailkit.calibrate._search import Choice as Choice
from tailkit.calibrate._search import SearchResult as SearchResult
from tailkit.calibrate._search import StepOptions as StepOptions
from tailkit.calibrate._search import candidates as candidates
from tailkit.calibrate._search import search as search


__all__ = [
    "QUANTILES",
    "Calibration",
    "Choice",
    "SearchResult",
    "StepOptions",
    "calibrate",
    "candidates",
    "hedge_candidates",
    "search",
    "workflow_of",
]
