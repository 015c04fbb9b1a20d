"""
Production's check of a plan: its predictions against the ledgers of the runs it made.

`observe` reads ledgers (the executor's JSON lines, or any log ``tailkit ingest`` reads) and
measures, for the plan's workflow, the runs, miss rate, p50, p99 and extra attempts per first
attempt, and per step its p50, p99 and hedge rate, each with its 95 % interval. `check_plan`
puts each prediction next to its observed figure. A line ``drifted`` only when the observed
interval and the plan's own interval are apart (and more than 15 % apart in value), each read
at the level that holds the whole family of lines at ``level``: a plan that still holds reads
drifted with probability at most ``1 - level``, one error rate for one exit code. A drifted
line names its likely causes (a slower route, an outage, failed calls, hedges refused by the
budget, throttle refusals and rate limits, a thin basis); with too few runs the ledger
``can't tell``.

Example::

    report = check_plan("plan.yaml", ["ledger.jsonl"])
    print(report.summary())
    for line in report.drifted:
        print(line.scope, line.figure, line.reason, line.cause)
    raise SystemExit(report.exit_code)

Each observed figure is a `tailkit.estimate.Estimate` (``value``, ``low``, ``high``, ``n``,
``method``, ``level``). The building blocks (the intervals, the rule, the defaults, the words
a line is written in) are in `tailkit.check.lowlevel`.
"""

from tailkit.check._check import check_observation as check_observation
from tailkit.check._check import check_plan as check_plan
from tailkit.check._observation import Observation as Observation
from tailkit.check._observation import StepObservation as StepObservation
from tailkit.check._observe import observe as observe
from tailkit.check._report import CANT_TELL as CANT_TELL
from tailkit.check._report import DRIFTED as DRIFTED
from tailkit.check._report import HOLDS as HOLDS
from tailkit.check._report import WORKFLOW as WORKFLOW
from tailkit.check._report import CheckLine as CheckLine
from tailkit.check._report import CheckReport as CheckReport


__all__ = [
    "CANT_TELL",
    "DRIFTED",
    "HOLDS",
    "WORKFLOW",
    "CheckLine",
    "CheckReport",
    "Observation",
    "StepObservation",
    "check_observation",
    "check_plan",
    "observe",
]
