"""
The cutoff optimizer's building blocks, for extensions and tests; they may change.

The search itself (`search` over each step's `candidates`: `Choice`s on the grid of
`QUANTILES` of the step's own latency and past the onset of a second mode in its tail
(`tail_gap`), with the `StepOptions` a plan allows), the hedge routes
a step may try (`hedge_candidates`), the bootstrap's resampling of route samples
(`resample`, `replicate`) and the warnings about what a plan's repeats assume of their routes'
tails (`evidence_warnings`). Code written against `tailkit.calibration` needs none of them.
"""

from tailkit.calibration._resample import replicate, resample
from tailkit.calibration._routes import hedge_candidates
from tailkit.calibration._search import (
    QUANTILES,
    Choice,
    SearchResult,
    StepOptions,
    candidates,
    search,
    tail_gap,
)
from tailkit.calibration._warn import evidence_warnings


__all__ = [
    "QUANTILES",
    "Choice",
    "SearchResult",
    "StepOptions",
    "candidates",
    "evidence_warnings",
    "hedge_candidates",
    "replicate",
    "resample",
    "search",
    "tail_gap",
]
