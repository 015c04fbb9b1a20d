"""
Races between two clocks: a caller's log joined with its callee's log of the same calls.

`find_races` pairs the caller's attempts (e.g. the executor's ledger) with the callee's records
(e.g. ``tailkit serve``'s access log) and reports the clock skew, the t-zero gap, successes the
caller had already given up on, duplicate executions and re-plans, whether the callee honoured
the propagated deadline, and the budget it really had against the one it believed it had.
"""

from tailkit.races._races import DEADLINE_GRACE_S as DEADLINE_GRACE_S
from tailkit.races._races import find_races as find_races
from tailkit.races._report import MATCHES as MATCHES
from tailkit.races._report import ClockSkew as ClockSkew
from tailkit.races._report import Duplicate as Duplicate
from tailkit.races._report import LateCall as LateCall
from tailkit.races._report import RaceReport as RaceReport
from tailkit.races._report import Replan as Replan
from tailkit.races._report import Spread as Spread


__all__ = [
    "DEADLINE_GRACE_S",
    "MATCHES",
    "ClockSkew",
    "Duplicate",
    "LateCall",
    "RaceReport",
    "Replan",
    "Spread",
    "find_races",
]
