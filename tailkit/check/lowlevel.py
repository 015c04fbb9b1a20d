"""
The building blocks of `tailkit.check`, for who builds another check on them (low level).

`tailkit.check` holds what a check's user needs: `check_plan`, `observe`, `check_observation`
and what they return. This module holds the pieces they are made of, public so that other
packages and tools need not reach into private modules: the observed intervals (`rate`,
`ratio`, `observed_quantiles`, `at_level`), the rule a line drifts by (`line_level`), the
defaults and the names of the figures, the words a line is written in (`figure_text`,
`observed_text`), the parts of a result (`Judged`, `Cause`, `RouteAttempts`, `Durations`,
`LeftOut`, a live step's `LiveObservation` and `RouteShare`), the names of a live step's lines
(`LIVE_LINES`), and why the screen of the runs leaves one out (`CLOCK`, `ROUTE`, `REFUSED`,
`PARTIAL`) and by which bounds (`FAR`, `OFF_PLAN_SHARE`).

Each observed figure is a `tailkit.estimate.Estimate`, at ``tailkit.estimate.LEVEL`` unless
asked for another level.
"""

from tailkit.check._check import MIN_RUNS, THIN_BASIS_CALLS, TOLERANCE
from tailkit.check._estimate import (
    CLOPPER_PEARSON,
    GARWOOD,
    NO_DATA,
    Durations,
    at_level,
    estimate_json,
    no_data,
    observed_quantiles,
    rate,
    ratio,
)
from tailkit.check._observation import (
    CLOCK,
    PARTIAL,
    REFUSED,
    ROUTE,
    LeftOut,
    LiveObservation,
    RouteAttempts,
    RouteShare,
)
from tailkit.check._report import (
    CAUSES,
    LIVE_LINES,
    STEP_FIGURES,
    VERDICTS,
    WORKFLOW_FIGURES,
    Cause,
    Judged,
    figure_text,
    interval_text,
    observed_text,
)
from tailkit.check._rule import line_level
from tailkit.check._screen import FAR, OFF_PLAN_SHARE


__all__ = [
    "CAUSES",
    "CLOCK",
    "CLOPPER_PEARSON",
    "FAR",
    "GARWOOD",
    "LIVE_LINES",
    "MIN_RUNS",
    "NO_DATA",
    "OFF_PLAN_SHARE",
    "PARTIAL",
    "REFUSED",
    "ROUTE",
    "STEP_FIGURES",
    "THIN_BASIS_CALLS",
    "TOLERANCE",
    "VERDICTS",
    "WORKFLOW_FIGURES",
    "Cause",
    "Durations",
    "Judged",
    "LeftOut",
    "LiveObservation",
    "RouteAttempts",
    "RouteShare",
    "at_level",
    "estimate_json",
    "figure_text",
    "interval_text",
    "line_level",
    "no_data",
    "observed_quantiles",
    "observed_text",
    "rate",
    "ratio",
]
